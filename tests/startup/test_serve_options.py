"""`--probe-*` sets the probe of `--serve`: given without it, a usage error (exit 2, one line),
before anything is resolved or started."""

from __future__ import annotations

import contextlib
import io

import pytest

from kit.cli import main


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(argv)
    return int(info.value.code or 0), out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        ["up", "tiny", "--probe-every", "5"],
        ["up", "tiny", "--probe-budget", "1", "--probe-timeout", "9"],
        ["watch", "some-container", "--probe-timeout", "9"],
    ],
)
def test_a_probe_setting_without_serve_is_a_usage_error(argv):
    code, out, err = run_cli(argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--serve" in err and "Traceback" not in err


def test_a_server_removed_by_its_rm_is_never_called_kept():
    from rich.console import Console

    from kit.cli.up import _print_result
    from kit.startup.result import UpResult

    gone = UpResult("tiny", "img", "kit-tiny-1", "crashed", 1, exception="x", container_gone=True)
    for container in (True, False):  # kit up, kit watch
        out = io.StringIO()
        _print_result(gone, Console(file=out, width=200), container=container)
        text = out.getvalue()
        assert "kept" not in text and "container gone: kit-tiny-1 was removed when it stopped" in text
    out = io.StringIO()
    _print_result(
        UpResult("tiny", "img", "kit-tiny-1", "crashed", 1, exception="x"), Console(file=out), container=True
    )
    assert "container kept: kit-tiny-1" in out.getvalue()
