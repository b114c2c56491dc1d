"""The conformance matrix: `kit validate`'s hand-written rules against each release's own parser.

`kit validate` is fast because each dialect encodes a range of SGLang releases by hand; `kit check`
is right because it runs the release's own ServerArgs (and, for hybrid models on CUDA, its attention
registry). This module holds the two together. For every cell (a target, `--set` overrides, a
release) it asks both and compares:

    both accept                                   agree
    both reject, SGLang's words match a rule that fired (its `rejects`, at its `stage`)   agree
    anything else                                 a disagreement, named

It also checks the dialects' other claims: a companion that fills in intent must be needed (the
launch without it is refused), and an old flag or variable is refused, warned about or ignored as
the dialect's [renamed] / [removed] / [deprecated] say.

Pure parts (cells, the kit's side, comparing, the table) take data and return data; `run_matrix`
is the shell that creates venvs and runs the driver, one process per release, `jobs` at a time.
"""

from __future__ import annotations

import itertools
import re
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from kit.catalog import load_catalog
from kit.catalog._errors import translate as _schema_error
from kit.dialects import Dialect, Rule, dialect_for, matches, translate
from kit.errors import InputError, KitError
from kit.images.manifest import load_manifest
from kit.launch import Resolved, context_of, intent_of, resolve_full

MATRIX = Path(__file__).resolve().parent / "matrix.toml"
Scalar = str | int | float | bool


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Group(_Strict):
    name: str
    about: str = ""
    targets: tuple[str, ...]
    axes: dict[str, list[Scalar]]


class Probe(_Strict):
    name: str
    target: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    names: str
    """The flag or variable whose fate the probe shows."""


class Subset(_Strict):
    releases: tuple[str, ...]
    cells: tuple[str, ...]
    """Cell keys (Cell.key without the companion part), e.g. 'qwen-mtp probe spec-v2-env'."""


class Matrix(_Strict):
    releases: tuple[str, ...]
    ci: Subset
    groups: tuple[Group, ...]
    probes: tuple[Probe, ...] = ()

    @field_validator("releases")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError("a release is listed twice")
        return value


def load_matrix(path: Path = MATRIX) -> Matrix:
    from kit.catalog import read_toml

    try:
        return Matrix.model_validate(read_toml(path))
    except ValidationError as exc:
        raise _schema_error(path, exc, Matrix) from exc


# --- cells --------------------------------------------------------------------------------------


