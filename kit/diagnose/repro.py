"""`kit repro BUNDLE`: start what a bundle recorded, the same way, and say whether it happened again.

    plan = plan_replay(bundle, sets, ...)   the launch to start: the bundle's image (by digest or
                                            id, else the same manifest's tag), argv, environment,
                                            container settings and phase limits, --set on top
                                            (kit/diagnose/replay_launch.py), the secret names passed
                                            from this machine, and what the trust policy refuses
                                            (kit/diagnose/trust.py): plan.refused
    plan_view(plan)                         what will run, as data and as lines to print
                                            (kit/diagnose/replay_plan.py)
    differences(plan, here)                 fingerprint differences that matter, bundle vs here
    run_replay(plan, ...)                   kit up's own start/watch/clean-up, then `compare`
                                            (kit/startup/replay.py: start-up sits above this)
    compare(bundle result, replay)          verdict, phase and stuck ranks: reproduced or not

A bundle is untrusted input. The plan is shown before anything starts, and `kit repro` starts it
only when `plan.refused` is empty (an SGLang launch as the kit renders one) or the user says
`--trust-bundle`. Secret variables the bundle's launch had are passed from this machine only where
the catalog target passes them itself (HF_TOKEN for a gated model) or the user names them
(`--pass-env NAME`); a masked secret flag value (`--api-key`) is replaced by a fresh random one
(start-up does not depend on it).

Others extend the plan with sections of their own: `ReplayPlan.extra` holds (title, lines) pairs
that `plan_view` prints after the standard ones (e.g. a version-difference section).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.diagnose import fingerprint as fp
from kit.diagnose import trust
from kit.diagnose.bundle import Bundle
from kit.diagnose.fact_sources import HereFacts
from kit.diagnose.redact import MASK
from kit.diagnose.replay_launch import (
    Recorded,
    no_effect,
    replay_launch,
    shm_bytes,
    size_text,
    split_sets,
)
from kit.errors import EnvironmentProblem, InputError, KitError
from kit.spec import LaunchSpec

_STUCK = {"hung", "deadline", "stalled"}  # did not finish ("stalled": old bundles' word for hung)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ReplayPlan:
    bundle: Bundle
    spec: LaunchSpec
    limits: Any  # kit.logs.PhaseLimits
    image_ref: str
    image_tag: str
    image_note: str | None
    image_id: str | None = None
    """The local id of image_ref (what will run)."""
    changes: tuple[str, ...] = ()
    """What --set changed in the launch, one line each."""
    notes: tuple[str, ...] = ()
    """Facts about the replay a person should see (missing secrets, a catalog launch stood in)."""
    first_token: bool = False
    sets: tuple[str, ...] = ()
    refused: tuple[trust.Refusal, ...] = ()
    """What the trust policy does not start without --trust-bundle, one item each."""
    passed: tuple[str, ...] = ()
    """Names of this machine's variables the replay reads (the target's own, and --pass-env)."""
    withheld: tuple[str, ...] = ()
    """The bundle's secret names that are not passed."""
    no_effect: tuple[str, ...] = ()
    """--set items that change nothing in the replay (kit repro exits 2 on them)."""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """More sections for the plan: (title, lines), printed after the standard ones."""


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
    result: Any  # kit.startup.result.UpResult (start-up imports this module, never the reverse)
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


def _list(value: Any, what: str, bundle: Bundle) -> list:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(
            str(bundle.path), f"fingerprint.json: {what} is not a list of strings", "make the bundle again"
        )
    return value


def _env(value: Any, bundle: Bundle) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InputError(
            str(bundle.path), "fingerprint.json: launch.env is not NAME -> text", "make the bundle again"
        )
    return dict(value)


def _settings(container: Mapping[str, Any]) -> dict[str, Any]:
    """The container settings a replay takes from a bundle (trust.check_container vets them first)."""
    shm = container.get("shm_size")
    ulimits = container.get("ulimits")
    caps = container.get("cap_add")
    return {
        "shm_size": _size(shm),
        "ipc_host": container.get("ipc_mode") == "host",
        "ulimits": {str(k): v for k, v in ulimits.items() if type(v) is int}
        if isinstance(ulimits, dict)
        else {},
        "cap_add": tuple(str(c) for c in caps) if isinstance(caps, list) else (),
    }


# Profile keys a bundle's recorded overrides may not set on this machine: the host side of a launch
# (mounts, published address, passed variables, capabilities) comes from launch.container (checked)
# and this kit's catalog, and extra_args would widen the flags the trust policy accepts.
_HOST_KEYS = ("container", "extra_args")


