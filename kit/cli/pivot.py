"""`kit preflight`, `kit doctor`, `kit bisect`: the diagnostic pivot (kit/pivot/), a few lines each.

Exit codes are rows of kit.errors.EXITS (each command's `@exits`, printed in its --help): a hung step
is HUNG and a step past its deadline DEADLINE, as for `kit up`; doctor is OK unless a check fails.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from kit.cli import cli
from kit.cli.catalog import image_option, json_option, set_option
from kit.cli.exits import DOCUMENT, LINES, exits
from kit.cli.host import gpus_option
from kit.cli.params import WEEK_S, FiniteFloat, LimitValue
from kit.cli.signals import interruptible
from kit.cli.up import fault_option
from kit.output import console, emit_json, jsonable
from kit.pivot.steps import ALL_STEPS

_STYLE = {
    "pass": "green",
    "ok": "green",
    "ready": "green",
    "known": "green",
    "warn": "yellow",
    "n/a": "dim",
    "skipped": "dim",
    "not-checked": "dim",
    "not run": "dim",
}


def _style(status: str) -> str:
    return _STYLE.get(status, "bold red")


def _line(out: Console, text: str, style: str | None = None) -> None:
    out.print(text, markup=False, highlight=False, style=style)


def print_rows(
    out: Console, header: tuple[str, ...], rows: list[tuple[str, ...]], *, status: int | None = None
) -> None:
    """Aligned columns that never wrap (the last one runs on), the status column coloured."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    last = len(header) - 1

    def line(cells: tuple[str, ...], styles: dict[int, str]) -> Text:
        text = Text()
        for i, cell in enumerate(cells):
            text.append(cell if i == last else cell.ljust(widths[i] + 2), style=styles.get(i, ""))
        return text

    out.print(line(header, dict.fromkeys(range(len(header)), "bold")), soft_wrap=True)
    for row in rows:
        out.print(line(row, {status: _style(row[status])} if status is not None else {}), soft_wrap=True)


