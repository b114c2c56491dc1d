"""What a bundle holds: every member, masked; the log kept whole or as head and tail; per-rank tails;
a readable picture; and the same bytes back from the reader."""

from __future__ import annotations

import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

from bundle_helpers import HUNG_RESULT, hung_input

from kit.diagnose.bundle import (
    LOG_KEEP_BYTES,
    build_members,
    keep_log,
    rank_tails,
    read_bundle,
    summary_md,
    write_bundle,
)
from kit.diagnose.picture import startup_svg
from kit.diagnose.redact import Redactor


def test_a_written_bundle_reads_back_member_for_member(tmp_path):
    bundle = hung_input()
    members = build_members(bundle, Redactor())
    path = write_bundle(tmp_path / "b.tar.gz", bundle.name, members)
    back = read_bundle(path)
    assert back.name == "kit-tiny-2c8fd4a6-hung"
    assert dict(back.members) == members
    assert back.result["verdict"] == "hung"
    assert "_create_c10d_store" in back.stacks["TP0"]
    assert "kit_fault_hang_init" in back.stacks["TP1"]
    assert set(members) >= {
        "bundle.json",
        "summary.md",
        "fingerprint.json",
        "result.json",
        "startup.svg",
        "log/server.log",
        "lock.txt",
        "stacks/TP0.txt",
        "stacks/TP1.txt",
        "log/tails/main.txt",
    }
    with tarfile.open(path) as tar:  # one folder, so `tar xzf` makes one directory
        assert {m.name.split("/")[0] for m in tar.getmembers()} == {"kit-tiny-2c8fd4a6-hung"}


def test_writing_is_atomic_and_leaves_no_partial_file(tmp_path):
    bundle = hung_input()
    write_bundle(tmp_path / "b.tar.gz", bundle.name, build_members(bundle, Redactor()))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.tar.gz"]


def test_the_same_input_gives_the_same_bytes(tmp_path):
    bundle = hung_input()
    a = write_bundle(tmp_path / "a.tar.gz", bundle.name, build_members(bundle, Redactor()))
    b = write_bundle(tmp_path / "b.tar.gz", bundle.name, build_members(bundle, Redactor()))
    assert a.read_bytes() == b.read_bytes()


def test_a_small_log_is_kept_whole():
    text = "line\n" * 100
    kept = keep_log(text)
    assert kept.whole and kept.text == text and kept.lines == 100


def test_a_large_log_keeps_its_head_and_tail_within_the_limit():
    lines = [f"[2026-12-02 10:00:00 TP{i % 4}] line {i:07d} " + "x" * 80 for i in range(120_000)]
    text = "\n".join(lines) + "\n"
    kept = keep_log(text)
    assert not kept.whole
    assert len(kept.text.encode()) <= LOG_KEEP_BYTES + 300
    assert kept.text.startswith(lines[0] + "\n") and kept.text.endswith(lines[-1] + "\n")
    assert f"{kept.left_out_lines} lines" in kept.text
    assert kept.lines == 120_000
    # Cut at line ends: every kept line is a whole original line (or the marker).
    originals = set(lines)
    assert all(line in originals or line.startswith("[kit bundle:") for line in kept.text.splitlines())


def test_rank_tails_keep_each_ranks_last_lines_with_continuations():
    text = "\n".join(
        [
            "launcher noise",
            "[2026-12-02 10:00:00] server_args=...",
            "[2026-12-02 10:00:01 TP0] Init parallel begin.",
            "[2026-12-02 10:00:01 TP1] Init parallel begin.",
            "[2026-12-02 10:00:02 TP1] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "scheduler.py", line 1, in run',
            "RuntimeError: boom",
            "[2026-12-02 10:00:03 DP0 TP1] Load weight begin.",
        ]
    )
    tails = rank_tails(text, lines_per_rank=2)
    assert tails["main"] == ["launcher noise", "[2026-12-02 10:00:00] server_args=..."]
    assert tails["TP0"] == ["[2026-12-02 10:00:01 TP0] Init parallel begin."]
    assert tails["TP1"] == ['  File "scheduler.py", line 1, in run', "RuntimeError: boom"]
    assert tails["DP0 TP1"] == ["[2026-12-02 10:00:03 DP0 TP1] Load weight begin."]


