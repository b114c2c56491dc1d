"""bisect's SGLang rules: a change that changes nothing the server would do is skipped, with the reason.

The decision as a pure function over facts, the rules as ladder.toml states them (each cited), the
climb recording a skip without a run, and `kit bisect --plan` through the CLI over the fake NVML's
PCIe-only and NVLink hosts.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pivot_helpers import run_cli

from kit.pivot.bisect import Budget, Rung, Trial, Variant, apply_change, climb, load_changes, plan_rungs
from kit.pivot.sglang_rules import LaunchFacts, Skip, gpu_nvlink, launch_facts, load_rules, sglang_skip
from kit.scenarios.fake_nvml import FakeNvml

PCIE = LaunchFacts("cuda", 4, {}, (), nvlink=False)
CUSTOM_AR = "no-custom-all-reduce"


@pytest.mark.parametrize(
    ("facts", "skipped"),
    [
        (PCIE, True),  # 4 x RTX PRO 6000: SGLang's own rule already turns it off
        (dataclasses.replace(PCIE, nvlink=True), False),  # NVLink everywhere: it runs, turning it off matters
        (dataclasses.replace(PCIE, nvlink=None), False),  # NVML cannot tell: run the change
        (dataclasses.replace(PCIE, tp=2), False),  # TP 2 over PCIe: it runs (P2P check patched to yes)
        (dataclasses.replace(PCIE, tp=2, flags=("--enable-p2p-check",)), False),  # a real IPC test decides
        (dataclasses.replace(PCIE, tp=3, nvlink=True), True),  # not a supported world size
        (dataclasses.replace(PCIE, tp=1), True),  # a group of one has none
        (LaunchFacts("cpu", 2), True),  # CUDA, ROCm and MUSA only
    ],
)
def test_the_custom_all_reduce_change_is_skipped_exactly_where_sglang_already_has_it_off(facts, skipped):
    skip = sglang_skip(CUSTOM_AR, facts)
    assert (skip is not None) == skipped
    if skip:
        assert skip.source and skip.why in skip.detail and skip.source in skip.detail


def test_the_pcie_rule_names_sglangs_own_reason_and_file():
    skip = sglang_skip(CUSTOM_AR, PCIE)
    assert "more than two PCIe-only GPUs" in skip.why and "TP 4" in skip.why
    assert "srt/distributed/device_communicators/custom_all_reduce_utils.py" in skip.source


@pytest.mark.parametrize(
    ("env", "flags", "skipped"),
    [
        ({}, (), True),  # SGLang sets NCCL_CUMEM_ENABLE=0 itself
        ({"NCCL_CUMEM_ENABLE": "1"}, (), False),  # the profile turned cuMem on: the change does something
        ({}, ("--enable-symm-mem",), False),  # symmetric memory: SGLang sets it to 1
    ],
)
def test_nccl_cumem_enable_0_is_skipped_unless_the_launch_turns_cumem_on(env, flags, skipped):
    assert (sglang_skip("cumem-off", LaunchFacts("cuda", 4, env, flags, nvlink=False)) is not None) == skipped


FACTS = st.builds(
    LaunchFacts,
    st.sampled_from(["cuda", "cpu"]),
    st.integers(1, 9),
    st.dictionaries(st.sampled_from(["NCCL_CUMEM_ENABLE", "NCCL_DEBUG"]), st.sampled_from(["0", "1"])),
    st.lists(st.sampled_from(["--enable-symm-mem", "--enable-p2p-check", "--tp-size"]), max_size=3).map(
        tuple
    ),
    st.sampled_from([True, False, None]),
)


@given(FACTS)
def test_no_rule_skips_a_change_that_would_change_what_the_server_does(facts):
    skip = sglang_skip(CUSTOM_AR, facts)
    if facts.device == "cuda" and facts.tp == 2:
        assert skip is None  # TP 2 over PCIe or NVLink runs SGLang's custom all-reduce
    if facts.device == "cuda" and facts.tp in (4, 6, 8) and facts.nvlink is not False:
        assert skip is None  # NVLink, or unknown: never assumed off
    cumem = sglang_skip("cumem-off", facts)
    if "NCCL_CUMEM_ENABLE" in facts.env or "--enable-symm-mem" in facts.flags:
        assert cumem is None


def test_every_rule_names_a_change_of_the_ladder_and_an_sglang_source():
    ids = {c.id for c in load_changes()}
    for rule in load_rules():
        assert rule.change in ids
        assert ".py" in rule.source and rule.why


def test_the_host_facts_come_from_nvml_topology():
    assert gpu_nvlink(4, FakeNvml.of(4)) is False  # RTX PRO 6000: PCIe only
    linked = FakeNvml.of(4)
    for device in linked.devices:
        device.nvlinks = 12
    assert gpu_nvlink(4, linked) is True
    assert gpu_nvlink(4, FakeNvml(available=False)) is None
    assert gpu_nvlink(4, FakeNvml.of(2)) is None  # fewer GPUs than ranks: cannot tell


def test_a_skipped_change_is_a_row_with_its_reason_and_never_runs():
    changes = load_changes()
    runs: list[tuple[str, str]] = []

    def run(variant: Variant) -> Trial:
        runs.append((variant.rung.name, variant.label))
        green = variant.rung.name != "base" or variant.label == "CUDA graphs off"
        verdict = "ready" if green else "hung"
        return Trial(variant.rung.name, variant.label, verdict, exit_code=0 if green else 4)

    def apply(rung: Rung, change) -> Variant | Skip | str:
        if change is not None and change.id in ("cumem-off", CUSTOM_AR):
            return sglang_skip(change.id, PCIE)
        return Variant(rung, change, rung.target, rung.image, ())

    rungs = tuple(Rung(name, "t", "img") for name in ("doctor", "preflight", "base", "target"))
    trials, found = climb(rungs, changes, run, budget=Budget(None), apply=apply, start_at="base")
    rows = [(t.change, t.verdict) for t in trials]
    assert rows == [
        ("as configured", "hung"),
        ("NCCL_P2P_DISABLE=1", "hung"),
        ("NCCL_CUMEM_ENABLE=0", "skipped"),
        ("--disable-custom-all-reduce", "skipped"),
        ("CUDA graphs off", "ready"),
    ]
    assert ("base", "--disable-custom-all-reduce") not in runs
    assert "more than two PCIe-only GPUs" in trials[3].detail and found["ended"] == "fixed"


def test_on_the_real_catalog_qwen_base_at_tp_4_skips_the_custom_all_reduce_rung_on_pcie_only():
    base = plan_rungs("qwen-base", None, ())[2]
    change = {c.id: c for c in load_changes()}[CUSTOM_AR]
    skip = apply_change(base, change, image_built=lambda ref: True, nvlink=False)
    assert isinstance(skip, Skip) and "TP 4" in skip.why
    runs = apply_change(base, change, image_built=lambda ref: True, nvlink=True)
    assert isinstance(runs, Variant) and runs.overrides[-1] == 'extra_args=["--disable-custom-all-reduce"]'
    from kit.launch import resolve

    assert launch_facts(resolve("tiny"), nvlink=True).nvlink is None  # no GPUs: no NVLink fact


@pytest.fixture
def fake_host(monkeypatch):
    """The CLI's NVML reads answered by the fake library (the same code path as pynvml)."""
    import kit.runtime.nvml as nvml

    def use(lib: FakeNvml) -> None:
        monkeypatch.setattr(nvml, "_pynvml", lambda: lib)

    return use


