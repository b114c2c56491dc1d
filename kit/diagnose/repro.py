"""`kit repro BUNDLE`: start what a bundle recorded, the same way, and say whether it happened again.

    plan = plan_replay(bundle, sets)     the launch to start: the bundle's image (by digest or id,
                                         else the same manifest's tag), argv, environment, container
                                         settings and phase limits, with --set changes on top
    differences(bundle, plan)            fingerprint differences that matter, bundle vs here
    run_replay(plan, ...)                kit up's own start/watch/clean-up, then `compare`
    compare(bundle result, replay)       verdict, phase and stuck ranks: reproduced or not

`--set` works as in `kit up`: `env.NAME=VALUE` sets a variable of the replay (`env.NAME=none`
removes it); any other key is applied to the catalog's launch of the target, and what it changes
there (argv, environment, timing) is applied to the bundle's launch. Secret variables the launch
had (HF_TOKEN, an API key's variable) are read from this machine's environment by name; a masked
secret flag value (`--api-key`) is replaced by a fresh random one (start-up does not depend on it).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.catalog._overrides import RESET, parse_override
from kit.diagnose import facts
from kit.diagnose import fingerprint as fp
from kit.diagnose.bundle import Bundle
from kit.diagnose.redact import MASK
from kit.errors import EnvironmentProblem, InputError
from kit.spec import LaunchSpec

_STUCK = {"hung", "deadline", "stalled"}


@dataclass(frozen=True)
class ReplayPlan:
    bundle: Bundle
    spec: LaunchSpec
    limits: Any  # kit.logs.PhaseLimits
    image_ref: str
    image_tag: str
    image_note: str | None
    changes: tuple[str, ...] = ()
    """What --set changed in the launch, one line each."""
    notes: tuple[str, ...] = ()
    """Facts about the replay a person should see (missing secrets, a catalog launch stood in)."""
    first_token: bool = False
    sets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    what: str
    bundle: str
    replay: str
    same: bool


@dataclass(frozen=True)
class ReproResult:
    bundle: str
    reproduced: bool
    compared: tuple[Comparison, ...]
    differences: tuple[str, ...]
    changes: tuple[str, ...]
    result: Any  # kit.startup.result.UpResult
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        return int(self.result.exit_code)


# -- the image -----------------------------------------------------------------------------------


def find_image(
    image: Mapping[str, Any], *, image_id_of: Callable[[str], str | None]
) -> tuple[str, str | None]:
    """(the reference to start, a note when it is not the bundle's exact image).

    The bundle's image by its tag when the tag still names it, else by registry digest or image id;
    else the same manifest's tag (a rebuild of the same pins: its lock is compared before start);
    else EnvironmentProblem with the exact build command (exit 3). `image_id_of(ref)` is the local
    image id a reference names, or None when there is no such image here.
    """
    name = fp.known(image.get("name"))
    tag = fp.known(image.get("tag"))
    image_id = fp.known(image.get("id"))
    local_tag_id = image_id_of(tag) if tag else None
    if image_id and local_tag_id == image_id:
        return tag, None
    for ref in (fp.known(image.get("digest")), image_id):
        if ref and image_id_of(ref):
            return ref, None
    if local_tag_id:
        if image_id:
            return (
                tag,
                f"the bundle's image {image_id[:19]} is not here; using {tag}, built from the same manifest",
            )
        return tag, f"the bundle does not say which build of {tag} ran; using the one here"
    build = f"kit image build {name}" if name else "kit image build NAME (the bundle names no image manifest)"
    raise EnvironmentProblem(
        f"image {tag or name or 'unknown'} ({(image_id or 'id unknown')[:19]}) is not here",
        hint=f"run '{build}'",
    )


# -- the launch ----------------------------------------------------------------------------------


def _split_sets(sets: Sequence[str]) -> tuple[dict[str, str | None], list[str]]:
    """(env.NAME=VALUE sets: NAME -> VALUE or None to remove, the other sets)."""
    env: dict[str, str | None] = {}
    other: list[str] = []
    for item in sets:
        parts, value = parse_override(item)
        if parts[0] == "env" and len(parts) == 2:
            env[parts[1]] = None if value.lower() == RESET else value
        else:
            other.append(item)
    return env, other


def _groups(argv: Sequence[str]) -> list[tuple[str | None, list[str]]]:
    """[python, -m, x, --tp, 2, --flag] -> [(None, [python, -m, x]), (--tp, [2]), (--flag, [])]."""
    groups: list[tuple[str | None, list[str]]] = [(None, [])]
    for arg in argv:
        if arg.startswith("--"):
            groups.append((arg, []))
        else:
            groups[-1][1].append(arg)
    return groups


def patch_argv(argv: Sequence[str], base: Sequence[str], changed: Sequence[str]) -> list[str]:
    """What --set changed from the catalog's BASE argv to CHANGED, applied to the bundle's ARGV flag by
    flag (values replaced, flags added or removed), so flags only the bundle has are kept."""
    before, after = dict(_groups(base)[1:]), dict(_groups(changed)[1:])
    out: list[tuple[str | None, list[str]]] = []
    for flag, values in _groups(argv):
        if flag is not None and flag in before and flag not in after:
            continue  # removed by the change
        if flag is not None and flag in after and before.get(flag) != after[flag]:
            values = after[flag]
        out.append((flag, values))
    present = {flag for flag, _ in out}
    out += [(flag, values) for flag, values in after.items() if flag not in before and flag not in present]
    return [token for flag, values in out for token in ([flag] if flag else []) + values]


def _list(value: Any, what: str, bundle: Bundle) -> list:
    if not isinstance(value, list):
        raise InputError(str(bundle.path), f"fingerprint.json: {what} is not a list", "make the bundle again")
    return value


def plan_replay(
    bundle: Bundle,
    sets: Sequence[str] = (),
    *,
    image_id_of: Callable[[str], str | None],
    environ: Mapping[str, str] = os.environ,
) -> ReplayPlan:
    """The launch a replay starts, from the bundle and --set; reads only the catalog and image list."""
    from kit.launch import resolve
    from kit.startup.limits import limits_from_spec

    finger = bundle.fingerprint
    launch = finger.get("launch")
    result = bundle.result
    if not isinstance(launch, dict):
        raise InputError(
            str(bundle.path), "fingerprint.json has no launch to replay", "make the bundle again"
        )
    target = fp.known(launch.get("target")) or result.get("target")
    if not isinstance(target, str):
        raise InputError(str(bundle.path), "the bundle names no target", "make the bundle again")
    image = finger.get("image") if isinstance(finger.get("image"), dict) else {}
    image_name = fp.known(image.get("name"))
    notes: list[str] = []
    if image_name is None:
        notes.append(f"the bundle names no image; replaying on {target}'s own image")
    recorded = fp.known(launch.get("overrides"))
    overrides = [str(o) for o in recorded] if isinstance(recorded, list) else []
    env_sets, other_sets = _split_sets(sets)
    base = resolve(target, image=image_name, overrides=overrides)
    changed = resolve(target, image=image_name, overrides=[*overrides, *other_sets]) if other_sets else base
    if not image:
        image = {"name": base.image, "tag": base.image_ref}
    elif image_name is None:
        image = {**image, "name": base.image, "tag": base.image_ref}
    image_ref, image_note = find_image(image, image_id_of=image_id_of)

    argv = fp.known(launch.get("argv"))
    if argv is None:
        argv = list(base.argv)
        notes.append(f"the bundle's launch is unknown ({launch.get('argv_from')}); replaying the catalog's")
    argv = [str(a) for a in _list(argv, "launch.argv", bundle)]
    changes: list[str] = []
    if changed.argv != base.argv:
        patched = patch_argv(argv, base.argv, changed.argv)
        changes.append(f"argv: {fp.argv_change(argv, patched)}")
        argv = patched
    masked_flags = [argv[i - 1] for i, a in enumerate(argv) if a == MASK and i > 0]
    argv = [
        secrets.token_urlsafe(24) if a == MASK else a.replace(MASK, secrets.token_urlsafe(24)) for a in argv
    ]
    for flag in masked_flags:
        notes.append(f"{flag}: the bundle's value was masked; the replay uses a fresh random one")

    env_recorded = fp.known(launch.get("env"))
    env: dict[str, str] = dict(env_recorded) if isinstance(env_recorded, dict) else dict(base.env)
    if not isinstance(env_recorded, dict):
        notes.append("the bundle's environment is unknown; replaying the catalog's")
    secret_names = [str(s) for s in (launch.get("secrets") or []) if isinstance(s, str)]
    env = {k: str(v) for k, v in env.items() if v != MASK and k not in secret_names}
    for key in sorted(set(base.env) | set(changed.env)):
        if base.env.get(key) != changed.env.get(key):
            before = env.get(key)
            if key in changed.env:
                env[key] = changed.env[key]
            else:
                env.pop(key, None)
            changes.append(
                f"env {key}: {before if before is not None else '(unset)'} -> {env.get(key, '(unset)')}"
            )
    for key, value in env_sets.items():
        before = env.get(key)
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
        if before != env.get(key):
            changes.append(
                f"env {key}: {before if before is not None else '(unset)'} -> {env.get(key, '(unset)')}"
            )
    missing = [k for k in secret_names if not environ.get(k)]
    for name in missing:
        notes.append(f"{name}: set in the bundle's launch, not set here (the replay runs without it)")

    limits_data = fp.known(launch.get("limits"))
    if changed.timing != base.timing or not isinstance(limits_data, dict):
        limits = limits_from_spec(changed)
        if changed.timing != base.timing:
            changes.append("phase limits: from the catalog with the --set changes")
    else:
        limits = fp.limits_from_data(limits_data)

    container = fp.known(launch.get("container"))
    container = container if isinstance(container, dict) else {}
    update: dict[str, Any] = {
        "argv": tuple(argv),
        "env": env,
        "pass_env": tuple(dict.fromkeys([*secret_names, *changed.pass_env])),
        "image_ref": image_ref,
        "notes": tuple(f"override: {o}" for o in [*overrides, *sets]),
    }
    if container:
        shm = container.get("shm_size")
        update["shm_size"] = str(shm) if isinstance(shm, int) and shm > 0 else changed.shm_size
        update["ipc_host"] = container.get("ipc_mode") == "host"
        if isinstance(container.get("ulimits"), dict):
            update["ulimits"] = {str(k): int(v) for k, v in container["ulimits"].items() if v is not None}
        if isinstance(container.get("cap_add"), list):
            update["cap_add"] = tuple(str(c) for c in container["cap_add"])
    spec = changed.model_copy(update=update)
    return ReplayPlan(
        bundle=bundle,
        spec=spec,
        limits=limits,
        image_ref=image_ref,
        image_tag=changed.image_ref,
        image_note=image_note,
        changes=tuple(changes),
        notes=tuple(notes),
        first_token=result.get("verdict") == "failed",
        sets=tuple(sets),
    )


# -- before it starts: what differs here ---------------------------------------------------------


def here_fingerprint(plan: ReplayPlan, environ: Mapping[str, str] = os.environ) -> dict:
    """This machine and the launch about to start, in the bundle's shape (for the diff)."""
    image, versions, _ = facts.image_facts_of_ref(plan.image_ref, plan.spec.image, tag=plan.image_tag)
    present = {k: "<set here>" for k in plan.spec.pass_env if environ.get(k)}
    return {
        "format": fp.FORMAT,
        "kit": facts.kit_section(),
        "image": image,
        "versions": versions,
        "host": facts.host_facts(),
        "nvidia": facts.nvidia_facts(),
        "launch": facts.launch_of_spec(plan.spec, plan.limits, present, "kit repro"),
    }


def differences(plan: ReplayPlan, here: Mapping[str, Any]) -> list[str]:
    """Each fingerprint difference that matters (suspects and the image), bundle vs here."""
    lines = []
    for d in fp.diff(plan.bundle.fingerprint, here).suspects:
        if d.key.startswith("launch.") and d.group not in ("environment", "argv", "overrides"):
            continue
        lines.append(d.describe("bundle", "here"))
    return lines


# -- after: did it happen again ------------------------------------------------------------------


def _verdict_class(verdict: str | None) -> str:
    return "stuck" if verdict in _STUCK else str(verdict)


def compare(
    bundle_result: Mapping[str, Any], replay: Mapping[str, Any]
) -> tuple[bool, tuple[Comparison, ...]]:
    """Verdict (HUNG, DEADLINE and a log's STALLED are one kind: start-up did not finish), phase and
    stuck ranks of the bundle against the replay's."""
    bv, rv = str(bundle_result.get("verdict")), str(replay.get("verdict"))
    rows = [
        Comparison("verdict", bv.upper(), rv.upper(), _verdict_class(bv) == _verdict_class(rv)),
        Comparison(
            "phase",
            str(bundle_result.get("phase") or "-"),
            str(replay.get("phase") or "-"),
            bundle_result.get("phase") == replay.get("phase"),
        ),
    ]
    b_stuck = sorted(bundle_result.get("stuck_ranks") or [])
    r_stuck = sorted(replay.get("stuck_ranks") or [])
    rows.append(
        Comparison("stuck ranks", ", ".join(b_stuck) or "-", ", ".join(r_stuck) or "-", b_stuck == r_stuck)
    )
    return all(r.same for r in rows), tuple(rows)


def run_replay(
    plan: ReplayPlan,
    differences_found: Sequence[str],
    *,
    keep: bool = False,
    on_progress: Callable | None = None,
    on_start: Callable | None = None,
) -> ReproResult:
    """Start the planned launch with kit up's own code (same clean-up on every path) and compare."""
    from kit.output import jsonable
    from kit.startup.up import run_up

    result = run_up(
        plan.spec,
        plan.limits,
        keep=keep,
        on_progress=on_progress,
        on_start=on_start,
        first_token=plan.first_token,
    )
    same, rows = compare(plan.bundle.result, jsonable(result))
    return ReproResult(
        bundle=str(plan.bundle.path),
        reproduced=same and result.verdict != "interrupted",
        compared=rows,
        differences=tuple(differences_found),
        changes=plan.changes,
        result=result,
        notes=plan.notes + ((plan.image_note,) if plan.image_note else ()),
    )
