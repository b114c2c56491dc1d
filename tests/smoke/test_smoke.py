"""The smoke suite: the same tests for the CPU rehearsal (CI) and the GPU targets (-m gpu on a GPU
runner). Each test states one thing a serving engineer needs from a fresh start-up."""

from __future__ import annotations

import pytest

from kit.launch import resolve
from kit.testing import checks, serving, speculative

# The tiny production-architecture target (a generated Qwen3.5-MoE with the 122B's config keys and an
# MTP head, inside the GPU image): the quick GPU workflow's smoke, in about a minute on any sm_120 GPU.
# Its names, here once; .github/workflows/gpu-quick.yml runs them (tests/smoke/test_gpu_workflows.py).
TINY_PRODUCTION = ("qwen-tiny", "qwen-tiny-mtp")
# The production model (234 GB in the HF cache): the nightly workflow, one job per target.
FULL_MODEL = ("qwen-base", "qwen-mtp")

GPU = [pytest.mark.gpu, pytest.mark.docker]
FULL = [pytest.mark.full_model, pytest.mark.docker]
REHEARSAL = [pytest.mark.docker, pytest.mark.slow]

SERVING_TARGETS = [
    pytest.param("tiny", marks=REHEARSAL, id="tiny"),
    *(pytest.param(t, marks=GPU, id=t) for t in TINY_PRODUCTION),
    *(pytest.param(t, marks=FULL, id=t) for t in FULL_MODEL),
]
# Reference profiles record their greedy answer; speculative ones must reproduce it.
REFERENCE_TARGETS = [t for t in SERVING_TARGETS if t.id in ("qwen-tiny", "qwen-base")]
SPECULATIVE_TARGETS = [t for t in SERVING_TARGETS if t.id in ("qwen-tiny-mtp", "qwen-mtp")]
# The rehearsal's tool call gets a start of its own (the profile's smoke.tool_call_overrides: its
# reasoning parser holds every grammar back); the GPU targets call the tool on their own server.
TOOL_TARGETS = [
    pytest.param(
        ("tiny", tuple(resolve("tiny").smoke["tool_call_overrides"])), marks=REHEARSAL, id="tiny-tools"
    ),
    *(t for t in SERVING_TARGETS if t.id != "tiny"),
]
# Speculative profiles with smoke.simulate_accept_length: a start of their own under SGLang's
# accepted-draft simulation (the --set overrides come from the profile; kit/testing/speculative.py).
SIMULATED_TARGETS = [
    pytest.param((t, speculative.simulated_overrides(resolve(t))), marks=GPU, id=f"{t}-simulated")
    for t in TINY_PRODUCTION
    if speculative.simulated_overrides(resolve(t))
]
# The fault switch exists only in the CPU rehearsal image.
FAULT_TARGETS = [pytest.param("tiny", marks=REHEARSAL, id="tiny")]

serving_targets = pytest.mark.parametrize("kit_server", SERVING_TARGETS, indirect=True)


def assert_check(result: checks.CheckResult, server=None) -> None:
    if server is not None:
        server.record(result.name.replace(" ", "_"), result.seconds)
    assert result.ok, f"{result.name}: {result.detail} (measured {result.seconds}, limit {result.limit_s})"


@serving_targets
def test_every_rank_completes_distributed_init_within_the_init_deadline(kit_server):
    assert_check(checks.init_within_deadline(kit_server.result, kit_server.spec), kit_server)


@serving_targets
def test_first_token_on_streaming_chat_within_the_first_token_deadline(kit_server):
    assert_check(checks.first_token_chat(kit_server.url, kit_server.spec), kit_server)


@serving_targets
def test_first_token_on_native_generate_within_the_first_token_deadline(kit_server):
    assert_check(checks.first_token_generate(kit_server.url, kit_server.spec), kit_server)


@serving_targets
def test_health_generate_is_healthy(kit_server):
    assert_check(checks.health_generate(kit_server.url, kit_server.spec))


@serving_targets
def test_greedy_answers_are_identical_twice(kit_server):
    assert_check(checks.greedy_repeatable(kit_server.url, kit_server.spec))


@serving_targets
def test_a_structured_output_request_holds_to_its_json_schema(kit_server):
    assert_check(checks.structured_output(kit_server.url, kit_server.spec), kit_server)


@pytest.mark.parametrize("kit_server", TOOL_TARGETS, indirect=True)
def test_a_tool_call_comes_back_parsed(kit_server):
    assert_check(checks.tool_call_parsed(kit_server.url, kit_server.spec), kit_server)


