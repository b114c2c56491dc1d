"""resolve('tiny'): the rehearsal launch other work builds on, fact for fact."""

from __future__ import annotations

import pytest

from kit.errors import InputError
from kit.launch import list_targets, resolve

TINY_ARGV = (
    "python", "-m", "sglang.launch_server",
    "--model-path", "/opt/kit/models/tiny",
    "--device", "cpu",
    "--tp-size", "2",
    "--disable-cuda-graph",
    "--max-total-tokens", "65536",
    "--reasoning-parser", "deepseek-r1",
    "--soft-watchdog-timeout", "60",  # the profile's longest stall window
    "--host", "0.0.0.0",
    "--port", "30000",
    "--sleep-on-idle",  # the profile's extra_args come last
)  # fmt: skip


def test_tiny_spec_is_the_verified_rehearsal_launch():
    spec = resolve("tiny")
    assert spec.image == "sglang-0.5.23-cpu"
    assert spec.image_ref == "kit/sglang:sglang-0.5.23-cpu"
    assert (spec.device, spec.gpus, spec.ranks) == ("cpu", 0, 2)
    assert spec.argv == TINY_ARGV
    assert spec.env == {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
    assert spec.model_path == "/opt/kit/models/tiny"
    assert spec.timing.deadlines == {
        "init": 60, "load": 120, "memory": 60, "autotune": 60, "capture": 60, "warmup": 120,
        "first_token": 30,
    }  # fmt: skip
    assert spec.timing.stall_windows == {
        "init": 20, "load": 60, "memory": 30, "autotune": 30, "capture": 60, "warmup": 60,
    }  # fmt: skip


def test_targets_are_listed():
    assert list_targets() == [
        "qwen-base", "qwen-mtp", "qwen-tiny", "qwen-tiny-mtp", "tiny", "tiny-qwen",
    ]  # fmt: skip


def test_unknown_target_names_the_known_ones():
    with pytest.raises(InputError) as info:
        resolve("x")
    known = "qwen-base, qwen-mtp, qwen-tiny, qwen-tiny-mtp, tiny, tiny-qwen"
    assert info.value.one_line() == f"target: unknown target 'x' (known targets: {known})"


def test_overrides_reach_the_spec():
    spec = resolve("tiny", overrides=["max_total_tokens=4096", "timing.deadlines.init=90"])
    assert spec.argv[spec.argv.index("--max-total-tokens") + 1] == "4096"
    assert spec.timing.deadlines["init"] == 90
    assert "override: max_total_tokens=4096" in spec.notes
