"""`kit repro BUNDLE`: the plan first (what will run), then the same image, argv, environment and
limits, watched live; reproduced or not. A bundle is untrusted: see docs/bundles.md ("Trust")."""

from __future__ import annotations

import dataclasses
import os

import click

from kit.cli import cli
from kit.cli.catalog import set_option
from kit.cli.exits import LINES, exits
from kit.cli.signals import interruptible
from kit.cli.up import VERDICT_EXITS
from kit.output import console, emit_json, jsonable


@exits(*VERDICT_EXITS, json=LINES)
@cli.command()
@click.argument("path", metavar="BUNDLE")
@set_option
@click.option(
    "--pass-env",
    "pass_env",
    metavar="NAME",
    multiple=True,
    help="Pass this machine's variable NAME into the replay (repeatable); only the target's own "
    "secret names (HF_TOKEN for a gated model) are passed without it.",
)
@click.option(
    "--trust-bundle",
    is_flag=True,
    help="Start the launch even where the trust policy refuses it (not an SGLang launch, extra "
    "capabilities, loader variables, a foreign image), after printing it.",
)
@click.option("--keep", is_flag=True, help="Leave the replay's container afterwards.")
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="Print the plan and what the trust policy refuses, then stop: no engine is asked to start anything.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON lines: the plan, milestones, then the result.")
def repro(
    path: str,
    overrides: tuple[str, ...],
    pass_env: tuple[str, ...],
    trust_bundle: bool,
    keep: bool,
    plan_only: bool,
    as_json: bool,
) -> None:
    """Replay BUNDLE: print what will run (image, the full command, environment with secrets by
    name, container settings, this machine's variables passed in) and the fingerprint differences
    that matter, start it, and end with the verdict and "reproduced" or "not reproduced".

    Only an SGLang launch as the kit renders it starts by default; anything else (another command,
    capabilities beyond SYS_PTRACE/IPC_LOCK/SYS_NICE, LD_PRELOAD and other loader variables, a
    foreign image) is refused (USAGE) before any container starts, naming each item: --trust-bundle
    starts it anyway. --set acts on the bundle's own launch (--set env.NCCL_P2P_DISABLE=1, --set
    nnodes=1); a set that changes nothing is USAGE. The replay's verdict is the exit code, as for
    `kit up`; a damaged or foreign bundle is USAGE, an image that is not here ENVIRONMENT. --plan
    prints the plan and stops: OK when the replay would start, USAGE when the policy refuses it.
    """
    from kit.cli.up import _print_result
    from kit.diagnose.bundle import read_bundle
    from kit.diagnose.facts import local_image_id
    from kit.diagnose.nearest import host_replay
    from kit.diagnose.replay_plan import plan_lines, plan_view
    from kit.diagnose.repro import (
        differences,
        here_fingerprint,
        local_image_labels,
        lock_section,
        plan_replay,
        refuse,
    )
    from kit.startup.live import LiveView
    from kit.startup.replay import run_replay

    bundle = read_bundle(path)
    host = host_replay(bundle)  # a host process's bundle: the nearest kit image, its versions first
    if host is not None:
        bundle = host.bundle
    plan = plan_replay(
        bundle, overrides, image_id_of=local_image_id, image_labels_of=local_image_labels, pass_env=pass_env
    )
    if host is not None:
        plan = dataclasses.replace(plan, extra=(*plan.extra, _nearest_section(host)))
    plan = dataclasses.replace(plan, extra=(*plan.extra, lock_section(plan)))
    found = differences(plan, here_fingerprint(plan))
    out = console()

    def say(text: str, style: str | None = None) -> None:
        out.print(text, style=style, markup=False, highlight=False)

    view = plan_view(plan, found, os.environ)
    if as_json:
        nearest = {"nearest_image": {**jsonable(host.choice), "notes": list(host.notes)}} if host else {}
        emit_json({**view, **nearest, "trusted": trust_bundle})
    else:
        for line in plan_lines(view, trusted=trust_bundle):
            say(line)
    refuse(plan, trusted=trust_bundle)
    if plan_only:  # OK: this bundle would start as planned (a refusal above is USAGE)
        raise SystemExit(0)
    interruptible()
    with LiveView(out, title=f"kit repro {bundle.name}", as_json=as_json) as live:
        outcome = run_replay(
            plan,
            found,
            keep=keep,
            on_progress=live.update,
            on_start=lambda s: live.started(s.name, s.url),
        )
    verdict_line = ", ".join(
        f"{c.what} {c.replay}" + ("" if c.same else f" (bundle: {c.bundle})") for c in outcome.compared
    )
    if as_json:
        emit_json(
            {
                "type": "result",
                **jsonable(outcome.result),
                "repro": {
                    "bundle": outcome.bundle,
                    "reproduced": outcome.reproduced,
                    "compared": jsonable(outcome.compared),
                    "differences": list(outcome.differences),
                    "changes": list(outcome.changes),
                    "notes": list(outcome.notes),
                },
            }
        )
    else:
        _print_result(outcome.result, out)
        if outcome.reproduced:
            say(f"reproduced: {verdict_line}", "bold red")
        else:
            say(
                f"not reproduced: {verdict_line}",
                "bold green" if outcome.result.verdict == "ready" else "bold",
            )
    raise SystemExit(outcome.exit_code)


def _nearest_section(host) -> tuple[str, tuple[str, ...]]:
    """The host-bundle section of the plan: the image chosen and every version difference,
    host -> image, printed before anything starts."""
    choice = host.choice
    lines = [
        f"{choice.manifest} (score {choice.score:g} of {choice.best:g})",
        f"version differences, host -> image: {len(choice.differences) or 'none'}",
        *(f"  {difference.line()}" for difference in choice.differences),
        *(f"note: {note}" for note in host.notes[1:]),
    ]
    return ("nearest kit image", tuple(lines))
