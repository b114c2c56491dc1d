"""`kit up`, `kit watch`, `kit ps`, `kit logs`, `kit down`: servers and their start-up, live."""

from __future__ import annotations

import click

from kit.cli import cli
from kit.cli.catalog import json_option, target_options
from kit.cli.signals import interruptible
from kit.output import console, emit_json, jsonable, show


def _print_result(result, out) -> None:
    from kit.startup.result import verdict_lines

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
    if result.container_removed:
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


def _finish(result, as_json: bool) -> None:
    """The result as a last JSON line or the verdict paragraph; the verdict's exit code."""
    if as_json:
        emit_json({"type": "result", **jsonable(result)})
    else:
        _print_result(result, console())
    raise SystemExit(result.exit_code)


def _limit_options(func):
    func = click.option(
        "--stall",
        "stall",
        multiple=True,
        metavar="STAGE=SECONDS",
        help="Override a stall window (no log line and no activity for this long = HUNG).",
    )(func)
    func = click.option(
        "--deadline", "deadline", multiple=True, metavar="STAGE=SECONDS", help="Override a phase deadline."
    )(func)
    return func


def no_validate_option(func):
    return click.option(
        "--no-validate", is_flag=True, help="Start without holding the launch against `kit validate`'s rules."
    )(func)


@cli.command()
@target_options
@no_validate_option
@click.option("--fault", help="CPU rehearsal only, test-only: plant a fault (hang-init, crash-load, ...).")
@click.option("--keep", is_flag=True, help="Leave the container running (or stopped) afterwards.")
@click.option("--no-first-token", is_flag=True, help="Stop at READY without a chat request.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines: milestones, activity, then the result.")
@_limit_options
def up(target, image, overrides, no_validate, fault, keep, no_first_token, as_json, deadline, stall) -> None:
    """Start TARGET in a container, show its start-up phases live, end with a verdict.

    Exit codes: 0 READY, 1 CRASHED (or the first token failed), 4 HUNG, 5 DEADLINE,
    2 bad input, 3 missing engine or image, 130 interrupted. The container is removed
    afterwards unless --keep.
    """
    from kit.launch import api_key_from_env
    from kit.model import require_model
    from kit.startup import run_up
    from kit.startup.live import LiveView
    from kit.startup.prepare import prepare_launch

    spec = prepare_launch(target, image=image, overrides=overrides, validate=not no_validate)
    require_model(spec)  # a missing model: one line with the fetch command, before any container
    api_key_from_env(spec, required=bool(spec.api_key_env))
    limits = _limits(spec, deadline, stall)
    interruptible()
    title = f"kit up {spec.target} ({spec.image}, {spec.ranks} ranks)" + (f", fault {fault}" if fault else "")
    with LiveView(console(), title=title, as_json=as_json) as view:
        result = run_up(
            spec,
            limits,
            fault=fault,
            keep=keep,
            on_progress=view.update,
            on_start=lambda s: view.started(s.name, s.url),
            first_token=not no_first_token,
        )
    _finish(result, as_json)


@cli.command()
@click.argument("container")
@click.option("--target", help="Catalog target for limits (default: the container's io.kit.target label).")
@click.option("--image", help="Image manifest (default: the container's io.kit.image label).")
@click.option("--first-token", is_flag=True, help="At READY, also time a chat request.")
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
def watch(container, target, image, first_token, max_attempts, as_json, deadline, stall) -> None:
    """Follow CONTAINER's start-up (e.g. started by compose) to a verdict; never removes it.

    Under a restart policy (systemd, Compose `restart: on-failure`) a crash is not the end: the
    watch follows the next launch attempt, up to --attempts, and judges the last one."""
    from kit.errors import InputError
    from kit.launch import resolve
    from kit.runtime.engine import LABEL_IMAGE, LABEL_TARGET
    from kit.runtime.server import attach
    from kit.startup import run_watch
    from kit.startup.live import LiveView

    labels = attach(container).labels
    target = target or labels.get(LABEL_TARGET)
    if not target:
        raise InputError("--target", f"container {container} has no {LABEL_TARGET} label", "pass --target")
    spec = resolve(target, image=image or labels.get(LABEL_IMAGE))
    limits = _limits(spec, deadline, stall)
    interruptible()
    with LiveView(console(), title=f"kit watch {container} ({spec.target})", as_json=as_json) as view:
        result = run_watch(
            container,
            spec,
            limits,
            on_progress=view.update,
            first_token=first_token,
            max_attempts=max_attempts,
        )
    _finish(result, as_json)


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


@cli.command()
@click.argument("container")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("--tail", default="all", help="Only the last N lines.")
def logs(container: str, follow: bool, tail: str) -> None:
    """Print a kit container's log."""
    from kit.runtime.inventory import print_logs

    print_logs(container, follow=follow, tail=tail)


@cli.command()
@click.argument("containers", nargs=-1)
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
