"""`kit doctor [TARGET]`: the host checks that known hangs and crashes come back to, each with its fix.

    report = run_doctor("qwen-base")      # DoctorReport; checks in a fixed order, each
                                          # pass | warn | fail | not-checked (with why)

`evaluate(context, facts)` is pure: what the target needs (`DoctorContext`) and what the host has
(`kit.runtime.host.HostFacts`, the one host-facts record fingerprints read too) in, checks out.
Tests give it facts read through the fake NVML library (kit/scenarios/fake_nvml.py), captured lspci
text and recorded `docker info` shapes; `run_doctor` reads the real host. A machine without GPUs lists
every check, says why the GPU ones could not run, and passes. `--gpus 0,1` (or KIT_GPUS) narrows the
GPU checks to those devices.

The checks live in kit/pivot/doctor_gpus.py and kit/pivot/doctor_host.py. The report's JSON form is
`DoctorReport`; its JSON Schema is docs/schema/doctor.json (a test keeps the file equal to
`DoctorReport.model_json_schema()`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from kit.errors import ExitCode
from kit.pivot.doctor_gpus import GpuChecks
from kit.pivot.doctor_host import HostChecks
from kit.pivot.doctor_report import (
    CHECK_IDS,
    SCHEMA_ID,
    Check,
    DoctorContext,
    DoctorReport,
    Status,
)
from kit.runtime.host import HostFacts, read_host


class _Checks(GpuChecks, HostChecks):
    """Every check, in CHECK_IDS order; each reads `ctx` and `facts` only."""


def evaluate(ctx: DoctorContext, facts: HostFacts) -> list[Check]:
    checks = _Checks(ctx, facts)
    return [getattr(checks, check_id.replace("-", "_"))() for check_id in CHECK_IDS]


def report(ctx: DoctorContext, checks: list[Check], seconds: float) -> DoctorReport:
    counts = {
        status: sum(c.status == status for c in checks) for status in ("pass", "warn", "fail", "not-checked")
    }
    ok = counts["fail"] == 0
    return DoctorReport(
        target=ctx.target,
        image=ctx.image,
        device=ctx.device,  # type: ignore[arg-type]
        checks=checks,
        counts=counts,
        ok=ok,
        exit_code=int(ExitCode.OK if ok else ExitCode.FAILED),
        seconds=round(seconds, 3),
    )


def compose_port(target: str, compose: Path | None = None) -> int | None:
    """The host port compose.yaml (the project's, or COMPOSE) publishes TARGET's service on; None
    when it has no such service or publishes none. Each target has its own (tiny is on 30004)."""
    import yaml

    from kit import paths

    try:
        document = yaml.safe_load((compose or paths.compose_file()).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return None
    service = (document.get("services") or {}).get(target) or {}
    for entry in service.get("ports") or []:
        if isinstance(entry, dict) and entry.get("published"):  # the long syntax
            return int(entry["published"])
        parts = str(entry).split(":")
        if len(parts) >= 2 and parts[-2].isdigit():  # [address:]host:container
            return int(parts[-2])
    return None


def doctor_context(
    target: str | None,
    *,
    image: str | None = None,
    overrides: tuple[str, ...] = (),
    gpus: str | None = None,
) -> DoctorContext:
    """What TARGET (and/or IMAGE) asks of the host; an empty context when neither is named.
    GPUS: --gpus as given (else KIT_GPUS): the devices the GPU checks look at."""
    from kit.runtime.host import choose_gpus

    if target is None and image is None:
        devices = choose_gpus(gpus, -1, target="the host", strict=False) if gpus else ()
        return DoctorContext(gpu_devices=devices)
    if target is None:
        from kit.images.manifest import load_manifest

        manifest = load_manifest(image)
        return DoctorContext(
            image=manifest.name,
            image_ref=manifest.tag,
            device=manifest.flavor,
            image_cuda=manifest.pins.cuda,
            arch_list=manifest.arch_list,
            gpu_devices=choose_gpus(gpus, -1, target=manifest.name, strict=False) if gpus else (),
        )
    from kit.launch import resolve_full

    r = resolve_full(target, image=image, overrides=overrides)
    spec, facts = r.spec, r.model.facts
    return DoctorContext(
        target=target,
        image=spec.image,
        image_ref=spec.image_ref,
        device=spec.device,
        gpus=spec.gpus,
        image_cuda=r.manifest.pins.cuda,
        arch_list=r.manifest.arch_list,
        hf_repo=facts.hf_id,
        hf_revision=spec.hf_revision,
        model_gib=facts.size_on_disk_gib,
        model_path=facts.path,
        hf_cache=spec.hf_cache,
        port=compose_port(target) or spec.port,
        compose_port=compose_port(target),
        server_port=spec.port,
        ipc_host=spec.ipc_host,
        shm_size=spec.shm_size,
        memlock=spec.ulimits.get("memlock"),
        gpu_devices=choose_gpus(gpus, spec.gpus, target=target),
        server_env=tuple(sorted(spec.env.items())),
    )


def run_doctor(
    target: str | None = None,
    *,
    image: str | None = None,
    overrides: tuple[str, ...] = (),
    gpus: str | None = None,
    nvml_lib: Any | None = None,
) -> DoctorReport:
    started = time.monotonic()
    ctx = doctor_context(target, image=image, overrides=overrides, gpus=gpus)
    if ctx.device == "cuda" and ctx.image_ref:
        held, why = read_image_arches(ctx.image_ref)
        ctx = dataclasses.replace(ctx, image_arches=held, image_arches_why=why)
    facts = read_host(
        image_ref=ctx.image_ref,
        hf_cache=ctx.hf_cache,
        hf_repo=ctx.hf_repo,
        hf_revision=ctx.hf_revision,
        port=ctx.port,
        nvml_lib=nvml_lib,
    )
    return report(ctx, evaluate(ctx, facts), time.monotonic() - started)


ARCHES_PROBE = Path(__file__).resolve().parent / "inimage" / "arches.py"
ARCHES_MARK = "KIT_ARCHES "


def read_image_arches(image_ref: str) -> tuple[dict[str, Any] | None, str | None]:
    """(what the image's kernels hold, None) read by kit/pivot/inimage/arches.py in a throwaway
    container of the image (no GPU, no network), or (None, why not)."""
    from kit.errors import KitError
    from kit.runtime.engine import client, image_exists, translated
    from kit.runtime.server import run_labels

    try:
        with translated(f"reading the kernels of {image_ref}"):
            if not image_exists(image_ref):
                return None, f"{image_ref} is not built here (kit image build), so its kernels cannot be read"
            out = client().containers.run(
                image_ref,
                ["python", "-c", ARCHES_PROBE.read_text(encoding="utf-8")],
                entrypoint=[],
                labels={**run_labels(), "io.kit.managed": "doctor"},
                network_mode="none",
                remove=True,
                stderr=False,
            )
    except KitError as exc:
        return None, f"the image's kernels could not be read: {exc.one_line()}"
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith(ARCHES_MARK):
            return json.loads(line[len(ARCHES_MARK) :]), None
    return None, "the image's kernel probe printed nothing"


def schema() -> dict[str, Any]:
    """The JSON Schema of `kit doctor --json` (docs/schema/doctor.json)."""
    document = DoctorReport.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **document,
    }


__all__ = [
    "CHECK_IDS",
    "SCHEMA_ID",
    "Check",
    "DoctorContext",
    "DoctorReport",
    "Status",
    "doctor_context",
    "evaluate",
    "read_image_arches",
    "report",
    "run_doctor",
    "schema",
]
