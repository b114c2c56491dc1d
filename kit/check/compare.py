"""Comparing the kit's side of a cell with what the release's own code said. Pure.

    both accept                                                      agree
    both refuse, SGLang's words match a rule that fired, at its stage   agree
    the launch was accepted but a stage it needs did not run         not run
    an old variable SGLang neither warns about nor refuses           unverified
    the check itself could not decide (it failed, or the stand-in
    runner was asked for an attribute it does not provide)           error
    anything else                                                    disagree

`not run` and `unverified` are not agreement: they are counted and listed apart. A run fails on
disagreements and errors.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit.check.kit_side import KitSide
from kit.check.matrix import Cell, Probe

STATUSES = ("agree", "unverified", "not run", "disagree", "error", "skipped")
FAILING = ("disagree", "error")


@dataclass(frozen=True)
class Outcome:
    release: str
    cell: Cell
    status: str
    """One of STATUSES: 'agree'; 'unverified' (SGLang said nothing that shows who is right);
    'not run' (a stage the verdict needs did not run); 'disagree'; 'error' (the check could not
    decide); 'skipped' (not a valid launch)."""
    mark: str
    """Short form for the table: 'ok', 'rule-id', 'refused', ... or what disagreed."""
    detail: str = ""
    kit: KitSide | None = None
    parser: dict[str, Any] | None = None


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    releases: tuple[str, ...] = ()
    seconds: float = 0.0
    setup_seconds: dict[str, float] = field(default_factory=dict)
    groups: tuple[str, ...] = ()

    def having(self, *statuses: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.status in statuses]

    @property
    def disagreements(self) -> list[Outcome]:
        """What fails the run: disagreements and cells the check could not decide."""
        return self.having(*FAILING)

    @property
    def ran(self) -> int:
        return sum(1 for o in self.outcomes if o.status != "skipped")

    def counts(self) -> dict[str, int]:
        return {status: len(self.having(status)) for status in STATUSES}


def _said(parser: dict[str, Any]) -> str:
    return f"{parser.get('error_type')}: {parser.get('error')}"


_NOTICE = re.compile(r"(?i)deprecat|removed|alias|no longer")


def _mentions(parser: dict[str, Any], name: str) -> bool:
    """A warning that names NAME and says it is old (deprecated, removed, an alias)."""
    return any(name in line and _NOTICE.search(line) for line in parser.get("warnings") or ())


def compare(
    release: str, cell: Cell, kit: KitSide, parser: dict[str, Any], base: dict[str, Any] | None = None
) -> Outcome:
    """Agreement of one cell. Pure. BASE: for a companion variant, the same cell with the companion."""
    done = lambda status, mark, detail="": Outcome(release, cell, status, mark, detail, kit, parser)  # noqa: E731
    if parser.get("internal"):
        return done("error", "check failed", _said(parser))
    load = parser.get("load") or {}
    if load.get("unknown"):
        names = ", ".join(load["unknown"])
        return done(
            "error",
            "runner lacks " + names,
            f"the release's load stage read {names} from the kit's stand-in runner, which does not "
            "provide it: teach kit/check/driver.py _Runner what the release's ModelRunner holds there",
        )
    if kit.expect is not None and cell.probe is not None:
        return _compare_probe(done, cell.probe, kit.expect, parser)
    not_run = bool(load) and not load.get("ran")
    if kit.expect == "refused":  # a companion left out
        if base is None or base.get("internal"):
            return done("error", "no base cell", "the same cell with the companion has no result")
        if not base.get("accepted"):
            # Refused with the companion as well: it is not what decides this launch.
            return done("agree", "moot", f"refused with it too: {_said(base)}")
        if parser.get("accepted") is False:
            return done("agree", "needed", f"without it: {_said(parser)}")
        if not_run:
            return done(
                "not run",
                "load not run",
                f"companion {cell.without}: the parser accepts the launch without it; the load stage, "
                f"where it could be refused, did not run: {load.get('why')}",
            )
        return done(
            "disagree", "not needed", f"companion {cell.without}: SGLang accepts the launch without it"
        )
    accepted = parser.get("accepted")
    if accepted:
        parser_rules = [rule for rule in kit.errors if rule.stage != "load"]
        if parser_rules:
            ids = ", ".join(rule.id for rule in parser_rules)
            return done("disagree", f"kit refuses ({ids})", f"kit rule {ids} fires; SGLang accepts")
        if not_run:
            unchecked = ", ".join(rule.id for rule in kit.errors)
            return done(
                "not run",
                "load not run",
                f"the parser accepts; the load stage did not run: {load.get('why')}"
                + (f" (kit rule {unchecked} is not checked)" if unchecked else ""),
            )
        if kit.errors:
            ids = ", ".join(rule.id for rule in kit.errors)
            return done("disagree", f"kit refuses ({ids})", f"kit rule {ids} fires; SGLang accepts")
        return done("agree", "ok")
    stage = parser.get("stage", "parser")
    said = _said(parser)
    if not kit.errors:
        return done("disagree", f"SGLang refuses ({stage})", f"no kit rule; SGLang ({stage}): {said}")
    for rule in kit.errors:
        if rule.stage == stage and rule.rejects and re.search(rule.rejects, said):
            return done("agree", rule.id, said)
    ids = ", ".join(f"{rule.id} ({rule.stage})" for rule in kit.errors)
    return done("disagree", "different reasons", f"kit rule {ids}; SGLang ({stage}): {said}")


def _compare_probe(
    done: Callable[..., Outcome], probe: Probe, expect: str, parser: dict[str, Any]
) -> Outcome:
    name = probe.names
    accepted = parser.get("accepted")
    if accepted is False:
        if parser.get("error_type") == "ArgumentError" and name in str(parser.get("error")):
            seen = "refused"
        else:
            return done("error", "probe base refused", _said(parser))
    elif _mentions(parser, name):
        seen = "warned"
    elif name.startswith("--"):
        seen = "accepted"  # argparse took the flag and said nothing about it: that is observable
    else:
        # A variable nobody mentions: the release may ignore it or read it quietly, and the parser's
        # output cannot tell which. Only a claimed notice can be proved wrong here.
        if expect == "warned":
            return done(
                "disagree", "silent, kit says warned", f"{name}: SGLang said nothing, the dialect says warned"
            )
        claim = {"silent": "ignores it", "accepted": "reads it"}.get(expect, expect)
        return done(
            "unverified",
            f"said nothing (dialect: {claim})",
            f"{name}: SGLang neither warns about nor refuses it, so that the release {claim}, as its "
            "dialect says, cannot be seen from the parser",
        )
    if seen == expect:
        return done("agree", seen)
    return done("disagree", f"{seen}, kit says {expect}", f"{name}: SGLang {seen}, the dialect says {expect}")
