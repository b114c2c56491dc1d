"""A wrapped log followed live reads exactly as the same text offline: one Unwrapper for both.

`kit watch --log FILE` / `kit up` follow a file with kit.runtime.logfile.FileFollower and feed each
line to kit.logs.LogParser through the Watcher (kit/startup/watch.py); `kit analyze FILE` unwraps
the whole text (kit.logs.wrappers.unwrap) and parses it in bulk. Here real logs, wrapped the way
`docker compose logs -f` and `journalctl -f -o short-precise` write them, are appended to a file a
few lines at a time while a Watcher follows it, and the live verdict, phases and wrappers are those
of `analyze_text` on the file's text. The properties: `Unwrapper.text` equals `Unwrapper.line` on
each piece (also past the sampled head, with the head made small), unwrapping never raises, and an
unwrapped log or line is left as it is.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_text_strategies import wrapped_logs

from kit.logs import PhaseLimits
from kit.logs import wrappers as wrappers_module
from kit.logs.analyze import analyze_text
from kit.logs.rows import rank_rows
from kit.logs.wrappers import Unwrapper, line_body, unwrap
from kit.runtime.logfile import FileFollower
from kit.runtime.source import SourceState
from kit.startup.watch import Watcher

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# SGLang's own `Exception: Capture cuda graph failed` traceback (sgl-project/sglang#4205).
CAPTURE_TRACEBACK = FIXTURES / "sglang-logs" / "30_capture-gloo-connection-closed.log"
# A real `docker compose logs` paste (sgl-project/sglang#6921; URL in the JSON beside it).
COMPOSE_PASTE = FIXTURES / "pasted-logs" / "01_compose-v1-mixed-chunk-crash-EXCERPT.log"
# The 0.5.23 CPU rehearsal's start-up as journald stored it (`journalctl -o json`).
JOURNAL = FIXTURES / "journal" / "sglang-tiny-ready.json"


def journalctl_short_precise(export: Path) -> str:
    """The export as `journalctl -o short-precise` prints it (`Mon DD HH:MM:SS.us host ident[pid]: `)."""
    lines = []
    for raw in export.read_text(encoding="utf-8").splitlines():
        entry = json.loads(raw)
        message = entry["MESSAGE"]
        if not isinstance(message, str):  # journald stores non-UTF-8 messages as byte arrays
            message = bytes(message).decode("utf-8", "replace")
        when = datetime.fromtimestamp(int(entry["__REALTIME_TIMESTAMP"]) / 1e6, tz=UTC)
        ident = entry.get("SYSLOG_IDENTIFIER", entry.get("_COMM", "?"))
        lines.extend(
            f"{when:%b %d %H:%M:%S.%f} {entry['_HOSTNAME']} {ident}[{entry['_PID']}]: {part}"
            for part in message.split("\n")
        )
    return "\n".join(lines) + "\n"


def compose(text: str, prefix: str = "sglang-1  | ") -> str:
    """`docker compose logs -f` of a service whose output is `text` (Compose v2's `name-1  | `)."""
    return "".join(prefix + line + "\n" for line in text.splitlines())


class FollowedFile:
    """A Source over a log file followed like `kit watch --log` does; the test's clock, and a
    server that exits when the test says so."""

    name = "followed"
    started_at = 0.0
    base_url = None

    def __init__(self, path: Path):
        self.now = 0.0
        self.running = True
        self.follower = FileFollower(path, clock=self.clock, wall=lambda: 1.0e9 + self.now)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def read(self):
        return self.follower.take()

    def sample(self, t):
        return None

    def state(self) -> SourceState:
        return SourceState(running=self.running, exit_code=None if self.running else 1)

    def drain(self, timeout_s):
        return self.follower.take()

    def stacks(self, want=lambda title: True, *, nonblocking=False):
        return []

    def log_text(self) -> str:
        return self.follower.text()

    def http_transport(self):
        return None

    def environment(self):
        return {}


def follow_live(text: str, tmp_path: Path, *, exits: bool, lines_per_step: int = 3, unwrap: bool = True):
    """Append `text` to a file a few lines per second while a Watcher follows it; the server
    exits after its last line when `exits`. Returns (watcher, verdict). `unwrap=False`: the
    Watcher's parser without its Unwrapper (what the live reader was before the merge)."""
    path = tmp_path / "server.log"
    path.write_text("", encoding="utf-8")
    source = FollowedFile(path)
    watcher = Watcher(source, PhaseLimits(), sample_every_s=1.0)
    if not unwrap:
        watcher.parser.unwrapper = None
    lines = text.splitlines(keepends=True)
    verdict = None
    for at in range(0, len(lines), lines_per_step):
        with path.open("a", encoding="utf-8") as log:
            log.write("".join(lines[at : at + lines_per_step]))
        source.sleep(1.0)
        _, verdict = watcher.step()
        if verdict is not None:
            return watcher, verdict
    source.running = not exits
    for _ in range(3):
        source.sleep(1.0)
        _, verdict = watcher.step()
        if verdict is not None:
            break
    return watcher, verdict


def assert_read_alike(watcher: Watcher, verdict, text: str) -> None:
    report = analyze_text(text)
    tracker = watcher.tracker
    assert verdict is not None and verdict.kind.value == report.outcome
    assert getattr(verdict, "phase", tracker.phase) == report.phase  # READY: the tracker's (serving)
    assert getattr(verdict, "exception", None) == report.exception
    assert tracker.last_milestone == report.last_milestone
    assert [(s.rank, s.phase.value) for s in tracker.timeline] == [(r.rank, r.phase) for r in report.timeline]
    assert [(r.rank, r.phase, r.last_milestone) for r in rank_rows(tracker, watcher.source.clock())] == [
        (r.rank, r.phase, r.last_milestone) for r in report.ranks
    ]
    assert watcher.parser.unwrapper is not None
    assert [(w.kind, w.count) for w in watcher.parser.unwrapper.seen] == [
        (w.kind, w.count) for w in report.wrappers
    ]


def test_a_compose_prefixed_capture_failure_followed_live_is_crashed_in_capture_as_offline(tmp_path):
    text = compose(CAPTURE_TRACEBACK.read_text(encoding="utf-8"))
    watcher, verdict = follow_live(text, tmp_path, exits=True)
    assert (verdict.kind.value, verdict.phase.value) == ("crashed", "capture")
    assert "Capture cuda graph failed" in (verdict.exception or "")
    assert_read_alike(watcher, verdict, text)
    assert [w.kind for w in watcher.parser.unwrapper.seen] == ["compose"]


def test_a_real_compose_paste_followed_live_reads_as_offline(tmp_path):
    # The paste starts mid-life (two prefill batches, then the scheduler's crash): live, the first
    # batch line is READY (serving, no start-up in it), as offline for the same line; the crash after
    # READY is the serving watcher's, and the whole paste offline is CRASHED in serving.
    text = COMPOSE_PASTE.read_text(encoding="utf-8")
    watcher, verdict = follow_live(text, tmp_path, exits=True, lines_per_step=1)
    assert (verdict.kind.value, watcher.tracker.phase.value, watcher.tracker.serving_only) == (
        "ready",
        "serving",
        True,
    )
    assert_read_alike(watcher, verdict, watcher.source.log_text())
    whole = analyze_text(text)
    assert (whole.outcome, whole.phase.value, whole.phase_from) == ("crashed", "serving", "exception")


def test_a_journald_wrapped_start_followed_live_is_ready_as_offline(tmp_path):
    text = journalctl_short_precise(JOURNAL)
    assert text.startswith("Dec ") and " python3[4242]: " in text
    watcher, verdict = follow_live(text, tmp_path, exits=False)
    assert verdict.kind.value == "ready"
    assert_read_alike(watcher, verdict, text)
    assert [w.kind for w in watcher.parser.unwrapper.seen] == ["ansi", "journalctl-short"]


@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "compose"])
def test_without_unwrapping_the_live_reader_would_lose_the_crash(wrapped, tmp_path):
    # What the merge fixed, on the live path (the Watcher feeding LogParser.feed line by line): fed
    # Compose-prefixed lines without its Unwrapper, it reads the capture traceback's body as foreign
    # lines and loses the exception.
    text = CAPTURE_TRACEBACK.read_text(encoding="utf-8")
    if wrapped:
        text = compose(text)
    (tmp_path / "raw").mkdir()
    _, raw = follow_live(text, tmp_path / "raw", exits=True, unwrap=False)
    _, read = follow_live(text, tmp_path, exits=True)
    assert "Capture cuda graph failed" in (read.exception or "")
    assert (raw.exception == read.exception) is not wrapped


