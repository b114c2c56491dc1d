"""A picture of a start-up: one row per rank, its phases as bars over time, the verdict as a line.
Pure: timeline rows in, SVG text out (no fonts or scripts needed to view it; any browser shows it).

    ranks ↓     0 s ─────────────── time ───────────────► verdict
    main        [launch                     ]
    TP0                 [init ][load ][memory]...
    TP1                 [init ...................  ← open: still in it at the verdict
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

PHASE_COLOURS = {
    "launch": "#9e9e9e",
    "init": "#26a69a",
    "load": "#42a5f5",
    "memory": "#ab47bc",
    "capture": "#ffca28",
    "warmup": "#66bb6a",
    "serving": "#2e7d32",
}
_LEFT, _RIGHT, _TOP, _ROW, _BAR = 90, 30, 56, 26, 16
_WIDTH = 860


def _ticks(total: float) -> list[float]:
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600):
        if total / step <= 10:
            return [i * step for i in range(int(total // step) + 1)]
    step = total / 10
    return [i * step for i in range(11)]


def _rank_order(rank: str) -> tuple[int, str]:
    return ({"launch": 0, "main": 1}.get(rank, 2), rank)


def startup_svg(
    timeline: Sequence[Mapping[str, Any]], *, title: str, verdict: str, verdict_at_s: float | None = None
) -> str:
    """timeline: rows with rank, phase, start_s, elapsed_s, open (UpResult.timeline as JSON).

    The time before the first milestone is the launch stage (imports, argument checks); it has no
    span of its own in the tracker, so it is drawn on a 'launch' row when it lasted at all.
    """
    first = min((float(row["start_s"]) for row in timeline), default=0.0)
    if first > 0 and not any(row["phase"] == "launch" for row in timeline):
        timeline = [
            {"rank": "launch", "phase": "launch", "start_s": 0.0, "elapsed_s": first, "open": False},
            *timeline,
        ]
    ranks = sorted({str(row["rank"]) for row in timeline}, key=_rank_order)
    ends = [float(row["start_s"]) + float(row["elapsed_s"]) for row in timeline]
    total = max([*ends, verdict_at_s or 0.0, 1.0])
    plot = _WIDTH - _LEFT - _RIGHT
    height = _TOP + _ROW * max(1, len(ranks)) + 60

    def x(seconds: float) -> float:
        return round(_LEFT + plot * max(0.0, seconds) / total, 1)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{_WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="{_LEFT}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<text x="{_LEFT}" y="38" fill="#555555">{escape(verdict)}</text>',
    ]
    axis_y = _TOP + _ROW * max(1, len(ranks)) + 4
    for tick in _ticks(total):
        out.append(f'<line x1="{x(tick)}" y1="{_TOP - 4}" x2="{x(tick)}" y2="{axis_y}" stroke="#eeeeee"/>')
        out.append(
            f'<text x="{x(tick)}" y="{axis_y + 14}" text-anchor="middle" fill="#555555">{tick:g} s</text>'
        )
    for index, rank in enumerate(ranks):
        y = _TOP + index * _ROW
        out.append(f'<text x="{_LEFT - 8}" y="{y + _BAR - 3}" text-anchor="end">{escape(rank)}</text>')
        for row in (r for r in timeline if str(r["rank"]) == rank):
            start, elapsed = float(row["start_s"]), float(row["elapsed_s"])
            phase = str(row["phase"])
            width = max(1.0, round(x(start + elapsed) - x(start), 1))
            colour = PHASE_COLOURS.get(phase, "#bdbdbd")
            still = " (still in it at the verdict)" if row.get("open") else ""
            tip = f"{rank} {phase}: from {start:.1f} s for {elapsed:.1f} s{still}"
            dashed = ' stroke="#c62828" stroke-dasharray="4 2"' if row.get("open") else ""
            out.append(
                f'<rect class="phase" data-rank="{escape(rank)}" data-phase="{escape(phase)}" '
                f'x="{x(start)}" y="{y}" width="{width}" height="{_BAR}" fill="{colour}"{dashed}>'
                f"<title>{escape(tip)}</title></rect>"
            )
            if width > 40:
                label_at = f'x="{x(start) + 4}" y="{y + _BAR - 4}"'
                out.append(f'<text {label_at} fill="#ffffff" font-size="11">{escape(phase)}</text>')
    if verdict_at_s is not None:
        vx = x(verdict_at_s)
        out.append(
            f'<line x1="{vx}" y1="{_TOP - 8}" x2="{vx}" y2="{axis_y}" stroke="#c62828" stroke-width="2"/>'
        )
    legend_y = axis_y + 34
    lx = _LEFT
    for phase, colour in PHASE_COLOURS.items():
        out.append(f'<rect x="{lx}" y="{legend_y - 10}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{lx + 16}" y="{legend_y}">{phase}</text>')
        lx += 90
    out.append("</svg>")
    return "\n".join(out) + "\n"
