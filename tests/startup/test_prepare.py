"""Validate before launch: `kit up`, `kit smoke` and the plugin refuse what `kit validate` rejects,
before any engine call, with one line and exit 2; --no-validate starts it anyway."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kit.errors import InputError
from kit.startup.prepare import prepare_launch

KIT = [sys.executable, "-m", "kit"]
NOWHERE = {**os.environ, "DOCKER_HOST": "tcp://127.0.0.1:9"}  # any engine call would fail (exit 3)


def test_a_valid_launch_comes_back_as_its_spec():
    spec = prepare_launch("tiny")
    assert spec.target == "tiny" and spec.ranks == 2


def test_the_first_error_names_its_rule_and_fix_and_counts_the_rest():
    with pytest.raises(InputError) as caught:
        prepare_launch("tiny", overrides=["tp=3"])
    error = caught.value
    assert error.field == "tp-heads"
    assert "(+2 more)" in error.problem  # tp-kv-heads and tp-mlp-intermediate (128) too
    assert "kit validate tiny" in error.hint and "--no-validate" in error.hint


def test_no_validate_resolves_without_the_rules():
    assert prepare_launch("tiny", overrides=["tp=3"], validate=False).ranks == 3


def test_gpu_target_with_the_wrong_tp_is_refused():
    with pytest.raises(InputError) as caught:
        prepare_launch("qwen-base", overrides=["tp=2"])
    assert caught.value.field == "tp-gpus"


def test_kit_up_with_a_rejected_launch_exits_2_before_any_engine_call():
    """`kit up tiny --set tp=3`: one line, exit 2, well under a second, and no engine touched."""
    started = time.monotonic()
    proc = subprocess.run(
        [*KIT, "up", "tiny", "--set", "tp=3"], capture_output=True, text=True, timeout=60, env=NOWHERE
    )
    took = time.monotonic() - started
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("kit: error: tp-heads: TP 3 does not divide the 4 attention heads")
    assert "--no-validate" in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    print(f"kit up tiny --set tp=3 exited 2 after {took:.2f} s (interpreter start included)")


def test_kit_up_no_validate_goes_on_to_the_engine():
    proc = subprocess.run(
        [*KIT, "up", "tiny", "--set", "tp=3", "--no-validate"],
        capture_output=True,
        text=True,
        timeout=60,
        env=NOWHERE,
    )
    assert proc.returncode == 3, proc.stderr  # it got past validation and found no engine
    assert "Traceback" not in proc.stderr


def test_kit_smoke_validates_too():
    proc = subprocess.run(
        [*KIT, "smoke", "tiny", "--set", "tp=3"], capture_output=True, text=True, timeout=60, env=NOWHERE
    )
    assert proc.returncode == 2 and "tp-heads" in proc.stderr