# -- properties ------------------------------------------------------------------------------------

SGLANG_LINES = [
    "[2026-12-02 13:46:12 TP1] Init parallel begin.",
    "[2025-03-08 12:29:13 DP0 TP1] Load weight begin. avail mem=21.63 GB",
    "[2025-03-08 12:29:28 TP0] Capture cuda graph end. Time elapsed: 7.23 s. mem usage=0.93 GB.",
    "[2025-03-08 12:29:29] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
    "[2026-02-25 16:41:56 TP9] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/x/scheduler.py", line 2937, in run_scheduler_process',
    "RuntimeError: NCCL error: remote process exited or there was a network error",
    "host:1:1 [0] NCCL WARN socketPollConnect: connect to 10.0.0.1<1> returned Connection refused",
    "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.68s/it]",
    "Killed",
    "",
]
COLLECTOR = [w.example for w in wrappers_module.wrappers()] + [
    "\x1b[36msglang-1  |\x1b[0m ",
    "Dec  4 21:53:13 gpu-host python3[4242]: ",
    "(pid=123) ",
]
line_shapes = st.one_of(st.sampled_from(SGLANG_LINES), st.text(max_size=60))
logs = wrapped_logs(line_shapes, COLLECTOR, max_wrappers=2, max_lines=60)
# One wrapper on every line: a log as a collector writes it.
collected = st.tuples(st.sampled_from(COLLECTOR), st.lists(st.sampled_from(SGLANG_LINES), max_size=60)).map(
    lambda p: "".join(p[0] + line + "\n" for line in p[1])
)

PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _line_by_line(text: str) -> tuple[str, tuple]:
    reader = Unwrapper()
    return "\n".join(reader.line(piece) for piece in text.split("\n")), reader.seen


def _in_chunks(text: str, cut: int) -> tuple[str, tuple]:
    pieces = text.split("\n")
    cut = 1 + cut % len(pieces)
    reader = Unwrapper()
    first = reader.text("\n".join(pieces[:cut]))
    rest = reader.text("\n".join(pieces[cut:])) if cut < len(pieces) else None
    return first if rest is None else first + "\n" + rest, reader.seen


@PROPERTY
@given(st.one_of(logs, collected, st.text()), st.integers(min_value=0, max_value=4000))
def test_a_buffer_unwraps_as_its_lines_one_by_one_and_never_raises(text, cut):
    whole = unwrap(text)
    assert (whole.text, whole.seen) == _line_by_line(text) == _in_chunks(text, cut)
    assert whole.text.count("\n") == text.count("\n")


@PROPERTY
@given(st.one_of(logs, collected), st.integers(min_value=0, max_value=4000))
def test_past_the_sampled_head_the_bulk_path_reads_as_the_lines(text, cut):
    # A head of 5 lines and 300 characters, a sparse kind given up after 2 near misses: the bulk
    # path (subn per kind, events for ANSI, CRLF and sparse kinds found later) runs on these logs.
    with (
        mock.patch.object(wrappers_module, "_SAMPLE_LINES", 5),
        mock.patch.object(wrappers_module, "_HEAD_CHARS", 300),
        mock.patch.object(wrappers_module, "_SPARSE_TRIES", 2),
    ):
        whole = unwrap(text)
        assert (whole.text, whole.seen) == _line_by_line(text) == _in_chunks(text, cut)


@PROPERTY
@given(st.lists(st.sampled_from(SGLANG_LINES), max_size=60))
def test_an_unwrapped_log_is_left_as_it_is(lines):
    text = "\n".join(lines) + "\n"
    assert unwrap(text) == wrappers_module.Unwrapped(text, ())
    assert _line_by_line(text) == (text, ())


@PROPERTY
@given(collected)
def test_unwrapping_twice_is_unwrapping_once(text):
    once = unwrap(text).text
    assert unwrap(once).text == once
    assert [line_body(line) for line in once.split("\n")] == [
        line_body(line_body(line)) for line in once.split("\n")
    ]


@PROPERTY
@given(st.text(max_size=200))
def test_a_line_body_never_raises_and_is_idempotent(line):
    body = line_body(line)
    assert line.endswith(body) and line_body(body) == body
