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
