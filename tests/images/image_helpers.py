"""Helpers the image tests import (conftest.py holds only fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.cli import main

ROOT = Path(__file__).resolve().parents[2]
CPU_IMAGE = "sglang-0.5.23-cpu"


def run_kit(argv: list[str]) -> int:
    """`kit ARGV` in this process; the exit code (output is in capsys)."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return int(exit_info.value.code or 0)
