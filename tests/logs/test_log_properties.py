"""Properties: garbage never raises, live feeding equals bulk parsing, wrappers never matter."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_text_strategies import wrapped_logs

from kit.logs import LogParser, Milestone, Rank, analyze_text, parse_text
from kit.logs.wrappers import line_body

# Lines the parser must treat carefully: milestones, traceback parts, errors, notes, noise.
REALISTIC = [
    "[2026-12-02 13:46:12 TP1] Init parallel begin.",
    "[2026-12-02 13:46:13 TP0] Init parallel ends. elapsed=0.59 s",
    "[2025-03-08 12:29:11 TP3] Init torch distributed begin.",
    "[2025-03-08 12:29:13 TP2] Init torch distributed ends. mem usage=0.13 GB",
    "[2025-03-08 12:29:13 DP0 TP1] Load weight begin. avail mem=21.63 GB",
    "[2025-03-08 12:29:21 TP1 EP1] Load weight end. type=Qwen2, avail mem=6.09 GB, mem usage=15.5 GB.",
    "[2025-03-08 12:29:21 PP1 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB",
    "[2025-03-08 12:29:21 TP0] Memory pool end. avail mem=2.09 GB",
    "[2026-07-21 08:22:00 TP0] Capture draft decode CUDA graph begin. backend=full",
    "[2025-03-08 12:29:28 TP0] Capture cuda graph end. Time elapsed: 7.23 s. mem usage=0.93 GB.",
    "[2025-03-08 12:29:29] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
    "[2025-03-08 12:29:33] The server is fired up and ready to roll!",
    "[2026-02-25 16:41:56 TP9] Scheduler hit an exception: Traceback (most recent call last):",
    "Traceback (most recent call last):",
    '  File "/x/scheduler.py", line 2937, in run_scheduler_process',
    "    scheduler = Scheduler(",
    "                ^^^^^^^^^^",
    "RuntimeError: NCCL error: remote process exited or there was a network error",
    "During handling of the above exception, another exception occurred:",
    "[2026-02-25 16:41:56] Received sigquit from a child process. It usually means the child failed.",
    "host:1:1 [0] NCCL WARN socketPollConnect: connect to 10.0.0.1<1> returned Connection refused",
    "host:1:1 [0] NCCL INFO Connected all trees",
    "[2025-03-08 12:29:12 TP0] sglang is using nccl==2.21.5",
    "[2026-12-02 13:46:25] SIGTERM received. signum=None frame=None.",
    "Killed",
    "[2026-12-02 13:46:19 TP0] Decode batch. #running-req: 1, #token: 9, token usage: 0.00",
    "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.68s/it]",
    "\rLoading pt checkpoint shards: 100% Completed | 1/1 [00:01<00:00,  1.31s/it]",
    "  0%|          | 0/13 [00:00<?, ?it/s][2025-03-08 12:29:21 TP1] Capture cuda graph begin.",
    "",
    "   ",
]

WRAPPERS = [
    "2026-12-02T13:46:15.123456789Z ",
    "2025-02-04 21:21:40 ",
    "3: ",
    "(SchedulerActor pid=123) ",
    "[pod/sglang-0/server] ",
    "[rank0]: ",
    "INFO:     ",
]

lines = st.one_of(st.sampled_from(REALISTIC), st.text(max_size=80))
texts = wrapped_logs(lines, WRAPPERS, max_wrappers=3, max_lines=40)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _feed_lines(text: str) -> list:
    parser = LogParser()
    events = [e for piece in text.split("\n") for e in parser.feed(piece)]
    return events + parser.flush()


@FAST
@given(st.text())
def test_arbitrary_text_never_raises(text):
    parse_text(text)
    _feed_lines(text)


@FAST
@given(st.binary(max_size=400))
def test_undecodable_bytes_never_raise_in_analysis(data):
    report = analyze_text(data.decode("utf-8", errors="replace"))
    assert report.outcome in {"ready", "crashed", "hung"}


@FAST
@given(texts)
def test_analysis_of_realistic_garbage_never_raises(text):
    report = analyze_text(text)
    assert report.outcome in {"ready", "crashed", "hung"}


@FAST
@given(texts)
def test_feeding_lines_equals_bulk_parsing(text):
    assert _feed_lines(text) == parse_text(text)


@FAST
@given(texts, st.integers(min_value=0, max_value=4000))
def test_feeding_line_aligned_chunks_equals_bulk_parsing(text, cut):
    # A live reader gets whole lines in batches of any size: "A\nB" is read as A, then B.
    pieces = text.split("\n")
    cut = 1 + cut % len(pieces)
    parser = LogParser()
    events = parser.feed_text("\n".join(pieces[:cut]))
    if cut < len(pieces):
        events += parser.feed_text("\n".join(pieces[cut:]))
    events += parser.flush()
    assert events == parse_text(text)


@FAST
@given(
    st.permutations(WRAPPERS).flatmap(lambda w: st.lists(st.sampled_from(w), max_size=4, unique=True)),
    st.sampled_from([(Rank(tp=3), " TP3"), (Rank(tp=1, dp=0), " DP0 TP1"), (None, "")]),
    st.sampled_from(
        [
            (Milestone.LOAD_BEGIN, "Load weight begin. avail mem=1 GB"),
            (Milestone.INIT_END, "Init parallel ends."),
        ]
    ),
)
def test_shuffled_wrappers_never_change_milestone_or_rank(wrappers, rank, milestone):
    expected_rank, rank_text = rank
    expected_milestone, body = milestone
    line = "".join(wrappers) + f"[2026-12-02 13:46:15{rank_text}] " + body
    [event] = parse_text(line)
    assert (event.milestone, event.rank) == (expected_milestone, expected_rank)
    assert line_body(line) == body
