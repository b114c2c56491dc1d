"""`kit image verify NAME`: prove from inside the image that it is what its manifest pins.

The probe (kit/images/inimage/verify.py, the kit's current copy) runs in a short-lived container
and reports what is installed; `compare` (pure) turns manifest + report into rows of
(check, expected, found, ok). Any row that is not ok is drift.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kit.errors import EnvironmentProblem, KitError
from kit.images.manifest import Manifest

PROBE = Path(__file__).resolve().parent / "inimage" / "verify.py"
MARKER = "KIT-VERIFY-JSON "
STAND_IN_MARK = "+kit.cpu.rehearsal"
GpuMode = Literal["auto", "all", "none"]


@dataclass(frozen=True)
class Row:
    check: str
    expected: str
    found: str
    ok: bool
    note: str = ""


@dataclass(frozen=True)
class VerifyResult:
    name: str
    tag: str
    image_id: str
    flavor: str
    ok: bool
    rows: list[Row]
    gpus: str
    """'requested' when the probe ran with the host's GPUs, else why not."""
    seconds: float
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def drift(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]


# --- pure comparison -------------------------------------------------------------------------------


def version_matches(expected: str, found: str | None) -> bool:
    """Exact, or a pin without a local label ('2.14.1') met by a local build ('2.14.1+cu130')."""
    if not found:
        return False
    return found == expected or ("+" not in expected and found.split("+", 1)[0] == expected)


def major_minor(version: str | None) -> str:
    return ".".join((version or "").split(".")[:2])


def arch_names(arch: str) -> set[str]:
    """'12.0' / '12.0a' / '12.0+PTX' -> names torch.cuda.get_arch_list() may use for it."""
    match = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", arch.strip())
    if not match:
        return {arch}
    digits = match[1] + match[2]
    return {f"sm_{digits}", f"sm_{digits}a", f"sm_{digits}f", f"compute_{digits}"}


def _python_row(manifest: Manifest, report: dict) -> Row:
    expected = manifest.base.python.removeprefix("python")
    found = str(report.get("python") or "")
    return Row("python", expected, found or "unknown", major_minor(found) == expected)


def _torch_rows(manifest: Manifest, torch: dict) -> tuple[list[Row], bool]:
    if not torch.get("imported"):
        return [Row("torch", manifest.pins.torch, f"import failed: {torch.get('error', '?')}", False)], False
    found = str(torch.get("version"))
    return [Row("torch", manifest.pins.torch, found, version_matches(manifest.pins.torch, found))], True


def _dist(report: dict, name: str) -> str | None:
    return (report.get("distributions") or {}).get(name)


def _module(report: dict, name: str) -> dict:
    return (report.get("modules") or {}).get(name) or {"found": False}


def _pinned_dist_row(check: str, dist: str, pin: str, report: dict) -> Row:
    found = _dist(report, dist)
    return Row(check, pin, found or "not installed", version_matches(pin, found))


def _stand_in_row(check: str, dists: tuple[str, ...], module: str, report: dict) -> Row:
    """CPU rehearsal: the kit's stand-in module is present and no real distribution is installed."""
    expected = "kit stand-in, no distribution"
    real = [f"{d}=={_dist(report, d)}" for d in dists if _dist(report, d)]
    if real:
        return Row(check, expected, ", ".join(real), False, "a CUDA-only package in the CPU image")
    info = _module(report, module)
    if info.get("stand_in"):
        return Row(check, expected, f"kit stand-in {info.get('version')}", True)
    if info.get("found"):
        return Row(check, expected, f"module at {info.get('origin')}", False, "not the kit's stand-in")
    return Row(check, expected, "missing", False, "SGLang imports it at start-up")


def _absent_row(check: str, dists: tuple[str, ...], report: dict, module: str | None = None) -> Row:
    present = [f"{d}=={_dist(report, d)}" for d in dists if _dist(report, d)]
    if module and _module(report, module).get("found") and not _module(report, module).get("stand_in"):
        present.append(f"module {module}")
    return Row(check, "not installed", ", ".join(present) or "not installed", not present)


