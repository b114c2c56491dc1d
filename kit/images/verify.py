"""`kit image verify NAME`: prove from inside the image that it is what its manifest pins, and that
what it carries runs.

The probe (kit/images/inimage/verify.py, the kit's current copy) runs in a short-lived container
and reports what is installed and what ran; `compare` (pure) turns manifest + report + GPU access
into rows. Each row is ok, drift, or not checked (with why): a check that could not run, because
no GPU reached the container or because something it depends on failed, is never counted as ok.
`verdict` (pure) reads the rows: pass, drift, incomplete, or waived (GPU checks turned off with
--gpus none).
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.errors import EnvironmentProblem, KitError
from kit.images.gpu_access import Attempt, GpuAccess, GpuMode, granted, not_asked, plan, refused
from kit.images.manifest import LOCAL_BASE, Manifest, lock_path
from kit.images.verify_rows import (
    COLLECTIVE_TIMEOUT_S,
    CPU_RANKS,
    DRIFT,
    NOT_CHECKED,
    OK,
    Row,
    Status,
    Verdict,
    arch_names,
    compare,
    counts,
    major_minor,
    verdict,
    version_matches,
)

PROBE = Path(__file__).resolve().parent / "inimage" / "verify.py"
PROBE_DIR = "/tmp/kit-verify"
"""Where the kit's copy of the probe is put in the container (its child processes run this file)."""
MARKER = "KIT-VERIFY-JSON "
GPU_CONTAINER: dict[str, Any] = {"shm_size": "2g"}
"""NCCL's shared-memory transport (GPUs without P2P) needs more than Docker's 64 MB /dev/shm."""


@dataclass(frozen=True)
class VerifyResult:
    name: str
    tag: str
    image_id: str
    flavor: str
    verdict: Verdict
    ok: bool
    """Every row ran and matched: the only full pass."""
    counts: dict[str, int]
    rows: list[Row]
    gpus: GpuAccess
    seconds: float
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def drift(self) -> list[Row]:
        return [r for r in self.rows if r.status == DRIFT]

    @property
    def not_checked(self) -> list[Row]:
        return [r for r in self.rows if r.status == NOT_CHECKED]


def parse_probe_output(stdout: str) -> dict:
    """The probe's JSON line; base images may print banners before it."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                report = json.loads(line[len(MARKER) :])
            except json.JSONDecodeError as exc:
                raise KitError(f"the in-image check printed unreadable JSON ({exc})") from exc
            if isinstance(report, dict):
                return report
    raise KitError("the in-image check printed no result")


def probe_args(flavor: str, *, gpus: bool, collective_timeout_s: float = COLLECTIVE_TIMEOUT_S) -> list[str]:
    """What the probe is asked to run: NCCL over every GPU when the GPUs are there, gloo over
    CPU_RANKS processes in the CPU image (the same all_reduce code), nothing collective otherwise."""
    args = [f"{PROBE_DIR}/verify.py", "--collective-timeout", f"{collective_timeout_s:g}"]
    if not gpus:
        args.append("--skip-gpu")
    if flavor == "cpu":
        args += ["--all-reduce", "gloo", "--world", str(CPU_RANKS)]
    elif gpus:
        args += ["--all-reduce", "nccl"]
    return args


# --- running it ------------------------------------------------------------------------------------


def _probe_archive() -> bytes:
    """The kit's probe and its sibling modules (kit/images/inimage/*.py) as a tar for put_archive: an
    image built before the probe last changed is still checked by the rules this kit version
    compares against."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(PROBE.parent.glob("*.py")):
            data = path.read_bytes()
            info = tarfile.TarInfo(f"{PROBE_DIR.rsplit('/', 1)[1]}/{path.name}")
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class _Refused(Exception):
    """The engine would not create or start the container this GPU way."""


