"""`kit image verify`'s rows: manifest vs what the probe found and ran inside the image. Pure: no
Docker, no clock. Each row is ok, drift, or not checked (with why); `verdict` reads the rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from kit.images.gpu_access import GpuAccess, not_asked
from kit.images.manifest import Manifest

COLLECTIVE_TIMEOUT_S = 90.0
CPU_RANKS = 2

Status = Literal["ok", "drift", "not checked"]
OK: Status = "ok"
DRIFT: Status = "drift"
NOT_CHECKED: Status = "not checked"
Verdict = Literal["pass", "drift", "incomplete", "waived"]


@dataclass(frozen=True)
class Row:
    check: str
    expected: str
    found: str
    status: Status
    why: str = ""
    """For 'not checked': why it could not run. Otherwise a note (e.g. 'the kit's stand-in')."""
    gpu: bool = False
    """The check needs the host's GPUs in the container: --gpus none turns it off on purpose."""

    @property
    def ok(self) -> bool:
        return self.status == OK


# --- pure comparison -------------------------------------------------------------------------------


def version_matches(expected: str, found: str | None, *, build: str | None = None) -> bool:
    """Exact, or a pin without a local label ('2.14.1') met by a local build ('2.14.1+cu130'); when
    `build` is given ('cu130': PyPI's torch is the CUDA 13.0 build), only by that one."""
    if not found:
        return False
    if found == expected:
        return True
    release, _, label = found.partition("+")
    return "+" not in expected and release == expected and (not build or not label or label == build)


def _cuda_build(manifest: Manifest) -> str | None:
    """'cu130' for a CUDA 13.0 image: the only local label its torch and torchvision may carry."""
    return "cu" + manifest.pins.cuda.replace(".", "") if manifest.pins.cuda else None


def major_minor(version: str | None) -> str:
    return ".".join((version or "").split(".")[:2])


def arch_names(arch: str) -> set[str]:
    """'12.0' / '12.0a' / '12.0+PTX' -> names torch.cuda.get_arch_list() may use for it."""
    match = re.fullmatch(r"(\d+)\.(\d+)([af]?)(\+PTX)?", arch.strip())
    if not match:
        return {arch}
    digits = match[1] + match[2]
    return {f"sm_{digits}", f"sm_{digits}a", f"sm_{digits}f", f"compute_{digits}"}


def _row(check: str, expected: str, found: str, ok: bool, why: str = "", *, gpu: bool = False) -> Row:
    return Row(check, expected, found, OK if ok else DRIFT, why, gpu)


def _python_row(manifest: Manifest, report: dict) -> Row:
    expected = manifest.base.python.removeprefix("python")
    found = str(report.get("python") or "")
    return _row("python", expected, found or "unknown", major_minor(found) == expected)


def _torch_rows(manifest: Manifest, torch: dict) -> tuple[list[Row], bool]:
    if not torch.get("imported"):
        return [_row("torch", manifest.pins.torch, f"import failed: {torch.get('error', '?')}", False)], False
    found = str(torch.get("version"))
    ok = version_matches(manifest.pins.torch, found, build=_cuda_build(manifest))
    return [_row("torch", manifest.pins.torch, found, ok)], True


def _dist(report: dict, name: str) -> str | None:
    return (report.get("distributions") or {}).get(name)


def _module(report: dict, name: str) -> dict:
    return (report.get("modules") or {}).get(name) or {"found": False}


def _pinned_dist_row(check: str, dist: str, pin: str, report: dict, *, build: str | None = None) -> Row:
    found = _dist(report, dist)
    return _row(check, pin, found or "not installed", version_matches(pin, found, build=build))


def _stand_in_row(check: str, dists: tuple[str, ...], module: str, report: dict) -> Row:
    """CPU rehearsal: the kit's stand-in module is present and no real distribution is installed."""
    expected = "kit stand-in, no distribution"
    real = [f"{d}=={_dist(report, d)}" for d in dists if _dist(report, d)]
    if real:
        return _row(check, expected, ", ".join(real), False, "a CUDA-only package in the CPU image")
    info = _module(report, module)
    if info.get("stand_in"):
        return _row(check, expected, f"kit stand-in {info.get('version')}", True)
    if info.get("found"):
        return _row(check, expected, f"module at {info.get('origin')}", False, "not the kit's stand-in")
    return _row(check, expected, "missing", False, "SGLang imports it at start-up")


def _absent_row(check: str, dists: tuple[str, ...], report: dict, module: str | None = None) -> Row:
    present = [f"{d}=={_dist(report, d)}" for d in dists if _dist(report, d)]
    if module and _module(report, module).get("found") and not _module(report, module).get("stand_in"):
        present.append(f"module {module}")
    return _row(check, "not installed", ", ".join(present) or "not installed", not present)


def _unchecked(check: str, expected: str, why: str, *, gpu: bool = False, found: str = "not run") -> Row:
    return Row(check, expected, found, NOT_CHECKED, why, gpu)


def _py_spy_row(manifest: Manifest, report: dict) -> Row:
    """py-spy dumps a hung rank's stack: installed at the pin, and its binary runs."""
    pin = manifest.pip_pin("py-spy")
    expected = f"{pin or '(no pin)'}; py-spy --version runs"
    facts = report.get("py_spy")
    if facts is None:
        return _unchecked("py-spy", expected, "the probe did not report it")
    if not pin:
        return _row(
            "py-spy", expected, facts.get("version") or "not installed", False, "the manifest pins no py-spy"
        )
    version = facts.get("version")
    if not version_matches(pin, version):
        return _row("py-spy", expected, version or "not installed", False)
    output = str(facts.get("output") or "")
    if facts.get("rc") != 0 or output.split()[-1:] != [version]:
        ran = facts.get("error") or f"py-spy --version exited {facts.get('rc')}: {output or 'no output'}"
        return _row("py-spy", expected, f"{version}; {ran}", False, "installed but does not run")
    return _row("py-spy", expected, f"{version}; '{output}'", True)


def _gpu_matmul_rows(torch: dict, access: GpuAccess, torch_ok: bool) -> list[Row]:
    expected = "a matmul on each visible GPU matches the CPU"
    if not access.granted:
        return [_unchecked("GPU matmul", expected, access.why, gpu=True)]
    if not torch_ok:
        return [_unchecked("GPU matmul", expected, "torch did not import", gpu=True)]
    if torch.get("cuda_error"):
        return [
            _row("GPU matmul", expected, f"CUDA failed: {torch['cuda_error']}", False, access.why, gpu=True)
        ]
    entries = torch.get("gpus") or []
    if not entries:
        return [_row("GPU matmul", expected, "CUDA sees no GPU", False, f"though {access.why}", gpu=True)]
    rows = []
    for position, entry in enumerate(entries):
        where = f"{entry.get('name')} (sm {entry.get('capability')})"
        ok = bool(entry.get("ok"))
        found = f"{where}: ok in {entry.get('ms')} ms" if ok else f"{where}: {entry.get('error')}"
        rows.append(
            Row(
                f"GPU {entry.get('index', position)} matmul",
                "runs and matches the CPU",
                found,
                OK if ok else DRIFT,
                gpu=True,
            )
        )
    return rows


# Import errors that only say "no GPU driver here": not drift when no GPU was given.
_NEEDS_DRIVER = re.compile(
    r"libcuda\.so|libnvidia-ml|CUDA driver|NVIDIA driver|no CUDA-capable device|CUDA_ERROR_NO_DEVICE", re.I
)


def _import_row(module: str, kernels: dict | None, access: GpuAccess, torch_ok: bool) -> Row:
    check, expected = f"import {module}", "imports"
    if not torch_ok:
        return _unchecked(check, expected, "torch did not import")
    if not kernels or not kernels.get("ran"):
        return _unchecked(
            check, expected, (kernels or {}).get("why") or "the probe did not run its kernels step"
        )
    entry = (kernels.get("imports") or {}).get(module)
    if entry is None:
        ended = kernels.get("error") or f"the kernels step ended (exit {kernels.get('rc')}) before it"
        return _row(check, expected, "not reached", False, ended)
    if not entry.get("found"):
        return _row(check, expected, "no such module", False)
    if entry.get("ok"):
        version = f" ({entry['version']})" if entry.get("version") else ""
        return _row(check, expected, f"ok in {entry.get('seconds')} s{version}", True)
    error = str(entry.get("error") or "?")
    if not access.granted and _NEEDS_DRIVER.search(error):
        return _unchecked(
            check, expected, f"its import needs a GPU driver: {access.why}", gpu=True, found=error[:300]
        )
    return _row(check, expected, error[:300], False, _last_line(kernels.get("stderr_tail")))


def _op_results(op: dict) -> tuple[list[dict], list[dict]]:
    results = list(op.get("results") or [])
    return results, [r for r in results if not r.get("ok")]


def _gpu_op_row(kernels: dict | None, access: GpuAccess, torch_ok: bool) -> Row:
    op = (kernels or {}).get("op") or {}
    name = op.get("name") or "silu_and_mul"
    check, expected = "sgl_kernel op", f"{name} on every GPU matches torch"
    if not access.granted:
        return _unchecked(check, expected, access.why, gpu=True)
    if not torch_ok or not kernels or not kernels.get("ran"):
        return _unchecked(
            check,
            expected,
            "torch did not import" if not torch_ok else "the kernels step did not run",
            gpu=True,
        )
    if not op.get("ran"):
        why = op.get("why") or "the kernels step ended before it"
        if op.get("blocked"):  # another row says why (the import, or CUDA)
            return _unchecked(check, expected, why, gpu=True)
        return _row(check, expected, "not run", False, why, gpu=True)
    results, failed = _op_results(op)
    if op.get("error") or failed or not results:
        detail = (
            op.get("error") or "; ".join(f"{r.get('device')}: {r.get('error')}" for r in failed) or "no GPU"
        )
        return _row(check, expected, detail, False, _last_line(kernels.get("stderr_tail")), gpu=True)
    worst = max(float(r.get("max_diff") or 0) for r in results)
    devices = ", ".join(str(r.get("device")) for r in results)
    return _row(check, expected, f"matches on {devices} (max |diff| {worst:.3g})", True, gpu=True)


def _stand_in_op_row(kernels: dict | None, torch_ok: bool) -> Row:
    check = "sgl_kernel op"
    expected = "the stand-in's assign_req_to_token_pool_cpu matches torch"
    if not torch_ok:
        return _unchecked(check, expected, "torch did not import")
    if not kernels or not kernels.get("ran"):
        return _unchecked(
            check, expected, (kernels or {}).get("why") or "the probe did not run its kernels step"
        )
    op = kernels.get("op") or {}
    if not op.get("ran"):
        why = op.get("why") or "the kernels step ended before it"
        return (
            _unchecked(check, expected, why)
            if op.get("blocked")
            else _row(check, expected, "not run", False, why)
        )
    if not op.get("stand_in"):
        return _row(check, expected, f"ran {op.get('name')}", False, "not the kit's stand-in")
    results, failed = _op_results(op)
    if op.get("error") or failed or not results:
        detail = op.get("error") or "; ".join(str(r.get("error")) for r in failed) or "no result"
        return _row(check, expected, detail, False)
    return _row(
        check, expected, "kit CPU stand-in: matches torch", True, "the kit's stand-in, not a CUDA kernel"
    )


def _all_reduce_row(report: dict, access: GpuAccess, torch_ok: bool, *, gpu: bool) -> Row:
    facts = report.get("all_reduce")
    timeout = (facts or {}).get("timeout_s") or COLLECTIVE_TIMEOUT_S
    if gpu:
        expected = f"NCCL sum over every GPU, a process each, within {timeout:g} s"
        if not access.granted:
            return _unchecked("all_reduce", expected, access.why, gpu=True)
    else:
        expected = f"gloo sum over {CPU_RANKS} CPU ranks, a process each, within {timeout:g} s"
    if not torch_ok:
        return _unchecked("all_reduce", expected, "torch did not import", gpu=gpu)
    if not facts:
        return _unchecked("all_reduce", expected, "the probe did not run it", gpu=gpu)
    if not facts.get("ran"):
        return _unchecked("all_reduce", expected, str(facts.get("why") or "not run"), gpu=gpu)
    ranks = facts.get("ranks") or []
    world = facts.get("world")
    where = f"{world} {'GPUs' if gpu else 'ranks'} ({facts.get('backend')})"
    # Every rank answered, and each saw the right sum: the probe's own flag is not enough alone.
    if facts.get("ok") and ranks and len(ranks) == world and all(r.get("ok") for r in ranks):
        want = ranks[0].get("want")
        return Row(
            "all_reduce",
            expected,
            f"{where}: {want if want is None else f'{want:g}'} on every rank in {facts.get('seconds')} s",
            OK,
            gpu=gpu,
        )
    bad = [r for r in ranks if not r.get("ok")]
    detail = "; ".join(f"rank {r.get('rank')}: {r.get('error') or _wrong_sum(r)}" for r in bad[:4])
    detail = detail or f"{len(ranks)} of {world} ranks reported"
    lead = f"timed out after {timeout:g} s" if facts.get("timed_out") else "failed"
    tail = next((r.get("stderr_tail") for r in bad if r.get("stderr_tail")), None)
    return Row("all_reduce", expected, f"{where} {lead}: {detail}", DRIFT, _last_line(tail), gpu)


def _last_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[-1][:300] if lines else ""


def _wrong_sum(rank: dict) -> str:
    return f"got {rank.get('low')}..{rank.get('high')}, want {rank.get('want')}"


def compare(manifest: Manifest, report: dict, *, access: GpuAccess) -> list[Row]:
    """Manifest vs what the probe found and ran inside the image. Pure: no Docker, no clock."""
    torch = report.get("torch") or {}
    rows = [_python_row(manifest, report)]
    torch_rows, torch_ok = _torch_rows(manifest, torch)
    rows += torch_rows
    if manifest.flavor == "cuda":
        rows += _cuda_rows(manifest, report, torch, torch_ok, access)
    else:
        rows += _cpu_rows(manifest, report, torch, torch_ok)
    rows.append(_py_spy_row(manifest, report))
    return rows


def _cuda_rows(manifest: Manifest, report: dict, torch: dict, torch_ok: bool, access: GpuAccess) -> list[Row]:
    pins = manifest.pins
    assert pins.cuda and pins.nccl and pins.nccl_package and pins.sglang_kernel and pins.flashinfer
    rows = []
    found_cuda = torch.get("cuda") if torch_ok else None
    rows.append(
        _row(
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
            _row(
                "CUDA toolkit (base image)",
                toolkit[1],
                found_toolkit or "unknown",
                found_toolkit == toolkit[1],
            )
        )
    found_nccl = torch.get("nccl") if torch_ok else None
    rows.append(
        _row(
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
                _row(
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
        build = _cuda_build(manifest)
        rows.append(_pinned_dist_row("torchvision", "torchvision", pins.torchvision, report, build=build))
    found_arches = list(torch.get("arch_list") or []) if torch_ok else []
    missing = [a for a in manifest.arch_list if not (arch_names(a) & set(found_arches))]
    rows.append(
        _row(
            "compiled arch list",
            "covers "
            + ", ".join(sorted({f"sm_{a.split('+')[0].replace('.', '')}" for a in manifest.arch_list})),
            " ".join(found_arches) or torch.get("arch_list_error") or "none",
            bool(found_arches) and not missing,
            f"missing {', '.join(missing)}" if missing and found_arches else "",
        )
    )
    kernels = report.get("kernels")
    rows.append(_import_row("sgl_kernel", kernels, access, torch_ok))
    rows.append(_import_row("flashinfer", kernels, access, torch_ok))
    rows += _gpu_matmul_rows(torch, access, torch_ok)
    rows.append(_gpu_op_row(kernels, access, torch_ok))
    rows.append(_all_reduce_row(report, access, torch_ok, gpu=True))
    return rows


def _cpu_rows(manifest: Manifest, report: dict, torch: dict, torch_ok: bool) -> list[Row]:
    rows = []
    found_cuda = torch.get("cuda") if torch_ok else None
    rows.append(
        _row("torch.version.cuda", "none (CPU build)", found_cuda or "none (CPU build)", not found_cuda)
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
        _row("compiled arch list", "none (CPU build)", " ".join(arches) or "none (CPU build)", not arches)
    )
    rows.append(_stand_in_op_row(report.get("kernels"), torch_ok))
    rows.append(_all_reduce_row(report, not_asked("none", ""), torch_ok, gpu=False))
    return rows


def verdict(rows: list[Row], access: GpuAccess) -> Verdict:
    """drift beats everything; every row ok is a pass; rows that did not run make it incomplete,
    unless they are only GPU rows turned off on purpose (--gpus none): waived."""
    if any(r.status == DRIFT for r in rows):
        return "drift"
    unchecked = [r for r in rows if r.status == NOT_CHECKED]
    if not unchecked:
        return "pass"
    if access.waived and all(r.gpu for r in unchecked):
        return "waived"
    return "incomplete"


def counts(rows: list[Row]) -> dict[str, int]:
    return {status: sum(r.status == status for r in rows) for status in (OK, DRIFT, NOT_CHECKED)}
