"""`kit bundle create | show | diff`: one file that captures a start-up, shown and compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

from kit.cli import cli
from kit.cli.catalog import json_option
from kit.cli.exits import DOCUMENT, PLAIN, exits
from kit.cli.params import LINE, LOG_FILE, OUTPUT_FILE, PID
from kit.errors import InputError
from kit.output import show


@exits(*PLAIN)
@cli.group()
def bundle() -> None:
    """Bundles: fingerprint, verdict, log, stacks and a picture of a start-up, in one .tar.gz."""


@exits("OK", "FAILED", "USAGE", "ENVIRONMENT", json=DOCUMENT)
@bundle.command("create")
@click.argument("ref", metavar="[RUN | CONTAINER]", type=LINE, required=False)
@click.option("--last", is_flag=True, help="The newest run kit up / kit watch recorded.")
@click.option(
    "--from-log", "from_log", type=LINE, metavar="FILE", help="A pasted log alone (needs --target)."
)
@click.option(
    "--pid",
    type=PID,
    metavar="PID",
    help="A server running as host process PID (its environment, argv, stacks).",
)
@click.option("--unit", type=LINE, metavar="NAME", help="A server running as systemd service NAME.")
@click.option(
    "--log", "log_file", type=LOG_FILE, metavar="FILE", help="With --pid/--unit: the server's log file."
)
@click.option(
    "--target",
    type=LINE,
    metavar="TARGET",
    help="Catalog target (for --from-log, or a container without the kit's labels).",
)
@click.option(
    "--image", type=LINE, metavar="NAME", help="Image manifest the log or container ran (images/NAME.toml)."
)
@click.option(
    "-o",
    "--output",
    type=OUTPUT_FILE,
    help="Where to write the .tar.gz: a new or regular file in a folder that exists (none is created).",
)
@json_option
def create(ref, last, from_log, pid, unit, log_file, target, image, output, as_json) -> None:
    """Write a bundle of RUN (a session id or runs folder), CONTAINER, the --last run, --from-log FILE,
    or a server running as host processes (--pid N | --unit NAME [--log FILE], docs/baremetal.md).

    Bundles go to ~/.cache/kit/bundles/ unless -o is given; secrets never enter them. Writing the
    bundle is what this command does, so it ends OK once the bundle is written, whatever the verdict
    inside: a bundle of a HUNG run is OK here, its result.json keeps the run's own exit_code (HUNG's),
    and the verdict is printed (--json: verdict, run_exit_code). `kit analyze BUNDLE` exits with
    the verdict.
    """
    from kit.diagnose import record

    given = (
        ("RUN|CONTAINER", ref),
        ("--last", last),
        ("--from-log", from_log),
        ("--pid", pid is not None),
        ("--unit", unit),
    )
    chosen = [name for name, value in given if value]
    if len(chosen) != 1:
        raise InputError(
            "RUN | CONTAINER",
            "give exactly one of RUN, CONTAINER, --last, --from-log FILE, --pid N or --unit NAME",
            "see --help",
        )
    if log_file and pid is None and not unit:
        raise InputError("--log", "--log goes with --pid or --unit", "for a pasted log use --from-log FILE")
    if pid is not None or unit:
        from kit.diagnose.host_record import bundle_of_host

        if image:
            raise InputError(
                "--image", "a host process runs no kit image", "drop --image (kit repro picks one)"
            )
        path = bundle_of_host(pid=pid, unit=unit, log=log_file, target=target, out=output)
    elif from_log:
        if not target:
            raise InputError(
                "--target", "--from-log needs the catalog target the log is of", "e.g. --target tiny"
            )
        path = record.bundle_from_log(from_log, target=target, image=image, out=output)
    elif last:
        run = record.last_run()
        taken = record.run_taken(run)
        path = record.bundle_from_run(run, output)
    else:
        run = record.find_run(ref)
        if run is not None:
            path = record.bundle_from_run(run, output)
        else:
            path = record.bundle_from_container(ref, target=target, image=image, out=output)
    info = _created(path)
    if last:
        info["run"] = taken
    show(info, as_json=as_json, human=_print_created)


def _created(path: Path) -> dict:
    from kit.diagnose.bundle import headline, read_bundle

    made = read_bundle(path)
    return {
        "bundle": str(path),
        "bytes": path.stat().st_size,
        "verdict": made.meta.get("verdict"),
        "run_exit_code": made.result.get("exit_code"),  # the run's; this command exits 0 (written)
        "headline": headline(made.result),
        "members": sorted(made.members),
    }


def _print_created(info: dict, out: Console) -> None:
    if info.get("run"):
        out.print(f"took {info['run']}", markup=False, highlight=False)
    out.print(f"{info['headline']}", markup=False, highlight=False)
    out.print(f"bundle: {info['bundle']} ({info['bytes'] / 1024:.0f} KB)", markup=False, highlight=False)


@exits(*PLAIN, json=DOCUMENT)
@bundle.command("show")
@click.argument("path", metavar="BUNDLE")
@json_option
def show_cmd(path: str, as_json: bool) -> None:
    """Summary, launch, timeline, likely causes and the picture of a bundle, rendered from its
    fingerprint (what kit repro runs); says when summary.md disagrees, and what kit repro would
    refuse to start without --trust-bundle. The SVG is written into the kit's cache."""
    from kit.diagnose.show import bundle_view

    show(bundle_view(path), as_json=as_json, human=_print_view)


