"""The upstream tools' word enters the one evidence record before the causes are ranked: NCCL RAS
and the flight recorder, asked once per verdict (kit/startup/up.py `ask_upstream`), raise the causes
their keys name (causes.toml `raised_by`), show as the causes' evidence and the verdict's direct
evidence, and their raw answers go into the bundle. GPU-shaped start-ups replayed through `kit up`'s
own code (kit/scenarios); RAS's and fr_trace's answers are the fixtures in their own formats
(tests/fixtures/ras, tests/fixtures/flight-recorder), handed over as the probe would."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.diagnose.bundle import read_bundle
from kit.logs.soft_watchdog import SoftWatchdogReader
from kit.runtime.upstream import read_answer
from kit.scenarios import run_scenario
from kit.startup import up

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))


def _ras(first: str, second: str) -> dict:
    read = (FIXTURES / "ras" / first).read_text(), (FIXTURES / "ras" / second).read_text()
    return {
        "snapshots": [
            {"format": "json", "text": read[0], "at": 0.0},
            {"format": "json", "text": read[1], "at": 10.0},
        ]
    }


def _asked(monkeypatch, answer: dict) -> list[int]:
    """`gather` as the probe would answer where the server runs; how often it was asked."""
    calls: list[int] = []

    def gather(source, soft_watchdog=()):
        calls.append(1)
        return read_answer(answer, soft_watchdog)

    monkeypatch.setattr(up, "gather", gather)
    return calls


def test_ras_every_rank_in_one_collective_raises_the_transport_stall_with_its_word(monkeypatch):
    report = (FIXTURES / "flight-recorder" / "all-entered" / "fr_trace-v.txt").read_text()
    calls = _asked(
        monkeypatch,
        {
            "ras": _ras("json-all-entered-1.json", "json-all-entered-2.json"),
            "flight_recorder": {"report": report, "rc": 0},
        },
    )
    result = run_scenario("p2p-after-init").result
    assert calls == [1]  # one probe per verdict
    first = result.likely_causes[0]
    assert first.id == "nccl-p2p", [c.id for c in result.likely_causes]
    said = [line for line in first.evidence if line.startswith(("nccl-ras: ", "flight-recorder: "))]
    assert said[0].startswith("nccl-ras: all 4 ranks launched AllReduce #12, Broadcast #1 and none launched")
    assert any("entered nccl:all_reduce #3" in line and "none completed it" in line for line in said)
    assert any(line.startswith("nccl-ras: all 4 ranks") for line in result.direct_evidence)
    assert result.upstream[0].startswith("NCCL RAS: all 4 ranks")
    members = read_bundle(result.bundle).members  # the raw answers, readable in the bundle
    assert {"upstream/ras-1.json", "upstream/ras-2.json", "upstream/fr_trace.txt"} <= set(members)


def test_a_rank_ras_and_fr_trace_name_as_never_joining_comes_first(monkeypatch):
    report = (FIXTURES / "flight-recorder" / "missing-rank" / "fr_trace-v.txt").read_text()
    _asked(
        monkeypatch,
        {
            "ras": _ras("json-never-launched.json", "json-never-launched.json"),
            "flight_recorder": {"report": report, "rc": 0},
        },
    )
    result = run_scenario("p2p-after-init").result
    first = result.likely_causes[0]
    assert first.id == "collective-rank-missing", [c.id for c in result.likely_causes]
    assert "nccl-ras: rank 3 never launched AllReduce (the others launched it up to #1) (NCCL 2.28.9)" in (
        first.evidence
    )
    assert any(line.startswith("flight-recorder: nccl:all_reduce #3") for line in first.evidence)
    assert "rank 1 never joined" in " ".join(first.evidence)


def test_nothing_asked_raises_nothing_and_says_why(monkeypatch):
    calls = _asked(
        monkeypatch, {"ras": {"skipped": "NCCL is not loaded"}, "flight_recorder": {"skipped": "x"}}
    )
    result = run_scenario("p2p-after-init").result
    assert calls == [1]
    assert "collective-rank-missing" not in [c.id for c in result.likely_causes]
    assert not any(line.startswith(("nccl-ras", "flight-recorder")) for line in result.direct_evidence)
    assert result.upstream == ("NCCL RAS: not asked (NCCL is not loaded)", "flight recorder: no dump (x)")


def test_a_ready_start_asks_nobody(monkeypatch):
    calls = _asked(monkeypatch, {})
    assert run_scenario("mtp-ready").result.verdict == "ready" and calls == []


def test_sglangs_soft_watchdog_firing_is_direct_evidence_and_raises_the_serving_cause():
    reader = SoftWatchdogReader()
    for line in (
        "[2026-12-05 10:00:00 TP0] Pyspy dump for PID 77 (py-spy dump --native --pid 77):",
        "Process 77: sglang::scheduler_TP0",
        'Thread 77 (idle): "MainThread"',
        "    all_reduce (torch/distributed/distributed_c10d.py:2950)",
        "[2026-12-05 10:00:01 TP0] Scheduler watchdog timeout (self.watchdog_timeout=60.0, self.soft=True)",
    ):
        reader.feed(line)
    [fired, dump] = reader.words()
    assert (fired.source, fired.key) == ("sglang-watchdog", "soft-watchdog") and dump.key is None
    from kit.logs.causes import rank_causes
    from kit.logs.events import Phase
    from kit.logs.evidence import Evidence, Facts

    record = Evidence("hung", Phase.SERVING, facts=Facts(nodes=1, gpu=False), upstream=reader.words())
    [first, *_] = rank_causes(record)
    assert first.cause.id == "serving-collective-stuck"
    assert (
        first.evidence[0]
        == "sglang-watchdog: SGLang's soft watchdog fired 1 time(s) after 60 s without progress"
    )
    assert record.lines() == (first.evidence[0],)  # its detail lines are the result's `upstream`
