"""A picture of a start-up: one row per rank, its phases as bars over time, the verdict as a line,
and under them the activity the verdict rests on. Pure: rows in, SVG text out (no fonts or scripts
needed to view it; any browser shows it).

    ranks ↓     0 s ─────────────── time ───────────────► verdict
    main        [launch                     ]
    TP0                 [init ][load ][memory]...
    TP1                 [init ...................  ← open: still in it at the verdict
    TP2         - - - - never seen - - - - - - - - -
    cpu TP0     ▁▃▇▇▇▅▁▁▁▁                          ← activity rows: CPU per rank, reads, GPU
    read MB/s   ▇▇▇▁▁                                 memory, compile writes, probe latency
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


def verdict_at(result: Mapping[str, Any]) -> float | None:
    """When the verdict came: the end of the timeline's last span (None without a timeline)."""
    ends = [float(s["start_s"]) + float(s["elapsed_s"]) for s in result.get("timeline") or []]
    return max(ends) if ends else None


def svg_of_result(result: Mapping[str, Any], *, title: str, verdict: str) -> str:
    """startup_svg with everything a result (UpResult as JSON) holds for the picture."""
    serving = result.get("serving") or {}
    return startup_svg(
        result.get("timeline") or [],
        title=title,
        verdict=verdict,
        verdict_at_s=verdict_at(result),
        activity=result.get("activity_series") or (),
        probes=serving.get("probe_points") or (),
        never_seen=result.get("never_seen_ranks") or (),
        earlier=result.get("earlier_attempts") or (),
        serving_stretch=result.get("serving_stretch"),
    )