def _print_view(view: Any, out: Console) -> None:
    from kit.diagnose.replay_plan import printable

    def say(text: str) -> None:
        out.print(printable(text), markup=False, highlight=False)

    say(view.summary.rstrip())
    if view.summary_differs:
        say("\n## summary.md disagrees with the fingerprint (a hand-edited bundle?)\n")
        say(
            "summary.md says what fingerprint.json and result.json do not; this page and kit repro use those:"
        )
        for line in view.summary_differs[:20]:
            say(f"  {line}")
    _print_launch(view.launch, say)
    say("\n## kit repro (the trust policy)\n")
    if view.trust_note:
        say(f"  {view.trust_note}")
    elif view.trust:
        say(f"  refuses {len(view.trust)} item(s) without --trust-bundle:")
        for line in view.trust:
            say(f"    {line}")
    else:
        say("  an SGLang launch as the kit renders it: kit repro starts it without --trust-bundle")
    if view.timeline:
        say("\n## Timeline (seconds from the start)\n")
        for row in view.timeline:
            still = "  (still in it)" if row.get("open") else ""
            say(f"  {row['rank']:<8} {row['phase']:<8} {row['start_s']:>8.1f} +{row['elapsed_s']:.1f}{still}")
    say(f"\npicture: {view.picture or 'none in this bundle'}")


def _print_launch(launch: dict, say: Any) -> None:
    import shlex

    from kit.diagnose.fingerprint import is_unknown, show_value

    say("\n## Launch (fingerprint.json: what kit repro runs)\n")
    argv = launch.get("argv")
    if isinstance(argv, list):
        say(f"  argv       {shlex.join(str(a) for a in argv)}")
    else:
        say(f"  argv       {show_value(argv)}")
    env = launch.get("env")
    if isinstance(env, dict) and not is_unknown(env):
        items = [f"{k}={shlex.quote(str(v))}" for k, v in sorted(env.items())]
        say(f"  env        {items[0] if items else '(none)'}")
        for item in items[1:]:
            say(f"             {item}")
    else:
        say(f"  env        {show_value(env)}")
    say(f"  secrets    {show_value(launch.get('secrets') or [])} (names only; never in a bundle)")
    container = launch.get("container")
    if isinstance(container, dict) and not is_unknown(container):
        for key, value in sorted(container.items()):
            say(f"  container.{key} {show_value(value) if not isinstance(value, dict) else value}")


@exits(*PLAIN, json=DOCUMENT)
@bundle.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option(
    "--all", "show_all", is_flag=True, help="List every difference (default: up to 40 besides suspects)."
)
@json_option
def diff_cmd(a: str, b: str, show_all: bool, as_json: bool) -> None:
    """What differs between two bundles' fingerprints, likely suspects first (versions, GPUs, P2P and
    topology, environment, argv, overrides); equal fields are counted."""
    from kit.diagnose.show import bundle_diff

    report = bundle_diff(a, b)
    show(report, as_json=as_json, human=lambda r, out: _print_diff(r, out, show_all))


def _print_diff(report: Any, out: Console, show_all: bool) -> None:
    def say(text: str, style: str | None = None) -> None:
        out.print(text, style=style, markup=False, highlight=False)

    say(f"A: {report.a} ({report.a_verdict})")
    say(f"B: {report.b} ({report.b_verdict})")
    suspects = [d for d in report.differences if d["matters"]]
    others = [d for d in report.differences if not d["matters"]]
    say(
        f"{len(report.differences)} differences ({len(suspects)} likely suspects), "
        f"{report.equal} fields equal, {report.unknown_both} unknown in both"
    )
    if suspects:
        say("likely suspects:", "bold")
        for d in suspects:
            say(f"  [{d['group']}] {d['line']}")
    if others:
        say("other differences:", "bold")
        shown = others if show_all else others[:40]
        for d in shown:
            say(f"  [{d['group']}] {d['line']}")
        if len(shown) < len(others):
            say(f"  ... and {len(others) - len(shown)} more (--all or --json lists them)")