def replayed_overrides(recorded: Any, notes: list[str]) -> list[str]:
    """The bundle's recorded --set overrides a replay applies again; the host's keys are left out."""
    if recorded is None or fp.is_unknown(recorded):
        return []
    if not isinstance(recorded, list) or not all(isinstance(o, str) for o in recorded):
        notes.append("the bundle's recorded overrides are not a list of KEY=VALUE; none are replayed")
        return []
    kept = []
    for item in recorded:
        if item.split("=", 1)[0].strip().split(".")[0] in _HOST_KEYS:
            notes.append(
                f"override {trust.shown(item, 80)}: not replayed (container settings come from the "
                "bundle's launch.container and this machine's catalog)"
            )
        else:
            kept.append(item)
    return kept


def _size(shm: Any) -> int | None:
    try:
        return shm_bytes(shm) if isinstance(shm, (int, str)) and not isinstance(shm, bool) else None
    except Exception:  # docker's parse_bytes on a size it cannot read: check_container named it
        return None


def fresh_api_key() -> str:
    """A random API key for a replay. Hex, never url-safe base64: a value starting with '-' (1 in 64 of
    token_urlsafe's) is read by SGLang's argparse as a flag, so `--api-key -x...` exits 2 at start."""
    return secrets.token_hex(24)


def _fresh_api_keys(argv: list[str], notes: list[str]) -> list[str]:
    """A masked secret flag's value (--api-key <redacted>) becomes a fresh random one."""
    for i, arg in enumerate(argv):
        if MASK in arg:
            flag = argv[i - 1] if arg == MASK and i > 0 else arg.partition("=")[0]
            notes.append(
                f"{trust.shown(flag, 40)}: the bundle's value was masked; the replay uses a fresh random one"
            )
    return [fresh_api_key() if a == MASK else a.replace(MASK, fresh_api_key()) for a in argv]


