"""The plugin's promises about reports, proven by running it in an inner pytest session."""

from __future__ import annotations

import pytest

from kit.launch import resolve


@pytest.mark.docker
@pytest.mark.slow
def test_reports_show_timeline_and_log_tail_on_failure_and_junit_carries_timings(built_image, pytester):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)
    # One inner session, one server (kit_server is session-scoped): a passing test that records
    # its first-token time, and a test that fails on purpose.
    pytester.makepyfile(
        """
        from kit.testing import checks

        def test_first_token(kit_server):
            check = checks.first_token_chat(kit_server.url, kit_server.spec)
            kit_server.record("first_token_chat_s", check.seconds)
            assert check.ok

        def test_fails_on_purpose(kit_server):
            assert kit_server.result.verdict == "something else"
        """
    )
    result = pytester.runpytest_subprocess(
        "--kit-target", "tiny", "--junitxml=junit.xml", "-p", "no:cacheprovider", timeout=600
    )
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert "kit tiny: phase timeline" in text
    assert "TP0      init" in text and "TP1      init" in text
    assert "kit tiny: log tail" in text
    assert "The server is fired up and ready to roll!" in text
    assert "READY tiny after" in text
    junit = (pytester.path / "junit.xml").read_text()
    for name in ("kit.first_token_chat_s", "kit.phase.init_s", "kit.phase.load_s", "kit.startup_s"):
        assert f'name="{name}"' in junit, name


def test_gpu_tests_skip_with_a_reason_naming_what_is_missing(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpu
        def test_needs_gpus():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-m", "gpu", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    assert "no NVIDIA GPU" in result.stdout.str()


GPU_TEST = """
import pytest

@pytest.mark.gpu
def test_needs_gpus():
    pass
"""


def test_require_gpu_turns_every_gpu_skip_into_a_failure_with_its_reason(pytester):
    """A GPU runner's job cannot go green having tested nothing (`--kit-require-gpu`)."""
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest_subprocess("-m", "gpu", "--kit-require-gpu", "-p", "no:cacheprovider")
    assert result.ret != 0
    result.assert_outcomes(errors=1)  # the skip happens at set-up, so it fails there
    text = result.stdout.str()
    assert "a gpu test skipped under --kit-require-gpu" in text and "no NVIDIA GPU" in text


def test_require_gpu_from_the_environment(pytester, monkeypatch):
    monkeypatch.setenv("KIT_REQUIRE_GPU", "1")
    pytester.makepyfile(GPU_TEST)
    result = pytester.runpytest_subprocess("-m", "gpu", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)


def test_a_launch_validate_rejects_fails_the_test_without_a_container(pytester, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")  # no engine call may happen
    pytester.makepyfile(
        """
        def test_server(kit_server):
            pass
        """
    )
    result = pytester.runpytest_subprocess(
        "--kit-target", "tiny", "--kit-set", "tp=3", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(errors=1)
    assert "kit: tp-heads: TP 3 does not divide the 4 attention heads" in result.stdout.str()
