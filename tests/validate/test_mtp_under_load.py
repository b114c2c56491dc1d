"""sglang#36537 in `kit validate`: MTP on the hybrid GDN model with the radix cache's extra_buffer (what
0.5.23's `auto` picks with the overlap schedule) is warned about with the workaround; the lazy
strategy and a launch without the radix cache are not."""

from __future__ import annotations

import pytest

from kit.validate import validate

RULE = "sglang-0.5.21:mtp-radix-extra-buffer-under-load"


def warned(target: str, *overrides: str) -> bool:
    return any(
        f.id == RULE and f.severity == "warning" for f in validate(target, overrides=overrides).findings
    )


@pytest.mark.parametrize("strategy", ["auto", "extra_buffer"])
def test_mtp_with_the_radix_caches_extra_buffer_is_warned_about(strategy):
    assert warned("qwen-mtp", f"mamba_cache={strategy}")
    finding = next(f for f in validate("qwen-mtp").findings if f.id == RULE)
    assert "sglang#36537" in finding.message and "extra_buffer_lazy" in finding.fix


def test_the_workarounds_and_the_plain_profile_are_not():
    assert not warned("qwen-mtp", "mamba_cache=extra_buffer_lazy")
    assert not warned("qwen-mtp", "radix_cache=false")
    assert not warned("qwen-mtp", "mamba_cache=auto", "overlap_schedule=false")  # auto is no_buffer then
    assert not warned("qwen-base")
