"""Preflight's graph step: the plan (pure, from the catalog and a GPU host's facts) and the in-image
code's CPU path (skipped with the reason). The GPU path itself runs only on a GPU host
(tests/pivot/test_gpu.py, marked gpu)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kit.launch import resolve
from kit.pivot.graph_step import CPU_SKIP, graph_plan, sglang_defaults, size_line
from kit.pivot.preflight import rank_request
from kit.pivot.steps import STEPS, device_plan, graph_text, plan_steps

ROOT = Path(__file__).resolve().parents[2]
RTX_PRO_6000_GIB = 95.6  # kit/catalog/hardware.toml
LIMITS = {"max_prefill_tokens": 8192, "replays": 20, "warmup": 2, "pynccl_bytes": 1 << 24}


def widths(plan: dict) -> dict[str, tuple[int, int]]:
    return {s["name"]: (s["tokens"], s["hidden"]) for s in plan["sizes"]}


def test_on_a_gpu_host_the_plan_includes_the_graph_step_at_the_mtp_profiles_widths():
    spec = resolve("qwen-mtp")  # Qwen3.5-122B-A10B, TP 4, 4 x RTX PRO 6000, NEXTN with 4 draft tokens
    request = rank_request(spec, 4, device_plan("cuda"), None, {})
    assert "graph" in plan_steps(request) and plan_steps(request) == list(STEPS)
    graph = request["graph"]
    # SGLang 0.5.23 on a 96 GB card at TP 4: decode graphs up to 512 requests, 8192-token chunks
    assert widths(graph) == {"decode": (512, 3072), "verify": (2048, 3072), "prefill": (8192, 3072)}
    assert graph["pynccl_bytes"] == 16 << 20 and graph["replays"] == 20 and graph["warmup"] == 2
    assert "95.6 GiB at TP 4" in graph["sources"]["batch"]
    assert size_line(graph["sizes"][1]) == "verify 2048 x 3072 bf16 (12 MiB)"


def test_without_speculative_decoding_there_is_no_verify_width():
    graph = rank_request(resolve("qwen-base"), 4, device_plan("cuda"), None, {})["graph"]
    assert set(widths(graph)) == {"decode", "prefill"}


def test_the_launchs_own_flags_decide_and_a_huge_chunk_is_bounded():
    argv = [
        "--cuda-graph-max-bs",
        "64",
        "--chunked-prefill-size=32768",
        "--speculative-num-draft-tokens",
        "4",
    ]
    graph = graph_plan("cuda", hidden_size=3072, tp=4, argv=argv, gpu_memory_gib=95.6, limits=LIMITS)
    assert widths(graph) == {"decode": (64, 3072), "verify": (256, 3072), "prefill": (8192, 3072)}
    assert graph["sources"] == {"batch": "launch", "chunk": "launch, bounded to 8192 tokens"}
    capped = graph_plan(
        "cuda",
        hidden_size=3072,
        tp=4,
        argv=["--max-running-requests", "48"],
        gpu_memory_gib=95.6,
        limits=LIMITS,
    )
    assert widths(capped)["decode"] == (48, 3072)  # memory_hook.py caps the default by it


@pytest.mark.parametrize(
    ("memory_gib", "tp", "expected"),
    [(16, 1, (2048, 8)), (32, 2, (4096, 48)), (32, 4, (4096, 160)), (80, 2, (8192, 256)),
     (RTX_PRO_6000_GIB, 4, (8192, 512)), (141, 1, (8192, 256)), (180, 8, (16384, 512)),
     (None, 4, (4096, 160))],
)  # fmt: skip
def test_sglang_0_5_23s_memory_defaults(memory_gib, tp, expected):
    assert sglang_defaults(memory_gib, tp) == expected


def test_on_cpu_and_with_graphs_off_the_step_is_skipped_with_the_reason():
    request = rank_request(resolve("tiny"), 2, device_plan("cpu"), None, {})
    assert request["graph"] == {"skip": CPU_SKIP} and "graph" in plan_steps(request)
    off = graph_plan(
        "cuda", hidden_size=64, tp=1, argv=["--disable-cuda-graph"], gpu_memory_gib=96, limits=LIMITS
    )
    assert "--disable-cuda-graph" in off["skip"]


def test_the_result_line_names_the_path_widths_and_times():
    detail = {
        "path": "PyNccl",
        "sizes": [{"name": "decode", "tokens": 512, "hidden": 3072, "bytes": 3 << 20, "replay_us": 41.3}],
        "pynccl": {"bytes": 16 << 20, "time_us": 820.0, "busbw_gbps": 30.69},
    }
    assert graph_text(detail) == (
        "bf16 all-reduce captured in graph_capture() and replayed (PyNccl): decode 512 x 3072 (3 MiB) 41 us; "
        "PyNccl 16 MiB 820 us, busbw 30.69 GB/s"
    )
    assert graph_text({"skipped": CPU_SKIP}) == CPU_SKIP


@pytest.fixture
def ranks_module(monkeypatch):
    """The in-image rank script as the container imports it (its folder and sglang_groups' on the path);
    at import it needs the standard library only (torch and sglang are imported inside the steps)."""
    monkeypatch.syspath_prepend(str(ROOT / "kit" / "images" / "inimage"))
    monkeypatch.syspath_prepend(str(ROOT / "kit" / "pivot" / "inimage"))
    for name in ("ranks", "sglang_groups"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module("ranks")


def test_the_in_image_graph_step_on_cpu_is_skipped_with_the_reason_before_touching_torch(ranks_module):
    assert ranks_module.STEPS == STEPS
    # Rank.graph itself, over a rank's state on the CPU rehearsal; the kit's venv has no torch, so
    # this passing proves the skip comes before anything touches it
    state = SimpleNamespace(device_kind="cpu", request={"graph": {"skip": CPU_SKIP}}, prepared={})
    assert ranks_module.Rank.graph(state) == {"skipped": CPU_SKIP}
    state.request = {}  # an older kit's request: still skipped, with the in-image reason
    assert "no CUDA graphs" in ranks_module.Rank.graph(state)["skipped"]


def test_the_in_image_graph_step_on_cuda_says_why_it_cannot_run(ranks_module):
    skip = ranks_module.graph_skip
    plan = {"sizes": [{"name": "decode", "tokens": 8, "hidden": 64}]}
    assert "--disable-cuda-graph" in skip(
        "cuda", {"skip": "the launch turns CUDA graphs off (--disable-cuda-graph)"}, {}
    )
    assert "no widths" in skip("cuda", {}, {"_server_args": object()})
    assert "SGLang's groups were not built" in skip(
        "cuda", plan, {}
    )  # plain torch groups: no graph_capture()
    assert skip("cuda", plan, {"_server_args": object(), "recipe": "bootstrap"}) is None


def test_the_live_view_says_skipped_not_ok_for_a_skipped_step():
    import io

    from rich.console import Console

    from kit.cli.pivot import PreflightView
    from kit.pivot.preflight import PreflightProgress

    out = io.StringIO()
    view = PreflightView(Console(file=out, width=200), 2, as_json=False, title="kit preflight tiny")
    ended = (("allreduce", 0), ("allreduce", 1), ("graph", 0), ("graph", 1))
    view.update(PreflightProgress("run", 3.0, "p2p", 0.0, ended, (), "kit-preflight-x", ("graph",)))
    lines = out.getvalue().splitlines()
    assert [line.split()[2:] for line in lines] == [["allreduce", "ok"], ["graph", "skipped"]]
