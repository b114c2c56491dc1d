"""The rehearsals the watch steps watch (kit/hostcheck/rehearsal/) print SGLang 0.5.23's own lines, and
the kit's parser reads them as the mission's phases: init begun, a rendezvous crash, capture begun."""

from __future__ import annotations

from pathlib import Path

from kit.hostcheck.rehearsal import hang, shapes
from kit.logs import analyze_text

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


def _texts(path: Path) -> set[str]:
    """Each line's text after SGLang's '[YYYY-MM-DD HH:MM:SS( TPn)] ' prefix."""
    return {line.split("] ", 1)[1] for line in path.read_text().splitlines() if line.startswith("[20")}


def _log(*texts: str, now: float = 1_780_000_000.0) -> str:
    lines = [hang.stamp(now=now) + t for t in hang.LAUNCHER_LINES]
    lines += [hang.stamp("TP0", now=now + 1 + i) + t for i, t in enumerate(texts)]
    return "\n".join(lines) + "\n"


def test_the_rehearsal_prints_sglang_0_5_23s_own_lines():
    real = _texts(FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log")
    assert set(hang.LAUNCHER_LINES) | {hang.INIT_BEGIN} <= real
    crash = (
        FIXTURES / "sglang-logs" / "20_dsr1-2node-tp16-node2-nccl-connrefused-crash-init-v0.5.8.post1.log"
    ).read_text()
    assert hang.SCHEDULER_EXCEPTION + "Traceback (most recent call last):" in crash
    assert hang.LAUNCHER_SIGQUIT in crash


def test_the_rehearsal_log_reads_as_init_begun_then_a_rendezvous_crash():
    now = 1_780_000_000.0
    lines = [hang.stamp(now=now) + text for text in hang.LAUNCHER_LINES]
    lines.append(hang.stamp("TP0", now=now + 1) + hang.INIT_BEGIN)
    hung = analyze_text("\n".join(lines) + "\n")
    assert (hung.outcome, hung.last_milestone, hung.phase) == ("hung", "init.begin", "init")
    assert hung.dialect and "0.5.21" in hung.dialect

    lines.append(
        hang.stamp("TP0", now=now + 9)
        + hang.SCHEDULER_EXCEPTION
        + "Traceback (most recent call last):\n"
        + '  File "x.py", line 1, in <module>\n'
        + "torch.distributed.DistStoreError: Timed out after 9 seconds waiting for clients. "
        + "1/2 clients joined."
    )
    lines.append(hang.stamp(now=now + 9) + hang.LAUNCHER_SIGQUIT)
    crashed = analyze_text("\n".join(lines) + "\n")
    assert (crashed.outcome, crashed.phase) == ("crashed", "init")
    assert "rendezvous-timeout" in [c.id for c in crashed.likely_causes]


def test_the_shape_rehearsal_prints_sglang_0_5_23s_own_lines():
    real = _texts(FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log")
    assert set(shapes.TO_MEMORY_POOL) <= real
    # 0.5.23's capture line format (cuda_graph_setup.py), as the kit's parser reads it.
    capture = analyze_text(_log(hang.INIT_BEGIN, *shapes.TO_MEMORY_POOL, shapes.CAPTURE_BEGIN))
    assert (capture.outcome, capture.last_milestone, capture.phase) == ("hung", "capture.begin", "capture")
    spin = analyze_text(_log(hang.INIT_BEGIN))
    assert (spin.last_milestone, spin.phase) == ("init.begin", "init")