def _plan(argv: list[str]) -> dict:
    code, out, err = run_cli(["bisect", *argv, "--plan", "--json"])
    assert code == 0, err
    return json.loads(out)


def _actions(plan: dict, rung: str) -> dict[str, tuple[str, str]]:
    return {row["change"]: (row["action"], row["detail"]) for row in plan["changes"] if row["rung"] == rung}


def test_bisect_plan_through_the_cli_skips_the_custom_all_reduce_rung_on_four_pcie_gpus(fake_host):
    fake_host(FakeNvml.of(4))
    plan = _plan(["qwen-base"])
    assert plan["type"] == "plan" and plan["nvlink"] is False
    action, detail = _actions(plan, "base")["--disable-custom-all-reduce"]
    assert action == "skipped" and "more than two PCIe-only GPUs" in detail
    assert _actions(plan, "base")["NCCL_P2P_DISABLE=1"][0] == "run"
    assert _actions(plan, "preflight")["NCCL_CUMEM_ENABLE=0"][0] == "skipped"


def test_bisect_plan_through_the_cli_runs_it_on_nvlink_and_at_tp_2(fake_host):
    linked = FakeNvml.of(4)
    for device in linked.devices:
        device.nvlinks = 12
    fake_host(linked)
    assert _actions(_plan(["qwen-base"]), "base")["--disable-custom-all-reduce"][0] == "run"
    fake_host(FakeNvml.of(4))
    at_two = _actions(_plan(["qwen-base", "--set", "tp=2"]), "base")
    assert at_two["--disable-custom-all-reduce"][0] == "run"


def test_bisect_plan_on_the_cpu_rehearsal_skips_it_by_the_cpu_rule():
    plan = _plan(["tiny"])
    assert plan["nvlink"] is None
    action, detail = _actions(plan, "base")["--disable-custom-all-reduce"]
    assert action == "skipped" and "no custom all-reduce on CPU" in detail
