"""`kit up`, `kit watch`, `kit ps`, `kit logs`, `kit down`: servers and their start-up, live."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click

from kit.cli import cli
from kit.cli.catalog import json_option, target_options
from kit.cli.exits import DOCUMENT, LINES, exits
from kit.cli.host import gpus_option
from kit.cli.params import CONTAINER, LIMIT_VALUE, LINE, LOG_FILE, PID
from kit.cli.serving import serve_options
from kit.cli.signals import interruptible
from kit.output import console, emit_json, jsonable, show


def _print_result(result, out, *, container: bool = True) -> None:
    from kit.startup.result import sglang_phases, verdict_lines

    style = "bold green" if result.verdict == "ready" else "bold red"
    lines = verdict_lines(result)
    out.print(lines[0], style=style, markup=False, highlight=False)
    for line in lines[1:]:
        out.print(line, markup=False, highlight=False)
    if result.timeline or result.launch_s is not None:
        phases: dict[str, float] = {} if result.launch_s is None else {"launch": result.launch_s}
        for span in result.timeline:
            if span.phase != "serving":  # start-up phases only
                phases[span.phase] = max(phases.get(span.phase, 0.0), span.elapsed_s)
        out.print(
            "  phases: " + ", ".join(f"{p} {s:.1f} s" for p, s in phases.items()),
            markup=False,
            highlight=False,
        )
    if said := sglang_phases(result.sglang_startup_time):
        out.print(f"  {said}", markup=False, highlight=False)
    if result.container_gone and not result.container_removed:
        # Removed when it stopped (docker run --rm, or by someone else): there is nothing to keep.
        out.print(
            f"  container gone: {result.container} was removed when it stopped (its --rm, or by someone "
            "else), not by the kit",
            markup=False,
            highlight=False,
        )
    elif not container:
        out.print(f"  watched {result.container}: never stopped by the kit", markup=False, highlight=False)
    elif result.container_removed:
        out.print(f"  removed container {result.container}", markup=False, highlight=False)
    else:
        out.print(
            f"  container kept: {result.container} (remove with 'kit down {result.container}')",
            markup=False,
            highlight=False,
        )


def _limits(spec, deadline: tuple[str, ...], stall: tuple[str, ...]):
    from kit.startup import limits_from_spec, parse_limit_overrides

    return limits_from_spec(
        spec,
        deadlines=parse_limit_overrides(deadline, "--deadline"),
        stall_windows=parse_limit_overrides(stall, "--stall"),
    )


def _finish(result, as_json: bool, *, container: bool = True) -> None:
    """The result as a last JSON line or the verdict paragraph; the verdict's exit code."""
    if as_json:
        emit_json({"type": "result", **jsonable(result)})
    else:
        _print_result(result, console(), container=container)
    raise SystemExit(result.exit_code)


def _policy(strict: bool):
    from kit.startup.overrun import DeadlinePolicy

    return DeadlinePolicy.VERDICT if strict else DeadlinePolicy.REPORT


def _load_bytes(spec) -> int | None:
    """The checkpoint's size on disk from the catalog: what the live view measures a load against."""
    from kit.catalog import load_catalog

    model = load_catalog().models.get(spec.model)
    return None if model is None else int(model.facts.size_on_disk_gib * (1 << 30))


def _limit_options(func):
    func = click.option(
        "--strict-deadlines",
        "strict",
        is_flag=True,
        help="End with DEADLINE when a stage passes its deadline while still moving, as kit smoke does "
        "(default: say so and follow on to READY, HUNG or CRASHED). The server is never removed for it.",
    )(func)
    func = click.option(
        "--stall",
        "stall",
        type=LIMIT_VALUE,
        multiple=True,
        metavar="STAGE=SECONDS",
        help="Override a stall window (no log line and no activity for this long = HUNG).",
    )(func)
    func = click.option(
        "--deadline",
        "deadline",
        type=LIMIT_VALUE,
        multiple=True,
        metavar="STAGE=SECONDS",
        help="Override a phase deadline.",
    )(func)
    return func