@pytest.mark.parametrize("kit_server", REFERENCE_TARGETS, indirect=True)
def test_the_reference_profile_records_its_greedy_answer(kit_server):
    assert_check(speculative.greedy_reference_recorded(kit_server.url, kit_server.spec), kit_server)


@pytest.mark.parametrize("kit_server", SPECULATIVE_TARGETS, indirect=True)
def test_speculative_decoding_gives_the_reference_profiles_greedy_answer(kit_server):
    """MTP verifies every draft against the target model: at temperature 0 the tokens must be base's."""
    assert_check(speculative.greedy_matches_reference(kit_server.url, kit_server.spec), kit_server)


@pytest.mark.parametrize("kit_server", SPECULATIVE_TARGETS, indirect=True)
def test_sglangs_acceptance_length_is_reported_and_above_the_profiles_floor(kit_server):
    result = speculative.accept_length(kit_server.url, kit_server.spec)
    print(f"{kit_server.spec.target}: acceptance length {result.detail}")
    assert_check(result, kit_server)


@pytest.mark.parametrize("kit_server", SIMULATED_TARGETS, indirect=True)
def test_under_sglangs_draft_simulation_the_reported_acceptance_length_is_the_simulated_one(kit_server):
    """Random weights refuse every draft; SGLang's own simulation commits L-1 drafts per verify step, so
    the accepted-draft paths run, and the acceptance length SGLang reports must be L."""
    assert speculative.simulated_length(kit_server.spec) is not None
    result = speculative.accept_length(kit_server.url, kit_server.spec)
    print(f"{kit_server.spec.target}: {result.detail}")
    assert_check(result, kit_server)


# The KV-pressure window: the full MTP model on its own acceptance, the tiny one under SGLang's
# simulation (random drafts accept nothing, so only a simulated length can fall).
KV_PRESSURE_TARGETS = [
    *(t for t in SPECULATIVE_TARGETS if t.id == "qwen-mtp"),
    *SIMULATED_TARGETS,
]


@pytest.mark.parametrize("kit_server", KV_PRESSURE_TARGETS, indirect=True)
def test_acceptance_holds_as_the_kv_cache_fills(kit_server):
    """sglang#36537: NEXTN on a hybrid GDN model with the radix cache rejected every draft once
    `full token usage` passed ~0.6. Acceptance at an empty cache proves nothing about that: the
    window fills the cache past 0.6 and holds SGLang's own per-interval acceptance there."""
    container = kit_server.container.get_wrapped_container()
    result = speculative.kv_pressure_window(kit_server.url, kit_server.spec, container)
    print(f"{kit_server.spec.target}: {result.detail}")
    assert_check(result, kit_server)


@serving_targets
def test_the_server_is_still_serving_at_the_end_of_the_window(kit_server):
    """Last for each server: a crash after READY (under MTP, after structured output) is named."""
    container = kit_server.container.get_wrapped_container()
    assert_check(serving.serving_window(kit_server.url, kit_server.spec, container), kit_server)


def test_the_tool_call_judge_wants_parsed_tool_calls():
    parsed = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [
                        {
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                }
            }
        ]
    }
    raw = {"choices": [{"message": {"content": '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis',
                                    "tool_calls": None}}]}  # fmt: skip
    assert checks.judge_tool_call(parsed) == (True, 'get_weather({"city": "Paris"})')
    ok, detail = checks.judge_tool_call(raw)
    assert not ok and "unparsed" in detail
    assert not checks.judge_tool_call({"error": "x"})[0]
    bad_args = {
        "choices": [{"message": {"tool_calls": [{"function": {"name": "get_weather", "arguments": "{"}}]}}]
    }
    assert "not JSON" in checks.judge_tool_call(bad_args)[1]
    body = checks.tool_call_request("Qwen/Qwen3.5-122B-A10B")
    assert body["tools"][0]["function"]["name"] == "get_weather" and body["tool_choice"] == "required"


@pytest.mark.parametrize("target", FAULT_TARGETS)
def test_a_planted_init_hang_is_reported_hung_in_init_within_the_stall_window(kit_launch, target):
    result, limits = kit_launch(target, fault="hang-init:rank=1")
    assert_check(checks.planted_hang_named(result, limits))
    assert result.missing_ranks == ("TP1",)


@pytest.mark.parametrize("target", FAULT_TARGETS)
def test_a_planted_crash_is_reported_with_its_phase(kit_launch, target):
    result, _ = kit_launch(target, fault="crash-load:rank=1")
    assert_check(checks.planted_crash_named(result, phase="load"))
    assert "crash-load" in (result.exception or "")