def _run_once(
    ref: str,
    *,
    name: str,
    args: list[str],
    timeout_s: float,
    extra: dict[str, Any],
    environment: dict[str, str],
) -> dict:
    from docker.errors import APIError
    from requests.exceptions import ConnectionError as RequestsConnectionError
    from requests.exceptions import ReadTimeout

    from kit.images.inspect import MANAGED_VALUE
    from kit.runtime.engine import LABEL_IMAGE, LABEL_MANAGED, client

    kwargs: dict[str, Any] = {
        "entrypoint": ["python"],  # skips base-image entrypoints (the CUDA banner)
        "command": args,
        "labels": {LABEL_MANAGED: MANAGED_VALUE, LABEL_IMAGE: name},
        "network_disabled": True,
        "detach": True,
        **extra,
    }
    if environment:
        kwargs["environment"] = {**environment, **(extra.get("environment") or {})}
    asks_gpus = bool(extra.get("device_requests") or extra.get("runtime"))
    container = None
    try:
        try:
            container = client().containers.create(ref, **kwargs)
        except APIError as exc:
            if asks_gpus:
                raise _Refused(str(exc.explanation or exc)) from exc
            raise
        container.put_archive(PROBE_DIR.rsplit("/", 1)[0], _probe_archive())
        try:
            container.start()
        except APIError as exc:
            if asks_gpus:
                raise _Refused(str(exc.explanation or exc)) from exc
            raise
        try:
            status = container.wait(timeout=timeout_s)
        except (ReadTimeout, RequestsConnectionError) as exc:
            raise KitError(f"the check inside {ref} did not finish in {timeout_s:.0f} s") from exc
        stdout = container.logs(stdout=True, stderr=False).decode("utf-8", errors="replace")
        stderr = container.logs(stdout=False, stderr=True).decode("utf-8", errors="replace")
    finally:
        if container is not None:
            container.remove(force=True)
    try:
        return parse_probe_output(stdout)
    except KitError as exc:
        tail = " | ".join(stderr.strip().splitlines()[-3:]) or "no output"
        raise KitError(f"{exc.message} in {ref} (exit {status.get('StatusCode')})", hint=tail) from exc


def run_probe(
    ref: str,
    *,
    name: str,
    flavor: str,
    mode: GpuMode = "auto",
    collective_timeout_s: float = COLLECTIVE_TIMEOUT_S,
    timeout_s: float = 600,
    environment: dict[str, str] | None = None,
) -> tuple[dict, GpuAccess]:
    """Run the probe in a fresh container (no network, removed afterwards): with the host's GPUs
    when the image is a GPU image and the engine gives them one of the ways gpu_access plans.
    `environment` is added to the container's (tests arm the rehearsal's fault switch with it)."""
    from kit.runtime.engine import translated

    def once(args: list[str], extra: dict[str, Any]) -> dict:
        with translated(f"checking {ref}"):
            return _run_once(
                ref, name=name, args=args, timeout_s=timeout_s, extra=extra, environment=environment or {}
            )

    without = probe_args(flavor, gpus=False, collective_timeout_s=collective_timeout_s)
    if flavor != "cuda":
        return once(without, {}), not_asked(mode, "a CPU image: its checks need no GPU")
    if mode == "none":
        return once(without, {}), not_asked(mode, "--gpus none")
    from kit.runtime.host import read_cdi, read_engine

    engine = read_engine()
    if not engine.answered:
        raise EnvironmentProblem(f"checking {ref}: {engine.error}")
    plans = plan(engine, read_cdi(engine))
    attempts: list[Attempt] = []
    with_gpus = probe_args(flavor, gpus=True, collective_timeout_s=collective_timeout_s)
    for chosen in plans.ways:
        try:
            report = once(with_gpus, {**GPU_CONTAINER, **chosen.sdk_kwargs()})
        except _Refused as exc:
            attempts.append(Attempt(chosen.how, " ".join(str(exc).split())[:300]))
            continue
        return report, granted(mode, chosen, attempts, plans.notes)
    access = refused(mode, attempts, plans.notes)
    if mode == "all":
        raise EnvironmentProblem(
            f"--gpus all: {access.why}",
            hint="; ".join(access.detail) or "install the NVIDIA Container Toolkit",
        )
    return once(without, {}), access


def lock_row(committed: str | None, installed: str | None) -> Row:
    """The 'lock' row: the image holds exactly images/NAME.lock (pure)."""
    from kit.images.image_lock import installed_vs_lock

    same, expected, found = installed_vs_lock(committed, installed)
    if same is None:
        return Row("lock", expected, found, NOT_CHECKED, found)
    return Row("lock", expected, found, OK if same else DRIFT)


def base_row(manifest: Manifest, committed: str | None, label: str | None) -> Row:
    """The 'base' row (pure): what the image was built on (its io.kit.base label) against the base the
    lock was made on, or the manifest's digest. A local base is not fixed (kit.images.base): one other
    than the lock's is said, not counted as drift, as the build said it."""
    from kit.images.system_lock import system_of

    image, digest = manifest.base.image, manifest.base.digest
    registry = f"{image}@{digest}" if digest and digest != LOCAL_BASE else None
    locked = system_of(committed).base if committed else None
    expected = locked or registry or f"{image} (built locally: not fixed)"
    if not label:
        return Row("base", expected, "not recorded", NOT_CHECKED, "built before the kit recorded its base")
    if registry:
        return Row("base", registry, label, OK if label == registry else DRIFT)
    if label == locked:
        return Row("base", expected, label, OK)
    why = "a locally built base is not fixed" + ("" if locked else "; the lock records no base yet")
    return Row("base", expected, label, OK, why)


