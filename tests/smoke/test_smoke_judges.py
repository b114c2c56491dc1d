"""The smoke's judges without a server: what SGLang 0.5.23 answers (shapes read from its wheel) in,
pass or fail out. The servers themselves run in test_smoke.py (tiny in CI, the GPU targets on a GPU
runner)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.errors import InputError
from kit.launch import resolve
from kit.testing import answers, checks, speculative
from kit.testing.answers import Greedy
from kit.testing.serving import name_crash
from kit.testing.speculative import (
    Acceptance,
    acceptance_of,
    first_difference,
    key_for,
    load_reference,
    pooled,
    reference_profile,
    references_wanted,
    save_reference,
)


def test_a_structured_answer_must_parse_and_hold_to_the_schema():
    assert answers.judge_structured('{"answer":"yes","sure":true}') == (True, '{"answer":"yes","sure":true}')
    # The rehearsal's answer, whitespace and all (0.5.23 CPU, xgrammar, 2026-12-03).
    ok, _ = answers.judge_structured('{  \r\r"answer"\t\t\n\n\n:\t\t"yes",  \r\r\r\n\n\n\t\t"sure":true}')
    assert ok
    cut, why = answers.judge_structured('{  \r\r"answer"', {"type": "length", "length": 48})
    assert not cut and "cut off at max_new_tokens" in why
    assert not answers.judge_structured('{"answer":"maybe","sure":true}')[0]
    assert not answers.judge_structured('{"answer":"yes"}')[0]
    assert not answers.judge_structured('{"answer":"yes","sure":1}')[0]
    assert not answers.judge_structured('["yes", true]')[0]
    body = answers.structured_request()
    assert json.loads(body["sampling_params"]["json_schema"]) == answers.SCHEMA
    assert body["sampling_params"]["temperature"] == 0


@given(st.text(max_size=200))
def test_the_structured_judge_never_raises(text):
    ok, detail = answers.judge_structured(text)
    assert isinstance(ok, bool) and isinstance(detail, str)


def test_the_tool_call_request_holds_a_random_model_to_a_short_answer():
    body = checks.tool_call_request("/opt/kit/models/tiny")
    city = body["tools"][0]["function"]["parameters"]["properties"]["city"]
    assert city["enum"] == ["Paris", "London", "Tokyo"] and body["tool_choice"] == "required"
    assert body["frequency_penalty"] == 2.0 and body["temperature"] == 0
    # What the rehearsal's start with qwen3_coder answered (0.5.23 CPU, tool_choice=required).
    parsed = {
        "choices": [
            {
                "message": {
                    "content": "",
                    "tool_calls": [
                        {"function": {"name": "get_weather", "arguments": '{"city": "Paris\\t\\t\\t\\n"}'}}
                    ],
                }
            }
        ]
    }
    assert checks.judge_tool_call(parsed)[0]


def test_the_acceptance_length_is_each_responses_own():
    # 0.5.23 tokenizer_manager.py _calculate_spec_decoding_metrics: completion_tokens / spec_verify_ct.
    meta = {
        "completion_tokens": 32,
        "spec_accept_length": 32 / 11,
        "spec_verify_ct": 11,
        "spec_accept_rate": 0.67,
    }
    accepted = acceptance_of(meta)
    assert accepted == Acceptance(32 / 11, 11, 32)
    assert acceptance_of({"completion_tokens": 32}) is None  # not speculative: no figure, not 0
    assert acceptance_of({"spec_accept_length": True}) is None and acceptance_of(None) is None
    # Pooled over requests: all tokens over all verify steps, not the mean of the means.
    assert pooled([Acceptance(3.0, 10, 30), Acceptance(1.0, 30, 30)]) == 60 / 40
    assert pooled([Acceptance(3.0, None, None), Acceptance(2.0, 5, 10)]) == 2.5


def test_the_first_differing_token_is_named():
    assert first_difference((1, 2, 3), [1, 2, 3]) is None
    assert first_difference((1, 2, 3), (1, 0, 0)) == 1
    assert first_difference((1, 2), (1, 2, 3)) == 2


def test_the_reference_profile_is_base_for_mtp_and_recorded_by_base():
    mtp, base, tiny = resolve("qwen-mtp"), resolve("qwen-base"), resolve("tiny")
    assert reference_profile(mtp) == "base" and reference_profile(base) is None
    assert references_wanted(base) and not references_wanted(mtp) and not references_wanted(tiny)
    assert speculative.smoke_of(mtp).min_accept_length == 1.5
    assert speculative.smoke_of(tiny).tool_call_overrides == (
        "reasoning_parser=none",
        "tool_call_parser=qwen3_coder",
    )


def test_a_reference_round_trips_under_its_key_and_no_other(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    base, mtp = resolve("qwen-base"), resolve("qwen-mtp")
    key = key_for(base, "base")
    assert key_for(mtp, speculative.reference_profile(mtp)) == key  # the MTP start finds base's answer
    path = save_reference(key, "qwen-base", Greedy((5, 6, 7), " Paris.", {}, 0.1))
    assert path.parent == tmp_path / "smoke" / "greedy"
    assert load_reference(key)["ids"] == [5, 6, 7]
    assert load_reference(key_for(resolve("qwen-mtp", overrides=["tp=2"]), "base")) is None  # another TP


def test_a_missing_reference_names_what_to_run_first(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    result = speculative.greedy_matches_reference("http://127.0.0.1:9", resolve("qwen-mtp"))
    assert not result.ok and "run the smoke of a 'base' target first" in result.detail


def test_a_crash_after_ready_is_named_by_the_ranks_exception():
    log = (
        "[2026-12-03 08:28:31] The server is fired up and ready to roll!\n"
        "[2026-12-03 08:29:02 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 3100\n'
        "    scheduler.event_loop_overlap()\n"
        "TypeError: 'NoneType' object is not subscriptable\n"
        "\n"
        "[2026-12-03 08:29:02] Received sigquit from a child process. It usually means the child failed.\n"
    )
    line = name_crash(log, 137)
    assert line.startswith("TypeError: 'NoneType' object is not subscriptable (TP1, log line 2)")
    assert line.endswith("exit code 137")
    quiet = name_crash("[2026-12-03 08:28:31] The server is fired up and ready to roll!\n", 0)
    assert quiet.startswith("exit code 0; no exception in the log")


def test_the_speculative_checks_follow_the_launch_not_the_profile_name():
    """`--set speculative=none` (bisect's 'MTP off' rung) leaves the smoke section unused, not refused."""
    off = resolve("qwen-mtp", overrides=["speculative=none"])
    assert off.smoke["greedy_reference"] == "base"
    assert reference_profile(off) is None and not speculative.is_speculative(off)
    assert not references_wanted(off)  # it is not the base profile either


def test_a_greedy_reference_must_name_a_plain_profile_of_the_model(tmp_path, monkeypatch):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "catalog"))
    from catalog_helpers import copy_catalog

    from kit.catalog._load import load_catalog

    catalog = copy_catalog(tmp_path)
    path = catalog / "models" / "qwen3.5-122b-a10b.toml"
    path.write_text(path.read_text().replace('greedy_reference = "base"', 'greedy_reference = "mtp"'))
    with pytest.raises(InputError) as info:
        load_catalog(catalog)
    assert (
        "profiles.mtp.smoke.greedy_reference" in info.value.one_line()
        and "one of: base" in info.value.one_line()
    )
