"""causes.toml: filtering by outcome, phase and required words; ranking by hints found."""

from __future__ import annotations

import pytest

from kit.logs import Phase
from kit.logs.causes import build_causes, default_causes, match_causes


def _book(*causes: dict):
    base = {"title": "t", "why": "w", "what_to_try": ["x"]}
    return build_causes({"cause": [{**base, **c} for c in causes]})


def test_outcome_phase_and_required_words_filter():
    book = _book(
        {"id": "a", "outcome": ["stalled"], "phase": ["init"]},
        {"id": "b", "outcome": ["crashed"]},
        {"id": "c", "phase": ["none"]},
        {"id": "d", "requires": ["NCCL WARN"]},
    )
    assert [m.cause.id for m in match_causes("stalled", Phase.INIT, "", book)] == ["a"]
    assert [m.cause.id for m in match_causes("stalled", None, "nccl warn: x", book)] == ["c", "d"]
    assert [m.cause.id for m in match_causes("crashed", Phase.LOAD, "", book)] == ["b"]


def test_more_hints_found_rank_first_and_are_reported():
    book = _book(
        {"id": "plain"},
        {"id": "one", "hints": ["P2P"]},
        {"id": "two", "hints": ["NET/IB", "Init COMPLETE"]},
    )
    matches = match_causes("stalled", Phase.INIT, "... NET/IB ... init complete ... p2p", book)
    assert [(m.cause.id, m.hints_found) for m in matches] == [
        ("two", ("NET/IB", "Init COMPLETE")),
        ("one", ("P2P",)),
        ("plain", ()),
    ]


def test_limit():
    book = _book(*({"id": str(i)} for i in range(10)))
    assert len(match_causes("ready", Phase.SERVING, "", book, limit=3)) == 3


@pytest.mark.parametrize(
    "cause",
    [
        {"id": "a", "title": "t", "why": "w"},  # nothing to try
        {"id": "a", "title": "t", "why": "w", "what_to_try": ["x"], "outcome": ["hung"]},
        {"id": "a", "title": "t", "why": "w", "what_to_try": ["x"], "phase": ["booting"]},
    ],
)
def test_bad_cause_data_is_rejected(cause):
    with pytest.raises(ValueError):
        build_causes({"cause": [cause]})


def test_duplicate_ids_are_rejected():
    with pytest.raises(ValueError):
        _book({"id": "a"}, {"id": "a"})


def test_shipped_causes_cover_the_init_hang_facts():
    ids = {c.id for c in default_causes().causes}
    assert {"nccl-p2p", "pcie-acs", "shm-too-small", "memlock", "rank-missing", "peer-unreachable"} <= ids
    p2p = next(c for c in default_causes().causes if c.id == "nccl-p2p")
    assert any("NCCL_P2P_DISABLE=1" in step for step in p2p.what_to_try)
    init_hang = {
        m.cause.id for m in match_causes("stalled", Phase.INIT, "Init torch distributed begin.", limit=20)
    }
    assert {"nccl-p2p", "pcie-acs", "shm-too-small", "memlock", "rank-missing"} <= init_hang
    capture_crash = [m.cause.id for m in match_causes("crashed", Phase.CAPTURE, "", limit=20)]
    assert "cuda-graph-memory" in capture_crash
