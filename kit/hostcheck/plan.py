"""The step table (steps.toml) as data, and the part of it a run takes (pure over the table;
tests/hostcheck/test_plan.py). `python -m kit.hostcheck plan --only A,B` prints it for the bash
entry, one step a line: NAME<TAB>LIMIT<TAB>host|kit[<TAB>ARG...]."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

STEPS_TOML = Path(__file__).resolve().parent / "steps.toml"


@dataclass(frozen=True)
class PlannedStep:
    name: str
    limit: int  # seconds under `timeout`, before the budget cuts it
    args: tuple[str, ...] = ()
    host_packages_only: bool = False  # run without the carried wheels on PYTHONPATH (the wheels step)


def load_steps(text: str | None = None) -> list[PlannedStep]:
    """The table, in order (TEXT: a steps.toml's text; default the package's own)."""
    data = tomllib.loads(STEPS_TOML.read_text(encoding="utf-8") if text is None else text)
    steps = []
    for raw in data.get("step", []):
        limit = raw["limit"]
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise ValueError(f"steps.toml: step {raw.get('name')!r}: limit must be a positive whole number")
        args = raw.get("args", [])
        if not all(isinstance(a, str) and a and "\t" not in a for a in args):
            raise ValueError(f"steps.toml: step {raw['name']!r}: args must be non-empty strings without tabs")
        steps.append(PlannedStep(raw["name"], limit, tuple(args), bool(raw.get("host_packages_only", False))))
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"steps.toml: a step is listed twice: {names}")
    return steps


def select(steps: list[PlannedStep], only: str) -> list[PlannedStep]:
    """KIT_CHECK_STEPS: a comma-separated list keeps those steps, in the table's order (not the list's);
    empty keeps all. A name the table does not have selects nothing."""
    if not only:
        return list(steps)
    wanted = set(only.split(","))
    return [s for s in steps if s.name in wanted]


def plan_lines(steps: list[PlannedStep]) -> list[str]:
    """One line per step for the bash entry: NAME, LIMIT, host|kit, then the args, tab-separated."""
    return [
        "\t".join([s.name, str(s.limit), "host" if s.host_packages_only else "kit", *s.args]) for s in steps
    ]
