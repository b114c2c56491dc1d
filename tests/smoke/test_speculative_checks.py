"""MTP checks that can fail for the right reason (pure): the greedy comparison forgives a first
difference only where the reference run's top-1/top-2 logprobs tie; the acceptance length under
SGLang's accepted-draft simulation must be the simulated one; the simulated start's overrides."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.launch import resolve
from kit.testing import answers, speculative
from kit.testing.speculative import Acceptance, judge_greedy, judge_simulated, tie_gap

# meta_info["output_top_logprobs"] as 0.5.23's tokenizer_manager.py returns it: per position a list of
# (logprob, token_id, text) (JSON arrays), or None where it has none.
META = {
    "output_top_logprobs": [
        [[-0.10, 11, "a"], [-2.50, 12, "b"]],
        [[-1.000, 21, "c"], [-1.004, 22, "d"]],  # a near tie: bf16 rounding can flip it
        None,
        [[-0.5, 41, None]],
        [[-3.0, 52, "y"], [-0.2, 51, "x"]],  # unordered: the top-1 is found, not assumed first
    ]
}


def record(ids, gaps=None):
    rec = {"target": "qwen-tiny", "ids": list(ids), "text": "ref"}
    if gaps is not None:
        rec["top2_gaps"] = list(gaps)
    return rec


def greedy(ids):
    return answers.Greedy(tuple(ids), "spec", {}, 0.1)


def test_top2_gaps_reads_sglangs_top_logprobs_per_position():
    gaps = answers.top2_gaps(META)
    assert gaps[0] == pytest.approx(2.4) and gaps[1] == pytest.approx(0.004)
    assert gaps[2:4] == (None, None) and gaps[4] == pytest.approx(2.8)
    assert answers.top2_gaps({}) == () and answers.top2_gaps({"output_top_logprobs": "x"}) == ()


def test_equal_answers_pass():
    ok, detail = judge_greedy(greedy([11, 21, 31]), record([11, 21, 31], [2.4, 0.004, 1.0]), 0.05)
    assert ok and detail.startswith("3 tokens equal")


def test_a_first_difference_at_a_tie_is_not_a_failure():
    ok, detail = judge_greedy(greedy([11, 22, 99]), record([11, 21, 31], [2.4, 0.004, 1.0]), 0.05)
    assert ok and "up to token 1, a tie there" in detail and "0.0040 <= 0.05" in detail


def test_a_first_difference_with_a_clear_margin_fails_and_names_it():
    ok, detail = judge_greedy(greedy([99, 21, 31]), record([11, 21, 31], [2.4, 0.004, 1.0]), 0.05)
    assert not ok and "token 0 differs" in detail and "gap there 2.4000 > 0.05: no tie" in detail


def test_a_gap_equal_to_the_epsilon_is_a_tie_and_the_next_float_above_is_not():
    # The boundary the catalog's epsilon means: "within" it, inclusive (the smoke's words: gap <= eps).
    eps = 0.05
    above = math.nextafter(eps, 1.0)
    assert judge_greedy(greedy([11, 22]), record([11, 21], [2.4, eps]), eps)[0]
    ok, detail = judge_greedy(greedy([11, 22]), record([11, 21], [2.4, above]), eps)
    assert not ok and "> 0.05: no tie" in detail


def test_without_recorded_gaps_any_difference_fails_as_before():
    ok, detail = judge_greedy(greedy([0, 0, 0]), record([11, 21, 31]), 0.05)
    assert not ok and "a tie cannot be told" in detail and "3 of them token id 0" in detail


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=12),
    st.lists(st.one_of(st.none(), st.floats(0, 10)), max_size=12),
    st.integers(0, 11),
    st.floats(0, 1),
)
def test_the_judge_passes_exactly_when_equal_or_tied_at_the_first_difference(ids, gaps, flip, eps):
    ours = list(ids)
    if flip < len(ours):
        ours[flip] += 1
    ok, _ = judge_greedy(greedy(ours), record(ids, gaps), eps)
    at = speculative.first_difference(ours, ids)
    gap = tie_gap(record(ids, gaps), at) if at is not None else None
    assert ok == (at is None or (gap is not None and gap <= eps))


def test_the_simulated_acceptance_length_must_be_near_the_simulated_one():
    # 32 tokens at L=3: the first from prefill, ten verify steps of 3, an eleventh cut to 1 token.
    near = judge_simulated([Acceptance(32 / 11, 11, 32)] * 3, 3.0, 0.25)
    assert (
        near.ok
        and "2.91 reported, 3 simulated" in near.detail
        and "96 tokens / 33 verify steps" in near.detail
    )
    far = judge_simulated([Acceptance(1.0, 31, 32), Acceptance(1.0, 31, 32)], 3.0, 0.25)
    assert not far.ok and "1.03 reported" in far.detail and "per request 1.00, 1.00" in far.detail


def test_the_tiny_mtp_profile_asks_for_a_simulated_start_with_real_draft_tokens():
    spec = resolve("qwen-tiny-mtp")
    overrides = speculative.simulated_overrides(spec)
    assert overrides == (
        "env.SGLANG_SIMULATE_ACC_LEN=3",
        "env.SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token",
    )
    simulated = resolve("qwen-tiny-mtp", overrides=overrides)
    assert simulated.env["SGLANG_SIMULATE_ACC_LEN"] == "3"
    assert speculative.simulated_length(simulated) == 3.0 and speculative.simulated_length(spec) is None
    # 3 steps: at most 4 tokens per verify step, so a length of 3 refuses one draft per step
    assert speculative.expected_accept_length(3.0, simulated) == 3.0
    assert speculative.expected_accept_length(9.0, simulated) == 4.0
    # neither the plain profiles nor the full model's MTP start a simulated server
    for target in ("qwen-tiny", "qwen-mtp", "tiny", "tiny-qwen"):
        assert speculative.simulated_overrides(resolve(target)) == ()


def test_the_reference_keeps_its_top2_gaps_and_the_mtp_start_is_judged_by_them(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    key = speculative.key_for(resolve("qwen-tiny"), "base")
    speculative.save_reference(key, "qwen-tiny", answers.Greedy((11, 21, 31, 41, 51), "ref", META, 0.1))
    stored = speculative.load_reference(key)
    assert stored["top2_gaps"][1] == pytest.approx(0.004) and stored["top2_gaps"][2] is None
    assert judge_greedy(greedy([11, 22, 0, 0, 0]), stored, 0.05)[0]  # a tie at token 1
    assert not judge_greedy(greedy([11, 21, 99, 41, 51]), stored, 0.05)[0]  # no gap known at token 2
    assert not judge_greedy(greedy([12, 21, 31, 41, 51]), stored, 0.05)[0]  # a clear margin at token 0


# The scheduler's decode line as sglang#36537 quotes it (0.5.23's metrics_reporter.py wording).
COLLAPSED = (
    "[2026-08-30 10:00:00 TP0] Decode batch, #running-req: 9, full token usage: 0.57, mamba num: 35, "
    "accept len: 1.00, accept rate: 0.00, cuda graph: True"
)


def decode_line(usage: float, accept: float) -> str:
    return COLLAPSED.replace("full token usage: 0.57", f"full token usage: {usage:.2f}").replace(
        "accept len: 1.00", f"accept len: {accept:.2f}"
    )


def test_acceptance_must_hold_as_the_kv_cache_fills():
    assert speculative.decode_samples([COLLAPSED, "Prefill batch, #new-seq: 1"]) == [(0.57, 1.0)]
    healthy = [decode_line(u / 20, 2.6 - u / 100) for u in range(0, 19)]
    held = speculative.judge_kv_pressure(speculative.decode_samples(healthy), 1.0)
    assert held.ok and "top 0.90" in held.detail
    # sglang#36537's table: 1.78-2.59 up to 0.4, 1.03 at 0.6
    broken = [decode_line(0.1, 2.59), decode_line(0.2, 2.4), decode_line(0.4, 1.78), decode_line(0.6, 1.03)]
    fell = speculative.judge_kv_pressure(speculative.decode_samples(broken), 1.0)
    assert not fell.ok and "accept len 1.03 at full token usage 0.60" in fell.detail
    short = speculative.judge_kv_pressure(speculative.decode_samples(broken[:3]), 1.0)
    assert not short.ok and "to 0.40 only, not past 0.6" in short.detail
    assert not speculative.judge_kv_pressure([], 1.0).ok
