"""summary.txt from the steps' recorded lines, and the commit that ran.

summarise is pure (tests/hostcheck/test_report.py); read_steps reads WORK's
status and timing files, commit_of asks git."""

from __future__ import annotations

import re
from pathlib import Path

from kit.hostcheck.record import STATUSES, sh


def summarise(steps: list[tuple[str, list[tuple[str, str]], str]], commit: str | None = None) -> str:
    """summary.txt: one headline per step (its worst status, first line of that status), then details.

    `steps`: (name, [(status, text), ...], extra) where extra is e.g. '12.3 s' or 'timed out'.
    `commit`: the repository commit the run used, said under the headline.
    """
    rank = {s: i for i, s in enumerate(STATUSES)}
    head, detail = [], []
    counts = dict.fromkeys(STATUSES, 0)
    for name, lines, extra in steps:
        if not lines:
            lines = [("error", "no result recorded (the step died before saying anything)")]
        worst = max(lines, key=lambda item: rank[item[0]])[0]
        counts[worst] += 1
        first = next(text for status, text in lines if status == worst)
        head.append(f"{name:<12} {worst:<8} {first}{f'  [{extra}]' if extra else ''}")
        detail += [f"{name:<12} {status:<8} {text}" for status, text in lines]
    total = ", ".join(f"{counts[s]} {s}" for s in STATUSES)
    top = [f"gpu-host-check: {len(steps)} steps: {total}", *([f"commit: {commit}"] if commit else [])]
    return "\n".join([*top, "", *head, "", "all lines:", *detail, ""])


def commit_of(root: Path, given: str | None) -> str:
    """The commit this copy of the repository is: KIT_CHECK_COMMIT where the copy has no .git (a
    device machine gets the working tree only), else git's own answer, '+ local changes' if dirty."""
    if given:
        return f"{given} (KIT_CHECK_COMMIT)"
    code, head, _ = sh(["git", "-C", str(root), "rev-parse", "HEAD"], timeout=10)
    if code != 0 or not re.fullmatch(r"[0-9a-f]{40}", head.strip()):
        return "unknown: not a git checkout and KIT_CHECK_COMMIT unset"
    code, changes, _ = sh(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], timeout=10
    )
    return head.strip() + (" + local changes" if code == 0 and changes.strip() else "")


def read_steps(work: Path, names: list[str]) -> list[tuple[str, list[tuple[str, str]], str]]:
    """summarise's input from WORK: each step's status lines (WORK/status/NAME) and the runner's
    note on its time (WORK/timing: `NAME<TAB>12 s` or `NAME<TAB>skipped`), in the order given."""
    extras = {}
    timing = work / "timing"
    if timing.exists():
        for line in timing.read_text().splitlines():
            name, _, extra = line.partition("\t")
            extras[name] = extra
    steps = []
    for name in names:
        path = work / "status" / name
        lines = []
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                state, _, text = line.partition("\t")
                if state in STATUSES:
                    lines.append((state, text))
        steps.append((name, lines, extras.get(name, "")))
    return steps