def test_the_picture_is_valid_svg_with_one_bar_per_span():
    timeline = [
        {"rank": "main", "phase": "launch", "start_s": 0, "elapsed_s": 44, "open": False},
        *HUNG_RESULT["timeline"],
        {"rank": "<TP2 & co>", "phase": "load", "start_s": 10, "elapsed_s": 5, "open": False},
    ]
    svg = startup_svg(timeline, title="tiny <hung>", verdict="HUNG in init", verdict_at_s=53.5)
    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "phase"]
    assert len(bars) == len(timeline)  # main's launch span is there: no extra launch row
    assert {b.get("data-rank") for b in bars} == {"main", "TP0", "TP1", "<TP2 & co>"}
    assert all(b.get("stroke-dasharray") for b in bars if b.get("data-rank") in ("TP0", "TP1"))
    assert root.find("s:title", ns).text == "tiny <hung>"


def test_the_launch_before_the_first_milestone_gets_its_own_row():
    svg = startup_svg(HUNG_RESULT["timeline"], title="t", verdict="HUNG", verdict_at_s=53.5)
    bars = [
        r for r in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "phase"
    ]
    launch = [b for b in bars if b.get("data-rank") == "launch"]
    assert len(launch) == 1 and float(launch[0].get("width")) > 500  # 45 s of 53.5 s


def test_the_summary_says_what_happened_who_waits_and_how_to_replay():
    meta = {
        "name": "kit-tiny-x-hung",
        "created": "now",
        "made_by": "kit up",
        "log": {"lines": 41, "whole": True},
    }
    text = summary_md(meta, {}, HUNG_RESULT)
    assert text.startswith("# HUNG in init: no log line and no activity for 8 s")
    assert "**TP0** waiting: rendezvous" in text and "**TP1** missing: planted-fault" in text
    assert "kit repro kit-tiny-x-hung.tar.gz" in text
    assert "versions: sglang unknown" in text  # no fingerprint: said, not guessed


def test_the_picture_draws_the_activity_a_never_seen_rank_and_earlier_attempts():
    from kit.diagnose.picture import svg_of_result
    from kit.logs.activity import ActivitySample, series_rows

    samples = [
        ActivitySample(
            t=100 + i * 2, cpu_seconds=i * 1.0, read_bytes=i * 10**7, rank_cpu_seconds=(("TP0", i * 0.9),)
        )
        for i in range(6)
    ]
    result = {
        "timeline": HUNG_RESULT["timeline"],
        "activity_series": list(series_rows(samples, 100.0)),
        "serving": {"probe_points": [[20.0, 1.1, True], [30.0, 12.0, False]]},
        "never_seen_ranks": ["TP3"],
        "earlier_attempts": ["CRASHED in load"],
    }
    title = "tiny on img: HUNG in init"
    svg = svg_of_result(result, title=title, verdict="HUNG in init")
    root = ET.fromstring(svg)
    rects = list(root.iter("{http://www.w3.org/2000/svg}rect"))
    rows = {r.get("data-row") for r in rects if r.get("class") == "activity"}
    assert rows == {"cpu TP0", "read MB/s", "probe s"}  # rows that never moved are left out
    assert [r.get("data-rank") for r in rects if r.get("class") == "never-seen"] == ["TP3"]
    failed = [r for r in rects if r.get("data-row") == "probe s" and r.get("fill") == "#c62828"]
    assert len(failed) == 1
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "earlier launch attempts: CRASHED in load" in texts
    assert texts.count("HUNG in init") == 0 and texts.count(title) == 1  # the title is not repeated
    plain = ET.fromstring(svg_of_result({"timeline": HUNG_RESULT["timeline"]}, title="t", verdict="HUNG"))
    assert [t.text for t in plain.iter("{http://www.w3.org/2000/svg}text")][1] == "HUNG"


def test_the_picture_has_a_serving_row_for_a_log_with_a_serving_stretch():
    # sgl-project/sglang#31103: a decode batch with MTP acceptance, then the scheduler's crash.
    from kit.diagnose.picture import svg_of_result
    from kit.logs import analyze_path
    from kit.output import jsonable

    log = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-logs"
    report = analyze_path(next(log.glob("56_*.log")), accept_floor=1.5)
    svg = svg_of_result({"timeline": [], "serving_stretch": jsonable(report.serving)}, title="t", verdict="v")
    root = ET.fromstring(svg)
    rows = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "serving"]
    assert len(rows) == 1 and "accept_len 3.36" in (
        rows[0].findtext("{http://www.w3.org/2000/svg}title") or ""
    )
    assert "above floor 1.5" in svg
    assert 'class="serving"' not in svg_of_result({"timeline": []}, title="t", verdict="v")
