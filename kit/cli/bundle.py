"""`kit bundle create | show | diff`: one file that captures a start-up, shown and compared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console

from kit.cli import cli
from kit.cli.catalog import json_option
from kit.errors import InputError
from kit.output import show


@cli.group()
def bundle() -> None:
    """Bundles: fingerprint, verdict, log, stacks and a picture of a start-up, in one .tar.gz."""


@bundle.command("create")
@click.argument("ref", metavar="[RUN | CONTAINER]", required=False)
@click.option("--last", is_flag=True, help="The newest run kit up / kit watch recorded.")
@click.option("--from-log", "from_log", metavar="FILE", help="A pasted log alone (needs --target).")
@click.option("--target", help="Catalog target (for --from-log, or a container without the kit's labels).")
@click.option("--image", metavar="NAME", help="Image manifest the log or container ran (images/NAME.toml).")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Where to write the .tar.gz.")
@json_option
def create(ref, last, from_log, target, image, output, as_json) -> None:
    """Write a bundle of RUN (a session id or runs folder), CONTAINER, the --last run, or --from-log FILE.

    Bundles go to ~/.cache/kit/bundles/ unless -o is given; secrets never enter them.
    """
    from kit.diagnose import record

    chosen = [
        name for name, given in (("RUN|CONTAINER", ref), ("--last", last), ("--from-log", from_log)) if given
    ]
    if len(chosen) != 1:
        raise InputError(
            "RUN | CONTAINER", "give exactly one of RUN, CONTAINER, --last or --from-log FILE", "see --help"
        )
    if from_log:
        if not target:
            raise InputError(
                "--target", "--from-log needs the catalog target the log is of", "e.g. --target tiny"
            )
        path = record.bundle_from_log(from_log, target=target, image=image, out=output)
    elif last:
        path = record.bundle_from_run(record.last_run(), output)
    else:
        run = record.find_run(ref)
        if run is not None:
            path = record.bundle_from_run(run, output)
        else:
            path = record.bundle_from_container(ref, target=target, image=image, out=output)
    show(_created(path), as_json=as_json, human=_print_created)


def _created(path: Path) -> dict:
    from kit.diagnose.bundle import headline, read_bundle

    made = read_bundle(path)
    return {
        "bundle": str(path),
        "bytes": path.stat().st_size,
        "verdict": made.meta.get("verdict"),
        "headline": headline(made.result),
        "members": sorted(made.members),
    }


def _print_created(info: dict, out: Console) -> None:
    out.print(f"{info['headline']}", markup=False, highlight=False)
    out.print(f"bundle: {info['bundle']} ({info['bytes'] / 1024:.0f} KB)", markup=False, highlight=False)


@bundle.command("show")
@click.argument("path", metavar="BUNDLE")
@json_option
def show_cmd(path: str, as_json: bool) -> None:
    """Summary, timeline, likely causes and the picture of a bundle (its SVG is written next to the
    kit's cache so a browser can open it)."""
    from kit.diagnose.show import bundle_view

    show(bundle_view(path), as_json=as_json, human=_print_view)


def _print_view(view: Any, out: Console) -> None:
    out.print(view.summary.rstrip(), markup=False, highlight=False)
    if view.timeline:
        out.print("\n## Timeline (seconds from the start)\n", markup=False, highlight=False)
        for row in view.timeline:
            still = "  (still in it)" if row.get("open") else ""
            out.print(
                f"  {row['rank']:<8} {row['phase']:<8} {row['start_s']:>8.1f} +{row['elapsed_s']:.1f}{still}",
                markup=False,
                highlight=False,
            )
    out.print(f"\npicture: {view.picture or 'none in this bundle'}", markup=False, highlight=False)


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
