"""The live view draws every stage, serving included, on a terminal, in plain logs and as JSON lines."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

from rich.console import Console
from rich.text import Text

from kit.logs import PhaseLimits, Tracker, parse_text
from kit.startup.live import LiveView, rank_table, status_line
from kit.startup.watch import Progress

LOG = """\
[2026-12-02 14:09:01 TP0] Init parallel begin.
[2026-12-02 14:09:01 TP1] Init parallel begin.
[2026-12-02 14:09:02 TP0] Init parallel ends. elapsed=0.30 s
[2026-12-02 14:09:02 TP1] Init parallel ends. elapsed=0.37 s
[2026-12-02 14:09:03 TP0] Load weight begin. avail mem=21.30 GB
[2026-12-02 14:09:03 TP1] Load weight begin. avail mem=21.30 GB
[2026-12-02 14:09:03 TP0] Load weight end. elapsed=0.02 s, type=Qwen2ForCausalLM, avail mem=21.29 GB.
[2026-12-02 14:09:03 TP1] Load weight end. elapsed=0.02 s, type=Qwen2ForCausalLM, avail mem=21.29 GB.
[2026-12-02 14:09:04 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 65536, K size: 0.00 GB
[2026-12-02 14:09:04 TP0] Memory pool end. avail mem=21.15 GB
[2026-12-02 14:09:04 TP1] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 65536, K size: 0.00 GB
[2026-12-02 14:09:04] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-12-02 14:09:20] The server is fired up and ready to roll!
"""


def progress_steps() -> list[Progress]:
    """One Progress per event, the way the watcher hands them over."""
    tracker = Tracker.start(PhaseLimits(expected_ranks=2), 0.0)
    steps = []
    for i, event in enumerate(parse_text(LOG), start=1):
        tracker = tracker.observe_event(event, float(i))
        steps.append(Progress(tracker, float(i) + 0.5, (event,), None, "kit-tiny-test"))
    return steps


def test_every_stage_including_serving_draws_on_a_terminal():
    # What the live display holds after each update, rendered as a terminal would show it: the
    # refresh thread draws it 4 times a second, so the captured stream alone may skip a stage.
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    drawn_stages = []
    with LiveView(console, title="kit up tiny") as view:
        for step in progress_steps():
            view.update(step)
            frame = Console(file=io.StringIO(), force_terminal=True, width=120)
            frame.print(view._live.renderable)
            shown = frame.file.getvalue()
            assert status_line(step) in Text.from_ansi(shown).plain, f"stage {step.tracker.stage} not drawn"
            drawn_stages.append(step.tracker.stage)
    assert drawn_stages[-1] == "serving" and "window -" in status_line(progress_steps()[-1])
    assert {"init", "load", "memory", "capture", "warmup", "serving"} <= set(drawn_stages)


def test_plain_output_shows_each_ranks_milestone_once_and_each_stage_change():
    out = io.StringIO()
    with LiveView(Console(file=out, force_terminal=False, width=120), title="kit up tiny") as view:
        for step in progress_steps():
            view.update(step)
    text = out.getvalue()
    assert text.count("TP0      kv.ready") == 1  # two lines (KV cache, memory pool), shown once
    for stage in ("init", "load", "memory", "capture", "warmup", "serving"):
        assert f"stage {stage}" in text


def test_json_lines_are_one_object_per_line():
    buffer = io.StringIO()
    with redirect_stdout(buffer), LiveView(Console(file=io.StringIO()), title="t", as_json=True) as view:
        for step in progress_steps():
            view.update(step)
    objects = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert objects and all(o["type"] == "milestone" for o in objects)
    assert {(o["rank"], o["milestone"]) for o in objects} >= {("TP0", "init.begin"), ("main", "ready")}


def _launch_progress(now: float, line: str | None = "Loading tokenizer...") -> Progress:
    tracker = Tracker.start(PhaseLimits(expected_ranks=2), 0.0)
    return Progress(tracker, now, (), None, "kit-tiny-test", 3, line)


def test_the_launch_stage_says_what_happens_instead_of_an_empty_table():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    console.print(rank_table(_launch_progress(23.0)))
    text = out.getvalue()
    assert "launch" in text and "23.0 s" in text and "imports" in text


def test_plain_logs_get_a_heartbeat_while_nothing_else_is_said():
    out = io.StringIO()
    with LiveView(Console(file=out, force_terminal=False, width=200), title="kit up tiny") as view:
        for now in (0.5, 5.0, 10.0, 16.0, 20.0, 31.5):
            view.update(_launch_progress(now))
    lines = [line for line in out.getvalue().splitlines() if "launch for" in line]
    assert len(lines) == 2  # at 16 s and 31.5 s: one per 15 s of silence
    assert "launch for 16 s" in lines[0] and "last: Loading tokenizer..." in lines[0]
    assert "stage launch (starting SGLang" in out.getvalue()


def test_json_activity_lines_carry_the_stage_time_and_the_last_line():
    from kit.logs import ActivitySample

    base = _launch_progress(12.0)
    step = Progress(base.tracker, 12.0, (), ActivitySample(t=12.0, cpu_seconds=9.0), "c", 3, "importing")
    buffer = io.StringIO()
    with redirect_stdout(buffer), LiveView(Console(file=io.StringIO()), title="t", as_json=True) as view:
        view.update(step)
    activity = json.loads(buffer.getvalue().splitlines()[-1])
    assert activity["type"] == "activity" and activity["in_stage_s"] == 12.0
    assert activity["last_line"] == "importing" and activity["cpu_s"] == 9.0
