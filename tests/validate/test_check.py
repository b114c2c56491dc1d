"""`kit check`: the launch through the image's own SGLang parser.

The `slow` tests create a venv per SGLang version under the kit's cache on first use (pip, about a
minute each) and run SGLang's real ServerArgs with the target GPU emulated. They run in CI.
"""

from __future__ import annotations

import json

import pytest
from catalog_helpers import run_cli

from kit.check import MARKER, check, check_request
from kit.check.driver import _Placeholder, _StubFinder
from kit.launch import resolve_full

OLD = "sglang-0.5.10.post1-cu129-sm120"
NEW = "sglang-0.5.23-cu130-sm120"
SGLANG_0_5_10_MESSAGE = (
    "Speculative decoding for Qwen3_5MoeForConditionalGeneration is not compatible with radix cache when "
    "using --mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please use "
    "--mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
)


def test_request_emulates_the_target_gpu_for_cuda_images():
    request = check_request(resolve_full("qwen-mtp", image=OLD))
    assert request["emulate"] == {
        "capability": [12, 0],
        "memory_gib": 95.6,
        "device_count": 4,
        "name": "NVIDIA RTX PRO 6000 Blackwell",
        "cuda_version": "12.9",
    }
    assert request["args"][:2] == ["--model-path", "Qwen/Qwen3.5-122B-A10B"]
    assert request["env"] == {"NCCL_DEBUG": "WARN", "SGLANG_ENABLE_SPEC_V2": "1", "HF_HUB_OFFLINE": "1"}
    assert request["config_json"].endswith("qwen3.5-122b-a10b.config.json")
    assert request["stages"] == ["load"]  # a hybrid model: the attention registry's checks too


def test_request_emulates_nothing_on_cpu():
    request = check_request(resolve_full("tiny"))
    assert request["emulate"] is None and "stages" not in request


def test_stand_in_modules_import_and_refuse_calls():
    finder = _StubFinder({"kit_no_such_module"})
    spec = finder.find_spec("kit_no_such_module.io")
    module = finder.create_module(spec)
    assert isinstance(module.decode_jpeg, _Placeholder)
    with pytest.raises(NotImplementedError):
        module.decode_jpeg(b"")
    assert finder.find_spec("json") is None


@pytest.mark.slow
def test_sglang_0_5_10_rejects_the_first_failing_launch_with_its_own_message():
    result = check("qwen-mtp", image=OLD, overrides=["mamba_cache=no_buffer"])
    assert result.sglang == "0.5.10.post1"
    assert result.accepted is False
    assert result.error_type == "ValueError"
    assert result.error == SGLANG_0_5_10_MESSAGE
    assert result.emulated["capability"] == [12, 0]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["qwen-base", "qwen-mtp"])
@pytest.mark.parametrize("image", [OLD, NEW])
def test_every_gpu_profile_is_accepted_by_every_gpu_image(target, image):
    result = check(target, image=image)
    assert result.accepted, f"{result.error_type}: {result.error}"
    assert result.resolved["tp_size"] == 4
    if target == "qwen-mtp":
        strategy = result.resolved.get("mamba_scheduler_strategy") or result.resolved.get(
            "mamba_radix_cache_strategy"
        )
        assert strategy == "extra_buffer"
        assert result.resolved["speculative_algorithm"] in ("EAGLE", "NEXTN")
        assert result.resolved["disable_radix_cache"] is False


@pytest.mark.slow
def test_a_backend_the_attention_registry_refuses_is_refused_at_load():
    result = check("qwen-base", image=OLD, overrides=["attention_backend=fa3"])
    assert (result.accepted, result.stage, result.error_type) == (False, "load", "AssertionError")
    assert "triton, trtllm_mha, fa4, or flashinfer backend are the only supported backends" in result.error
    code, out, _ = run_cli(["check", "qwen-base", "--image", OLD, "--set", "attention_backend=fa3"])
    assert code == 1 and "(at model load: ServerArgs took it, the attention registry did not)" in out


@pytest.mark.slow
def test_the_cli_prints_sglangs_message_and_says_it_emulated():
    code, out, _ = run_cli(["check", "qwen-mtp", "--image", OLD, "--set", "mamba_cache=no_buffer"])
    assert code == 1
    assert "REJECTED by SGLang 0.5.10.post1's own parser" in out
    assert f"ValueError: {SGLANG_0_5_10_MESSAGE}" in " ".join(out.split("\n"))
    assert "emulated device: NVIDIA RTX PRO 6000 Blackwell, capability 12.0" in out
    code, out, _ = run_cli(["check", "qwen-base", "--image", OLD, "--json"])
    assert code == 0 and json.loads(out)["accepted"] is True


def test_marker_is_the_drivers():
    from kit.check import driver

    assert driver.MARKER == MARKER


@pytest.mark.slow
def test_one_driver_process_answers_each_cell_as_a_process_of_its_own_would():
    """The batch driver imports SGLang once per group and forks per cell; a cell must not see what
    an earlier one left behind (env SGLang sets, caches, the emulated GPU count of another TP)."""
    from kit.check import ensure_venv, run_cells

    launches = [
        ("qwen-mtp", ["mamba_cache=no_buffer"]),  # refused: the 0.5.10 ValueError
        ("qwen-mtp", []),  # SGLang sets env of its own on the way
        ("qwen-mtp", ["speculative.eagle_topk=4", "env.SGLANG_ENABLE_SPEC_V2=1"]),  # another env group
        ("qwen-base", ["tp=8"]),  # eight emulated GPUs in a group that began with four
        ("qwen-base", ["tp=2", "attention_backend=fa3"]),  # refused at load
        ("qwen-base", []),
    ]
    requests = [
        {**check_request(resolve_full(target, image=OLD, overrides=overrides)), "id": str(n)}
        for n, (target, overrides) in enumerate(launches)
    ]
    venv, _ = ensure_venv("0.5.10.post1")
    together = run_cells(venv, requests)

    def verdict(result):
        return (result.get("accepted"), result.get("stage"), result.get("error"), result.get("resolved"))

    for request in requests:
        alone = run_cells(venv, [request])[request["id"]]
        assert verdict(together[request["id"]]) == verdict(alone), launches[int(request["id"])]
    assert [together[str(n)]["accepted"] for n in range(len(launches))] == [
        False,
        True,
        False,
        True,
        False,
        True,
    ]
