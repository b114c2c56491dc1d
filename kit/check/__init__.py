"""`kit check`: the rendered launch through the image's own SGLang argument parser.

The parser runs in a cached venv per SGLang version (`kit.paths.cache_dir()/check/`) holding the
pinned sglang wheel (--no-deps), the CPU torch wheel and the light packages its parser imports
(deps.toml), or with `in_image=True` inside the image itself. driver.py does the work in a
subprocess; when the launch is for CUDA it makes torch.cuda answer like the target GPU
(capability, memory, count = TP), because some of SGLang's rules assert a CUDA device. The result
says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit import paths
from kit.errors import EnvironmentProblem, KitError
from kit.launch import Resolved, resolve_full

__all__ = [
    "CheckResult",
    "base_dir",
    "check",
    "check_request",
    "ensure_base",
    "ensure_venv",
    "launch_resolution",
    "run_cells",
    "venv_dir",
]

DRIVER = Path(__file__).resolve().parent / "driver.py"
DEPS = Path(__file__).resolve().parent / "deps.toml"
MARKER = "KIT_CHECK_RESULT "
CHECK_TIMEOUT_S = 600
# Light dependencies whose version changes what the parser does; a release's own pin wins.
WHEEL_PINNED = ("transformers", "xgrammar")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class CheckResult:
    target: str
    image: str
    sglang: str
    where: str
    """'venv PATH' or 'image REF'."""
    accepted: bool
    error_type: str | None
    error: str | None
    """SGLang's own message, verbatim."""
    stage: str | None
    """Where SGLang refused: 'parser' (ServerArgs) or 'load' (the attention registry); None if accepted."""
    resolved: dict[str, Any]
    """Key ServerArgs fields after SGLang's post-init (accepted launches)."""
    warnings: tuple[str, ...]
    emulated: dict[str, Any] | None
    """The device torch.cuda pretended to be, or None when nothing was emulated."""
    stubbed: tuple[str, ...]
    args: tuple[str, ...]
    env: dict[str, str]
    seconds: float
    """The parser run (subprocess start to result)."""
    setup_seconds: float
    """Creating the venv (0 when it was cached)."""
    load_not_run: str | None = None
    """Why the attention-registry check at model load did not run, when it was due (the verdict is
    then the parser's alone); None when it ran or was not due."""


def _deps(version: str) -> tuple[str, list[str]]:
    data = tomllib.loads(DEPS.read_text(encoding="utf-8"))
    entry = data.get("versions", {}).get(version) or data["default"]
    return data["torch"], list(entry["requirements"])


def pinned_by_wheel(requirements: list[str], metadata: str, names: Sequence[str]) -> list[str]:
    """Unpinned NAMES in REQUIREMENTS take the exact pin the sglang wheel's METADATA gives them.

    transformers decides how config.json is read (0.5.9 wants 4.57.1, 0.5.23 5.19.0): a release not
    listed in deps.toml still gets its own, so adding a release needs no deps.toml entry.
    """
    pins: dict[str, str] = {}
    for line in metadata.splitlines():
        found = re.match(r"Requires-Dist:\s*([A-Za-z0-9_.-]+)\s*==\s*([^;\s]+)\s*$", line)
        if found:
            pins[found[1].lower().replace("_", "-")] = found[2]
    wanted = {n.lower() for n in names}
    out = []
    for req in requirements:
        name = req.lower().replace("_", "-")
        out.append(f"{req}=={pins[name]}" if name in wanted and name in pins else req)
    return out


def _wheel_metadata(venv: Path, version: str) -> str:
    for path in venv.glob(f"lib/python*/site-packages/sglang-{version}.dist-info/METADATA"):
        return path.read_text(encoding="utf-8", errors="replace")
    return ""


def _lock_tag(release: str | None) -> str:
    """'-lock1a2b3c4d' for a venv made from a lock: its own folder, so a venv another process uses
    (made before locks, or from another lock) is never removed under it."""
    from kit.check.locks import lock_for

    locked = lock_for(release)
    return f"-lock{locked[1].removeprefix('sha256:')[:8]}" if locked else ""