def ensure_image(spec, *, build: bool) -> None:
    """The target's image is here, or is built now from its manifest and lock with progress on
    stderr (stdout keeps --json clean); with build=False a missing image is ENVIRONMENT naming
    `kit image build`."""
    from kit.cli.image_build import build_with_progress, built_line
    from kit.errors import EnvironmentProblem
    from kit.images.manifest import load_manifest
    from kit.output import err_console
    from kit.runtime.engine import image_exists

    if image_exists(spec.image_ref):
        return
    if not build:
        raise EnvironmentProblem(
            f"image {spec.image_ref} not built (--no-build)",
            hint=f"run 'kit image build {spec.image}', or kit up without --no-build builds it",
        )
    err_console().print(f"image {spec.image_ref} not built: building it from images/{spec.image}.lock")
    err_console().print(built_line(build_with_progress(load_manifest(spec.image))))


def first_token_option(default: bool, why: str):
    """The same switch on `kit up` and `kit watch`: at READY, time one chat request (a failed one is
    CRASHED). Up starts its own server and asks by default; watch follows someone else's server and
    sends it nothing unless asked."""
    shown = "--first-token" if default else "--no-first-token"
    return click.option(
        "--first-token/--no-first-token",
        "first_token",
        default=default,
        help=f"At READY, time one chat request; a failed one is CRASHED (default: {shown}, {why}).",
    )


# What a start-up ends with: the verdicts, and the kit's own reasons to stop.
VERDICT_EXITS = ("READY", "CRASHED", "HUNG", "DEADLINE", "USAGE", "ENVIRONMENT", "INTERRUPTED")


def no_validate_option(func):
    return click.option(
        "--no-validate", is_flag=True, help="Start without holding the launch against `kit validate`'s rules."
    )(func)


def fault_option(help: str):
    """The test-only switch of the CPU rehearsal: hidden from help, still taken."""
    return click.option("--fault", type=LINE, metavar="FAULT", hidden=True, help=help)  # into an env var


@exits(*VERDICT_EXITS, json=LINES)
@cli.command()
@target_options
@gpus_option
@no_validate_option
@fault_option("CPU rehearsal only, test-only: plant a fault (hang-init, crash-load, ...).")
@click.option("--keep", is_flag=True, help="Leave the container running (or stopped) afterwards.")
@click.option(
    "--no-build",
    is_flag=True,
    help="Refuse (ENVIRONMENT) when the image is not built, instead of building it from its lock first.",
)
@first_token_option(True, "the server is the kit's own")
@click.option("--json", "as_json", is_flag=True, help="JSON lines: milestones, activity, then the result.")
@_limit_options
@serve_options
def up(
    target,
    image,
    overrides,
    gpus,
    no_validate,
    fault,
    keep,
    no_build,
    first_token,
    as_json,
    deadline,
    stall,
    strict,
    serve,
) -> None:
    """Start TARGET in a container, show its start-up phases live, end with a verdict.

    An image not built yet is built first from images/NAME.toml and its lock, with the progress of
    `kit image build` (as Compose builds a missing service image); --no-build refuses instead.
    A stage past its deadline that still moves is reported and followed on (READY with the stage
    named); the container is removed afterwards unless --keep, and never for a passed deadline.
    With --serve it is watched while it serves until it hangs or crashes (a bundle; HUNG or CRASHED)
    or until Ctrl-C / SIGTERM, then removed.
    """
    from kit.launch import api_key_from_env
    from kit.model import require_model
    from kit.output import err_console
    from kit.runtime.client_config import read_client_proxy_env
    from kit.runtime.host import with_gpus
    from kit.startup import run_up
    from kit.startup.live import LiveView
    from kit.startup.prepare import prepare_launch, proxy_warnings
    from kit.startup.server import check_start

    # Every check of the input and the host before any output: bad input or no engine is one line.
    spec = with_gpus(prepare_launch(target, image=image, overrides=overrides, validate=not no_validate), gpus)
    require_model(spec)  # a missing model: one line with the fetch command, before any container
    api_key_from_env(spec, required=bool(spec.api_key_env))
    limits = _limits(spec, deadline, stall)
    check_start(spec, fault=fault, image=False)  # the fault switch, KIT_RUN_LABELS, the GPUs
    ensure_image(spec, build=not no_build)  # the engine, then the image: built here if missing
    for line in proxy_warnings(spec, read_client_proxy_env()):  # stderr: --json stays clean
        err_console().print(line, markup=False, highlight=False)
    interruptible()
    title = f"kit up {spec.target} ({spec.image}, {spec.ranks} ranks)" + (f", fault {fault}" if fault else "")
    with LiveView(console(), title=title, as_json=as_json, load_bytes=_load_bytes(spec)) as view:
        result = run_up(
            spec,
            limits,
            fault=fault,
            keep=keep,
            on_progress=view.update,
            on_start=lambda s: view.started(s.name, s.url),
            first_token=first_token,
            deadline_policy=_policy(strict),
            serve=serve,
            on_serving=view.serving,
        )
    _finish(result, as_json)