def system_rows(manifest: Manifest, committed: str | None, dpkg_status: str | None) -> list[Row]:
    """The system-package rows (pure): each package the manifest names, then every package in the
    image's dpkg database against the lock's (kit image lock NAME --system)."""
    from kit.images.system_lock import apt_names, compare_packages, parse_dpkg_status, system_of

    locked = system_of(committed).packages if committed else {}
    if dpkg_status is None:
        return [
            Row("system packages", "the lock's", "no dpkg database", NOT_CHECKED, "not a Debian/Ubuntu image")
        ]
    installed = parse_dpkg_status(dpkg_status)
    if not locked:
        return [
            Row(
                "system packages",
                "the lock's (none recorded)",
                f"{len(installed)} in the image",
                NOT_CHECKED,
                f"the lock holds no system packages yet: kit image lock {manifest.name} --system",
            )
        ]
    rows = []
    for name in apt_names(manifest):
        want, have = locked.get(name), installed.get(name)
        expected, found = (
            want.version if want else "not in the lock",
            have.version if have else "not installed",
        )
        rows.append(
            Row(
                f"apt {name}",
                expected,
                found,
                OK if want and have and want.version == have.version else DRIFT,
            )
        )
    compared = compare_packages(locked, installed)
    differences = compared.differences
    found = (
        f"0 differences ({compared.same} packages)"
        if not differences
        else f"{len(differences)} difference(s): " + "; ".join(differences[:20])
    )
    rows.append(Row("system packages", f"the lock's {len(locked)}", found, DRIFT if differences else OK))
    return rows


def result_of(
    manifest: Manifest,
    *,
    tag: str,
    image_id: str,
    report: dict,
    access: GpuAccess,
    seconds: float,
    lock: Row | None = None,
    system: list[Row] | None = None,
) -> VerifyResult:
    """The result of one probe run (pure): rows, verdict and counts."""
    rows = compare(manifest, report, access=access) + ([lock] if lock else []) + (system or [])
    result_verdict = verdict(rows, access)
    return VerifyResult(
        name=manifest.name,
        tag=tag,
        image_id=image_id,
        flavor=manifest.flavor,
        verdict=result_verdict,
        ok=result_verdict == "pass",
        counts=counts(rows),
        rows=rows,
        gpus=access,
        seconds=round(seconds, 2),
        report=report,
    )


def verify_image(
    manifest: Manifest,
    *,
    gpus: GpuMode = "auto",
    ref: str | None = None,
    collective_timeout_s: float = COLLECTIVE_TIMEOUT_S,
) -> VerifyResult:
    from kit.images.inspect import read_file, require_image
    from kit.images.system_lock import DPKG_STATUS

    tag = ref or manifest.tag
    started = time.monotonic()
    info = require_image(tag, manifest.name)
    report, access = run_probe(
        tag, name=manifest.name, flavor=manifest.flavor, mode=gpus, collective_timeout_s=collective_timeout_s
    )
    committed, installed = _locks(manifest, tag)
    try:
        dpkg: str | None = read_file(tag, DPKG_STATUS, label_image=manifest.name).decode("utf-8", "replace")
    except KitError:
        dpkg = None
    return result_of(
        manifest,
        tag=tag,
        image_id=info.id,
        report=report,
        access=access,
        seconds=time.monotonic() - started,
        lock=lock_row(committed, installed),
        system=[
            base_row(manifest, committed, info.labels.get("io.kit.base")),
            *system_rows(manifest, committed, dpkg),
        ],
    )


def _locks(manifest: Manifest, tag: str) -> tuple[str | None, str | None]:
    """(images/NAME.lock, what pip installed in the image); None for one that is not there. An image
    built before locks recorded its `pip freeze --all` at lock.txt instead of installed.txt."""
    from kit.images.inspect import read_file
    from kit.images.lock import INSTALLED_PATH, LOCK_PATH

    path = lock_path(manifest.name)
    committed = path.read_text(encoding="utf-8") if path.is_file() else None
    installed = None
    for recorded in (INSTALLED_PATH, LOCK_PATH):
        try:
            text = read_file(tag, recorded, label_image=manifest.name).decode("utf-8", errors="replace")
        except KitError:
            continue
        # A hashed lock.txt is the lock itself, not a record of what was installed: never its own proof.
        installed = None if recorded == LOCK_PATH and "--hash=" in text else text
        break
    return committed, installed


__all__ = [
    "COLLECTIVE_TIMEOUT_S",
    "CPU_RANKS",
    "DRIFT",
    "MARKER",
    "NOT_CHECKED",
    "OK",
    "PROBE",
    "Row",
    "Status",
    "Verdict",
    "VerifyResult",
    "arch_names",
    "base_row",
    "compare",
    "counts",
    "lock_row",
    "major_minor",
    "parse_probe_output",
    "probe_args",
    "result_of",
    "run_probe",
    "system_rows",
    "verdict",
    "verify_image",
    "version_matches",
]