def lines_json_option(func):
    """--json for the commands that stream: JSON lines, the result last (their --help footer says so)."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print JSON lines: one object per step as it happens, the result last.",
    )(func)


# -- preflight --------------------------------------------------------------------------------------


class PreflightView:
    """A line per step as every rank finishes it (JSON lines with --json); a spinner on a terminal."""

    def __init__(self, out: Console, ranks: int, *, as_json: bool, title: str):
        self.out, self.ranks, self.as_json, self.title = out, ranks, as_json, title
        self._ended: dict[tuple[str, str], set[int]] = {}
        self._status = out.status(title) if out.is_terminal and not as_json else None

    def __enter__(self) -> PreflightView:
        if self._status:
            self._status.__enter__()
        elif not self.as_json:
            _line(self.out, self.title)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._status:
            self._status.__exit__(*exc)

    def started(self, name: str) -> None:
        if self.as_json:
            emit_json({"type": "start", "container": name})

    def update(self, progress: Any) -> None:
        for step, rank in progress.ended:
            done = self._ended.setdefault((progress.attempt, step), set())
            done.add(rank)
            if len(done) == self.ranks:
                if self.as_json:
                    emit_json(
                        {
                            "type": "step",
                            "attempt": progress.attempt,
                            "step": step,
                            "t": round(progress.elapsed, 3),
                        }
                    )
                else:
                    suffix = "" if progress.attempt == "run" else f"  ({progress.attempt})"
                    status = "skipped" if step in getattr(progress, "skipped", ()) else "ok"
                    _line(self.out, f"{progress.elapsed:7.1f} s  {step:<10} {status}{suffix}")
        if self.as_json:
            for row in progress.sweep:
                emit_json({"type": "sweep", **row})
        if self._status:
            step = progress.step or "done"
            self._status.update(
                f"{self.title}: {progress.attempt}, {step}, "
                f"{progress.elapsed:.1f} s, quiet {progress.quiet_for:.1f} s"
            )


def _gbps(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}"


def print_preflight(result: Any, out: Console) -> None:
    from kit.pivot.steps import size_text

    ok = result.verdict == "ok"
    head = (
        f"OK: every step passed on {result.ranks} ranks ({result.backend}) in {result.seconds:.1f} s"
        if ok
        else f"{result.verdict.upper()}"
        + (f" in {result.step}" if result.step else "")
        + f": {result.message}"
    )
    _line(out, head, "bold green" if ok else "bold red")
    print_rows(
        out,
        ("step", "status", "time", "detail"),
        [
            (row.step, row.status, "-" if row.seconds is None else f"{row.seconds:.2f} s", row.detail)
            for row in result.steps
        ],
        status=1,
    )
    if result.sweep:
        _line(out, "all_reduce sweep (the slowest rank's time; busbw as nccl-tests reports it):")
        print_rows(
            out,
            ("size", "time (us)", "algbw (GB/s)", "busbw (GB/s)"),
            [
                (size_text(r.bytes), f"{r.time_us:.1f}", _gbps(r.algbw_gbps), _gbps(r.busbw_gbps))
                for r in result.sweep
            ],
        )
    if result.pairs:
        slow = min(result.pairs, key=lambda p: p.gbps or 0.0)
        _line(
            out,
            f"p2p: {len(result.pairs)} pairs, slowest {slow.src}->{slow.dst} at {_gbps(slow.gbps)} GB/s"
            + (
                "; peer access: "
                + ", ".join(f"{p.src}->{p.dst} {'yes' if p.peer_access else 'no'}" for p in result.pairs)
                if any(p.peer_access is not None for p in result.pairs)
                else ""
            ),
        )
    _line(
        out,
        "transports: "
        + (", ".join(result.transports) or "none reported")
        + (f" (NCCL {result.nccl})" if result.nccl else ""),
    )
    stacks = {s.rank: s for s in result.stacks}
    for rank in result.waiting_ranks:
        _line(
            out,
            f"  waiting: {rank} ({stacks[rank].kind}: {stacks[rank].where})"
            if rank in stacks
            else f"  waiting: {rank}",
        )
    for rank in result.missing_ranks:
        _line(out, f"  missing: {rank}" + (f" (its stack: {stacks[rank].where})" if rank in stacks else ""))
    for rank, stack in stacks.items():
        if rank not in result.waiting_ranks and rank not in result.missing_ranks:
            _line(out, f"  stack: {rank} ({stack.kind}: {stack.where})")
    for error in result.errors[:4]:
        _line(out, f"  {error}")
    if not ok and result.evidence:
        _line(out, "  last lines:")
        for line in result.evidence[-6:]:
            _line(out, f"    {line[:160]}")
    if result.retry is not None:
        again = result.retry
        where = f" in {again.step}" if again.step else ""
        _line(
            out,
            f"  again with NCCL_P2P_DISABLE=1: {again.verdict}{where} ({again.seconds:.1f} s)"
            f" -> {result.p2p}",
            "bold",
        )
    elif result.p2p:
        _line(out, f"  -> {result.p2p}", "bold")
    for note in result.notes:
        _line(out, f"  note: {note}")
    if result.diagnostics:
        _line(out, f"  diagnostics: {result.diagnostics}")
    _line(out, f"  containers removed: {'yes' if result.containers_removed else 'NO (see kit ps)'}")


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT", "HUNG", "DEADLINE", "INTERRUPTED", json=LINES)
@cli.command()
@click.argument("target", required=False)
@image_option
@set_option
@click.option(
    "--tp", "ranks", type=click.IntRange(1, 64), default=None, help="Ranks (default: the profile's tp)."
)
@click.option(
    "--until", type=click.Choice(["init", "allreduce", "p2p", "sweep"]), help="Stop after this step."
)
@click.option(
    "--no-retry", is_flag=True, help="On a hang, do not run the step again with NCCL_P2P_DISABLE=1."
)
@click.option(
    "--deadline",
    type=LimitValue(ALL_STEPS, kind="step"),
    multiple=True,
    metavar="STEP=SECONDS",
    help="Override a step's deadline.",
)
@fault_option("CPU rehearsal only, test-only: plant a fault (hang-init:rank=1, hang-p2p, ...).")
@lines_json_option
def preflight(target, image, overrides, ranks, until, no_retry, deadline, fault, as_json) -> None:
    """In the image, N ranks: SGLang's own set-up and group init, a checked all_reduce, P2P between
    every pair, an all_reduce sweep. NCCL_DEBUG=INFO whatever the profile says; --json names every
    setting with its source (sglang, profile, kit).

    TARGET gives the container settings (GPUs, IPC, shm, ulimits; default: the first catalog target
    for the image, or for this host). Each step has its own deadline; on a hang the ranks' stacks
    are read and the step runs again with NCCL_P2P_DISABLE=1, so the verdict says "P2P" or "not P2P".
    A step whose ranks crash or whose check says no is FAILED.
    """
    from kit.logs.limits import parse_limit_overrides
    from kit.pivot.preflight import check_preflight, host_has_gpus, preflight_spec, run_preflight

    gpus = host_has_gpus() if target is None and image is None else False
    spec = preflight_spec(target, image=image, overrides=overrides, host_has_gpus=gpus)
    count = check_preflight(spec, ranks=ranks, until=until, fault=fault)  # before the header
    step_deadlines = parse_limit_overrides(deadline, "--deadline", ALL_STEPS, kind="step")  # checked by click
    interruptible()
    title = f"kit preflight {spec.target} ({spec.image}, {count} ranks)" + (
        f", fault {fault}" if fault else ""
    )
    with PreflightView(console(), count, as_json=as_json, title=title) as view:
        result = run_preflight(
            spec,
            ranks=count,
            fault=fault,
            retry_without_p2p=not no_retry,
            until=until,
            deadlines=step_deadlines,
            on_progress=view.update,
            on_start=view.started,
        )
    if as_json:
        emit_json({"type": "result", **jsonable(result)})
    else:
        print_preflight(result, console())
    raise SystemExit(result.exit_code)


# -- doctor -----------------------------------------------------------------------------------------

_MARK = {"pass": "pass", "warn": "WARN", "fail": "FAIL", "not-checked": "not checked"}


def print_doctor(report: Any, out: Console) -> None:
    about = (
        f" for {report.target} ({report.image})"
        if report.target
        else (f" for {report.image}" if report.image else "")
    )
    for check in report.checks:
        out.print(f"[{_style(check.status)}]{_MARK[check.status]:<11}[/] ", end="")
        _line(out, f"{check.title}: {check.summary}")
        if check.status == "not-checked" and check.why:
            _line(out, f"            why: {check.why}", "dim")
        elif check.status in ("warn", "fail"):
            if check.why:
                _line(out, f"            why: {check.why}")
            if check.fix:
                _line(out, f"            fix: {check.fix}")
    counts = report.counts
    verdict = "OK" if report.ok else "FAILED"
    _line(
        out,
        f"{verdict}{about}: {counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail, "
        f"{counts['not-checked']} not checked ({report.seconds:.1f} s)",
        "bold green" if report.ok else "bold red",
    )


@exits("OK", "FAILED", "USAGE", json=DOCUMENT)
@cli.command()
@click.argument("target", required=False)
@image_option
@set_option
@gpus_option
@json_option
@click.option("--schema", "print_schema", is_flag=True, help="Print the JSON Schema of --json and exit.")
def doctor(target, image, overrides, gpus, as_json, print_schema) -> None:
    """Host checks for TARGET (or the host alone): driver, toolkit or CDI, GPUs, P2P, ACS, IOMMU, shm,
    memlock, disk, the model in the HF cache, the port. Each: pass, warn, fail or not checked (with
    why), and the fix; --gpus (or KIT_GPUS) narrows the GPU checks to those devices. OK unless a
    check fails (FAILED; a warning or a check not run is still OK); an unknown TARGET is USAGE.
    --json follows docs/schema/doctor.json.
    """
    from kit.pivot.doctor import run_doctor, schema

    if print_schema:
        click.echo(json.dumps(schema(), indent=2))
        return
    report = run_doctor(target, image=image, overrides=overrides, gpus=gpus)
    if as_json:
        emit_json(report.model_dump(mode="json"))
    else:
        print_doctor(report, console())
    raise SystemExit(report.exit_code)


# -- bisect -----------------------------------------------------------------------------------------


class BisectView:
    """Each run as it starts and ends; preflight and up runs show their own live progress."""

    def __init__(self, out: Console, *, as_json: bool):
        self.out, self.as_json = out, as_json
        self._live = None
        self._preflight: PreflightView | None = None

    def begin(self, variant: Any) -> None:
        from kit.startup.live import LiveView

        title = f"== {variant.rung.name}: {variant.label} ({variant.target} on {variant.image})"
        if not self.as_json:
            _line(self.out, title, "bold")
        if variant.rung.name in ("base", "target"):
            self._live = LiveView(self.out, title=f"kit up {variant.target}", as_json=self.as_json)
            self._live.__enter__()
        elif variant.rung.name == "preflight":
            from kit.launch import resolve

            ranks = resolve(variant.target, image=variant.image, overrides=variant.overrides).ranks
            self._preflight = PreflightView(
                self.out, ranks, as_json=self.as_json, title=f"kit preflight {variant.target}"
            )
            self._preflight.__enter__()

    def preflight_progress(self, progress: Any) -> None:
        if self._preflight:
            self._preflight.update(progress)

    def up_progress(self, progress: Any) -> None:
        if self._live:
            self._live.update(progress)

    def up_started(self, name: str, url: str | None) -> None:
        if self._live:
            self._live.started(name, url)

    def end(self, trial: Any) -> None:
        for view in (self._live, self._preflight):
            if view is not None:
                view.__exit__(None, None, None)
        self._live = self._preflight = None

    def trial(self, trial: Any) -> None:
        if self.as_json:
            emit_json({"type": "trial", **jsonable(trial)})
        elif trial.verdict == "skipped" and trial.change != "as configured":
            _line(self.out, f"== {trial.rung}: {trial.change} skipped: {trial.detail}", "dim")
        elif trial.ran:
            where = f" in {trial.phase}" if trial.phase and not trial.green else ""
            _line(
                self.out,
                f"-> {trial.verdict}{where} ({trial.seconds:.1f} s): {trial.detail}",
                _style(trial.verdict),
            )


def print_bisect(result: Any, out: Console) -> None:
    if result.verdict == "green":
        head = f"GREEN: every rung passed for {result.target}"
    elif result.verdict in ("fixed", "not fixed"):
        phase = f" in {result.failing_phase}" if result.failing_phase else ""
        head = f"{result.failing_rung} is the first failing rung ({result.failing_verdict}{phase}); "
        if result.fix:
            head += f"{result.fix} turns it green"
        elif result.also_green:
            head += f"only {', '.join(result.also_green)} turns it green"
        else:
            head += "no single change turned it green"
    elif result.verdict == "budget":
        head = "BUDGET spent before the ladder ended"
    else:
        head = "INTERRUPTED"
    green = result.verdict == "green" or result.fix is not None
    _line(out, head, "bold green" if green else "bold red")
    print_rows(
        out,
        ("rung", "change", "verdict", "phase", "time", "detail"),
        [
            (
                t.rung,
                t.change,
                t.verdict,
                t.phase or "-",
                f"{t.seconds:.1f} s" if t.ran else "-",
                t.detail[:160],
            )
            for t in result.trials
        ],
        status=2,
    )
    if result.also_green and result.fix:
        _line(out, f"  also green: {', '.join(result.also_green)} (known from the base rung)")
    if result.fix_command:
        _line(out, f"  green launch: {result.fix_command}")
        _line(out, f"  next: {result.next_command}  (the whole ladder with it)")
    if result.bundle:
        _line(out, f"  failing rung's diagnostics: {result.bundle}")
    for note in result.notes:
        _line(out, f"  note: {note}")
    _line(
        out, f"  {result.seconds:.1f} s" + (f" of a {result.budget_s:g} s budget" if result.budget_s else "")
    )


@exits("OK", "FAILED", "CRASHED", "USAGE", "ENVIRONMENT", "HUNG", "DEADLINE", "INTERRUPTED", json=LINES)
@cli.command()
@click.argument("target")
@image_option
@set_option
@click.option(
    "--budget",
    "budget_s",
    type=FiniteFloat(0, WEEK_S, example="--budget 3600"),
    default=None,
    metavar="SECONDS",
    help="Total time for the ladder (seconds, more than 0).",
)
@click.option(
    "--from",
    "start_at",
    type=click.Choice(["doctor", "preflight", "base", "target"]),
    default="doctor",
    help="Start the ladder at this rung.",
)
@fault_option("CPU rehearsal only, test-only: plant a fault in every rung's run (e.g. hang-p2p).")
@click.option("--plan", is_flag=True, help="Print what each rung would try, run or skip (why); run nothing.")
@lines_json_option
def bisect(target, image, overrides, budget_s, start_at, fault, plan, as_json) -> None:
    """Climb doctor -> preflight -> base profile -> TARGET's profile; on the first failing rung, change
    one thing at a time (MTP off, NCCL_P2P_DISABLE=1, --disable-custom-all-reduce, CUDA graphs off,
    another attention backend, the previous image) until one turns it green. A change SGLang already
    makes on this launch and host (its custom all-reduce off on more than two PCIe-only GPUs,
    NCCL_CUMEM_ENABLE=0) is skipped with the reason; --plan shows what each rung would run or skip.

    OK when every rung is green; else the failing rung's own exit (a doctor or preflight step that
    says no is FAILED, a start CRASHED, HUNG or DEADLINE); DEADLINE too when the budget ran out
    first. Nothing is left running. With --plan, --json prints one document ("type": "plan").
    """
    from kit.pivot.bisect import check_bisect, plan_ladder, run_bisect
    from kit.runtime.engine import client

    if plan:
        rungs, rows, nvlink = plan_ladder(target, image=image, overrides=overrides)
        if as_json:
            emit_json({"type": "plan", "rungs": jsonable(rungs), "changes": jsonable(rows), "nvlink": nvlink})
        else:
            links = {None: "unknown", True: "yes", False: "no"}[nvlink]
            _line(console(), f"kit bisect {target} --plan (NVLink between every pair of its GPUs: {links})")
            table = [(r.rung, r.change, r.action, r.detail) for r in rows]
            print_rows(console(), ("rung", "change", "action", "detail"), table)
        return
    check_bisect(target, image=image, overrides=overrides, fault=fault, budget_s=budget_s, start_at=start_at)
    client()  # every rung after doctor runs in the engine: without one, one line before the header
    interruptible()
    view = BisectView(console(), as_json=as_json)
    if not as_json:
        _line(
            console(),
            f"kit bisect {target}: doctor -> preflight -> base -> target"
            + (f", budget {budget_s:g} s" if budget_s else ""),
        )
    result = run_bisect(
        target,
        image=image,
        overrides=overrides,
        fault=fault,
        budget_s=budget_s,
        start_at=start_at,
        observer=view,
        on_trial=view.trial,
    )
    if as_json:
        emit_json({"type": "result", **jsonable(result)})
    else:
        print_bisect(result, console())
    raise SystemExit(result.exit_code)
