"""Build progress: which step, for how long, its last output; a heartbeat while a RUN step is quiet.

Fed with lines shaped like the engine's classic build output (`Step N/M : ...`, then a step's own
output) and times passed in, so it runs without an engine and without sleeping.
"""

from __future__ import annotations

from kit.images.build import BuildSteps

LINES = [
    "Step 22/34 : COPY ca/ /tmp/kit-ca/",
    " ---> 1b2c",
    "Step 23/34 : RUN apt-get update  && apt-get install -y --no-install-recommends python3.11",
    "Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]",
    "Setting up python3.11 (3.11.2-6) ...",
    "Step 24/34 : COPY wheels/ /tmp/kit-wheels/",
]


def test_steps_and_slow_step_times_in_a_plain_log():
    steps = BuildSteps(started=0.0)
    printed = []
    for t, line in zip([1, 1.5, 2, 3, 40, 95], LINES, strict=True):
        printed += steps.line(line, float(t))
    assert printed == [LINES[0], LINES[2], "  (Step 23/34 took 1 min 33 s)", LINES[5]]
    assert [name.split(" : ")[0] for name, _ in steps.durations] == ["Step 22/34", "Step 23/34"]


def test_a_quiet_run_step_gets_a_heartbeat_every_30_s_with_its_last_line():
    steps = BuildSteps(started=0.0)
    steps.line(LINES[2], 10.0)
    steps.line(LINES[3], 12.0)
    assert steps.heartbeat(25.0) is None
    beat = steps.heartbeat(41.0)
    assert beat == "  still in Step 23/34 after 31 s; last output 29 s ago: " + LINES[3]
    assert steps.heartbeat(50.0) is None  # not again before another 30 s
    assert steps.heartbeat(71.5).startswith("  still in Step 23/34 after 1 min 01 s")


def test_the_terminal_status_ticks_with_time_alone():
    steps = BuildSteps(started=0.0)
    steps.line(LINES[2], 5.0)
    steps.line(LINES[4], 9.0)
    first, later = steps.status(10.0), steps.status(75.0)
    assert first.startswith("Step 23/34 : RUN apt-get update") and "[5 s in step, 10 s in all]" in first
    assert "[1 min 10 s in step, 1 min 15 s in all]" in later and later.endswith(LINES[4])
    assert BuildSteps(started=0.0).status(3.0).startswith("preparing the build context  [3 s in step")


def test_the_cli_prints_heartbeats_between_step_lines(monkeypatch, capsys):
    import kit.cli.image_build as image_build

    clock = iter([0.0, 1.0, 2.0, 45.0, 46.0])
    progress = image_build._BuildProgress("kit/sglang:test")
    progress._clock = lambda: next(clock)
    progress.steps = BuildSteps(started=0.0)
    progress.tty, progress._status = False, None
    progress.line(LINES[2])  # t=0
    progress.line(LINES[3])  # t=1
    with progress._lock:
        beat = progress.steps.heartbeat(progress._clock())  # t=2: too early
    assert beat is None
    progress.line(LINES[5])  # t=45: the slow step ends
    err = capsys.readouterr().err
    assert LINES[2] in err and "(Step 23/34 took 45 s)" in err and LINES[5] in err