def plan_replay(
    bundle: Bundle,
    sets: Sequence[str] = (),
    *,
    image_id_of: Callable[[str], str | None],
    image_labels_of: Callable[[str], Mapping[str, str] | None] = lambda ref: None,
    environ: Mapping[str, str] = os.environ,
    pass_env: Sequence[str] = (),
) -> ReplayPlan:
    """The launch a replay starts, from the bundle, --set and --pass-env, with what the trust policy
    refuses in it; reads only the catalog and the image list (image_id_of, image_labels_of)."""
    from kit.diagnose.show import summary_differs
    from kit.images.manifest import load_manifest
    from kit.launch import resolve_full
    from kit.render.docker import run_kwargs
    from kit.runtime import compile_cache

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
    for name in pass_env:
        if not _ENV_NAME.fullmatch(name):
            raise InputError(
                "--pass-env", f"'{trust.shown(name, 40)}' is not a variable name", "e.g. --pass-env HF_TOKEN"
            )
    image = finger.get("image") if isinstance(finger.get("image"), dict) else {}
    image_name = fp.known(image.get("name"))
    if image_name is not None and not isinstance(image_name, str):
        raise InputError(
            str(bundle.path), "fingerprint.json: image.name is not text", "make the bundle again"
        )
    notes: list[str] = []
    if image_name is None:
        notes.append(f"the bundle names no image; replaying on {target}'s own image")
    overrides = replayed_overrides(launch.get("overrides"), notes)
    try:
        base = resolve_full(target, image=image_name, overrides=overrides)
    except InputError as exc:
        raise InputError(
            str(bundle.path), f"fingerprint.json: launch.overrides: {exc.one_line()}", "make the bundle again"
        ) from exc
    if not image:
        image = {"name": base.spec.image, "tag": base.spec.image_ref}
    elif image_name is None:
        image = {**image, "name": base.spec.image, "tag": base.spec.image_ref}
    image_ref, image_note = find_image(image, image_id_of=image_id_of)
    refused: list[trust.Refusal] = []

    # What the bundle ran: its argv (the kit's API-key wrapper taken off), env, secrets, settings.
    argv_recorded = fp.known(launch.get("argv"))
    if argv_recorded is None:
        argv = list(base.spec.argv)
        notes.append(
            f"the bundle's launch is unknown ({trust.shown(launch.get('argv_from'))}); "
            "replaying the catalog's"
        )
    else:
        argv = [str(a) for a in _list(argv_recorded, "launch.argv", bundle)]
    argv, key_variable = trust.unwrap_api_key(argv)
    if key_variable:
        argv += ["--api-key", fresh_api_key()]
        notes.append(
            f"the bundle's server read its API key from {key_variable} through the kit's wrapper; "
            "the replay passes a fresh random key instead"
        )
    argv = _fresh_api_keys(argv, notes)
    env_recorded = fp.known(launch.get("env"))
    if env_recorded is None:
        env = dict(base.spec.env)
        notes.append("the bundle's environment is unknown; replaying the catalog's")
    else:
        env = _env(env_recorded, bundle)
    listed = launch.get("secrets") or []
    secret_names = [str(s) for s in (listed if isinstance(listed, list) else []) if isinstance(s, str)]
    secret_names += [k for k, v in env.items() if v == MASK and k not in secret_names]
    secret_names += [key_variable] if key_variable and key_variable not in secret_names else []
    env = {k: v for k, v in env.items() if v != MASK and k not in secret_names}
    container = fp.known(launch.get("container"))
    container = container if isinstance(container, dict) else {}
    refused += trust.check_container(container)
    limits_data = fp.known(launch.get("limits"))

    recorded = Recorded(
        argv=tuple(argv),
        env=env,
        limits=limits_data if isinstance(limits_data, dict) else None,
        settings=_settings(container) if container else None,
    )
    replay = replay_launch(recorded, sets, target=target, image=image_name, overrides=overrides)
    silent = tuple(no_effect(recorded, sets, target=target, image=image_name, overrides=overrides))
    limits = fp.limits_from_data(replay.limits)
    resolved = replay.resolved
    changed = resolved.spec

    # Secrets by consent: the target's own names and the ones named on the command line.
    agreed = trust.consent(secret_names, changed.pass_env, pass_env)
    for name in agreed.passed:
        if not environ.get(name):
            notes.append(f"{name}: passed by name, not set here (the replay runs without it)")
    settings = replay.settings
    has_key = any(a == "--api-key" or a.startswith("--api-key=") for a in replay.argv)
    spec = changed.model_copy(
        update={
            "argv": replay.argv,
            "env": replay.env,
            "pass_env": agreed.passed,
            "image_ref": image_ref,
            "api_key_env": None if has_key else changed.api_key_env,
            "shm_size": size_text(settings.get("shm_size")),
            "ipc_host": bool(settings.get("ipc_host")),
            "ulimits": dict(settings.get("ulimits") or {}),
            "cap_add": tuple(settings.get("cap_add") or ()),
            "notes": tuple(f"override: {o}" for o in [*overrides, *sets]),
        }
    )

    # What the trust policy refuses in the launch that is about to start.
    mine = set(split_sets(sets)[0])
    refused += trust.check_argv(spec.argv, trust.known_flags(resolved.dialect, resolved.profile.extra_args))
    refused += trust.check_env(
        {k: v for k, v in spec.env.items() if k not in mine}, kit_values=compile_cache.ENV
    )
    kwargs = run_kwargs(spec, diagnose=True)
    volumes = kwargs.get("volumes") or {}
    refused += trust.check_mounts({v["bind"]: source for source, v in volumes.items()})
    manifest = load_manifest(spec.image)
    image_tag = image.get("tag") if isinstance(image.get("tag"), str) else None
    if image_ref == image_tag and image_tag != manifest.tag:
        refused.append(
            trust.Refusal(
                "image", f"{trust.shown(image_tag, 80)} is not the kit's tag of {spec.image} ({manifest.tag})"
            )
        )
    else:
        refused += trust.check_image(
            name=spec.image, manifest_tag=manifest.tag, ref=image_ref, labels=image_labels_of(image_ref)
        )
    edited = summary_differs(bundle)
    if edited:
        refused.append(
            trust.Refusal(
                "summary.md",
                f"says what fingerprint.json does not (a hand-edited bundle?): {edited[0]}"
                + (f" (and {len(edited) - 1} more lines)" if len(edited) > 1 else ""),
            )
        )
    return ReplayPlan(
        bundle=bundle,
        spec=spec,
        limits=limits,
        image_ref=image_ref,
        image_tag=changed.image_ref,
        image_note=image_note,
        image_id=image_id_of(image_ref),
        changes=replay.changes,
        notes=tuple(notes),
        first_token=result.get("verdict") == "failed",
        sets=tuple(sets),
        refused=tuple(refused),
        passed=agreed.passed,
        withheld=agreed.withheld,
        no_effect=silent,
    )


# -- before it starts: what differs here ---------------------------------------------------------


