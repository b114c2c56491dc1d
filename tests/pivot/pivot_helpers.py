"""The real `kit` CLI in a subprocess, for the pivot's end-to-end tests."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

import pytest

from kit.cli import main

KIT = [sys.executable, "-m", "kit"]


def run_kit(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> tuple[int, dict, list[dict], str]:
    """The real CLI in a subprocess with --json: (exit code, the result object, every JSON line, stderr)."""
    proc = subprocess.run([*KIT, *args, "--json"], capture_output=True, text=True, timeout=timeout, env=env)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [line for line in lines if line.get("type") == "result"]
    assert results, f"no result line; stdout={proc.stdout[-3000:]} stderr={proc.stderr[-3000:]}"
    return proc.returncode, results[-1], lines, proc.stderr


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """`kit ARGV` in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    return (code if isinstance(code, int) else (0 if code is None else 1)), out.getvalue(), err.getvalue()
