"""`kit repro BUNDLE`: the same image, argv, environment and limits, watched live; reproduced or not."""

from __future__ import annotations

import click

from kit.cli import cli
from kit.cli.catalog import set_option
from kit.cli.signals import interruptible
from kit.output import console, emit_json, jsonable


@cli.command()
@click.argument("path", metavar="BUNDLE")
@set_option
@click.option("--keep", is_flag=True, help="Leave the replay's container afterwards.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines: differences, milestones, then the result.")
def repro(path: str, overrides: tuple[str, ...], keep: bool, as_json: bool) -> None:
    """Replay BUNDLE: start its image (by digest), argv and environment under its phase limits, print
    the fingerprint differences that matter first, and end with the verdict and "reproduced" or
    "not reproduced" (verdict, phase and stuck ranks against the bundle's).

    --set works as in kit up, to try a fix on the replay: --set env.NCCL_P2P_DISABLE=1.
    Exit codes are kit up's (0 READY, 1 CRASHED, 4 HUNG, 5 DEADLINE); 3 when the image is not here
    (the build command is printed), 2 for a damaged or foreign bundle.
    """
    from kit.cli.up import _print_result
    from kit.diagnose.bundle import read_bundle
    from kit.diagnose.facts import local_image_id
    from kit.diagnose.repro import differences, here_fingerprint, plan_replay, run_replay
    from kit.startup.live import LiveView

    bundle = read_bundle(path)
    plan = plan_replay(bundle, overrides, image_id_of=local_image_id)
    found = differences(plan, here_fingerprint(plan))
    out = console()

    def say(text: str, style: str | None = None) -> None:
        out.print(text, style=style, markup=False, highlight=False)

    before = bundle.result
    if as_json:
        emit_json(
            {
                "type": "plan",
                "bundle": str(bundle.path),
                "image": plan.image_ref,
                "differences": found,
                "changes": list(plan.changes),
                "notes": [*plan.notes, *([plan.image_note] if plan.image_note else [])],
            }
        )
    else:
        say(f"replaying {bundle.name}: {plan.spec.target} on {plan.image_ref}", "bold")
        say(f"  the bundle: {str(before.get('verdict')).upper()} in {before.get('phase') or '-'}")
        for note in (*plan.notes, *([plan.image_note] if plan.image_note else [])):
            say(f"  note: {note}")
        say(f"  differences that matter, bundle -> here: {len(found) or 'none'}")
        for line in found:
            say(f"    {line}")
        for change in plan.changes:
            say(f"  --set: {change}")
    interruptible()
    with LiveView(out, title=f"kit repro {bundle.name}", as_json=as_json) as view:
        outcome = run_replay(
            plan,
            found,
            keep=keep,
            on_progress=view.update,
            on_start=lambda s: view.started(s.name, s.url),
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
