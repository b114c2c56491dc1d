"""Do a GPU image's pins install together, before anyone spends an hour building it?

    resolve_image(manifest) -> ResolveReport        kit image resolve NAME

pip's own resolver answers, in dry-run/report mode, for the image's platform rather than this
machine's: linux x86_64 at the base distribution's glibc (every manylinux tag down to 2_17), the
image's Python, binary wheels only, against the indexes the Dockerfile's pip steps use (PyPI, plus
the manifest's torch_index as an extra index). The requirements are the Dockerfile's: torch and
torchvision, then sglang, sglang-kernel, flashinfer-python and extra_pip (one resolution: every
pin is ==); the NCCL and force_pip pins are installed with --no-deps, so they are only looked up.

Then the base image's CUDA is held against what torch's own metadata asks for (torch 2.14.1:
`cuda-toolkit==13.0.3`; older builds: `nvidia-cuda-runtime-cuNN==X.Y.*`).

Honesty over a green light: where an index cannot be reached the report is `unverified`, never
`resolves`; it names the index and checks what it still can, saying which pins it replaced (a
`+cu130` torch from the unreachable torch index by PyPI's build of the same version) and that a
CUDA answer read from a replacement is about the replacement.

Pure core: requirements_for, platform_tags, pip_args, parse_report, conflict_lines, cuda_asked,
judge_cuda, verdict. Adapters: probe_index (HTTP), run_pip (subprocess).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from kit.errors import ExitCode, InputError
from kit.images.manifest import Manifest

DATA_FILE = Path(__file__).with_name("resolve.toml")
Status = Literal["resolves", "conflict", "unverified", "unreachable"]


@functools.cache
def _data() -> dict[str, Any]:
    return tomllib.loads(DATA_FILE.read_text(encoding="utf-8"))


# -- what to ask -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    """One question for pip: these requirements, on these indexes, for this platform."""

    requirements: tuple[str, ...]
    looked_up: tuple[str, ...]
    """Installed with --no-deps after the resolution (NCCL, force_pip): only their wheels are looked up."""
    python: str
    """Major.minor, e.g. 3.12."""
    glibc: str
    platforms: tuple[str, ...]
    index: str
    extra_indexes: tuple[str, ...]


def python_version(manifest: Manifest) -> str:
    found = re.fullmatch(r"python(\d+\.\d+)", manifest.base.python)
    if not found:
        raise InputError(
            "base.python", f"'{manifest.base.python}' names no Python version", "e.g. python3.12"
        )
    return found[1]


def python_tag(python: str) -> str:
    """'python3.11' -> 'cp311' (the wheel tag of the image's interpreter)."""
    match = re.fullmatch(r"python(\d)\.(\d+)", python)
    if not match:
        raise InputError("base.python", f"'{python}' is not like python3.11", "name the interpreter package")
    return f"cp{match.group(1)}{match.group(2)}"


def find_local_wheel(dist: str, version: str, py_tag: str, dirs: Iterable[Path]) -> Path | None:
    """A local wheel of exactly this version for this interpreter (linux x86_64), if one lies in dirs."""
    prefix = f"{dist}-{version}-{py_tag}-{py_tag}-"
    for directory in dirs:
        if not directory.is_dir():
            continue
        for wheel in sorted(directory.glob(f"{dist}-*.whl")):
            if wheel.name.startswith(prefix) and "x86_64" in wheel.name:
                return wheel
    return None


def cuda_constraints(manifest: Manifest) -> tuple[str, ...]:
    """'nvidia-cuda-nvcc==13.0.*' (and its -cu13 name) for each toolkit-versioned CUDA wheel."""
    cuda = manifest.pins.cuda
    if not cuda:
        return ()
    major = cuda.split(".", 1)[0]
    names = _data()["lock"]["cuda_components"]
    return tuple(f"{n}{suffix}=={cuda}.*" for n in names for suffix in ("", f"-cu{major}"))


def distribution(base_image: str) -> str:
    """'nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04' -> 'ubuntu24.04'; 'debian:bookworm-slim' -> 'bookworm'."""
    tag = base_image.rsplit(":", 1)[-1].split("@", 1)[0]
    for name in _data()["glibc"]:
        if name in tag:
            return name
    known = ", ".join(_data()["glibc"])
    raise InputError(
        "base.image", f"no glibc known for '{base_image}'", f"known: {known} (kit/images/resolve.toml)"
    )


def platform_tags(glibc: str, arch: str = "x86_64") -> tuple[str, ...]:
    """Every manylinux tag a wheel for this glibc may carry, newest first, then plain linux."""
    major, minor = (int(p) for p in glibc.split("."))
    oldest = int(_data()["pip"]["oldest_manylinux"])
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, oldest - 1, -1)]
    # The legacy aliases of manylinux_2_17 / _2_12 / _2_5 (PEP 599, 571, 513).
    tags += [f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}", f"linux_{arch}"]
    return tuple(tags)


