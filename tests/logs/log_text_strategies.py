"""Hypothesis strategies shared by the log property tests: a log text made of lines, some of them
behind collector wrappers (one or more prefixes in front), joined by LF or CRLF, with or without a
last newline."""

from __future__ import annotations

from hypothesis import strategies as st


def wrapped_logs(lines: st.SearchStrategy[str], wrappers: list[str], *, max_wrappers: int, max_lines: int):
    """Up to MAX_LINES of LINES, each bare or behind up to MAX_WRAPPERS of WRAPPERS."""
    wrapped = st.tuples(st.lists(st.sampled_from(wrappers), max_size=max_wrappers), lines).map(
        lambda p: "".join(p[0]) + p[1]
    )
    return st.tuples(
        st.lists(st.one_of(lines, wrapped), max_size=max_lines),
        st.sampled_from(["\n", "\r\n"]),
        st.booleans(),
    ).map(lambda p: p[1].join(p[0]) + (p[1] if p[2] else ""))