@exits(*VERDICT_EXITS, json=LINES)
@cli.command()
@click.argument("container", required=False, type=CONTAINER)
@click.option(
    "--pid",
    type=PID,
    metavar="PID",
    help="Watch host process PID and its descendants instead of a container.",
)
@click.option(
    "--unit",
    type=LINE,
    metavar="NAME",
    help="Watch systemd service NAME (its main PID, cgroup and journal) instead of a container.",
)
@click.option(
    "--log",
    "log_file",
    type=LOG_FILE,
    metavar="FILE",
    help="With --pid/--unit: the server's log file (followed like tail -F).",
)
@click.option(
    "--target",
    type=LINE,
    metavar="TARGET",
    help="Catalog target for limits (default: the container's io.kit.target label).",
)
@click.option(
    "--image", type=LINE, metavar="NAME", help="Image manifest (default: the container's io.kit.image label)."
)
@first_token_option(False, "a watch sends nothing to a server it did not start")
@click.option(
    "--attempts",
    "max_attempts",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Launch attempts to follow when a restart policy starts the server again; the last is judged.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON lines: milestones, activity, then the result.")
@_limit_options
@serve_options
def watch(
    container,
    pid,
    unit,
    log_file,
    target,
    image,
    first_token,
    max_attempts,
    as_json,
    deadline,
    stall,
    strict,
    serve,
):
    """Follow CONTAINER's start-up (e.g. started by compose) to a verdict; never removes it.

    --pid N or --unit NAME follow a server that runs as host processes (docs/baremetal.md); limits
    come from --target, else the defaults. Under a restart policy (systemd, Compose `restart:
    on-failure`) a crash is not the end: the watch follows the next launch attempt, up to
    --attempts, and judges the last one. --first-token times one chat request at READY, as `kit up`
    does by default. --serve keeps watching after READY (never stopping the server)."""
    from kit.startup.host import HostWatch

    follow = Follow(first_token, max_attempts, as_json, deadline, stall, strict, serve)
    if pid is not None or unit is not None or log_file:  # HostWatch: exactly one of --pid, --unit
        _watch_host(HostWatch(pid=pid, unit=unit, log=log_file), container, image, target, follow)
    else:
        _watch_container(container, image, target, follow)


@dataclasses.dataclass(frozen=True)
class Follow:
    """How `kit watch` follows what it found, the same for a container and for host processes."""

    first_token: bool
    max_attempts: int
    as_json: bool
    deadline: tuple[str, ...]
    stall: tuple[str, ...]
    strict: bool
    serve: Any  # kit.logs.serving.ServingLimits, or None without --serve

    def limits(self, spec):
        """The target's limits with --deadline/--stall, or the tracker's defaults without a target."""
        if spec is not None:
            return _limits(spec, self.deadline, self.stall)
        from kit.startup import parse_limit_overrides
        from kit.startup.host import default_limits

        return default_limits(
            parse_limit_overrides(self.deadline, "--deadline"), parse_limit_overrides(self.stall, "--stall")
        )

    def run(self, title: str, spec, watch: Callable[..., Any], *, container: bool = True) -> None:
        """The live view over `watch(limits, **how)`, then the verdict (and its exit code)."""
        from kit.startup.live import LiveView

        limits = self.limits(spec)
        interruptible()
        load_bytes = _load_bytes(spec) if spec is not None else None
        with LiveView(console(), title=title, as_json=self.as_json, load_bytes=load_bytes) as view:
            result = watch(
                limits,
                on_progress=view.update,
                first_token=self.first_token,
                max_attempts=self.max_attempts,
                deadline_policy=_policy(self.strict),
                serve=self.serve,
                on_serving=view.serving,
            )
        _finish(result, self.as_json, container=container)


def _watch_container(container: str | None, image: str | None, target: str | None, follow: Follow) -> None:
    """kit watch CONTAINER: its labels name the target and image unless --target/--image do."""
    from kit.errors import InputError
    from kit.launch import resolve
    from kit.runtime.engine import LABEL_IMAGE, LABEL_TARGET
    from kit.runtime.server import attach
    from kit.startup import run_watch

    if not container:
        raise InputError("CONTAINER", "nothing to watch", "name a container, or pass --pid N or --unit NAME")
    labels = attach(container).labels
    target = target or labels.get(LABEL_TARGET)
    if not target:
        raise InputError("--target", f"container {container} has no {LABEL_TARGET} label", "pass --target")
    spec = resolve(target, image=image or labels.get(LABEL_IMAGE))
    follow.run(
        f"kit watch {container} ({spec.target})",
        spec,
        lambda limits, **how: run_watch(container, spec, limits, **how),
    )


def _watch_host(what, container: str | None, image: str | None, target: str | None, follow: Follow) -> None:
    """kit watch --pid/--unit: the host source's flow (kit/startup/host.py), opened (the process, its
    log, systemd) before the header is printed."""
    from kit.errors import InputError
    from kit.launch import resolve
    from kit.startup.host import open_host_watch, run_watch_host

    if container:
        raise InputError("CONTAINER", "a container and --pid/--unit were both given", "give one of them")
    if image:
        raise InputError("--image", "a host process runs no kit image", "drop --image (kit repro picks one)")
    spec = resolve(target) if target else None
    shown = f"pid {what.pid}" if what.pid is not None else what.unit
    with open_host_watch(what, spec) as opened:
        follow.run(
            f"kit watch {shown} ({spec.target if spec else 'default limits'})",
            spec,
            lambda limits, **how: run_watch_host(opened, spec, limits, **how),
            container=False,
        )


@exits("OK", "USAGE", "ENVIRONMENT", json=DOCUMENT)
@cli.command()
@json_option
def ps(as_json: bool) -> None:
    """The kit's containers (running and stopped), found by label."""
    from kit.runtime.inventory import list_servers

    rows = list_servers()
    show(rows, as_json=as_json, human=_print_ps)


def _print_ps(rows, out) -> None:
    if not rows:
        out.print("no kit containers", markup=False)
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("name", "target", "image", "status", "url"):
        table.add_column(column)
    for row in rows:
        table.add_row(row.name, row.target, row.image, row.status, row.url or "-")
    out.print(table)


@exits("OK", "USAGE", "ENVIRONMENT", "INTERRUPTED")
@cli.command()
@click.argument("container", type=CONTAINER)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option(
    "--tail",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Only the last N lines (default: all).",
)
def logs(container: str, follow: bool, tail: int | None) -> None:
    """Print a kit container's log."""
    from kit.runtime.inventory import print_logs

    print_logs(container, follow=follow, tail="all" if tail is None else str(tail))


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT")
@cli.command()
@click.argument("containers", metavar="[CONTAINER]...", nargs=-1, type=CONTAINER)
@click.option("--all", "all_", is_flag=True, help="Every container the kit started (not Compose's services).")
def down(containers: tuple[str, ...], all_: bool) -> None:
    """Stop and remove the kit's containers (by name, or --all; Compose's services only by name)."""
    from kit.errors import InputError
    from kit.runtime.inventory import remove_servers

    if not containers and not all_:
        raise InputError("CONTAINERS", "nothing to remove", "name containers (see 'kit ps') or pass --all")
    removal = remove_servers(containers, all_=all_)
    for name in removal.removed:
        console().print(f"removed {name}", markup=False, highlight=False)
    for name in removal.left:
        console().print(
            f"left {name}: started by Compose (stop it with 'docker compose down', or name it)",
            markup=False,
            highlight=False,
        )
