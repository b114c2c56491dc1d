"""Preflight's graph step: the plan (pure, from SGLang's own resolution of the launch and the model's
config.json) and the in-image code's CPU path (skipped with the reason). The GPU path itself runs
only on a GPU host (tests/pivot/test_gpu.py, marked gpu).

The resolutions in tests/fixtures/resolutions/ are what SGLang 0.5.23's own ServerArgs resolution
(kit/check/driver.py in the 0.5.23 check venv, the target GPU emulated) printed for qwen-mtp and
qwen-base; the `slow` test runs it again and holds the plan to it."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kit.launch import resolve
from kit.pivot.graph_step import (
    CPU_SKIP,
    captured_batches,
    graph_plan,
    graph_request,
    size_line,
    vocab_per_rank,
)
from kit.pivot.preflight import rank_request
from kit.pivot.steps import STEPS, device_plan, graph_text, plan_steps

ROOT = Path(__file__).resolve().parents[2]
RESOLUTIONS = ROOT / "tests" / "fixtures" / "resolutions"
LIMITS = {"max_prefill_tokens": 8192, "replays": 20, "warmup": 2, "pynccl_bytes": 1 << 24}


def recorded(target: str) -> dict:
    return json.loads((RESOLUTIONS / f"sglang-0.5.23-{target}.json").read_text())


def widths(plan: dict) -> dict[str, tuple[int, int]]:
    return {s["name"]: (s["tokens"], s["hidden"]) for s in plan["sizes"]}


MTP_WIDTHS = {
    "decode": (48, 3072),  # NEXTN -> EAGLE: max_running_requests 48 (speculative_hook.py), the pool
    "verify": (192, 3072),  # 48 requests x 4 draft tokens: the target-verify graph
    "decode logits": (48, 62080),  # the LM head's shard: 248320 / 4, all_gather (logits_processor.py)
    "verify logits": (192, 62080),
    "prefill": (8192, 3072),  # the breakable prefill graph's largest token count
}


def test_on_a_gpu_host_the_plan_captures_the_widths_the_mtp_server_uses():
    """Issue 38: not 512 x 3072 and 2048 x 3072 (the decode list's top): SGLang clips the capture
    sizes to its request pool, 48 requests under EAGLE; and the logits gathers are captured too."""
    spec = resolve("qwen-mtp")  # Qwen3.5-122B-A10B, TP 4, 4 x RTX PRO 6000, NEXTN with 4 draft tokens
    graph = graph_request(spec, 4, recorded("qwen-mtp"))
    request = rank_request(spec, 4, device_plan("cuda"), None, {}, graph=graph)
    assert "graph" in plan_steps(request) and plan_steps(request) == list(STEPS)
    assert widths(graph) == MTP_WIDTHS
    assert [s["op"] for s in graph["sizes"]] == [
        "all_reduce",
        "all_reduce",
        "all_gather",
        "all_gather",
        "all_reduce",
    ]
    assert graph["pynccl_bytes"] == 16 << 20 and graph["replays"] == 20 and graph["warmup"] == 2
    assert "max_running_requests 48" in graph["sources"]["batch"] and "up to 512" in graph["sources"]["batch"]
    assert size_line(graph["sizes"][1]) == "verify 192 x 3072 bf16 (1.12 MiB)"
    assert size_line(graph["sizes"][3]) == "verify logits 192 x 62080 bf16 (22.7 MiB per rank, all_gather)"


def test_without_speculative_decoding_no_verify_and_the_pool_is_not_capped():
    graph = graph_request(resolve("qwen-base"), 4, recorded("qwen-base"))
    assert widths(graph) == {"decode": (512, 3072), "decode logits": (512, 62080), "prefill": (8192, 3072)}


def test_capture_sizes_are_clipped_to_the_request_pool_as_sglangs_runner_does():
    sizes = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 512]
    assert captured_batches(sizes, 48) == [1, 2, 4, 8, 16, 24, 32, 40, 48]
    assert captured_batches(sizes, 50) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 50]  # the pool's own size added
    assert captured_batches(sizes, None) == sizes and captured_batches(sizes, 1024) == sizes
    assert vocab_per_rank(248320, 4) == 62080 and vocab_per_rank(1000, 3) == 342  # padded to 64: 1024


def test_without_sglangs_resolution_the_step_says_why_instead_of_guessing():
    argv = ("--model-path", "x")
    refused = {"accepted": False, "error": "ValueError: Speculative decoding for X is not compatible"}
    for resolution in (None, refused, {"accepted": True, "sglang": "0.5.10.post1", "resolved": {}}):
        plan = graph_plan("cuda", hidden_size=64, vocab_size=1000, tp=2, argv=argv, resolution=resolution)
        assert "skip" in plan
    assert (
        "not compatible"
        in graph_plan("cuda", hidden_size=64, vocab_size=1000, tp=2, argv=argv, resolution=refused)["skip"]
    )


@pytest.mark.slow
def test_sglang_0_5_23s_own_resolution_of_qwen_mtp_gives_those_widths():
    """The release itself, in its check venv (built on first use): the recorded resolution holds."""
    from kit.check import launch_resolution

    fresh = launch_resolution(resolve("qwen-mtp"), in_image=False)
    assert fresh["accepted"] and fresh["resolved"] == recorded("qwen-mtp")["resolved"]
    assert widths(graph_request(resolve("qwen-mtp"), 4, fresh)) == MTP_WIDTHS


def test_on_cpu_and_with_graphs_off_the_step_is_skipped_with_the_reason():
    request = rank_request(resolve("tiny"), 2, device_plan("cpu"), None, {})
    assert request["graph"] == {"skip": CPU_SKIP} and "graph" in plan_steps(request)
    off = graph_plan(
        "cuda",
        hidden_size=64,
        vocab_size=1000,
        tp=1,
        argv=["--disable-cuda-graph"],
        resolution=None,
        limits=LIMITS,
    )
    assert "--disable-cuda-graph" in off["skip"]


def test_the_result_line_names_the_path_widths_and_times():
    detail = {
        "path": "PyNccl",
        "sizes": [
            {
                "name": "decode",
                "op": "all_reduce",
                "tokens": 48,
                "hidden": 3072,
                "bytes": 3 << 20,
                "replay_us": 41.3,
            },
            {
                "name": "decode logits",
                "op": "all_gather",
                "tokens": 48,
                "hidden": 62080,
                "bytes": 6 << 20,
                "replay_us": 90.0,
            },
        ],
        "pynccl": {"bytes": 16 << 20, "time_us": 820.0, "busbw_gbps": 30.69},
    }
    assert graph_text(detail) == (
        "bf16 all-reduce and logits all_gather captured in graph_capture() and replayed (PyNccl): "
        "decode 48 x 3072 (3 MiB) 41 us; decode logits 48 x 62080 (6 MiB per rank, all_gather) 90 us; "
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


@pytest.mark.slow
def test_the_in_image_gather_check_expects_each_ranks_shard_in_its_columns(check_venv_python):
    """ranks.py's check of a replayed logits all_gather, under the torch of the 0.5.23 check venv."""
    import subprocess

    code = (
        "import sys, torch; sys.path[:0] = sys.argv[1:3]; import ranks; "
        "print(ranks.gathered_values(torch, 4, (2, 8), 'cpu').tolist())"
    )
    folders = [str(ROOT / "kit" / "pivot" / "inimage"), str(ROOT / "kit" / "images" / "inimage")]
    done = subprocess.run(
        [check_venv_python("0.5.23"), "-c", code, *folders], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-800:]
    assert json.loads(done.stdout) == [[1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]] * 2