def _gpu_rows(torch: dict, gpus: str) -> list[Row]:
    entries = torch.get("gpus") or []
    if gpus != "requested":
        return [Row("GPU op", "a matmul on each visible GPU", f"skipped ({gpus})", True, "skipped")]
    if torch.get("cuda_error"):
        return [Row("GPU op", "a matmul on each visible GPU", f"CUDA failed: {torch['cuda_error']}", False)]
    if not entries:
        return [Row("GPU op", "a matmul on each visible GPU", "no GPU visible (skipped)", True, "skipped")]
    rows = []
    for entry in entries:
        where = f"{entry.get('name')} (sm {entry.get('capability')})"
        found = (
            f"{where}: ok in {entry.get('ms')} ms" if entry.get("ok") else f"{where}: {entry.get('error')}"
        )
        rows.append(
            Row(f"GPU {entry.get('index')} matmul", "runs and matches the CPU", found, bool(entry.get("ok")))
        )
    return rows


def compare(manifest: Manifest, report: dict, *, gpus: str = "requested") -> list[Row]:
    """Manifest vs what the probe found inside the image. Pure: no Docker, no clock."""
    torch = report.get("torch") or {}
    rows = [_python_row(manifest, report)]
    torch_rows, torch_ok = _torch_rows(manifest, torch)
    rows += torch_rows
    if manifest.flavor == "cuda":
        rows += _cuda_rows(manifest, report, torch, torch_ok, gpus)
    else:
        rows += _cpu_rows(manifest, report, torch, torch_ok)
    return rows


def _cuda_rows(manifest: Manifest, report: dict, torch: dict, torch_ok: bool, gpus: str) -> list[Row]:
    pins = manifest.pins
    assert pins.cuda and pins.nccl and pins.nccl_package and pins.sglang_kernel and pins.flashinfer
    rows = []
    found_cuda = torch.get("cuda") if torch_ok else None
    rows.append(
        Row(
            "torch.version.cuda",
            pins.cuda,
            found_cuda or "none (CPU build)",
            major_minor(found_cuda) == major_minor(pins.cuda),
        )
    )
    toolkit = re.match(r"^(?:[\w.-]+/)*cuda:(\d+\.\d+(?:\.\d+)?)-", manifest.base.image)
    if toolkit:
        found_toolkit = (report.get("env") or {}).get("CUDA_VERSION")
        rows.append(
            Row(
                "CUDA toolkit (base image)",
                toolkit[1],
                found_toolkit or "unknown",
                found_toolkit == toolkit[1],
            )
        )
    found_nccl = torch.get("nccl") if torch_ok else None
    rows.append(
        Row(
            "NCCL (torch reports)",
            pins.nccl,
            found_nccl or torch.get("nccl_error") or "none",
            found_nccl == pins.nccl,
        )
    )
    rows.append(_pinned_dist_row(f"NCCL wheel {pins.nccl_package}", pins.nccl_package, pins.nccl, report))
    for other in ("nvidia-nccl-cu12", "nvidia-nccl-cu13"):
        if other != pins.nccl_package and _dist(report, other):
            rows.append(
                Row(
                    f"NCCL wheel {other}",
                    "not installed",
                    _dist(report, other) or "",
                    False,
                    "two NCCL libraries",
                )
            )
    rows.append(_pinned_dist_row("sglang", "sglang", manifest.pins.sglang, report))
    rows.append(_pinned_dist_row("sglang-kernel", "sglang-kernel", pins.sglang_kernel, report))
    rows.append(_pinned_dist_row("flashinfer-python", "flashinfer-python", pins.flashinfer, report))
    # flashinfer refuses to run with a cubin package of another version; SGLang pins both equal.
    if _dist(report, "flashinfer-cubin"):
        rows.append(_pinned_dist_row("flashinfer-cubin", "flashinfer-cubin", pins.flashinfer, report))
    if pins.torchvision:
        rows.append(_pinned_dist_row("torchvision", "torchvision", pins.torchvision, report))
    found_arches = list(torch.get("arch_list") or []) if torch_ok else []
    missing = [a for a in manifest.arch_list if not (arch_names(a) & set(found_arches))]
    rows.append(
        Row(
            "compiled arch list",
            "covers "
            + ", ".join(sorted({f"sm_{a.split('+')[0].replace('.', '')}" for a in manifest.arch_list})),
            " ".join(found_arches) or torch.get("arch_list_error") or "none",
            bool(found_arches) and not missing,
            f"missing {', '.join(missing)}" if missing and found_arches else "",
        )
    )
    rows += _gpu_rows(torch, gpus) if torch_ok else []
    return rows


