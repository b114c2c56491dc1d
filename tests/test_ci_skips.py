"""In CI (CI=true) a skip fails unless its reason is on tests/skip_policy.py's short allow-list: a test
that needs torch, the engine or an image that CI failed to provide is a failure, not a quiet skip;
one that needs an NVIDIA GPU, which CI has none of, is not."""

from __future__ import annotations

from pathlib import Path

from skip_policy import ALLOWED_SKIPS, allowed_skip

CONFTEST = Path(__file__).with_name("conftest.py")
POLICY = Path(__file__).with_name("skip_policy.py")
SUITE = """
import pytest

def test_needs_a_gpu():
    pytest.skip("no NVIDIA GPU: NVML Shared Library Not Found")

@pytest.mark.skipif(True, reason="no NVIDIA GPU here (NVML: not found)")
def test_needs_a_gpu_too():
    pass

def test_needs_torch():
    pytest.importorskip("no_such_torch")

@pytest.mark.docker
def test_needs_the_engine():
    pytest.skip("no Docker engine answers (ConnectionError)")

@pytest.mark.xfail(reason="known")
def test_known_to_fail():
    assert False
"""


def test_in_ci_only_the_allowed_skips_pass(pytester, monkeypatch):
    pytester.makeconftest(CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(skip_policy=POLICY.read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    docker: d\n")
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    # The engine's test fails at call, or at setup (an error) where the kit's pytest plugin finds no engine
    # first: either way it is not a quiet skip.
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped") == 2 and outcomes.get("xfailed") == 1, outcomes
    assert outcomes.get("failed", 0) + outcomes.get("errors", outcomes.get("error", 0)) == 2, outcomes
    result.stdout.fnmatch_lines(["*FAILED*test_needs_torch*not on tests/conftest.py's ALLOWED_SKIPS*"])
    monkeypatch.setenv("CI", "false")
    pytester.runpytest_subprocess("-p", "no:randomly").assert_outcomes(skipped=4, xfailed=1)


def test_the_allow_list_is_short_and_each_entry_says_why():
    assert len(ALLOWED_SKIPS) <= 5 and all(len(why) > 20 for why in ALLOWED_SKIPS.values())
    assert allowed_skip("Skipped: no NVIDIA GPU: NVML sees none")
    assert allowed_skip("could not import 'torch': No module named 'torch'") is None
    assert allowed_skip("image kit/sglang:sglang-0.5.23-cpu not built (run 'kit image build ...')") is None