def venv_dir(version: str) -> Path:
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return paths.cache_dir() / "check" / f"sglang-{version}-{py}{_lock_tag(version)}"


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # two test processes building one venv wait for each other
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_step(argv: list[str], what: str, progress: Progress) -> None:
    progress(what)
    tail: list[str] = []
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        raise EnvironmentProblem(f"check venv: {what}: {exc}") from exc
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        if line and "is ignored: it is neither a file nor a directory" not in line:
            tail = [*tail[-7:], line]
            progress(f"{what}: {line[:120]}")
    if proc.wait() != 0:
        raise EnvironmentProblem(
            f"check venv: {what} failed: {' | '.join(tail[-3:])}",
            hint="pip needs PyPI (or your index) for the pinned sglang wheel; see kit/check/deps.toml",
        )


def _site_packages(venv: Path) -> Path:
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return venv / "lib" / py / "site-packages"


def _build(
    venv: Path, wanted: dict[str, Any], what: str, steps: Callable[[Path], None], progress: Progress
) -> float:
    """Create VENV with steps(building) unless its kit-ready.json already says `wanted`. Seconds spent."""
    ready = venv / "kit-ready.json"

    def is_ready() -> bool:
        try:
            return json.loads(ready.read_text()) == wanted and _python(venv).exists()
        except (OSError, ValueError):
            return False

    if is_ready():
        return 0.0
    started = time.monotonic()
    with _locked(venv.parent / f".{venv.name}.lock"):
        if is_ready():
            return 0.0
        building = venv.with_name(venv.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        shutil.rmtree(venv, ignore_errors=True)
        _run_step([sys.executable, "-m", "venv", str(building)], f"creating venv for {what}", progress)
        steps(building)
        (building / "kit-ready.json").write_text(json.dumps(wanted))
        building.rename(venv)
    return time.monotonic() - started


def _pip(venv: Path) -> list[str]:
    return [
        str(_python(venv)),
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
    ]


def base_dir() -> Path:
    torch, _ = _deps("")
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return paths.cache_dir() / "check" / f"base-torch{torch}-{py}{_lock_tag(None)}"


def _from_lock(venv: Path, lock: Path) -> list[str]:
    """pip installs the lock and nothing else: every file's hash checked, nothing resolved, wheels only;
    the host's own torch wheel folders (its pip config) are only places to find locked files."""
    from kit.images.pipconfig import pip_defaults

    links = [arg for folder in pip_defaults().find_links for arg in ("--find-links", str(folder))]
    return [*_pip(venv), "--require-hashes", "--no-deps", "--only-binary", ":all:", *links, "-r", str(lock)]


def ensure_base(progress: Progress = lambda _: None) -> tuple[Path, float]:
    """What every check venv shares (CPU torch, triton, the light dependencies): ~1.9 GB, made once,
    from kit/check/locks/base.lock where this host's Python is the lock's (else resolved, as before)."""
    from kit.check.locks import lock_for

    data = tomllib.loads(DEPS.read_text(encoding="utf-8"))
    torch, requirements = data["torch"], list(data["base"]["requirements"])
    base = base_dir()
    locked = lock_for(None)

    def steps(building: Path) -> None:
        if locked:
            _run_step(_from_lock(building, locked[0]), f"installing {locked[0].name} (locked)", progress)
            return
        _run_step([*_pip(building), f"torch=={torch}"], f"installing torch {torch} (CPU)", progress)
        _run_step(
            [*_pip(building), *requirements], f"installing {len(requirements)} shared dependencies", progress
        )

    wanted: dict[str, Any] = {"torch": torch, "requirements": requirements}
    if locked:
        wanted["lock"] = locked[1]
    return base, _build(base, wanted, "the shared base", steps, progress)


def ensure_venv(version: str, progress: Progress = lambda _: None) -> tuple[Path, float]:
    """The check venv for sglang VERSION, created on first use. Returns (venv, seconds spent creating).

    It holds the sglang wheel (--no-deps) and what its release pins differently (transformers,
    deps.toml's per-release lists); everything else comes from the shared base through a .pth file,
    so a release costs ~0.4 GB and seconds, not a torch install. Where kit/check/locks/ has the
    release's lock (for this host's Python), that lock is installed and nothing else.
    """
    from kit.check.locks import lock_for

    base, base_seconds = ensure_base(progress)
    venv = venv_dir(version)
    _, requirements = _deps(version)
    locked = lock_for(version)
    wanted = {"sglang": version, "base": base.name, "requirements": requirements}
    if locked:
        wanted["lock"] = locked[1]

    def steps(building: Path) -> None:
        # The base's packages come after the venv's own on sys.path: a release's pin shadows them.
        (_site_packages(building) / "kit-check-base.pth").write_text(f"{_site_packages(base)}\n")
        if locked:  # what the base already holds at the locked version, pip leaves there
            _run_step(_from_lock(building, locked[0]), f"installing {locked[0].name} (locked)", progress)
            (building / "kit-requirements.txt").write_text(locked[0].read_text(encoding="utf-8"))
            return
        _run_step(
            [*_pip(building), "--no-deps", f"sglang=={version}"],
            f"installing sglang {version} (--no-deps)",
            progress,
        )
        pinned = pinned_by_wheel(requirements, _wheel_metadata(building, version), WHEEL_PINNED)
        _run_step([*_pip(building), *pinned], f"installing {len(pinned)} light dependencies", progress)
        (building / "kit-requirements.txt").write_text("\n".join(pinned) + "\n")

    return venv, base_seconds + _build(venv, wanted, f"sglang {version}", steps, progress)


def check_request(r: Resolved) -> dict[str, Any]:
    """What the driver gets: server flags, the model's config.json, env, and the device to emulate."""
    spec = r.spec
    emulate = None
    if spec.device == "cuda":
        hardware = r.hardware
        capability = tuple(int(p) for p in (hardware.capability if hardware else "12.0").split("."))
        emulate = {
            "capability": list(capability),
            "memory_gib": hardware.memory_gib if hardware else 96.0,
            "device_count": r.profile.tp,
            "name": hardware.name if hardware else "emulated GPU",
            "cuda_version": r.manifest.pins.cuda,
        }
    config = r.model.config_path
    request = {
        "args": list(spec.argv[3:]),
        "config_json": str(config) if config else None,
        "env": dict(spec.env),
        "emulate": emulate,
    }
    if emulate and r.model.facts.hybrid:
        # Hybrid GDN models on CUDA: SGLang checks their attention backend again at model load
        # (attention_registry.py), where 0.5.9 refuses flashinfer; the driver runs that too.
        request["stages"] = ["load"]
    return request


def launch_resolution(spec, *, in_image: bool | None = None, progress: Progress = lambda _: None) -> dict:
    """SGLang's own resolution of this exact launch (its argv and env, the model's config.json: the
    fetched one where `kit model fetch` put it, the target GPU emulated as `kit check` does): the
    driver's result, with `graphs` (the CUDA-graph capture lists the release resolved) and
    `resolved` (max_running_requests, ...). Runs in the image where it is on this host (a GPU host
    has the one it serves), else in the check venv of the image's release."""
    from kit.runtime.engine import image_exists
    from kit.validate import model_config

    r = resolve_full(spec.target, image=spec.image)
    request = check_request(r)
    config, _ = model_config(r)
    request.update(args=list(spec.argv[3:]), env=dict(spec.env), config_json=str(config) if config else None)
    if request.get("emulate"):
        request["emulate"] = {**request["emulate"], "device_count": spec.ranks}
    if in_image is None:
        in_image = image_exists(spec.image_ref)
    if in_image:
        progress(f"SGLang's resolution of the launch in {spec.image_ref}")
        return _parse(_run_in_image(spec.image_ref, request), f"image {spec.image_ref}")
    venv, _ = ensure_venv(r.manifest.pins.sglang, progress)
    progress(f"SGLang {r.manifest.pins.sglang}'s resolution of the launch")
    return _run_in_venv(venv, request)


def _parse(output: str, where: str) -> dict[str, Any]:
    for line in reversed(output.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER) :])
    tail = " | ".join(line for line in output.strip().splitlines()[-3:])
    raise KitError(f"the check in {where} gave no result: {tail or 'no output'}")