def _toml(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Cell:
    group: str
    target: str
    overrides: tuple[str, ...] = ()
    probe: Probe | None = None
    without: str | None = None
    """A companion left out: the launch must then be refused, or the companion is not needed."""

    @property
    def key(self) -> str:
        """The row: the same cell on every release."""
        parts = [self.target, *self.overrides]
        if self.probe:
            parts.append(f"probe {self.probe.name}")
        if self.without:
            parts.append(f"without companion {self.without}")
        return " ".join(parts)


def cells_of(
    matrix: Matrix, groups: Iterable[str] | None = None, keys: Iterable[str] | None = None
) -> list[Cell]:
    """Every group's cells (the product of its axes, per target), then the probes; KEYS picks cells."""
    if keys is not None:
        chosen = set(keys)
        found = [c for c in cells_of(matrix, groups) if c.key in chosen]
        missing = chosen - {c.key for c in found}
        if missing:
            raise InputError(
                "cells", f"not in the matrix: {sorted(missing)[0]}", "copy a row of docs/conformance.md"
            )
        return found
    wanted = set(groups) if groups is not None else None
    cells: list[Cell] = []
    for group in matrix.groups:
        if wanted is not None and group.name not in wanted:
            continue
        keys = list(group.axes)
        for target in group.targets:
            for values in itertools.product(*(group.axes[k] for k in keys)):
                overrides = tuple(f"{k}={_toml(v)}" for k, v in zip(keys, values, strict=True))
                cells.append(Cell(group.name, target, overrides))
    if wanted is None or "old-names" in wanted:
        cells += [Cell("old-names", probe.target, probe=probe) for probe in matrix.probes]
    return cells


# --- the kit's side (pure but for reading data files) --------------------------------------------


@dataclass(frozen=True)
class KitSide:
    """What the kit says about one cell on one release."""

    dialect: str
    errors: tuple[Rule, ...]
    """The dialect's error rules that fire: the kit's claim that SGLang refuses this."""
    warnings: tuple[str, ...]
    policy: tuple[str, ...]
    """The kit's own findings (TP fits the GPUs, memory, pitfalls): beyond the parser, not compared."""
    request: dict[str, Any]
    """What the driver runs (kit.check.check_request), with an id."""
    expect: str | None = None
    """Probes and companion variants: 'refused', 'warned', 'silent' or 'accepted'."""
    argv: tuple[str, ...] = ()


def _manifest_text(data: dict[str, Any]) -> str:
    lines: list[str] = []
    tables: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append(f"\n[{key}]")
            tables += [f"{k} = {_value(v)}" for k, v in value.items() if v is not None]
        elif value is not None:
            lines.append(f"{key} = {_value(value)}")
    return "\n".join(lines + tables) + "\n"


def _value(value: Any) -> str:
    import json

    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else str(value)


class Releases:
    """Image manifests that say 'this target's image, with sglang RELEASE and its dialect by range'.

    They live in a temporary images folder, so resolving a cell is exactly `kit validate`'s path.
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self._made: dict[tuple[str, str], str] = {}

    def image(self, base_image: str, release: str) -> str:
        key = (base_image, release)
        if key not in self._made:
            base = load_manifest(base_image)
            name = f"{base.name}--as-sglang-{release}"
            data = base.model_dump(mode="json")
            data.update(name=name, dialect=dialect_for(release).name)
            data["pins"]["sglang"] = release
            data["description"] = f"{base.description}, with sglang {release} (conformance matrix)"
            (self.directory / f"{name}.toml").write_text(_manifest_text(data), encoding="utf-8")
            self._made[key] = name
        return self._made[key]


def _request(r: Resolved, cell_id: str, args: Sequence[str] | None = None, env: dict | None = None) -> dict:
    from kit.check import check_request

    request = check_request(r)
    if args is not None:
        request["args"] = list(args)
    if env is not None:
        request["env"] = env
    request["id"] = cell_id
    return request


def kit_side(cell: Cell, release: str, releases: Releases) -> KitSide | str:
    """The kit's verdict and the driver's request for CELL on RELEASE, or why the cell cannot exist."""
    from kit.validate import findings_for

    catalog = load_catalog()
    if cell.target not in catalog.targets:
        return f"unknown target '{cell.target}'"
    image = releases.image(catalog.targets[cell.target][1].image, release)
    try:
        r = resolve_full(cell.target, image=image, overrides=cell.overrides, images_dir=releases.directory)
    except InputError as exc:
        return f"not a valid launch for the catalog: {exc}"
    cell_id = f"{release}|{cell.key}"
    findings, _ = findings_for(r)
    fired = tuple(rule for rule in r.dialect.rules if matches(rule.when, r.translation.facts))
    errors = tuple(rule for rule in fired if rule.severity == "error")
    warns = tuple(rule.id for rule in fired if rule.severity == "warning")
    dialect_ids = {f"{r.dialect.name}:{rule.id}" for rule in fired}
    policy = tuple(sorted({f.id for f in findings if f.severity == "error" and f.id not in dialect_ids}))
    if cell.probe is not None:
        probe = cell.probe
        request = _request(r, cell_id, [*r.spec.argv[3:], *probe.args], {**r.spec.env, **probe.env})
        return KitSide(
            r.dialect.name, errors, warns, policy, request, _fate(r.dialect, probe.names), r.spec.argv
        )
    if cell.without is not None:
        return _without(cell, r, cell_id, errors, warns, policy)
    return KitSide(r.dialect.name, errors, warns, policy, _request(r, cell_id), None, r.spec.argv)


def _fate(dialect: Dialect, name: str) -> str:
    """What the dialect says the release does with an old NAME (a flag or an env variable)."""
    if name.startswith("--"):
        if name in dialect.deprecated.flags:
            return "warned"
        if name in dialect.renamed or name in dialect.removed.flags:
            return "refused"
        return "accepted"
    if name in dialect.deprecated.env:
        return "warned"
    if name in dialect.removed.env:
        return "silent"
    return "accepted"


def companion_cells(cell: Cell, release: str, releases: Releases) -> list[Cell]:
    """For each companion that filled in intent on this cell, the same cell without it."""
    catalog = load_catalog()
    if cell.probe or cell.without or cell.target not in catalog.targets:
        return []
    image = releases.image(catalog.targets[cell.target][1].image, release)
    try:
        r = resolve_full(cell.target, image=image, overrides=cell.overrides, images_dir=releases.directory)
    except InputError:
        return []
    return [
        replace(cell, without=companion.id)
        for companion in r.dialect.companions
        if companion.id in r.translation.applied
        and companion.set
        and any(r.translation.intent.get(k) == v for k, v in companion.set.items())
    ]


def _without(cell: Cell, r: Resolved, cell_id: str, errors, warns, policy) -> KitSide:
    dialect = r.dialect.model_copy(
        update={"companions": tuple(c for c in r.dialect.companions if c.id != cell.without)}
    )
    gpus = r.spec.gpus
    bare = translate(
        dialect,
        intent_of(r.profile, r.model, r.spec.device),
        context=context_of(r.model, r.profile, r.hardware, gpus),
        profile_env=r.profile.env,
        extra_args=r.profile.extra_args,
    )
    request = _request(r, cell_id, list(bare.args), dict(bare.env))
    return KitSide(r.dialect.name, errors, warns, policy, request, "refused", r.spec.argv)


# --- comparing (pure) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    release: str
    cell: Cell
    status: str
    """'agree', 'disagree', 'error' (the check could not run) or 'skipped' (not a valid launch)."""
    mark: str
    """Short form for the table: 'ok', 'rule-id', 'refused', ... or what disagreed."""
    detail: str = ""
    kit: KitSide | None = None
    parser: dict[str, Any] | None = None


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
    if kit.expect is not None and cell.probe is not None:
        return _compare_probe(done, cell.probe, kit.expect, parser)
    if kit.expect == "refused":  # a companion left out
        if base is None or base.get("internal"):
            return done("error", "no base cell", "the same cell with the companion has no result")
        if not base.get("accepted"):
            # Refused with the companion as well: it is not what decides this launch.
            return done("agree", "moot", f"refused with it too: {_said(base)}")
        if parser.get("accepted") is False:
            return done("agree", "needed", f"without it: {_said(parser)}")
        unverified = load and not load.get("ran")
        why = (
            f"load stage did not run: {load.get('why')}"
            if unverified
            else "SGLang accepts the launch without it"
        )
        return done("disagree", "not needed", f"companion {cell.without}: {why}")
    accepted = parser.get("accepted")
    if accepted:
        if load and not load.get("ran") and any(rule.stage == "load" for rule in kit.errors):
            return done("error", "load unchecked", f"the load stage did not run: {load.get('why')}")
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


def _compare_probe(done, probe: Probe, expect: str, parser: dict[str, Any]) -> Outcome:
    name = probe.names
    accepted = parser.get("accepted")
    warned = _mentions(parser, name)
    if accepted is False:
        seen = (
            "refused"
            if parser.get("error_type") == "ArgumentError" and name in str(parser.get("error"))
            else "failed"
        )
    elif warned:
        seen = "warned"
    else:  # a variable nobody mentions is ignored: 'silent' where the dialect calls it removed
        seen = "silent" if not name.startswith("--") and expect in ("silent", "warned") else "accepted"
    if seen == "failed":
        return done("error", "probe base refused", _said(parser))
    if seen == expect:
        return done("agree", seen)
    return done("disagree", f"{seen}, kit says {expect}", f"{name}: SGLang {seen}, the dialect says {expect}")


# --- the shell: venvs, driver processes, progress ------------------------------------------------


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    releases: tuple[str, ...] = ()
    seconds: float = 0.0
    setup_seconds: dict[str, float] = field(default_factory=dict)
    groups: tuple[str, ...] = ()

    @property
    def disagreements(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status in ("disagree", "error")]

    @property
    def ran(self) -> int:
        return sum(1 for o in self.outcomes if o.status != "skipped")


Progress = Callable[[str, int], None]
"""progress(message, cells_done_since_last_call)."""


def plan(
    matrix: Matrix, release: str, cells: Sequence[Cell], releases: Releases
) -> tuple[list[tuple[Cell, KitSide]], list[Outcome]]:
    """The kit's side of every cell on RELEASE (plus companion variants), and the cells skipped."""
    planned: list[tuple[Cell, KitSide]] = []
    skipped: list[Outcome] = []
    for cell in cells:
        for each in [cell, *companion_cells(cell, release, releases)]:
            side = kit_side(each, release, releases)
            if isinstance(side, str):
                skipped.append(Outcome(release, each, "skipped", "not a launch", side))
            else:
                planned.append((each, side))
    return planned, skipped


def run_release(
    release: str, cells: Sequence[Cell], releases: Releases, progress: Progress, matrix: Matrix
) -> tuple[list[Outcome], float]:
    from kit.check import ensure_venv, run_cells

    planned, outcomes = plan(matrix, release, cells, releases)
    venv, setup = ensure_venv(release, lambda message: progress(f"{release}: {message}", 0))
    progress(f"{release}: SGLang's parser on {len(planned)} cells", len(outcomes))
    results = run_cells(
        venv,
        [side.request for _, side in planned],
        on_result=lambda _: progress(f"{release}: running", 1),
        timeout_s=max(600.0, 5.0 * len(planned)),
    )
    by_key = {cell.key: side.request["id"] for cell, side in planned}
    for cell, side in planned:
        base = results.get(by_key.get(replace(cell, without=None).key, "")) if cell.without else None
        outcomes.append(compare(release, cell, side, results[side.request["id"]], base))
    return outcomes, setup


def run_matrix(
    *,
    releases: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    jobs: int = 2,
    matrix: Matrix | None = None,
    progress: Progress = lambda message, done: None,
) -> Report:
    """Every cell on every release; releases run in parallel, `jobs` at a time."""
    matrix = matrix or load_matrix()
    chosen = tuple(releases or matrix.releases)
    cells = cells_of(matrix, groups, keys)
    started = time.monotonic()
    report = Report(releases=chosen, groups=tuple(groups or [g.name for g in matrix.groups] + ["old-names"]))
    with tempfile.TemporaryDirectory(prefix="kit-conformance-") as tmp:
        made = Releases(Path(tmp))
        for release in chosen:  # resolve every dialect up front: a release no range covers is input
            dialect_for(release)
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {r: pool.submit(run_release, r, cells, made, progress, matrix) for r in chosen}
            for release, future in futures.items():
                try:
                    outcomes, setup = future.result()
                except KitError as exc:
                    raise KitError(f"sglang {release}: {exc}") from exc
                report.outcomes += outcomes
                report.setup_seconds[release] = round(setup, 1)
    report.seconds = round(time.monotonic() - started, 1)
    return report


def planned_count(
    matrix: Matrix, releases: Sequence[str], groups: Sequence[str] | None, keys: Sequence[str] | None = None
) -> int:
    """How many cells a run will have (base cells x releases; companion variants come on top)."""
    return len(cells_of(matrix, groups, keys)) * len(releases)


# --- the table (pure) ---------------------------------------------------------------------------

_MARKS = {"agree": "", "disagree": "**≠** ", "error": "**?** ", "skipped": "· "}


def render_markdown(report: Report, matrix: Matrix, *, command: str, when: str) -> str:
    by_key: dict[str, dict[str, Outcome]] = {}
    groups: dict[str, list[str]] = {}
    for outcome in report.outcomes:
        key = outcome.cell.key
        by_key.setdefault(key, {})[outcome.release] = outcome
        rows = groups.setdefault(outcome.cell.group, [])
        if key not in rows:
            rows.append(key)
    bad = report.disagreements
    lines = [
        "# Conformance: `kit validate` against each release's own parser",
        "",
        "Generated by `scripts/conformance`; do not edit by hand. Each cell is one launch (a target and",
        "`--set` overrides) on one SGLang release, judged twice: by the kit's dialect rules (`kit validate`)",
        "and by the release's own `ServerArgs` (and, for hybrid models on CUDA, its attention registry) in",
        "a check venv with 4 x sm_120 emulated (`kit check`). How to read it and how to add a release:",
        "docs/catalog.md.",
        "",
        f"- command: `{command}`",
        f"- run: {when}, {report.seconds:.0f} s wall ({_setup(report)})",
        f"- cells: {report.ran} run on {len(report.releases)} releases"
        f" ({sum(1 for o in report.outcomes if o.status == 'skipped')} skipped as not a valid launch)",
        f"- disagreements: **{len(bad)}**",
        "",
        "Marks: `ok` both accept; a rule id: both refuse, SGLang's words match that rule; `needed`: the",
        "launch without that companion is refused, so the companion is required (`moot`: refused with it",
        "too, for another reason); `refused` / `warned` /",
        "`silent` / `accepted`: what the release does with an old name, as its dialect says; `≠` a",
        "disagreement (the kit's claim first, then SGLang's); `?` the check could not decide; `·` not a",
        "launch the catalog accepts. Policy findings (TP vs GPUs, memory fit, pitfalls) are the kit's own",
        "and not compared.",
        "",
        "| release | dialect |",
        "|---|---|",
    ]
    dialects: dict[str, str] = {}
    for outcome in report.outcomes:
        if outcome.kit is not None:
            dialects.setdefault(outcome.release, outcome.kit.dialect)
    lines += [f"| {r} | {dialects.get(r, '')} |" for r in report.releases]
    if bad:
        lines += ["", "## Disagreements", "", "| release | cell | what |", "|---|---|---|"]
        lines += [f"| {o.release} | `{o.cell.key}` | {_cell_text(o.detail)} |" for o in bad]
    quiet = unexercised(report)
    if quiet:
        lines += ["", "## Rules no cell exercised", ""]
        lines += [f"- `{d}:{rule.id}` ({rule.severity}): {_cell_text(rule.source)}" for d, rule in quiet]
    about = {g.name: g.about for g in matrix.groups}
    about["old-names"] = "old flags and variables, passed as given"
    for group, rows in groups.items():
        lines += ["", f"## {group}", "", about.get(group, ""), ""]
        lines.append("| cell | " + " | ".join(report.releases) + " |")
        lines.append("|---|" + "---|" * len(report.releases))
        for key in rows:
            marks = []
            for release in report.releases:
                outcome = by_key[key].get(release)
                marks.append("" if outcome is None else _MARKS[outcome.status] + _cell_text(outcome.mark))
            lines.append(f"| `{key}` | " + " | ".join(marks) + " |")
    return "\n".join(lines) + "\n"


def unexercised(report: Report) -> list[tuple[str, Rule]]:
    """The rules of the dialects the run used that fired in no cell: claims the matrix cannot check."""
    from kit.dialects import load_dialect

    fired: set[tuple[str, str]] = set()
    used: set[str] = set()
    for outcome in report.outcomes:
        if outcome.kit is not None:
            used.add(outcome.kit.dialect)
            fired |= {(outcome.kit.dialect, rule.id) for rule in outcome.kit.errors}
            fired |= {(outcome.kit.dialect, rule_id) for rule_id in outcome.kit.warnings}
    quiet: list[tuple[str, Rule]] = []
    for name in sorted(used):
        try:
            rules = load_dialect(name).rules
        except InputError:  # a dialect only a test made up
            continue
        quiet += [(name, rule) for rule in rules if (name, rule.id) not in fired]
    return quiet


def _setup(report: Report) -> str:
    made = {r: s for r, s in report.setup_seconds.items() if s}
    if not made:
        return "every check venv cached"
    return f"{len(made)} check venvs created, {sum(made.values()):.0f} s of it"


def _cell_text(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())[:300]


def read_matrix_toml(text: str) -> Matrix:
    """A matrix from TOML text (tests plant their own)."""
    return Matrix.model_validate(tomllib.loads(text))