def requirements_for(manifest: Manifest) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(resolved together, looked up with --no-deps), as the Dockerfile's pip steps install them."""
    pins = manifest.pins
    together = [f"torch=={pins.torch}"]
    if pins.torchvision:
        together.append(f"torchvision=={pins.torchvision}")
    together.append(f"sglang=={pins.sglang}")
    if pins.sglang_kernel:
        together.append(f"sglang-kernel=={pins.sglang_kernel}")
    if pins.flashinfer:
        together.append(f"flashinfer-python=={pins.flashinfer}")
    together += manifest.extra_pip
    looked_up = [f"{pins.nccl_package}=={pins.nccl}"] if pins.nccl_package and pins.nccl else []
    looked_up += manifest.force_pip
    return tuple(together), tuple(looked_up)


def ask_for(manifest: Manifest) -> Ask:
    glibc = _data()["glibc"][distribution(manifest.base.image)]
    together, looked_up = requirements_for(manifest)
    extra = (manifest.pins.torch_index,) if manifest.pins.torch_index else ()
    return Ask(
        together,
        looked_up,
        python_version(manifest),
        glibc,
        platform_tags(glibc),
        _data()["pip"]["index"],
        extra,
    )


def without_local_labels(requirements: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """'torch==2.14.1+cu130' -> 'torch==2.14.1' (PyPI's build of that version). Returns the new
    requirements and one 'from -> to' line per replacement."""
    new, replaced = [], []
    for line in requirements:
        plain = re.sub(r"(==\s*[^+;\s]+)\+[A-Za-z0-9.]+", r"\1", line)
        new.append(plain)
        if plain != line:
            replaced.append(f"{line} -> {plain}")
    return tuple(new), tuple(replaced)


def pip_args(
    ask: Ask,
    requirements: Sequence[str],
    *,
    report: Path,
    extra_indexes: Sequence[str],
    no_deps: bool = False,
    cert: Path | None = None,
    constraints: Path | None = None,
) -> list[str]:
    """`pip install --dry-run --report` for the image's platform, ignoring this machine's pip config
    (--isolated: a local constraints file or mirror would answer for this machine, not the image)."""
    args = ["install", "--isolated", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
    args += ["--python-version", ask.python, "--implementation", "cp", "--only-binary=:all:"]
    for tag in ask.platforms:
        args += ["--platform", tag]
    args += ["--index-url", ask.index]
    for url in extra_indexes:
        args += ["--extra-index-url", url]
    if cert is not None:
        args += ["--cert", str(cert)]
    # Wheel metadata through HTTP range requests: a 550 MB torch wheel whose index serves no
    # separate .metadata file is not downloaded to learn its requirements.
    args += ["--use-feature=fast-deps", "--disable-pip-version-check", "--no-input"]
    if no_deps:
        args.append("--no-deps")
    if constraints is not None:  # the CUDA wheels held to the image's CUDA minor, as the lock holds them
        args += ["--constraint", str(constraints)]
    return [*args, *requirements]


# -- what pip said ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    url: str
    requires: tuple[str, ...] = ()


def parse_report(document: dict[str, Any]) -> tuple[Installed, ...]:
    """pip's installation report (https://pip.pypa.io/en/stable/reference/installation-report/)."""
    rows = []
    for item in document.get("install") or []:
        meta = item.get("metadata") or {}
        url = (item.get("download_info") or {}).get("url", "")
        rows.append(
            Installed(
                str(meta.get("name", "?")),
                str(meta.get("version", "?")),
                url,
                tuple(meta.get("requires_dist") or ()),
            )
        )
    return tuple(sorted(rows, key=lambda r: r.name.lower()))


# pip's words for an index it could not talk to (urllib3/requests through pip's vendored copies),
# and run_pip's own when pip ran past --timeout: no answer either way, so ENVIRONMENT, never CONFLICT.
_NETWORK = re.compile(
    r"did not finish within|"
    r"NewConnectionError|Max retries exceeded|Could not fetch URL|ConnectTimeout|ReadTimeout|timed out|"
    r"Temporary failure in name resolution|Name or service not known|Connection reset|ProtocolError|SSLError"
)


def network_trouble(stderr: str) -> str | None:
    """The first line where pip says it could not talk to an index: a failure that is no answer."""
    return next((line.strip() for line in stderr.splitlines() if _NETWORK.search(line)), None)


def conflict_lines(stderr: str, limit: int = 12) -> tuple[str, ...]:
    """pip's refusal, without its warnings and hints: ERROR lines and the 'conflict is caused by' block."""
    keep, inside = [], False
    for raw in stderr.splitlines():
        line = raw.rstrip()
        if line.startswith("ERROR:") or "conflict is caused by" in line:
            keep.append(line.strip())
            inside = "conflict is caused by" in line
        elif inside and line.startswith("    "):
            keep.append(line.strip())
        else:
            inside = False
    return tuple(keep[:limit])


# -- CUDA: the base image against torch -------------------------------------------------------------


@dataclass(frozen=True)
class CudaCheck:
    base: str | None
    """The base image's CUDA toolkit version, from its tag (nvidia/cuda:X.Y.Z-...)."""
    asked: str | None
    """What torch's metadata asks for, e.g. 'cuda-toolkit==13.0.3'."""
    ok: bool | None
    """None: nothing to compare (a CPU base, or torch's requirements unknown)."""
    detail: str
    read_from: str = ""
    """Which torch the requirement was read from ('torch 2.14.1' or 'PyPI's torch 2.14.1 in place of ...')."""


def base_cuda(base_image: str) -> str | None:
    found = re.search(r"(?:^|/)cuda:(\d+\.\d+(?:\.\d+)?)-", base_image)
    return found[1] if found else None


def cuda_asked(requires: Sequence[str]) -> tuple[str, str] | None:
    """(package, version) of the CUDA toolkit torch's Requires-Dist pins: cuda-toolkit (2.14: the
    toolkit version itself), else nvidia-cuda-runtime[-cuNN] (its major.minor is the toolkit's)."""
    found: dict[str, str] = {}
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        pins = [s.version for s in req.specifier if s.operator == "=="]
        name = req.name.lower().replace("_", "-")
        if pins and (name == "cuda-toolkit" or re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", name)):
            found[name] = pins[0]
    if "cuda-toolkit" in found:
        return "cuda-toolkit", found["cuda-toolkit"]
    return next(iter(found.items()), None)


def _parts(version: str, n: int) -> tuple[int, ...]:
    try:
        release = Version(version).release
    except InvalidVersion:
        return ()
    return tuple(release[:n]) + (0,) * max(0, n - len(release))


def judge_cuda(base_image: str, torch: Installed | None, read_from: str) -> CudaCheck:
    base = base_cuda(base_image)
    if base is None:
        return CudaCheck(None, None, None, f"{base_image} is not an nvidia/cuda base: nothing to compare")
    asked = cuda_asked(torch.requires) if torch else None
    if asked is None:
        why = "torch was not resolved" if torch is None else f"{read_from} pins no CUDA toolkit package"
        return CudaCheck(base, None, None, f"base CUDA {base}; {why}", read_from)
    package, version = asked
    # cuda-toolkit's version is the toolkit's (13.0.3 = CUDA 13.0 update 3); a runtime package's
    # third part is its own build number, so only major.minor say which toolkit it belongs to.
    n = 3 if package == "cuda-toolkit" else 2
    need, have = _parts(version, n), _parts(base, n)
    ok = bool(need and have) and have[0] == need[0] and have >= need
    shown_need = ".".join(map(str, need))
    verdict = "meets it" if ok else f"is older than {shown_need}" if have < need else "is another major"
    return CudaCheck(
        base,
        f"{package}=={version}",
        ok,
        f"{read_from} asks for {package}=={version}; base CUDA {base} {verdict}",
        read_from,
    )


# -- the report --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexProbe:
    url: str
    reachable: bool
    detail: str


@dataclass(frozen=True)
class ResolveReport:
    image: str
    status: Status
    summary: str
    python: str
    glibc: str
    platforms: tuple[str, ...]
    indexes: tuple[IndexProbe, ...]
    requirements: tuple[str, ...]
    substituted: tuple[str, ...] = ()
    """'torch==2.14.1+cu130 -> torch==2.14.1': pins replaced because their index could not be reached."""
    resolved: tuple[Installed, ...] = ()
    conflict: tuple[str, ...] = ()
    looked_up: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    """--no-deps pins with no wheel for the platform (pip's lines)."""
    cuda: CudaCheck | None = None
    pip_version: str = ""
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "resolves"

    @property
    def exit_code(self) -> int:
        if self.status == "resolves":
            return int(ExitCode.OK)
        if self.status == "conflict":
            return int(ExitCode.FAILED)
        return int(ExitCode.ENVIRONMENT)  # could not be checked (all of it, or part): never a pass


def verdict(
    *,
    unreachable: Sequence[IndexProbe],
    substituted: Sequence[str],
    conflict: Sequence[str],
    missing: Sequence[str],
    cuda: CudaCheck | None,
    asked: bool,
    trouble: str | None = None,
) -> tuple[Status, str]:
    """The status and one line. A conflict found is a conflict even where part could not be checked;
    a pass needs every index reached, nothing replaced, and the base's CUDA meeting torch's."""
    partial = f" (with {', '.join(substituted)})" if substituted else ""
    if trouble:
        return "unverified", f"NOT verified: pip lost the index part-way ({trouble[:160]})"
    if conflict:
        return "conflict", f"pip's resolver refuses these pins{partial}: {conflict[-1]}"
    if missing:
        return "conflict", f"no wheel for the image's platform: {missing[0]}"
    if cuda is not None and cuda.ok is False:
        return "conflict", f"the base image's CUDA is too old: {cuda.detail}"
    if not asked:
        names = ", ".join(p.url for p in unreachable) or "the indexes"
        return "unreachable", f"nothing could be resolved: cannot reach {names}"
    if unreachable:
        names = ", ".join(p.url for p in unreachable)
        return (
            "unverified",
            f"NOT verified: cannot reach {names}; the rest resolves{partial}, which is not the image's set",
        )
    return "resolves", "every pin installs together for the image's platform; the base's CUDA meets torch's"


# -- adapters ----------------------------------------------------------------------------------------


def probe_index(url: str, project: str, *, cert: Path | None = None, timeout_s: float = 15.0) -> IndexProbe:
    """Can the index be reached at all (its page for a project it must serve)?"""
    import httpx

    target = f"{url.rstrip('/')}/{project}/"
    try:
        answer = httpx.get(
            target, timeout=timeout_s, follow_redirects=True, verify=str(cert) if cert else True
        )
    except httpx.HTTPError as exc:
        return IndexProbe(url, False, f"{type(exc).__name__}: {str(exc)[:120]}")
    if answer.status_code != 200:
        return IndexProbe(url, False, f"HTTP {answer.status_code} for {target}")
    return IndexProbe(url, True, f"HTTP 200 for {target}")


@dataclass(frozen=True)
class PipRun:
    returncode: int
    report: dict[str, Any] = field(default_factory=dict)
    stderr: str = ""


def run_pip(args: Sequence[str], report: Path, *, timeout_s: float) -> PipRun:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return PipRun(124, stderr=f"ERROR: pip did not finish within {timeout_s:.0f} s")
    document: dict[str, Any] = {}
    if done.returncode == 0 and report.is_file():
        document = json.loads(report.read_text(encoding="utf-8"))
    return PipRun(done.returncode, document, done.stderr)


def pip_version() -> str:
    from importlib.metadata import version

    return version("pip")


def image_pip_version() -> str | None:
    """The pip the image's venv runs (resolve.toml [lock] image_pip; the lock carries it)."""
    return _data().get("lock", {}).get("image_pip")


def resolve_image(manifest: Manifest, *, cert: Path | None = None, timeout_s: float = 900.0) -> ResolveReport:
    started = time.monotonic()
    ask = ask_for(manifest)
    data = _data()["pip"]
    probes = [probe_index(ask.index, data["index_probe"], cert=cert)]
    probes += [probe_index(url, data["torch_index_probe"], cert=cert) for url in ask.extra_indexes]
    unreachable = [p for p in probes if not p.reachable]
    requirements, substituted = ask.requirements, ()
    extra = tuple(p.url for p in probes[1:] if p.reachable)
    notes = []
    if len(extra) < len(ask.extra_indexes):
        requirements, substituted = without_local_labels(ask.requirements)
    theirs, ours = image_pip_version(), pip_version()
    if theirs and theirs != ours:
        notes.append(f"resolved with pip {ours}; the image builds with pip {theirs}")
    resolved: tuple[Installed, ...] = ()
    conflict: tuple[str, ...] = ()
    missing: list[str] = []
    trouble: str | None = None
    if probes[0].reachable:
        with tempfile.TemporaryDirectory(prefix="kit-resolve-") as tmp:
            report, held = Path(tmp) / "report.json", Path(tmp) / "cuda-minor.txt"
            held.write_text("\n".join(cuda_constraints(manifest)) + "\n", encoding="utf-8")
            run = run_pip(
                pip_args(ask, requirements, report=report, extra_indexes=extra, cert=cert, constraints=held),
                report,
                timeout_s=timeout_s,
            )
            resolved = parse_report(run.report)
            trouble = network_trouble(run.stderr) if run.returncode != 0 else None
            if run.returncode != 0 and not trouble:
                conflict = conflict_lines(run.stderr) or (f"pip exited {run.returncode}",)
            looked_up, looked_subst = (
                without_local_labels(ask.looked_up) if substituted else (ask.looked_up, ())
            )
            for requirement in looked_up:
                one = Path(tmp) / "one.json"
                found = run_pip(
                    pip_args(ask, [requirement], report=one, extra_indexes=extra, no_deps=True, cert=cert),
                    one,
                    timeout_s=timeout_s,
                )
                if found.returncode != 0 and not trouble:
                    trouble = network_trouble(found.stderr)
                if found.returncode != 0 and not trouble:
                    missing.append(f"{requirement}: " + " ".join(conflict_lines(found.stderr, 2)))
            substituted += looked_subst
    torch = next((r for r in resolved if r.name.lower() == "torch"), None)
    read_from = f"torch {torch.version}" if torch else "torch"
    if torch and substituted:
        read_from = f"PyPI's torch {torch.version} (in place of {manifest.pins.torch})"
    cuda = judge_cuda(manifest.base.image, torch, read_from) if resolved else None
    status, summary = verdict(
        unreachable=unreachable,
        substituted=substituted,
        conflict=conflict,
        missing=missing,
        cuda=cuda,
        asked=bool(resolved) or bool(conflict),
        trouble=trouble,
    )
    return ResolveReport(
        image=manifest.name,
        status=status,
        summary=summary,
        python=ask.python,
        glibc=ask.glibc,
        platforms=ask.platforms,
        indexes=tuple(probes),
        requirements=ask.requirements,
        substituted=substituted,
        resolved=resolved,
        conflict=conflict,
        looked_up=ask.looked_up,
        missing=tuple(missing),
        cuda=cuda,
        pip_version=ours,
        notes=tuple(notes),
        seconds=round(time.monotonic() - started, 1),
    )