def _driver_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "PYTHON", "CUDA_"))}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def run_cells(
    venv: Path,
    cells: Sequence[dict[str, Any]],
    on_result: Callable[[dict[str, Any]], None] = lambda _: None,
    timeout_s: float = CHECK_TIMEOUT_S,
) -> dict[str, dict[str, Any]]:
    """Run many cells (check_request()s with an "id") through one driver process: id -> result.

    The driver imports SGLang once per group of cells and forks a process per cell (driver.py), so
    a cell costs a parse, not an import. on_result hears of each result as it arrives.
    """
    ids = [str(cell["id"]) for cell in cells]
    if len(set(ids)) != len(ids):
        raise KitError("check cells need distinct ids")
    results: dict[str, dict[str, Any]] = {}
    tail: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kit-check-") as tmp:
        req = Path(tmp) / "request.json"
        req.write_text(json.dumps({"cells": list(cells)}))
        proc = subprocess.Popen(
            [str(_python(venv)), str(DRIVER), str(req)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_driver_env(),
            cwd=tmp,
        )
        # The driver prints result lines as cells finish; a watchdog bounds the whole batch.
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(MARKER):
                    result = json.loads(line[len(MARKER) :])
                    results[str(result.get("id"))] = result
                    on_result(result)
                elif line.strip():
                    tail = [*tail[-4:], line.strip()]
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    missing = [i for i in ids if i not in results]
    if missing:
        raise KitError(
            f"the check driver in {venv} stopped after {len(results)} of {len(ids)} cells "
            f"(exit {proc.returncode}, limit {timeout_s:.0f} s): {' | '.join(tail[-3:]) or 'no output'}"
        )
    return results


def _run_in_venv(venv: Path, request: dict[str, Any]) -> dict[str, Any]:
    cell = {**request, "id": "check"}
    return run_cells(venv, [cell])["check"]


def _run_in_image(image_ref: str, request: dict[str, Any]) -> str:
    from kit.runtime.engine import client, translated

    with tempfile.TemporaryDirectory(prefix="kit-check-") as tmp:
        shutil.copy(DRIVER, Path(tmp) / "driver.py")
        if request.get("config_json"):
            shutil.copy(request["config_json"], Path(tmp) / "config.json")
            request = {**request, "config_json": "/kit-check/config.json"}
        (Path(tmp) / "request.json").write_text(json.dumps(request))
        with translated(f"running the check in {image_ref}"):
            output = client().containers.run(
                image_ref,
                command=["python", "/kit-check/driver.py", "/kit-check/request.json"],
                volumes={tmp: {"bind": "/kit-check", "mode": "rw"}},
                labels={"io.kit.managed": "check"},
                network_mode="none",
                remove=True,
                stdout=True,
                stderr=True,
            )
        return output.decode("utf-8", errors="replace")


def check(
    target: str,
    *,
    image: str | None = None,
    overrides: Sequence[str] = (),
    in_image: bool = False,
    progress: Progress = lambda _: None,
) -> CheckResult:
    """Run SGLang's own parser on the launch. A rejection is a result (accepted=False), not an error."""
    r = resolve_full(target, image=image, overrides=overrides)
    request = check_request(r)
    setup = 0.0
    if in_image:
        where = f"image {r.spec.image_ref}"
        progress(f"running SGLang's parser in {r.spec.image_ref}")
        started = time.monotonic()
        data = _parse(_run_in_image(r.spec.image_ref, request), where)
    else:
        venv, setup = ensure_venv(r.manifest.pins.sglang, progress)
        where = f"venv {venv}"
        progress(f"running SGLang {r.manifest.pins.sglang}'s parser")
        started = time.monotonic()
        data = _run_in_venv(venv, request)
    seconds = time.monotonic() - started
    if data.get("internal"):
        raise KitError(f"the check itself failed in {where}: {data.get('error_type')}: {data.get('error')}")
    load = data.get("load") or {}
    if load.get("unknown"):  # the release reads what the stand-in ModelRunner lacks: no verdict
        raise KitError(
            f"the check could not decide in {where}: SGLang's attention registry read "
            f"{', '.join(load['unknown'])} from the kit's stand-in ModelRunner, which does not provide it",
            hint="kit/check/driver.py _Runner must learn what the release's ModelRunner holds there",
        )
    return CheckResult(
        target=target,
        image=r.spec.image,
        sglang=str(data.get("sglang", r.manifest.pins.sglang)),
        where=where,
        accepted=bool(data.get("accepted")),
        error_type=data.get("error_type"),
        error=data.get("error"),
        stage=data.get("stage"),
        resolved=data.get("resolved") or {},
        warnings=tuple(data.get("warnings") or ()),
        emulated=data.get("emulated"),
        stubbed=tuple(data.get("stubbed") or ()),
        args=tuple(r.spec.argv),
        env=dict(r.spec.env),
        seconds=round(seconds, 2),
        setup_seconds=round(setup, 1),
        load_not_run=str(load.get("why")) if load and not load.get("ran") else None,
    )
