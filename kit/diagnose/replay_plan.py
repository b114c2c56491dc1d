"""What a replay will run, shown before anything starts. Pure: a ReplayPlan in, data and lines out.

    view = plan_view(plan, differences, environ)   JSON-ready: image (tag and id), the container's
                                                   full command, environment (secrets by name),
                                                   container settings, this machine's variables
                                                   passed in, the bundle's secrets not passed,
                                                   --set changes, notes, refused items
    plan_lines(view)                               the same as lines for a terminal

Everything comes from the LaunchSpec the replay starts and from `run_kwargs`, the mapping
`kit up` itself starts a container with, so the plan is what runs. Text from the bundle is printed
with printable characters only (`printable`). Sections others add (`ReplayPlan.extra`: title and
lines) follow the standard ones.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from kit.diagnose.redact import mask_argv
from kit.diagnose.trust import shown


def printable(text: str) -> str:
    """Untrusted text for a terminal: printable characters, line ends and tabs kept, the rest '?'."""
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)


def _gpus(kwargs: Mapping[str, Any]) -> int:
    return sum(int(r.get("Count") or 0) for r in kwargs.get("device_requests") or [])


def plan_view(plan: Any, differences: Sequence[str], environ: Mapping[str, str]) -> dict[str, Any]:
    """The plan as data (the `plan` line of `kit repro --json`)."""
    from kit.render.docker import run_kwargs

    spec = plan.spec
    kwargs = run_kwargs(spec, diagnose=True)
    ports = kwargs.get("ports") or {}
    result = plan.bundle.result
    return {
        "type": "plan",
        "bundle": str(plan.bundle.path),
        "bundle_verdict": str(result.get("verdict")),
        "bundle_phase": result.get("phase"),
        "target": spec.target,
        "image": {"ref": plan.image_ref, "tag": plan.image_tag, "id": plan.image_id, "note": plan.image_note},
        # A secret flag's value (the replay's fresh API key) is not printed.
        "command": mask_argv(list(kwargs["command"]))[0],
        "env": dict(sorted(spec.env.items())),
        "from_this_machine": [{"name": n, "set_here": bool(environ.get(n))} for n in spec.pass_env],
        "not_passed": list(plan.withheld),
        "container": {
            "cap_add": list(kwargs.get("cap_add") or []),
            "shm_size": kwargs.get("shm_size"),
            "ipc_mode": kwargs.get("ipc_mode") or "private",
            "ulimits": {u["Name"]: u["Hard"] for u in kwargs.get("ulimits") or []},
            "gpus": _gpus(kwargs),
            "mounts": {v["bind"]: source for source, v in (kwargs.get("volumes") or {}).items()},
            "ports": {
                port: f"{address}:{host or '(a free port)'}"
                for port, (address, host) in sorted(ports.items())
            },
            "init": bool(kwargs.get("init")),
        },
        "limits": {
            "deadline_s": _stages(plan.limits.deadline_s),
            "stall_window_s": _stages(plan.limits.stall_window_s),
            # A DEADLINE bundle replays under the strict policy (kit/startup/replay.py): then a stage
            # past its deadline ends the replay; otherwise it is said and followed on.
            "deadlines_decide": str(result.get("verdict")) == "deadline",
        },
        "differences": list(differences),
        "changes": list(plan.changes),
        "notes": [*plan.notes, *([plan.image_note] if plan.image_note else [])],
        "refused": [r.line() for r in plan.refused],
        "no_effect": list(plan.no_effect),
        "extra": [{"title": title, "lines": list(lines)} for title, lines in plan.extra],
    }


def _stages(seconds: Any) -> dict[str, float]:
    from dataclasses import asdict

    return {k: float(v) for k, v in asdict(seconds).items()}


def _command_lines(command: Sequence[str]) -> list[str]:
    """One flag (and its value) per line after the entry point, shell-quoted."""
    lines: list[str] = []
    head: list[str] = []
    rest = list(command)
    while rest and not rest[0].startswith("--"):
        head.append(rest.pop(0))
    lines.append(shlex.join(head))
    i = 0
    while i < len(rest):
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            lines.append("  " + shlex.join(rest[i : i + 2]))
            i += 2
        else:
            lines.append("  " + shlex.quote(rest[i]))
            i += 1
    return lines


def plan_lines(view: Mapping[str, Any], *, trusted: bool = False) -> list[str]:
    """The plan for a terminal, every line printable."""
    image = view["image"]
    container = view["container"]
    out = [
        f"replaying {view['bundle']}: {view['target']}",
        f"  the bundle: {str(view['bundle_verdict']).upper()} in {view['bundle_phase'] or '-'}",
        "what will run:",
        f"  image      {image['ref']}" + (f" ({image['id'][:19]})" if image["id"] else " (id unknown)"),
    ]
    command = _command_lines(view["command"])
    out += [f"  command    {command[0]}", *[f"             {line}" for line in command[1:]]]
    env = [f"{k}={shlex.quote(v)}" for k, v in view["env"].items()]
    out += [f"  env        {env[0] if env else '(none)'}", *[f"             {e}" for e in env[1:]]]
    passed = [
        f"{p['name']} ({'set here' if p['set_here'] else 'not set here'})" for p in view["from_this_machine"]
    ]
    out.append(f"  from this machine: {', '.join(passed) or 'nothing'}")
    if view["not_passed"]:
        names = ", ".join(view["not_passed"])
        out.append(f"  not passed (secret names in the bundle): {names}; --pass-env NAME passes one")
    ulimits = ", ".join(f"{k}={v}" for k, v in container["ulimits"].items()) or "-"
    mounts = ", ".join(f"{source} -> {where}" for where, source in container["mounts"].items()) or "-"
    ports = ", ".join(f"{host} -> {port}" for port, host in container["ports"].items()) or "-"
    out += [
        f"  caps       {', '.join(container['cap_add']) or '-'}",
        f"  ipc        {container['ipc_mode']}; shm {container['shm_size'] or 'default'}",
        f"  ulimits    {ulimits}",
        f"  GPUs       {container['gpus']}",
        f"  mounts     {mounts}",
        f"  ports      {ports}",
    ]
    limits = view["limits"]
    stalls = limits["stall_window_s"]
    out.append("  stall windows " + ", ".join(f"{k} {v:g} s" for k, v in stalls.items()))
    deadlines = ", ".join(f"{k} {v:g} s" for k, v in limits["deadline_s"].items())
    if limits.get("deadlines_decide"):
        out.append(f"  deadlines  {deadlines}: they decide the verdict (the bundle ended at one: DEADLINE)")
    else:
        out.append(f"  deadlines  {deadlines}: said when passed, not a verdict (HUNG and CRASHED decide)")
    out += [f"  note: {note}" for note in view["notes"]]
    out.append(f"differences that matter, bundle -> here: {len(view['differences']) or 'none'}")
    out += [f"  {line}" for line in view["differences"]]
    out += [f"--set: {change}" for change in view["changes"]]
    for section in view["extra"]:
        out.append(f"{section['title']}:")
        out += [f"  {line}" for line in section["lines"]]
    if view["refused"]:
        head = "started anyway (--trust-bundle)" if trusted else "not started without --trust-bundle"
        out.append(f"refused by the trust policy ({head}):")
        out += [f"  {line}" for line in view["refused"]]
    return [shown(line, 2000) for line in out]
