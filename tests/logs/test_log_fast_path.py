"""The fast path of `kit analyze` against a straightforward reference, on random mixes of real lines.

The fast path remembers: classified line tails (LogParser._memo), launch-line arguments per
distinct text after the launch words (launch_fields_at), a traceback's phase per text
(PatternSet.phase_of), and searches launch arguments with letter-led regexes. The reference reads
every line on its own with nothing remembered, and the launch arguments with the original
look-behind regexes over the whole line. Lines come from the real corpus (tests/fixtures), mixed
at random, with launch lines repeated under new timestamps as a restarting server prints them.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kit.logs import LogParser, analyze_text, parse_text
from kit.logs.launch import launch_fields, launch_fields_at
from kit.logs.patterns import default_patterns

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = sorted((FIXTURES / "sglang-logs").glob("*.log")) + sorted((FIXTURES / "kit-logs").glob("*.log"))
REAL_LINES = sorted(
    {line for path in LOGS for line in path.read_text(encoding="utf-8", errors="replace").splitlines()}
)
LAUNCH_LINES = [line for line in REAL_LINES if "server_args=" in line or "Namespace(" in line]
LAUNCH_WORDS = ("server_args=", "vLLM API server version", "Namespace(")

# The launch-argument regexes as they were, look-behind first: the reference for the fast ones.
_VALUE = r"""['"]?(?:=|:\s*)(\d+)"""
_REFERENCE_ARGS = {
    "tp": re.compile(r"(?<![\w.])(?:tp_size|tensor_parallel_size)" + _VALUE),
    "pp": re.compile(r"(?<![\w.])(?:pp_size|pipeline_parallel_size)" + _VALUE),
    "dp": re.compile(r"(?<![\w.])(?:dp_size|data_parallel_size)" + _VALUE),
    "ep": re.compile(r"(?<![\w.])ep_size" + _VALUE),
    "nnodes": re.compile(r"(?<![\w.])nnodes" + _VALUE),
    "node_rank": re.compile(r"(?<![\w.])node_rank" + _VALUE),
}
_REFERENCE_DP_ATTENTION = re.compile(r"""(?<![\w.])enable_dp_attention['"]?(?:=|:\s*)(True|False)""")
_REFERENCE_MODEL = re.compile(r"""(?<![\w.])['"]?(?:model_path|model)['"]?(?:=|:\s*)'([^']*)'""")


def reference_launch_fields(line: str) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, regex in _REFERENCE_ARGS.items():
        found = regex.search(line)
        if found is not None:
            fields[name] = int(found.group(1))
    found = _REFERENCE_DP_ATTENTION.search(line)
    if found is not None:
        fields["dp_attention"] = found.group(1) == "True"
    found = _REFERENCE_MODEL.search(line)
    if found is not None:
        fields["model"] = found.group(1)
    return fields


class _Forgetful(dict):
    """A memo that never remembers: every line and traceback is worked out afresh."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def reference_events(text: str) -> list:
    """Line by line, nothing remembered (the parser's and the patterns' memos forgetful)."""
    patterns = default_patterns()
    saved = patterns._phases
    object.__setattr__(patterns, "_phases", _Forgetful())
    try:
        parser = LogParser()
        parser._memo = _Forgetful()
        events = []
        for line in text.split("\n"):
            events.extend(parser.feed(line))
        events.extend(parser.flush())
        return events
    finally:
        object.__setattr__(patterns, "_phases", saved)


def _restamped(line: str, seconds: int) -> str:
    """A launch line as a restart prints it: the same words after a new timestamp."""
    stamp = (datetime(2026, 12, 2, 13, 0, 0) + timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
    body = line[line.index("]") + 1 :] if line.startswith("[") and "]" in line else f" {line}"
    return f"[{stamp}]{body}"


mixes = st.lists(
    st.one_of(
        st.sampled_from(REAL_LINES),
        st.builds(_restamped, st.sampled_from(LAUNCH_LINES), st.integers(0, 86_000)),
    ),
    max_size=120,
).map("\n".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixes)
def test_fast_parse_equals_the_reference_on_mixes_of_real_lines(text):
    assert parse_text(text) == reference_events(text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mixes)
def test_the_verdict_is_the_same_with_warm_and_cold_memos(text):
    """The report of a mix read after other mixes (memos warm) equals the one read cold."""
    warm = analyze_text(text)
    patterns = default_patterns()
    saved = patterns._phases
    object.__setattr__(patterns, "_phases", _Forgetful())
    try:
        cold = analyze_text(text)
    finally:
        object.__setattr__(patterns, "_phases", saved)
    assert warm == cold
    assert (warm.outcome, warm.phase, warm.attempt.count) == (cold.outcome, cold.phase, cold.attempt.count)


line_parts = st.sampled_from(
    [
        "tp_size=4",
        "attn_tp_size=2",
        "moe_dense_tp_size=1",
        "x.tp_size=9",
        "'tensor_parallel_size': 8",
        "pp_size=2",
        "pipeline_parallel_size=3",
        "dp_size=2",
        "data_parallel_size: 4",
        "ep_size=8",
        "nnodes=2",
        "node_rank=1",
        "enable_dp_attention=True",
        "enable_dp_attention=False",
        "model_path='/m/Q'",
        "'model': 'org/x'",
        "_nnodes=3",
        "t",
        "p",
        "_",
        ".",
        ", ",
        "=",
        "1",
        "[2026-12-02 13:00:00] ",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(line_parts, max_size=12).map("".join),
    st.sampled_from(LAUNCH_WORDS),
    st.lists(line_parts, max_size=12).map("".join),
)
def test_launch_fields_equal_the_look_behind_reference(head, words, tail):
    """The letter-led regexes and the read-once tail give what the look-behind regexes gave."""
    line = head + words + tail
    expected = reference_launch_fields(line)
    assert launch_fields(line) == expected
    assert launch_fields_at(line, len(head)) == expected
    assert launch_fields_at(line, len(head)) == expected  # the remembered tail too


def test_real_launch_lines_read_the_same_as_the_reference():
    assert LAUNCH_LINES, "the corpus holds launch lines"
    for line in LAUNCH_LINES:
        at = min((line.find(w) for w in LAUNCH_WORDS if w in line), default=0)
        assert launch_fields_at(line, at) == reference_launch_fields(line) == launch_fields(line)


def reference_phase_of(text: str):
    """Every rule's every message and frame word tried on every frame, as before the prefilter."""
    from kit.logs.patterns import TRACEBACK_FRAME
    from kit.logs.wrappers import line_body

    rules = default_patterns().exception_phases
    for rule in rules:
        if any(message in text for message in rule.messages):
            return rule.phase
    lines = text.splitlines()
    for index, line in enumerate(lines):
        stripped = line_body(line).lstrip()
        if not stripped.startswith(TRACEBACK_FRAME):
            continue
        source = lines[index + 1] if index + 1 < len(lines) else ""
        for rule in rules:
            if any(frame in stripped or f"{frame}(" in source for frame in rule.frames):
                return rule.phase
    return None


_RULE_WORDS = sorted(
    {w for rule in default_patterns().exception_phases for w in (*rule.messages, *rule.frames)}
)
_TRACEBACK_LINES = [line for line in REAL_LINES if 'File "' in line or "Error" in line]
phase_texts = st.lists(
    st.one_of(
        st.sampled_from(_TRACEBACK_LINES),
        st.builds("  {}".format, st.sampled_from(_RULE_WORDS)),
        st.builds('  File "x.py", line 1, in {}'.format, st.sampled_from(_RULE_WORDS)),
        st.builds("    self.{}()".format, st.sampled_from(_RULE_WORDS)),
    ),
    max_size=30,
).map("\n".join)


@settings(max_examples=300, deadline=None)
@given(phase_texts)
def test_the_prefiltered_phase_of_an_error_equals_the_reference(text):
    assert default_patterns()._phase_of(text) == reference_phase_of(text)