def here_fingerprint(plan: ReplayPlan, environ: Mapping[str, str] = os.environ) -> dict:
    """This machine and the launch about to start, in the bundle's shape (for the diff)."""
    present = {k: "<set here>" for k in plan.spec.pass_env if environ.get(k)}
    here = HereFacts(plan.spec, plan.image_ref, tag=plan.image_tag, present=present)
    return fp.build(here, plan.limits).fingerprint


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
    """Verdict (HUNG and DEADLINE are one kind: start-up did not finish), phase and
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


# -- the CLI's gate --------------------------------------------------------------------------------


def refuse(plan: ReplayPlan, *, trusted: bool) -> None:
    """InputError (exit 2, before any container starts) for --set items that change nothing, and
    for what the trust policy refuses unless TRUSTED; one line naming each item."""
    if plan.no_effect:
        raise InputError(
            "--set",
            f"{', '.join(trust.shown(s, 80) for s in plan.no_effect)} changes nothing in the replay's "
            "argv, environment, limits or container settings (the bundle already has it, or the key "
            "is not part of this launch)",
            "check the key and the value; without it the replay is the bundle's own launch",
        )
    if plan.refused and not trusted:
        items = "; ".join(r.line() for r in plan.refused)
        raise InputError(
            str(plan.bundle.path),
            f"not an SGLang launch the kit starts on its own ({len(plan.refused)} refused): {items}",
            "read the plan above; --trust-bundle starts it as it is",
        )


def local_image_labels(ref: str) -> dict[str, str] | None:
    """The labels of the local image REF names, or None when there is none."""
    from docker.errors import ImageNotFound, NotFound

    from kit.runtime.engine import client, translated

    with translated(f"reading the labels of image {ref}"):
        try:
            image = client().images.get(ref)
        except (ImageNotFound, NotFound):
            return None
    return dict((image.attrs.get("Config") or {}).get("Labels") or {})


def lock_differences(
    bundle_lock: str | None,
    local_lock: str | None,
    bases: tuple[str | None, str | None] | None = None,
) -> tuple[str, tuple[str, ...]]:
    """The plan's lock section (pure): the bundle's image lock against the local image's, every
    difference named, those that decide a start-up first (torch, NCCL, CUDA wheels, SGLang,
    flashinfer, transformers); with `bases` (the bundle's, here), whether the local image matches
    both the lock's digest and the base's first. Bundle text is made printable and bounded."""
    from kit.images.image_lock import lock_digest
    from kit.images.lock import diff_locks, parse_lock, ranked_lines

    title = "image lock, bundle -> here"
    if bundle_lock is None or local_lock is None:
        missing = (
            "the bundle carries no lock"
            if bundle_lock is None
            else "the local image's lock could not be read"
        )
        return title, (f"not compared: {missing}",)
    diff = diff_locks(parse_lock(bundle_lock), parse_lock(local_lock), a_name="bundle", b_name="here")
    head = f"bundle {lock_digest(bundle_lock)}, here {lock_digest(local_lock)}: " + (
        "the same packages"
        if diff.same
        else f"{len(diff.changed) + len(diff.added) + len(diff.removed)} differences"
    )
    match = () if bases is None else (_image_match(bundle_lock, local_lock, *bases),)
    return title, (*match, head, *(f"  {trust.shown(line)}" for line in ranked_lines(diff)))


def _image_match(bundle_lock: str, local_lock: str, bundle_base: str | None, local_base: str | None) -> str:
    """One line: does the local image match the bundle's lock digest and base digest?"""
    from kit.images.image_lock import lock_digest

    same_lock = lock_digest(bundle_lock) == lock_digest(local_lock)
    if bundle_base is None or local_base is None:
        said = "the bundle" if bundle_base is None else "the local image"
        base = f"base not compared ({said} records none)"
    elif bundle_base == local_base:
        base = f"the same base ({trust.shown(local_base)})"
    else:
        base = f"another base (bundle {trust.shown(bundle_base)}, here {trust.shown(local_base)})"
    verdict = (
        "matches" if same_lock and bundle_base is not None and bundle_base == local_base else "does NOT match"
    )
    lock = "the same lock digest" if same_lock else "another lock digest"
    return f"the local image {verdict} the bundle's: {lock}, {base}"


def lock_section(plan: ReplayPlan) -> tuple[str, tuple[str, ...]]:
    """lock_differences for a plan: the bundle's lock.txt and the image the replay starts."""
    from kit.images.inspect import read_file
    from kit.images.lock import LOCK_PATH

    try:
        local = read_file(plan.image_ref, LOCK_PATH).decode("utf-8", "replace")
        local_base = (local_image_labels(plan.image_ref) or {}).get("io.kit.base")
    except KitError:  # no image here, no engine: the section says it was not compared
        local, local_base = None, None
    bundle_lock = plan.bundle.text("lock.txt") if "lock.txt" in plan.bundle.members else None
    image = plan.bundle.fingerprint.get("image")
    bundle_base = image.get("base") if isinstance(image, dict) else None
    bundle_base = bundle_base if isinstance(bundle_base, str) else None
    return lock_differences(bundle_lock, local, (bundle_base, local_base))
