"""The one guard for "the image is not built here" (tests/conftest.py `built_image`): a skip on a
developer's machine, a failure in CI, which builds the images it tests before running them."""

from __future__ import annotations

from pathlib import Path

import pytest

GUARDED = """
import kit.runtime.engine as engine

def test_needs_an_image(built_image, monkeypatch):
    monkeypatch.setattr(engine, "image_exists", lambda ref: False)  # not built, whatever the engine
    built_image("kit/sglang:not-built-here", "sglang-0.5.23-cpu")
"""


@pytest.mark.parametrize(("ci", "outcome"), [("", "skipped"), ("true", "failed")])
def test_an_unbuilt_image_skips_here_and_fails_in_ci(pytester, monkeypatch, ci, outcome):
    monkeypatch.setenv("CI", ci)
    pytester.makeconftest(Path(__file__).with_name("conftest.py").read_text(encoding="utf-8"))
    # The conftest imports the skip allow-list beside it (tests/skip_policy.py).
    pytester.makepyfile(skip_policy=Path(__file__).with_name("skip_policy.py").read_text(encoding="utf-8"))
    pytester.makepyfile(GUARDED)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(**{outcome: 1})
    if ci:
        result.stdout.fnmatch_lines(["*not built*CI builds it*"])
