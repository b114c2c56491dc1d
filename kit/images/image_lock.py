"""An image's lock: images/NAME.lock, the full closure the image installs, every file with its hash.

    kit image lock NAME            re-resolve from the manifest (uv pip compile), write the lock
    kit image lock NAME --check    does the lock still satisfy the manifest? (pure: no network)

The manifest's pins are the intent; the lock is what the Dockerfile installs (`pip install
--require-hashes --no-deps`: nothing is resolved at build time). uv resolves for the image's platform
(linux x86_64 at the base's glibc, the image's Python, wheels only) exactly the requirements the
build used to resolve itself: torch (+ torchvision), sglang and the GPU pins, extra_pip and the image's
pip. The NCCL and force_pip pins, which SGLang's own install forces over torch's, are uv overrides,
so the closure holds them consistently; a CPU image's sglang (installed without its CUDA-only
dependencies) is locked alone with --no-deps. The CUDA wheels that carry the toolkit's own version
are held to the manifest's CUDA minor (resolve.toml [lock] cuda_components).

Pure: lock_ask, uv_args, parse_entries, merge_blocks, lock_text, check_lock, lock_changes.
Adapters: make_lock (probes the indexes, runs uv); the lock is written with kit.files.write_atomic.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement

from kit.errors import EnvironmentProblem, InputError
from kit.files import write_atomic
from kit.images.lock import LockDiff, diff_locks, normalize, parse_lock
from kit.images.manifest import LOCAL_BASE, LOCK_SUFFIX, Manifest, lock_path
from kit.images.resolve import (
    _data,
    cuda_constraints,
    distribution,
    find_local_wheel,
    python_tag,
    python_version,
    requirements_for,
)
from kit.images.system_lock import SystemLock, apt_names, system_of, with_system

_HEADER_KEY = re.compile(r"^# kit-lock (?P<key>[a-z-]+): (?P<value>.*)$")
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s\\;]+)")
_HASH = re.compile(r"--hash=(?P<hash>sha256:[0-9a-f]{64})")


def lock_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LockAsk:
    """What uv is asked for one image (all from the manifest and resolve.toml: no machine state)."""

    image: str
    together: tuple[str, ...]
    """Resolved as one set."""
    no_deps: tuple[str, ...]
    """Locked alone, without their dependencies (the CPU image's sglang)."""
    overrides: tuple[str, ...]
    """Forced over what the packages ask (NCCL, force_pip), as SGLang's install forces them."""
    constraints: tuple[str, ...]
    python: str
    platform: str
    """uv's --python-platform: x86_64-manylinux_2_36 for a glibc 2.36 base."""
    index: str
    extra_indexes: tuple[str, ...]

    @property
    def pins(self) -> tuple[str, ...]:
        return self.together + self.no_deps + self.overrides


def lock_ask(manifest: Manifest) -> LockAsk:
    together, forced = requirements_for(manifest)
    no_deps: tuple[str, ...] = ()
    if manifest.flavor == "cpu":  # sglang without its CUDA-only requirements, as the image always had it
        sglang = f"sglang=={manifest.pins.sglang}"
        together, no_deps = tuple(r for r in together if r != sglang), (sglang,)
    glibc = _data()["glibc"][distribution(manifest.base.image)]
    return LockAsk(
        image=manifest.name,
        together=(*together, f"pip=={_data()['lock']['image_pip']}"),
        no_deps=no_deps,
        overrides=forced,
        constraints=cuda_constraints(manifest),
        python=python_version(manifest),
        platform="x86_64-manylinux_" + glibc.replace(".", "_"),
        index=_data()["pip"]["index"],
        extra_indexes=(manifest.pins.torch_index,) if manifest.pins.torch_index else (),
    )


def uv_args(
    ask: LockAsk,
    requirements: str,
    *,
    extra_indexes: Sequence[str],
    find_links: Sequence[Path] = (),
    no_deps: bool = False,
    overrides: str | None = None,
    constraints: str | None = None,
) -> list[str]:
    """`uv pip compile` for the image's platform; uv's own config files are ignored (--no-config)."""
    args = ["pip", "compile", "--no-config", "--quiet", "--generate-hashes", "--no-header"]
    args += ["--only-binary", ":all:", "--python-platform", ask.platform, "--python-version", ask.python]
    args += ["--index-url", ask.index]
    for url in extra_indexes:
        args += ["--extra-index-url", url]
    if extra_indexes:  # pip (the build's installer) takes the best version across indexes; so does this
        args += ["--index-strategy", "unsafe-best-match"]
    for folder in find_links:
        args += ["--find-links", str(folder)]
    if no_deps:
        args.append("--no-deps")
    if overrides:
        args += ["--override", overrides]
    if constraints:
        args += ["--constraint", constraints]
    return [*args, requirements]


# -- the lock's text -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    name: str
    version: str
    hashes: tuple[str, ...]


def parse_entries(text: str) -> dict[str, Entry]:
    """A hashed requirements file -> {normalized name: Entry}."""
    entries: dict[str, Entry] = {}
    current: str | None = None
    for line in text.splitlines():
        if match := _ENTRY.match(line):
            current = normalize(match["name"])
            entries[current] = Entry(match["name"], match["version"], ())
        elif not line.startswith((" ", "\t")):
            current = None
        if current is not None:
            found = tuple(_HASH.findall(line))
            if found:
                old = entries[current]
                entries[current] = Entry(old.name, old.version, old.hashes + found)
    return entries


def header(text: str) -> dict[str, str]:
    return {m["key"]: m["value"] for line in text.splitlines() if (m := _HEADER_KEY.match(line))}


def merge_blocks(*outputs: str) -> str:
    """uv outputs (one entry line, then its hash and 'via' lines) -> one text sorted by name."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for text in outputs:
        for line in text.splitlines():
            if match := _ENTRY.match(line):
                current = blocks.setdefault(normalize(match["name"]), [])
                if current:  # the same package from two compiles: keep the first
                    current = None
                    continue
            if current is not None and line.strip():
                current.append(line)
    return "\n".join("\n".join(blocks[k]) for k in sorted(blocks)) + "\n"


def lock_text(ask: LockAsk, body: str, *, uv_version: str, notes: Sequence[str] = ()) -> str:
    lines = [
        f"# images/{ask.image}{LOCK_SUFFIX}: every package kit/sglang:{ask.image} installs, each file with",
        "# its hash (the Dockerfile: pip install --require-hashes --no-deps). Written by",
        f"# `kit image lock {ask.image}` from images/{ask.image}.toml with {uv_version}; edit the manifest,",
        "# then relock. `kit image lock NAME --check` holds this file to the manifest's pins.",
        f"# kit-lock python: {ask.python}",
        f"# kit-lock platform: {ask.platform}",
        f"# kit-lock index: {ask.index}",
        f"# kit-lock extra-index: {' '.join(ask.extra_indexes) or '-'}",
        f"# kit-lock no-deps: {' '.join(ask.no_deps) or '-'}",
        f"# kit-lock overrides: {' '.join(ask.overrides) or '-'}",
        f"# kit-lock constraints: {' '.join(ask.constraints) or '-'}",
        *(f"# note: {n}" for n in notes),
    ]
    return "\n".join(lines) + "\n" + body


# -- the check (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    package: str
    """The package the problem is about, or the header key ('platform', 'python', ...)."""
    detail: str


def _holds(requirement: str, entries: dict[str, Entry]) -> Problem | None:
    try:
        req = Requirement(requirement)
    except InvalidRequirement:
        return Problem(requirement, "the manifest's requirement does not parse")
    entry = entries.get(normalize(req.name))
    if entry is None:
        return Problem(req.name, f"the manifest asks for {requirement}; the lock has no {req.name}")
    if not req.specifier.contains(entry.version, prereleases=True):
        return Problem(req.name, f"the manifest pins {req.specifier}; the lock has {entry.version}")
    return None


def check_lock(manifest: Manifest, text: str) -> list[Problem]:
    """Every way the lock no longer satisfies the manifest: a pin, the platform, a CUDA wheel, a hash."""
    ask = lock_ask(manifest)
    problems: list[Problem] = []
    said = header(text)
    wanted = {
        "python": ask.python,
        "platform": ask.platform,
        "index": ask.index,
        "extra-index": " ".join(ask.extra_indexes) or "-",
        "no-deps": " ".join(ask.no_deps) or "-",
        "overrides": " ".join(ask.overrides) or "-",
        "constraints": " ".join(ask.constraints) or "-",
    }
    for key, value in wanted.items():
        if said.get(key) != value:
            problems.append(
                Problem(
                    key,
                    f"the lock was made for {said.get(key, 'nothing')!r}, the manifest asks for {value!r}",
                )
            )
    entries = parse_entries(text)
    for requirement in (*ask.pins, *ask.constraints):
        problem = _holds(requirement, entries)
        if problem and not (requirement in ask.constraints and "has no" in problem.detail):
            problems.append(problem)
    problems += [Problem(e.name, "no hash") for e in entries.values() if not e.hashes]
    if not entries:
        problems.append(Problem("(lock)", "no package lines"))
    return problems + _system_problems(manifest, system_of(text))


def _system_problems(manifest: Manifest, system: SystemLock) -> list[Problem]:
    """The system part, where the lock has one: made on the manifest's base, holding every package
    the manifest names (a manifest edited without `kit image lock NAME --system`)."""
    if system.base is None and not system.packages:
        return []
    problems = []
    image, digest = manifest.base.image, manifest.base.digest
    named = f"{image}@{digest}" if digest and digest != LOCAL_BASE else None
    if named and system.base != named:
        problems.append(Problem("base", f"the lock was made on {system.base}, the manifest names {named}"))
    elif not named and not (system.base or "").startswith(f"{image} "):
        problems.append(Problem("base", f"the lock was made on {system.base}, the manifest names {image}"))
    problems += [
        Problem(name, f"the manifest installs {name}; the lock's system packages do not hold it")
        for name in apt_names(manifest)
        if name not in system.packages
    ]
    return problems


def lock_changes(old_text: str | None, new_text: str) -> LockDiff:
    return diff_locks(parse_lock(old_text or ""), parse_lock(new_text), a_name="old lock", b_name="new lock")


# -- adapters --------------------------------------------------------------------------------------

_UV_NETWORK = re.compile(
    r"Failed to fetch|error sending request|dns error|Could not connect|timed out|Connection refused|"
    r"failed to lookup address|tcp connect error|Network unreachable",
    re.IGNORECASE,
)


def uv_binary() -> str:
    """uv from the kit's environment (the dev extra installs it), else the PATH's."""
    import shutil

    here = Path(sys.executable).with_name("uv")
    found = str(here) if here.is_file() else shutil.which("uv")
    if not found:
        raise EnvironmentProblem("uv is not installed", hint="pip install uv (the kit's dev extra has it)")
    return found


@dataclass(frozen=True)
class MadeLock:
    text: str
    notes: tuple[str, ...] = field(default_factory=tuple)


def _run_uv(uv: str, args: list[str], cwd: Path, timeout_s: float, cert: Path | None) -> str:
    env = {**os.environ, **({"SSL_CERT_FILE": str(cert)} if cert else {})}
    try:
        done = subprocess.run(
            [uv, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise EnvironmentProblem(f"uv did not finish within {timeout_s:.0f} s", hint="retry later") from exc
    if done.returncode != 0:
        trouble = next((ln.strip() for ln in done.stderr.splitlines() if _UV_NETWORK.search(ln)), None)
        if trouble:
            raise EnvironmentProblem(f"the index could not be reached: {trouble[:200]}", hint="retry online")
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        raise InputError(
            "pins", "uv cannot resolve them: " + " | ".join(lines[-4:])[:400], "fix the manifest"
        )
    return done.stdout


def make_lock(
    manifest: Manifest, *, wheel_dirs: Sequence[Path] = (), cert: Path | None = None, timeout_s: float = 900.0
) -> MadeLock:
    """Resolve the manifest into a lock's text. An index that cannot be reached: EnvironmentProblem
    (exit 3), unless it is the torch index and the pinned torch wheel lies in a local folder and
    nothing else comes from that index (the CPU image: torch only)."""
    from kit.images.resolve import probe_index

    ask = lock_ask(manifest)
    data = _data()["pip"]
    pypi = probe_index(ask.index, data["index_probe"], cert=cert)
    if not pypi.reachable:
        raise EnvironmentProblem(f"cannot reach {ask.index} ({pypi.detail})", hint="relock where it answers")
    extra, notes, links = list(ask.extra_indexes), [], []
    wheel = find_local_wheel("torch", manifest.pins.torch, python_tag(manifest.base.python), wheel_dirs)
    if wheel is not None:
        links.append(wheel.parent)
    for url in ask.extra_indexes:
        probe = probe_index(url, data["torch_index_probe"], cert=cert)
        if probe.reachable:
            continue
        if wheel is None or manifest.pins.torchvision or manifest.flavor == "cuda":
            raise EnvironmentProblem(f"cannot reach {url} ({probe.detail})", hint="relock where it answers")
        extra.remove(url)
        notes.append(f"{wheel.name} from a local copy (sha256 above); {url} could not be reached")
    uv = uv_binary()
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="kit-lock-") as tmp:
        folder = Path(tmp)
        (folder / "manifest-pins").write_text("\n".join(ask.together) + "\n", encoding="utf-8")
        (folder / "manifest-overrides").write_text("\n".join(ask.overrides) + "\n", encoding="utf-8")
        (folder / "cuda-minor").write_text("\n".join(ask.constraints) + "\n", encoding="utf-8")
        together = uv_args(
            ask,
            "manifest-pins",
            extra_indexes=extra,
            find_links=links,
            overrides="manifest-overrides" if ask.overrides else None,
            constraints="cuda-minor" if ask.constraints else None,
        )
        outputs = [_run_uv(uv, together, folder, timeout_s, cert)]
        if ask.no_deps:
            (folder / "manifest-no-deps").write_text("\n".join(ask.no_deps) + "\n", encoding="utf-8")
            alone = uv_args(ask, "manifest-no-deps", extra_indexes=extra, find_links=links, no_deps=True)
            outputs.append(_run_uv(uv, alone, folder, timeout_s, cert))
    return MadeLock(
        lock_text(ask, merge_blocks(*outputs), uv_version=version.split(" (")[0], notes=notes), tuple(notes)
    )


@dataclass(frozen=True)
class Checked:
    """One manifest's lock, checked (pure over the file's text)."""

    status: Literal["ok", "stale", "no lock"]
    problems: list[Problem]
    summary: str = ""
    why: str = ""
    """For 'no lock': the state it is in, and where it can be locked (never advice that cannot work)."""


def check_file(manifest: Manifest, directory: Path | None = None) -> Checked:
    """check_lock on images/NAME.lock. A manifest without a lock is a known state, not a failure:
    `kit image build` refuses to build it, and it is locked where its indexes answer."""
    path = lock_path(manifest.name, directory)
    if not path.is_file():
        ask = lock_ask(manifest)
        indexes = ", ".join((ask.index, *ask.extra_indexes))
        return Checked(
            "no lock",
            [],
            why=f"not checked; `kit image build {manifest.name}` refuses it until `kit image lock "
            f"{manifest.name}` runs where its indexes answer ({indexes})",
        )
    text = path.read_text(encoding="utf-8")
    problems = check_lock(manifest, text)
    system = system_of(text)
    count = len(parse_entries(text))
    if system.packages:
        apt = f"{len(system.packages)} system packages at exact versions, base {system.base}"
    else:
        apt = f"no system packages recorded yet (kit image lock {manifest.name} --system, after a build)"
    summary = f"{count} packages, every one hashed; {apt}"
    return Checked("stale" if problems else "ok", problems, summary)


@dataclass(frozen=True)
class Relocked:
    path: Path
    summary: str
    lines: tuple[str, ...]
    """'transformers 5.19.0 -> 5.20.0', 'added foo 1.0', 'removed bar 2.0', then notes."""


def change_lines(diff: LockDiff) -> tuple[str, ...]:
    return (
        *(f"{c.name} {c.before} -> {c.after}" for c in diff.changed),
        *(f"added {p.name} {p.version}" for p in diff.added),
        *(f"removed {p.name} {p.version}" for p in diff.removed),
    )


def relock(manifest: Manifest, *, directory: Path | None = None, timeout_s: float = 900.0) -> Relocked:
    """Resolve again, write images/NAME.lock atomically, say what changed."""
    from kit.images.pipconfig import pip_defaults

    defaults = pip_defaults()
    path = lock_path(manifest.name, directory)
    old = path.read_text(encoding="utf-8") if path.is_file() else None
    made = make_lock(manifest, wheel_dirs=defaults.find_links, cert=defaults.cert, timeout_s=timeout_s)
    problems = check_lock(manifest, made.text)
    if problems:  # uv's answer must satisfy the manifest it was asked about; never write one that does not
        first = problems[0]
        raise InputError(f"pins: {first.package}", f"the resolved lock does not hold it: {first.detail}")
    text = made.text if old is None else with_system(made.text, system_of(old))  # the system part stays
    diff = lock_changes(old, text)
    write_atomic(path, text.encode("utf-8"), field=f"images/{manifest.name}.lock")
    count = len(parse_entries(text))
    if old is None:
        summary = f"written, {count} packages"
    elif diff.same and old == text:
        summary = f"unchanged, {count} packages"
    elif diff.same:
        summary = f"same versions, hashes or notes changed, {count} packages"
    else:
        summary = f"{len(diff.changed)} changed, {len(diff.added)} added, {len(diff.removed)} removed"
    lines = () if old is None else change_lines(diff)
    return Relocked(path, summary, (*lines, *(f"note: {n}" for n in made.notes)))


def installed_vs_lock(committed: str | None, installed: str | None) -> tuple[bool | None, str, str]:
    """The image's installed set (its `pip freeze --all`, /opt/kit/lock.txt) against the committed
    lock: (same, expected, found); same is None where one side is missing. Each difference named."""
    if committed is None:
        return None, "images/NAME.lock", "no committed lock"
    expected = f"the committed lock, {len(parse_entries(committed))} packages"
    if installed is None:
        return None, expected, "the image records no installed set"
    diff = diff_locks(parse_lock(committed), parse_lock(installed), a_name="lock", b_name="image")
    if diff.same:
        return True, expected, f"0 differences ({diff.unchanged} packages)"
    named = [f"{c.name} {c.before} in the lock, {c.after} in the image" for c in diff.changed]
    named += [f"{p.name} {p.version} only in the image" for p in diff.added]
    named += [f"{p.name} {p.version} only in the lock" for p in diff.removed]
    return False, expected, f"{len(named)} difference(s): " + "; ".join(named)