def startup_svg(
    timeline: Sequence[Mapping[str, Any]],
    *,
    title: str,
    verdict: str,
    verdict_at_s: float | None = None,
    activity: Sequence[Mapping[str, Any]] = (),
    probes: Sequence[Sequence[Any]] = (),
    never_seen: Sequence[str] = (),
    earlier: Sequence[str] = (),
    serving_stretch: Mapping[str, Any] | None = None,
) -> str:
    """timeline: rows with rank, phase, start_s, elapsed_s, open (UpResult.timeline as JSON);
    activity: series rows (t, cpu per rank, read_mb_s, gpu_mem_gib, compile_mb); probes: [t,
    latency, answered]; never_seen: ranks that printed nothing (an empty dashed row each); earlier:
    how earlier launch attempts ended (a line under the subtitle).

    The time before the first milestone is the launch stage (imports, argument checks); it has no
    span of its own in the tracker, so it is drawn on a 'launch' row when it lasted at all.
    """
    first = min((float(row["start_s"]) for row in timeline), default=0.0)
    if first > 0 and not any(row["phase"] == "launch" for row in timeline):
        timeline = [
            {"rank": "launch", "phase": "launch", "start_s": 0.0, "elapsed_s": first, "open": False},
            *timeline,
        ]
    seen = {str(row["rank"]) for row in timeline}
    ranks = sorted(seen | {str(r) for r in never_seen}, key=_rank_order)
    metrics = activity_rows(activity, probes)
    ends = [float(row["start_s"]) + float(row["elapsed_s"]) for row in timeline]
    ends += [float(row["t"]) for row in activity] + [float(p[0]) + float(p[1]) for p in probes]
    total = max([*ends, verdict_at_s or 0.0, 1.0])
    plot = _WIDTH - _LEFT - _RIGHT
    top = _TOP + (16 if earlier else 0)
    stretch = serving_stretch if serving_stretch and serving_stretch.get("over_time") else None
    rows = len(ranks) + len(metrics) + (1 if stretch else 0)
    height = top + _ROW * max(1, rows) + 60

    def x(seconds: float) -> float:
        return round(_LEFT + plot * max(0.0, seconds) / total, 1)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{_WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="{_LEFT}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    if verdict and verdict not in title:  # a title that holds the verdict is not repeated under it
        out.append(f'<text class="subtitle" x="{_LEFT}" y="38" fill="#555555">{escape(verdict)}</text>')
    if earlier:
        said = "earlier launch attempts: " + "; ".join(earlier)
        out.append(f'<text class="attempts" x="{_LEFT}" y="{top - 12}" fill="#8d6e63">{escape(said)}</text>')
    axis_y = top + _ROW * max(1, rows) + 4
    for tick in _ticks(total):
        out.append(f'<line x1="{x(tick)}" y1="{top - 4}" x2="{x(tick)}" y2="{axis_y}" stroke="#eeeeee"/>')
        out.append(
            f'<text x="{x(tick)}" y="{axis_y + 14}" text-anchor="middle" fill="#555555">{tick:g} s</text>'
        )
    for index, rank in enumerate(ranks):
        y = top + index * _ROW
        out.append(f'<text x="{_LEFT - 8}" y="{y + _BAR - 3}" text-anchor="end">{escape(rank)}</text>')
        if rank not in seen:
            out.append(
                f'<rect class="never-seen" data-rank="{escape(rank)}" x="{_LEFT}" y="{y}" width="{plot}" '
                f'height="{_BAR}" fill="none" stroke="#c62828" stroke-dasharray="4 4">'
                f"<title>{escape(rank)}: never printed a line</title></rect>"
            )
            out.append(f'<text x="{_LEFT + 6}" y="{y + _BAR - 4}" fill="#c62828">never seen</text>')
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
    for index, (name, points) in enumerate(metrics):
        y = top + (len(ranks) + index) * _ROW
        out.extend(_metric_row(name, points, y, x))
    if stretch is not None:
        out.extend(_serving_row(stretch, top + (len(ranks) + len(metrics)) * _ROW, plot))
    if verdict_at_s is not None:
        vx = x(verdict_at_s)
        out.append(
            f'<line x1="{vx}" y1="{top - 8}" x2="{vx}" y2="{axis_y}" stroke="#c62828" stroke-width="2"/>'
        )
    legend_y = axis_y + 34
    lx = _LEFT
    for phase, colour in PHASE_COLOURS.items():
        out.append(f'<rect x="{lx}" y="{legend_y - 10}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{lx + 16}" y="{legend_y}">{phase}</text>')
        lx += 90
    out.append("</svg>")
    return "\n".join(out) + "\n"


def activity_rows(
    activity: Sequence[Mapping[str, Any]], probes: Sequence[Sequence[Any]] = ()
) -> list[tuple[str, list[tuple[float, float]]]]:
    """(row name, [(t, value)]) for each activity measure that moved at all, in a fixed order."""
    rows: list[tuple[str, list[tuple[float, float]]]] = []
    ranks = sorted({rank for row in activity for rank in (row.get("cpu") or {})}, key=_rank_order)
    for rank in ranks:
        rows.append(
            (f"cpu {rank}", [(float(r["t"]), float((r.get("cpu") or {}).get(rank, 0))) for r in activity])
        )
    for key, name in (("read_mb_s", "read MB/s"), ("gpu_mem_gib", "gpu GiB"), ("compile_mb", "compile MB")):
        rows.append((name, [(float(r["t"]), float(r.get(key) or 0)) for r in activity]))
    if probes:
        rows.append(("probe s", [(float(p[0]), float(p[1]) if p[2] else -float(p[1])) for p in probes]))
    return [(name, points) for name, points in rows if any(v for _, v in points)]


def _serving_row(stretch: Mapping[str, Any], y: float, plot: float) -> list[str]:
    """The serving stretch of a log (kit/logs/digest.py): one bar per slice of its batch lines, as tall
    as that slice's median generation throughput, the slice's medians (acceptance, KV and mamba
    usage, requests) in its tooltip; the log's acceptance range and its floor as the row's label."""
    slices = list(stretch.get("over_time") or [])
    top_rate = max((float(s.get("gen_throughput") or 0) for s in slices), default=0.0) or 1.0
    accept = (stretch.get("over_log") or {}).get("accept_len")
    label = "serving"
    if accept:
        label += f"  accept len {accept['min']:g}-{accept['max']:g} (median {accept['median']:g})"
        if stretch.get("accept_floor") is not None:
            side = "BELOW" if stretch.get("accept_below_floor") else "above"
            label += f", {side} floor {stretch['accept_floor']:g}"
    out = [f'<text x="{_LEFT - 8}" y="{y + _BAR - 3}" text-anchor="end">serving</text>']
    width = plot / max(1, len(slices))
    for index, piece in enumerate(slices):
        tall = max(1.0, _BAR * float(piece.get("gen_throughput") or 0) / top_rate)
        said = ", ".join(f"{k} {v}" for k, v in piece.items() if v is not None)
        left, bottom = round(_LEFT + index * width + 1, 1), round(y + _BAR - tall, 1)
        out.append(
            f'<rect class="serving" x="{left}" y="{bottom}" width="{round(max(1.0, width - 2), 1)}" '
            f'height="{round(tall, 1)}" fill="#2e7d32"><title>{escape(said)}</title></rect>'
        )
    at = f'x="{_LEFT + 4}" y="{y - 2}"'
    out.append(f'<text class="serving-label" {at} fill="#2e7d32" font-size="11">{escape(label)}</text>')
    return out


def _metric_row(name: str, points: list[tuple[float, float]], y: float, x) -> list[str]:
    """A row of bars, tallest = the row's largest value; a negative value (a failed probe) in red."""
    peak = max(abs(v) for _, v in points) or 1.0
    out = [
        f'<text x="{_LEFT - 8}" y="{y + _BAR - 3}" text-anchor="end" fill="#555555">{escape(name)}</text>',
        f'<line x1="{_LEFT}" y1="{y + _BAR}" x2="{_WIDTH - _RIGHT}" y2="{y + _BAR}" stroke="#dddddd"/>',
    ]
    for t, value in points:
        tall = round(_BAR * abs(value) / peak, 1)
        colour = "#c62828" if value < 0 else "#546e7a"
        out.append(
            f'<rect class="activity" data-row="{escape(name)}" x="{x(t) - 1}" y="{y + _BAR - tall}" '
            f'width="2" height="{tall}" fill="{colour}"><title>{escape(name)} at {t:.0f} s: '
            f"{abs(value):g}{' (failed)' if value < 0 else ''}</title></rect>"
        )
    out.append(f'<text x="{_WIDTH - _RIGHT + 2}" y="{y + 8}" font-size="9" fill="#888888">{peak:g}</text>')
    return out
