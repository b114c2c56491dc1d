"""The smoke suite: the same tests for the CPU rehearsal (CI) and the GPU targets (-m gpu on a GPU
runner). Each test states one thing a serving engineer needs from a fresh start-up."""

from __future__ import annotations

import pytest

from kit.testing import checks

SERVING_TARGETS = [
    pytest.param("tiny", marks=[pytest.mark.docker, pytest.mark.slow], id="tiny"),
    pytest.param("qwen-base", marks=[pytest.mark.gpu, pytest.mark.docker], id="qwen-base"),
    pytest.param("qwen-mtp", marks=[pytest.mark.gpu, pytest.mark.docker], id="qwen-mtp"),
]
# Only the GPU targets serve a model that can call tools (the tiny rehearsal model cannot).
TOOL_TARGETS = [t for t in SERVING_TARGETS if t.id != "tiny"]
# The fault switch exists only in the CPU rehearsal image.
FAULT_TARGETS = [pytest.param("tiny", marks=[pytest.mark.docker, pytest.mark.slow], id="tiny")]

serving = pytest.mark.parametrize("kit_server", SERVING_TARGETS, indirect=True)


def assert_check(result: checks.CheckResult, server=None) -> None:
    if server is not None:
        server.record(result.name.replace(" ", "_"), result.seconds)
    assert result.ok, f"{result.name}: {result.detail} (measured {result.seconds}, limit {result.limit_s})"


@serving
def test_every_rank_completes_distributed_init_within_the_init_deadline(kit_server):
    assert_check(checks.init_within_deadline(kit_server.result, kit_server.spec), kit_server)


@serving
def test_first_token_on_streaming_chat_within_the_first_token_deadline(kit_server):
    assert_check(checks.first_token_chat(kit_server.url, kit_server.spec), kit_server)


@serving
def test_first_token_on_native_generate_within_the_first_token_deadline(kit_server):
    assert_check(checks.first_token_generate(kit_server.url, kit_server.spec), kit_server)


@serving
def test_health_generate_is_healthy(kit_server):
    assert_check(checks.health_generate(kit_server.url, kit_server.spec))


@serving
def test_greedy_answers_are_identical_twice(kit_server):
    assert_check(checks.greedy_repeatable(kit_server.url, kit_server.spec))


@pytest.mark.parametrize("kit_server", TOOL_TARGETS, indirect=True)
def test_a_tool_call_comes_back_parsed(kit_server):
    assert_check(checks.tool_call_parsed(kit_server.url, kit_server.spec), kit_server)


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