def _cpu_rows(manifest: Manifest, report: dict, torch: dict, torch_ok: bool) -> list[Row]:
    rows = []
    found_cuda = torch.get("cuda") if torch_ok else None
    rows.append(
        Row("torch.version.cuda", "none (CPU build)", found_cuda or "none (CPU build)", not found_cuda)
    )
    rows.append(_absent_row("NCCL wheel", ("nvidia-nccl-cu12", "nvidia-nccl-cu13"), report))
    rows.append(_pinned_dist_row("sglang", "sglang", manifest.pins.sglang, report))
    rows.append(_stand_in_row("sglang-kernel", ("sglang-kernel", "sgl-kernel"), "sgl_kernel", report))
    rows.append(
        _absent_row(
            "flashinfer",
            ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"),
            report,
            "flashinfer",
        )
    )
    if manifest.pins.torchvision:
        rows.append(_pinned_dist_row("torchvision", "torchvision", manifest.pins.torchvision, report))
    else:
        rows.append(_stand_in_row("torchvision", ("torchvision",), "torchvision", report))
    arches = list(torch.get("arch_list") or []) if torch_ok else []
    rows.append(
        Row("compiled arch list", "none (CPU build)", " ".join(arches) or "none (CPU build)", not arches)
    )
    return rows


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


# --- running it ------------------------------------------------------------------------------------


def run_probe(ref: str, *, name: str, gpus: bool, timeout_s: float = 300) -> dict:
    """Run the probe in a fresh container (no network, removed afterwards) and return its report."""
    import docker
    from requests.exceptions import ConnectionError as RequestsConnectionError
    from requests.exceptions import ReadTimeout

    from kit.images.inspect import MANAGED_VALUE
    from kit.runtime.engine import LABEL_IMAGE, LABEL_MANAGED, client, translated

    # The kit's own copy of the probe, passed on the command line: an image built before the probe
    # last changed is still checked by the rules this kit version compares against.
    command = ["-c", PROBE.read_text(encoding="utf-8")] + ([] if gpus else ["--skip-gpu"])
    kwargs: dict[str, Any] = {
        "entrypoint": ["python"],  # skips base-image entrypoints (the CUDA banner)
        "command": command,
        "labels": {LABEL_MANAGED: MANAGED_VALUE, LABEL_IMAGE: name},
        "network_disabled": True,
        "detach": True,
    }
    if gpus:
        kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    with translated(f"checking {ref}"):
        container = client().containers.create(ref, **kwargs)
        try:
            container.start()
            try:
                status = container.wait(timeout=timeout_s)
            except (ReadTimeout, RequestsConnectionError) as exc:
                raise KitError(f"the check inside {ref} did not finish in {timeout_s:.0f} s") from exc
            stdout = container.logs(stdout=True, stderr=False).decode("utf-8", errors="replace")
            stderr = container.logs(stdout=False, stderr=True).decode("utf-8", errors="replace")
        finally:
            container.remove(force=True)
    try:
        return parse_probe_output(stdout)
    except KitError as exc:
        tail = " | ".join(stderr.strip().splitlines()[-3:]) or "no output"
        raise KitError(f"{exc.message} in {ref} (exit {status.get('StatusCode')})", hint=tail) from exc


def _gpu_choice(mode: GpuMode) -> tuple[bool, str]:
    from kit.images.inspect import gpu_runtime_available

    if mode == "none":
        return False, "--gpus none"
    available = gpu_runtime_available()
    if mode == "all" and not available:
        raise EnvironmentProblem(
            "--gpus all: the engine has no NVIDIA runtime",
            hint="install the NVIDIA Container Toolkit, or use --gpus auto",
        )
    return (True, "requested") if available else (False, "no NVIDIA runtime on this engine")


def verify_image(manifest: Manifest, *, gpus: GpuMode = "auto", ref: str | None = None) -> VerifyResult:
    from kit.images.inspect import require_image

    tag = ref or manifest.tag
    started = time.monotonic()
    info = require_image(tag, manifest.name)
    use_gpus, why = _gpu_choice(gpus)
    report = run_probe(tag, name=manifest.name, gpus=use_gpus)
    rows = compare(manifest, report, gpus=why)
    return VerifyResult(
        name=manifest.name,
        tag=tag,
        image_id=info.id,
        flavor=manifest.flavor,
        ok=all(r.ok for r in rows),
        rows=rows,
        gpus=why,
        seconds=round(time.monotonic() - started, 2),
        report=report,
    )
