"""causes.toml: filtering by outcome, phase and required words; ranking by the evidence found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.logs import Phase
from kit.logs.causes import build_causes, default_causes, match_causes


def _book(*causes: dict):
    base = {"title": "t", "why": "w", "what_to_try": ["x"], "source": "s"}
    return build_causes({"cause": [{**base, **c} for c in causes]})


def test_outcome_phase_and_required_words_filter():
    book = _book(
        {"id": "a", "outcome": ["hung"], "phase": ["init"]},
        {"id": "b", "outcome": ["crashed"]},
        {"id": "c", "phase": ["none"]},
        {"id": "d", "requires": ["NCCL WARN"]},
    )
    assert [m.cause.id for m in match_causes("hung", Phase.INIT, "", book)] == ["a"]
    assert [m.cause.id for m in match_causes("hung", None, "nccl warn: x", book)] == ["c", "d"]
    assert [m.cause.id for m in match_causes("crashed", Phase.LOAD, "", book)] == ["b"]


def test_an_exception_beats_words_and_words_beat_a_phase_fit():
    book = _book(
        {"id": "fits-phase", "phase": ["capture"]},
        {"id": "one-word", "words": ["P2P"]},
        {"id": "two-words", "words": ["NET/IB", "Init COMPLETE"]},
        {"id": "raised", "exceptions": ["OutOfMemoryError"]},
    )
    evidence = "... NET/IB ... init complete ... p2p ... torch.OutOfMemoryError: CUDA out of memory"
    matches = match_causes("crashed", Phase.CAPTURE, evidence, book)
    assert [(m.cause.id, m.evidence, m.generic) for m in matches] == [
        ("raised", ("OutOfMemoryError",), False),
        ("two-words", ("NET/IB", "Init COMPLETE"), False),
        ("one-word", ("P2P",), False),
        ("fits-phase", (), True),
    ]


def test_generic_causes_for_this_phase_alone_come_before_those_for_many_phases():
    book = _book(
        {"id": "many", "phase": ["init", "capture", "warmup", "none"]},
        {"id": "any"},
        {"id": "only-warmup", "phase": ["warmup"]},
    )
    matches = match_causes("crashed", Phase.WARMUP, "", book)
    assert [m.cause.id for m in matches] == ["only-warmup", "many", "any"]
    assert all(m.generic for m in matches)


def test_among_equal_evidence_the_book_order_decides_not_the_phase_list():
    # A PCIe-only box hung in init: three causes name "no NVLink"; the commoner one (first in the
    # book) stays first even though it also fits more phases.
    book = _book(
        {"id": "p2p", "phase": ["init", "capture", "warmup", "none"], "words": ["no NVLink"]},
        {"id": "acs", "phase": ["init", "capture", "warmup"], "words": ["no NVLink"]},
        {"id": "narrow", "phase": ["init"]},
    )
    matches = match_causes("hung", Phase.INIT, "gpu link: PCIe, no NVLink", book)
    assert [m.cause.id for m in matches] == ["p2p", "acs", "narrow"]
    assert [m.generic for m in matches] == [False, False, True]


def test_words_match_where_a_word_starts_case_insensitively():
    book = _book({"id": "roce", "words": ["RoCE"]}, {"id": "batch", "words": ["BatchDecode"]})
    found = {m.cause.id: m.evidence for m in match_causes("crashed", None, "the process died", book)}
    assert found["roce"] == ()  # not inside "process"
    found = {m.cause.id: m.evidence for m in match_causes("crashed", None, "BatchDecodeWithPaged", book)}
    assert found["batch"] == ("BatchDecode",)


def test_when_the_phase_is_unknown_evidence_may_point_at_any_phase():
    book = _book({"id": "capture-oom", "phase": ["capture"], "words": ["out of memory"]}, {"id": "generic"})
    tail = "Exception: Capture cuda graph failed: CUDA out of memory."
    assert [m.cause.id for m in match_causes("crashed", None, tail, book)] == ["generic"]
    unknown = match_causes("crashed", None, tail, book, phase_known=False)
    assert [m.cause.id for m in unknown] == ["capture-oom", "generic"]


def test_limit():
    book = _book(*({"id": str(i)} for i in range(10)))
    assert len(match_causes("ready", Phase.SERVING, "", book, limit=3)) == 3


@pytest.mark.parametrize(
    "cause",
    [
        {"id": "a", "title": "t", "why": "w", "source": "s"},  # nothing to try
        {"id": "a", "title": "t", "why": "w", "what_to_try": ["x"]},  # no source
        {"id": "a", "title": "t", "why": "w", "what_to_try": ["x"], "source": "s", "outcome": ["stalled"]},
        {"id": "a", "title": "t", "why": "w", "what_to_try": ["x"], "source": "s", "phase": ["booting"]},
        {"id": "a", "title": "t", "why": "w", "what_to_try": ["x"], "source": "s", "hints": ["x"]},
        {"id": "a", "title": "t", "why": "w", "what_to_try": ["x"], "source": "s", "words": [""]},
    ],
)
def test_bad_cause_data_is_rejected(cause):
    with pytest.raises(ValueError):
        build_causes({"cause": [cause]})


def test_duplicate_ids_are_rejected():
    with pytest.raises(ValueError):
        _book({"id": "a"}, {"id": "a"})


def test_every_shipped_cause_has_fix_lines_and_a_source():
    for cause in default_causes().causes:
        assert cause.what_to_try and cause.source, cause.id


def test_shipped_causes_cover_the_init_hang_facts_and_the_failures_real_logs_show():
    ids = {c.id for c in default_causes().causes}
    assert {"nccl-p2p", "pcie-acs", "shm-too-small", "memlock", "rank-missing", "peer-unreachable"} <= ids
    assert {
        "capture-oom",
        "kv-pool-oom",
        "port-in-use",
        "rendezvous-timeout",
        "rank-died-loading",
        "weights-bad",
        "download-stall",
        "driver-too-old",
        "wrong-arch",
        "nccl-version-mismatch",
        "wsl-shm",
    } <= ids
    p2p = next(c for c in default_causes().causes if c.id == "nccl-p2p")
    assert any("NCCL_P2P_DISABLE=1" in step for step in p2p.what_to_try)
    init_hang = {
        m.cause.id for m in match_causes("hung", Phase.INIT, "Init torch distributed begin.", limit=20)
    }
    assert {"nccl-p2p", "pcie-acs", "shm-too-small", "memlock", "rank-missing"} <= init_hang


_REAL_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-logs"


@pytest.mark.parametrize(
    "log",
    [
        "29_deepep-2node-h20-capture-cuda-oom",  # capture-oom
        "44_dsv4-fp8-h200-tp8-kv-pool-no-memory",  # kv-pool-oom
        "52_VLLM-ci-api-server-port-in-use",  # port-in-use
        "35_qwen2-eagle-draft-keyerror-weights",  # weights-bad
        "28_sm75-capture-no-kernel-image-v0.2",  # wrong-arch
        "22_mistral7b-tp1-warmup-502-proxy-crash-v0.4",  # warmup-proxy
    ],
)
def test_the_cause_a_real_log_shows_ranks_first_on_its_evidence(log):
    """A public issue's own log (tests/fixtures/sglang-logs), whole, against the cause its thread
    established (the fixture's JSON): the book's words must find it in what SGLang really printed."""
    expected = json.loads((_REAL_LOGS / f"{log}.json").read_text())["expected"]
    text = (_REAL_LOGS / f"{log}.log").read_text(errors="replace")
    phase = Phase(expected["phase"]) if expected["phase"] else None
    first = match_causes(expected["outcome"], phase, text)[0]
    assert first.cause.id == expected["cause"]
    assert first.evidence and all(e in text for e in first.evidence)  # on the log's words, not book order


# -- the activity a live verdict was reached on is evidence ---------------------------------------


def test_a_fitting_activity_shape_outranks_a_word_and_opens_the_gate():
    book = _book(
        {"id": "p2p", "words": ["no NVLink"], "activity": ["spinning"]},
        {"id": "rendezvous", "requires": ["TCPStore"], "activity": ["quiet"]},
        {"id": "plain", "words": ["no NVLink", "Init COMPLETE"]},
    )
    evidence = "gpu link: PCIe, no NVLink\nInit COMPLETE"
    quiet = [m.cause.id for m in match_causes("hung", Phase.INIT, evidence, book, activity="quiet")]
    assert quiet == ["rendezvous", "plain", "p2p"]  # a shape (200) beats two words (200) by book order
    spinning = match_causes("hung", Phase.INIT, evidence, book, activity="spinning")
    assert [m.cause.id for m in spinning] == ["p2p", "plain"]  # the gate stays shut without its shape
    assert spinning[0].evidence[0] == "activity=spinning"
    offline = [m.cause.id for m in match_causes("hung", Phase.INIT, evidence, book)]
    assert offline == ["plain", "p2p"]  # no activity offline: words alone


def test_a_cause_the_server_ruled_out_is_not_offered():
    book = _book({"id": "custom", "words": ["no NVLink"], "unless": ["custom all-reduce: off"]})
    assert match_causes("hung", Phase.CAPTURE, "no NVLink", book)
    assert not match_causes("hung", Phase.CAPTURE, "no NVLink\ncustom all-reduce: off (tp=4)", book)


def test_an_unknown_activity_shape_is_rejected():
    with pytest.raises(ValueError, match="activity"):
        _book({"id": "x", "activity": ["busy"]})


def test_the_shipped_book_reads_quiet_and_spinning_as_the_issue_says():
    # A quiet init: rendezvous, a missing rank, NCCL's bootstrap first; a spin after NCCL's init:
    # P2P and ACS first, custom all-reduce not at all where SGLang turned it off.
    quiet_init = "Init torch distributed begin.\ngpu link: PCIe, no NVLink"
    quiet = [
        m.cause.id for m in match_causes("hung", Phase.INIT, quiet_init, device="cuda", activity="quiet")
    ]
    assert set(quiet[:3]) == {"rendezvous-timeout", "rank-missing", "nccl-bootstrap"}
    spin = "Init COMPLETE\nvia P2P/IPC\ngpu link: PCIe, no NVLink\ncustom all-reduce: off (tp=4)"
    spinning = [
        m.cause.id for m in match_causes("hung", Phase.CAPTURE, spin, device="cuda", activity="spinning")
    ]
    assert spinning[:2] == ["nccl-p2p", "pcie-acs"] and "custom-allreduce" not in spinning


# -- a cause's own line before the phase and before the wrapper ---------------------------------------


def test_words_found_only_on_milestone_lines_are_the_phase_not_a_word_of_the_cause():
    # Real lines of tests/fixtures/sglang-logs/50_*: the pool step names `Load weight end` as a word,
    # the KV-pool cause only the low memory after it; the milestone line says the phase, nothing more.
    book = _book(
        {"id": "pool", "phase": ["memory"], "words": ["avail-mem-low"]},
        {"id": "step-stopped", "phase": ["memory"], "words": ["Load weight end", "avail-mem-low"]},
        {"id": "step-only", "phase": ["memory"], "words": ["Load weight end"]},
        {"id": "phase-only", "phase": ["memory"]},
    )
    log = (
        "[2026-06-02 10:11:12 TP0] Load weight end. type=Gemma3ForConditionalGeneration, "
        "dtype=torch.bfloat16, avail mem=2.10 GB, mem usage=17.20 GB.\navail-mem-low"
    )
    matches = match_causes("hung", Phase.MEMORY, log, book)
    assert [(m.cause.id, m.generic) for m in matches] == [
        ("pool", False),  # one word of its own each: the book's order
        ("step-stopped", False),
        ("step-only", True),  # the milestone line alone: it rests on the phase
        ("phase-only", True),
    ]
    # The same word on a line that is no milestone is the cause's own.
    own = match_causes("hung", Phase.MEMORY, "stuck after Load weight end for 20 min", book)
    assert not next(m for m in own if m.cause.id == "step-only").generic


def test_a_cause_the_error_class_line_names_comes_before_the_wrapper_that_reported_it():
    # tests/fixtures/sglang-logs/47_*: gloo's RuntimeError reported by the scheduler's wrapper line.
    book = _book(
        {
            "id": "wrapper",
            "exceptions": ["Scheduler hit an exception"],
            "words": ["Scheduler hit an exception"],
        },
        {"id": "peer", "words": ["Connection timed out"]},
    )
    raised = (
        "[2026-06-17 06:48:31 TP6] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3105, '
        "in run_scheduler_process\n"
        "[2026-06-17 06:48:31 TP4] RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] "
        "Read error [node1-private-ip]:<port>: Connection timed out"
    )
    assert [m.cause.id for m in match_causes("crashed", None, raised, book, exception=raised)] == [
        "peer",
        "wrapper",
    ]
    # No class named (the traceback cut before its last line): the wrapper is the fallback.
    cut = raised.rsplit("\n", 1)[0] + "\n    Connection timed out"
    assert [m.cause.id for m in match_causes("crashed", None, cut, book, exception=cut)] == [
        "wrapper",
        "peer",
    ]


def test_the_book_knows_what_an_sm120_build_and_a_p2p_failure_print():
    # Upstream's own words: torch's capability warning, ptxas via Triton, NCCL 2.28.9 p2p.cc.
    arch = [
        "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible "
        "with the current PyTorch installation.",
        "ptxas fatal   : Value 'sm_120a' is not defined for option 'gpu-name'",
    ]
    for line in arch:
        found = match_causes("crashed", Phase.CAPTURE, line, device="cuda", exception=line)
        assert found[0].cause.id == "wrong-arch", line
    # A model config's `architectures=[...]` says nothing about the GPU (it once opened the gate).
    config = (
        "[2026-06-15 19:57:33 TP5] Hybrid swa model: self.hf_config.architectures=['DeepseekV4ForCausalLM']"
    )
    assert "wrong-arch" not in [
        m.cause.id for m in match_causes("crashed", Phase.INIT, config, device="cuda")
    ]
    # NCCL's P2P set-up failing, and a segfault inside SGLang's NCCL wrapper at init, are crashes
    # (tests/fixtures/sglang-logs-oos/oos01_*'s lines).
    segfault = (
        "[2026-06-15 19:57:33 TP5] Init torch distributed begin.\n"
        "Fatal Python error: Segmentation fault\n"
        '  File "/site-packages/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 1'
    )
    p2p = (
        "host:1:2 [0] transport/p2p.cc:355 NCCL WARN failed to peer with device 1(=2000): "
        "217 peer access is not supported between these two devices"
    )
    for text in (segfault, p2p):
        found = match_causes("crashed", Phase.INIT, text, device="cuda", exception=text)
        assert found[0].cause.id == "nccl-p2p" and not found[0].generic, text
