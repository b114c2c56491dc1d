"""A LaunchSpec's timing as the tracker's PhaseLimits, with command-line overrides. Pure.

Here, beside PhaseLimits, so that start-up, bundles and replays all read it from below them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kit.errors import InputError
from kit.logs import PhaseLimits, StageSeconds
from kit.spec import MAX_SECONDS, LaunchSpec, seconds_written

STAGES = ("launch", "init", "load", "memory", "autotune", "capture", "warmup", "first_token")
# Before the first milestone the server imports SGLang and checks arguments: up to minutes on a
# cold page cache. A catalog may set `launch` itself; this is the fallback.
_LAUNCH_DEADLINE_S = 600.0
_LAUNCH_STALL_S = 180.0


def parse_limit_overrides(
    values: Iterable[str], option: str, names: Sequence[str] = STAGES, *, kind: str = "stage"
) -> dict[str, float]:
    """['init=30', 'load=600'] -> {'init': 30.0, 'load': 600.0}: the one parser of NAME=SECONDS
    (--deadline and --stall of up/watch/smoke, preflight's --deadline over its steps). Bad input is
    an InputError naming the option, worded as kit/cli/params.py words every value."""
    result: dict[str, float] = {}
    syntax = f"{kind.upper()}=SECONDS"
    example = "init" if "init" in names else names[0]
    for raw in values:
        name, sep, number = raw.partition("=")
        name = name.strip()
        if not sep or name not in names:
            raise InputError(
                option, f"'{raw}' is not {syntax}", f"{kind}s: {', '.join(names)}; e.g. {example}=600"
            )
        seconds = seconds_written(number)
        if seconds is None:
            raise InputError(
                option, f"'{number}' is not a number of seconds", f"a finite number, e.g. {name}=600"
            )
        if not 0 < seconds <= MAX_SECONDS:
            raise InputError(
                option,
                f"{seconds:g} is out of range",
                f"more than 0 and at most {MAX_SECONDS:g}, e.g. {name}=600",
            )
        result[name] = seconds
    return result


def _seconds(
    table: Mapping[str, float], overrides: Mapping[str, float], fallback: Mapping[str, float]
) -> StageSeconds:
    values = {
        stage: float(overrides.get(stage, table.get(stage, fallback.get(stage, 0.0)))) for stage in STAGES
    }
    return StageSeconds(**values)


def limits_from_spec(
    spec: LaunchSpec,
    *,
    deadlines: Mapping[str, float] | None = None,
    stall_windows: Mapping[str, float] | None = None,
) -> PhaseLimits:
    timing = spec.timing
    # first_token has no stall window of its own in the catalog: the warm-up request shares
    # the warmup window. A catalog without an autotune entry gives autotune capture's limits.
    stall_fallback = {
        "launch": _LAUNCH_STALL_S,
        "first_token": timing.stall_windows.get("warmup", 0.0),
        "autotune": timing.stall_windows.get("capture", 0.0),
    }
    deadline_fallback = {"launch": _LAUNCH_DEADLINE_S, "autotune": timing.deadlines.get("capture", 0.0)}
    return PhaseLimits(
        deadline_s=_seconds(timing.deadlines, deadlines or {}, deadline_fallback),
        stall_window_s=_seconds(timing.stall_windows, stall_windows or {}, stall_fallback),
        expected_ranks=spec.ranks,
        cpu_counts_in=frozenset(timing.cpu_progress_in),
        deadlines_given=frozenset(deadlines or {}),
    )
