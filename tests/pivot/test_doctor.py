"""Doctor's checks over facts: GPU hosts through the fake NVML library (kit/scenarios/fake_nvml.py),
lspci text and recorded `docker info` shapes, a host without GPUs for real, and --json against
docs/schema/doctor.json."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from kit.pivot.doctor import CHECK_IDS, DoctorContext, doctor_context, evaluate, report, run_doctor, schema
from kit.pivot.doctor_gpus import kernels_cover
from kit.runtime.host import (
    EngineFacts,
    HostFacts,
    cdi_answer,
    engine_facts,
    engine_failed,
    iommu_mode,
    nvml_bdf,
    parse_lspci,
    read_nvml,
    read_port,
    scan_model_cache,
    upstream_bridges,
)
from kit.scenarios.fake_nvml import FakeNvml, NVMLError_GpuIsLost

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SCHEMA = ROOT / "docs" / "schema" / "doctor.json"
GiB = 1 << 30
# lspci -vvv in its own format, for a Starship/Matisse (AMD) host with two RTX PRO 6000 cards: the
# first GPU's root port has ACS source validation and redirection on, as in NVIDIA/nccl#2079.
LSPCI = (FIXTURES / "lspci-acs.txt").read_text()


def status(checks, check_id: str) -> str:
    return next(c for c in checks if c.id == check_id).status


def by_id(checks, check_id: str):
    return next(c for c in checks if c.id == check_id)


def gpu_host(nvml: FakeNvml | None = None, **changes) -> HostFacts:
    """A healthy 4 x RTX PRO 6000 workstation: driver 580 (CUDA 13.0), nvidia runtime, IOMMU passthrough."""
    nvml = nvml or FakeNvml.of(4)
    facts = HostFacts(
        nvml=read_nvml(nvml),
        engine=EngineFacts(version="28.0.1", runtimes=("nvidia", "runc")),
        image_present=True,
        lspci={},
        iommu=iommu_mode("BOOT_IMAGE=/vmlinuz iommu=pt", ["ivhd0"], ["identity"] * 4),
        shm_total=64 * GiB,
        shm_free=64 * GiB,
        memlock=-1,
        port=30000,
        port_free=True,
    )
    return dataclasses.replace(facts, **changes)


# What kit/pivot/inimage/arches.py prints for a CUDA image, in its own shape: torch's arch flags and
# the kernel wheels' cubins. The values are an example of that shape (a GPU host reads the real ones:
# the GPU host check's doctor step), not a record of the cu130 image.
HELD = {
    "torch": ["compute_120", "sm_100", "sm_120", "sm_80", "sm_90"],
    "packages": {
        "sgl_kernel": {"arches": ["sm_100a", "sm_120a"], "files": 3},
        "flashinfer": {"why": "no shared objects (pure Python, or JIT at run time)", "files": 0},
        "deep_gemm": {"why": "not installed"},
    },
}


@pytest.fixture(scope="module")
def qwen() -> DoctorContext:
    return dataclasses.replace(doctor_context("qwen-base"), image_arches=HELD)


def test_a_healthy_gpu_host_passes_every_gpu_check(qwen):
    checks = evaluate(qwen, gpu_host())
    assert [c.id for c in checks] == list(CHECK_IDS)
    for check_id in ("nvidia-driver", "container-toolkit", "gpu-count", "compute-capability", "gpu-busy"):
        assert status(checks, check_id) == "pass", by_id(checks, check_id)
    assert "12.0: the image's kernels cover it (torch sm_120)" in by_id(checks, "compute-capability").summary
    topology = by_id(checks, "p2p-topology")
    assert topology.status == "pass" and topology.details["topology"]["0"]["1"] == "PHB"
    assert "crosses the CPU's root complex" in topology.summary  # PHB: ACS and IOMMU matter
    assert status(checks, "iommu") == "pass" and "passthrough" in by_id(checks, "iommu").summary


def test_a_driver_older_than_the_images_cuda_fails_with_the_driver_version_to_install(qwen):
    checks = evaluate(qwen, gpu_host(FakeNvml.of(4, driver="575.51.03", cuda_driver=12090)))
    driver = by_id(checks, "nvidia-driver")
    assert driver.status == "fail"
    assert "CUDA up to 12.9" in driver.summary and "needs CUDA 13.0" in driver.summary
    assert driver.fix == "install an NVIDIA driver >= 580.65.06"


def test_gpus_outside_the_images_kernels_fail_naming_the_package(qwen):
    checks = evaluate(qwen, gpu_host(FakeNvml.of(4, name="NVIDIA H100", capability=(9, 0))))
    capability = by_id(checks, "compute-capability")
    assert capability.status == "fail" and "sgl_kernel has no kernel for sm_90" in capability.summary
    assert "torch has no kernel" not in capability.summary  # torch's own list has sm_90


def test_the_kernels_the_image_holds_decide_not_the_manifests_arch_string(qwen):
    """Issue 38: the manifest's torch_cuda_arch_list says 12.0 whatever the wheels hold; an image whose
    sglang-kernel carries no sm_120 code fails on an RTX PRO 6000, and one never read is not passed."""
    assert qwen.arch_list == ("12.0",)
    without = {**HELD, "packages": {"sgl_kernel": {"arches": ["sm_100a", "sm_90a"], "files": 3}}}
    checks = evaluate(dataclasses.replace(qwen, image_arches=without), gpu_host())
    capability = by_id(checks, "compute-capability")
    assert capability.status == "fail" and capability.summary.endswith("sgl_kernel has no kernel for sm_120")
    unread = dataclasses.replace(qwen, image_arches=None, image_arches_why="kit/sglang:x is not built here")
    capability = by_id(evaluate(unread, gpu_host()), "compute-capability")
    assert capability.status == "not-checked" and capability.why == "kit/sglang:x is not built here"


@pytest.mark.parametrize(
    ("capability", "arches", "runs"),
    [("12.0", ["sm_120"], True), ("12.0", ["sm_120a"], True), ("12.1", ["sm_120a"], False),
     ("12.1", ["sm_120"], True), ("12.0", ["sm_121"], False), ("12.0", ["sm_100", "sm_90"], False),
     ("12.0", ["compute_90"], True), ("9.0", ["compute_120"], False), ("12.0", [], False),
     ("10.0", ["sm_100a", "sm_120a"], True)],
)  # fmt: skip
def test_which_cubins_and_ptx_run_on_a_capability(capability, arches, runs):
    """CUDA's binary compatibility: a cubin on its major at an equal or higher minor, an arch-specific
    one ('a') on its own capability only, PTX on any equal or newer GPU."""
    assert kernels_cover(capability, arches) is runs


def test_too_few_gpus_fail_and_a_missing_toolkit_fails(qwen):
    no_cdi = EngineFacts(version="28.0.1", runtimes=("runc",), cdi_spec_dirs=())
    checks = evaluate(qwen, gpu_host(FakeNvml.of(2), engine=no_cdi))
    assert status(checks, "gpu-count") == "fail"
    toolkit = by_id(checks, "container-toolkit")
    assert toolkit.status == "fail" and "nvidia-ctk runtime configure" in toolkit.fix
    assert "CDI is off" in toolkit.summary
    cdi_engine = EngineFacts(version="28.0.1", runtimes=("runc",), cdi_spec_dirs=("/etc/cdi",))
    with_cdi = evaluate(
        qwen, gpu_host(engine=cdi_engine, cdi=cdi_answer(cdi_engine, {"/etc/cdi/nvidia.yaml": CDI_SPEC}))
    )
    toolkit = by_id(with_cdi, "container-toolkit")
    assert toolkit.status == "pass" and "CDI devices nvidia.com/gpu=0" in toolkit.summary
    assert toolkit.details["cdi"]["specs"] == ["/etc/cdi/nvidia.yaml"]


CDI_SPEC = """\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices: [{name: "0"}, {name: "1"}, {name: "2"}, {name: "3"}, {name: all}]
"""


def test_a_wedged_gpu_fails_and_a_busy_one_warns(qwen):
    nvml = FakeNvml.of(4)
    nvml.set_utilization(gpu=2, pct=100)  # spinning, and nobody on it
    wedged = by_id(evaluate(qwen, gpu_host(nvml)), "gpu-busy")
    assert wedged.status == "fail" and "GPU 2 at 100 %" in wedged.summary and "-i 2" in wedged.fix
    busy_nvml = FakeNvml.of(4)
    busy_nvml.set_process(gpu=1, pid=4242, used_bytes=20 * GiB)
    busy = by_id(evaluate(qwen, gpu_host(busy_nvml)), "gpu-busy")
    assert busy.status == "warn" and "GPU 1: 1 process(es), 20 GiB" in busy.summary


def test_nvml_p2p_not_supported_warns_with_the_pair(qwen):
    nvml = FakeNvml.of(4, p2p={(0, 3): 1, (3, 0): 1})
    check = by_id(evaluate(qwen, gpu_host(nvml)), "p2p-topology")
    assert check.status == "warn" and "0->3: read chipset not supported" in check.summary
    assert check.details["p2p"]["1"]["2"] == "OK"


def test_acs_redirection_on_a_gpus_upstream_bridge_warns_with_the_bridge_and_the_fix(qwen):
    nvml = FakeNvml.of(2)
    first, second = (nvml_bdf(d.bus_id) for d in nvml.devices)
    paths = {first: ["0000:00:01.1"], second: ["0000:00:03.1"]}
    check = by_id(evaluate(qwen, gpu_host(nvml, lspci=parse_lspci(LSPCI), gpu_paths=paths)), "pcie-acs")
    assert check.status == "warn"
    assert "0000:00:01.1 SrcValid+ ReqRedir+ CmpltRedir+" in check.summary
    assert "NCCL_P2P_DISABLE=1" in check.fix and check.details["redirecting"] == {
        "0000:00:01.1": ["SrcValid", "ReqRedir", "CmpltRedir"]
    }
    clean = by_id(
        evaluate(qwen, gpu_host(nvml, lspci=parse_lspci(LSPCI), gpu_paths={first: ["0000:00:03.1"]})),
        "pcie-acs",
    )
    assert clean.status == "pass"


def test_acs_is_not_checked_without_lspci_or_without_root(qwen):
    missing = by_id(evaluate(qwen, gpu_host(lspci=None, lspci_error="lspci is not installed")), "pcie-acs")
    assert missing.status == "not-checked" and "not installed" in missing.why
    user = parse_lspci((FIXTURES / "lspci-user.txt").read_text())
    hidden = by_id(evaluate(qwen, gpu_host(lspci=user)), "pcie-acs")
    assert hidden.status == "not-checked" and "root" in hidden.why


def test_a_translating_iommu_warns_on_a_multi_gpu_host(qwen):
    translated = iommu_mode("BOOT_IMAGE=/vmlinuz amd_iommu=on", ["ivhd0"], ["DMA-FQ", "DMA-FQ"])
    check = by_id(evaluate(qwen, gpu_host(iommu=translated)), "iommu")
    assert check.status == "warn" and "translated" in check.summary and "iommu=pt" in check.fix


def test_iommu_mode_reads_the_command_line_units_and_group_types():
    assert iommu_mode("quiet", [], []).mode == "off"
    assert iommu_mode("intel_iommu=on iommu=pt", ["dmar0"], []).mode == "passthrough"
    assert iommu_mode("intel_iommu=on", ["dmar0"], ["DMA", "identity"]).mode == "translated"
    assert iommu_mode("amd_iommu=off", ["ivhd0"], []).mode == "off"
    assert iommu_mode(None, ["dmar0"], []).mode == "unknown"
    assert iommu_mode("intel_iommu=on iommu=pt", ["dmar0"], []).cmdline_flags == (
        "intel_iommu=on",
        "iommu=pt",
    )


def test_pci_paths_and_bus_ids():
    assert upstream_bridges("/sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0") == ["0000:00:01.1"]
    assert upstream_bridges(
        "/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0/0000:42:10.0/0000:45:00.0"
    ) == [
        "0000:40:01.1",
        "0000:41:00.0",
        "0000:42:10.0",
    ]
    assert nvml_bdf("00000000:17:00.0") == "0000:17:00.0"
    assert parse_lspci(LSPCI)["0000:00:03.1"].redirecting == ()


def test_a_host_without_gpus_lists_every_check_says_why_and_passes():
    facts = HostFacts(
        nvml=read_nvml(FakeNvml(available=False)), engine=EngineFacts(version="20.10", runtimes=("runc",))
    )
    ctx = DoctorContext()
    result = report(ctx, evaluate(ctx, facts), 0.1)
    assert [c.id for c in result.checks] == list(CHECK_IDS)
    assert result.ok and result.exit_code == 0
    for check in result.checks:
        if check.status == "not-checked":
            assert check.why, check.id
    assert "NVML is not available" in by_id(result.checks, "nvidia-driver").why


def test_a_gpu_target_on_a_host_without_gpus_fails_once_not_for_every_gpu_check(qwen):
    facts = HostFacts(nvml=read_nvml(FakeNvml(available=False)), engine=EngineFacts(version="20.10"))
    checks = evaluate(qwen, facts)
    assert [c.id for c in checks if c.status == "fail" and c.id != "disk"] == ["nvidia-driver"]
    assert by_id(checks, "gpu-count").why == "see nvidia-driver"


def test_the_cpu_rehearsal_needs_no_gpu_checks():
    ctx = doctor_context("tiny")
    facts = HostFacts(
        nvml=read_nvml(FakeNvml(available=False)), engine=EngineFacts(version="20.10"), image_present=True
    )
    checks = evaluate(ctx, facts)
    assert by_id(checks, "nvidia-driver").why == "tiny runs on CPU"
    assert status(checks, "shm") == "pass" and "2g" in by_id(checks, "shm").summary
    assert "inside the image" in by_id(checks, "model-cache").why


def make_snapshot(hub: Path, repo: str, files: dict[str, bytes], *, incomplete: bool = False) -> None:
    folder = hub / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / "abc123"
    (folder / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("abc123")
    for name, data in files.items():
        blob = folder / "blobs" / f"blob-{name}"
        blob.write_bytes(data)
        (snapshot / name).symlink_to(blob)
    if incomplete:
        (folder / "blobs" / "deadbeef.incomplete").write_bytes(b"x")


INDEX = json.dumps(
    {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
)


def test_the_model_cache_is_complete_only_with_every_shard_of_its_index(tmp_path, qwen):
    repo = "Qwen/Qwen3.5-122B-A10B"
    full = tmp_path / "full" / "hub"
    make_snapshot(
        full,
        repo,
        {
            "config.json": b"{}",
            "model.safetensors.index.json": INDEX.encode(),
            "model-00001-of-00002.safetensors": b"1" * 10,
            "model-00002-of-00002.safetensors": b"2" * 10,
        },
    )
    done = scan_model_cache(full, repo)
    assert done.complete and done.files == 4 and done.snapshot == "abc123"
    partial = tmp_path / "partial" / "hub"
    make_snapshot(
        partial,
        repo,
        {
            "config.json": b"{}",
            "model.safetensors.index.json": INDEX.encode(),
            "model-00001-of-00002.safetensors": b"1",
        },
        incomplete=True,
    )
    half = scan_model_cache(partial, repo)
    assert (
        not half.complete
        and half.missing == ("model-00002-of-00002.safetensors",)
        and half.incomplete_blobs == 1
    )
    assert not scan_model_cache(tmp_path / "empty", repo).present

    ctx = dataclasses.replace(qwen, hf_cache=str(tmp_path / "partial"))
    checks = evaluate(ctx, gpu_host(model_cache=half, disk_free=10 * GiB, disk_path=str(tmp_path)))
    cache = by_id(checks, "model-cache")
    assert (
        cache.status == "fail"
        and "1 file(s) missing" in cache.summary
        and cache.fix == "kit model fetch qwen-base"
    )
    disk = by_id(checks, "disk")
    assert disk.status == "fail" and "needs 245" in disk.summary
    roomy = evaluate(ctx, gpu_host(model_cache=done, disk_free=1 * GiB, disk_path=str(tmp_path)))
    assert status(roomy, "disk") == "pass" and status(roomy, "model-cache") == "pass"


def test_a_port_in_use_is_seen():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert read_port(port) == (False, None)


def test_the_port_checked_is_the_one_compose_yaml_publishes_the_target_on(tmp_path):
    # tiny's service is published on 30004 (compose.yaml: one host port per target), not the
    # catalog's 30000 that the docker and systemd renders publish; both are named.
    from kit.pivot.doctor import compose_port

    ctx = doctor_context("tiny")
    assert (ctx.port, ctx.compose_port, ctx.server_port) == (30004, 30004, 30000)
    busy = dataclasses.replace(gpu_host(), port=30004, port_free=False)
    [check] = [c for c in evaluate(ctx, busy) if c.id == "port"]
    assert check.status == "warn" and check.summary == "127.0.0.1:30004 is in use"
    assert check.why.startswith("compose.yaml publishes tiny on 30004; kit render docker/systemd on 30000")
    long_syntax = tmp_path / "compose.yaml"
    long_syntax.write_text("services:\n  tiny:\n    ports:\n    - {target: 30000, published: 31000}\n")
    assert compose_port("tiny", long_syntax) == 31000 and compose_port("nosuch", long_syntax) is None


def test_the_documented_schema_is_the_reports_own():
    assert json.loads(SCHEMA.read_text()) == schema(), (
        "regenerate: kit doctor --schema > docs/schema/doctor.json"
    )


def test_reports_validate_against_the_documented_schema(qwen):
    documented = json.loads(SCHEMA.read_text())
    nvml = FakeNvml.of(4)
    nvml.set_utilization(gpu=0, pct=100)
    for ctx, facts in (
        (qwen, gpu_host(nvml, lspci=parse_lspci(LSPCI))),
        (
            DoctorContext(),
            HostFacts(nvml=read_nvml(FakeNvml(available=False)), engine=engine_failed("no engine")),
        ),
    ):
        document = report(ctx, evaluate(ctx, facts), 0.2).model_dump(mode="json")
        jsonschema.validate(document, documented)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "checks": [{"id": "x", "status": "maybe"}]}, documented)


@pytest.mark.docker
def test_kit_doctor_on_this_machine_prints_every_check_and_its_json_validates():
    """This machine has no GPU: every check listed, the GPU ones say why, exit 0 (the engine answers)."""
    human = subprocess.run(
        [sys.executable, "-m", "kit", "doctor"], capture_output=True, text=True, timeout=60
    )
    assert human.returncode == 0, human.stdout + human.stderr
    for title in (
        "NVIDIA driver",
        "PCIe ACS",
        "IOMMU mode",
        "/dev/shm size",
        "Locked-memory limit",
        "Server port",
    ):
        assert title in human.stdout
    assert "why: " in human.stdout
    machine = subprocess.run(
        [sys.executable, "-m", "kit", "doctor", "tiny", "--json"], capture_output=True, text=True, timeout=60
    )
    document = json.loads(machine.stdout)
    jsonschema.validate(document, json.loads(SCHEMA.read_text()))
    assert machine.returncode == document["exit_code"] == 0
    assert [c["id"] for c in document["checks"]] == list(CHECK_IDS)


def test_run_doctor_reads_this_host_without_raising():
    result = run_doctor(nvml_lib=FakeNvml(available=False))
    assert len(result.checks) == len(CHECK_IDS)
    assert by_id(result.checks, "nvidia-driver").status == "not-checked"


# -- one CDI answer, chosen GPUs, lost GPUs ---------------------------------------------------------

DOCKER_INFO = ROOT / "tests" / "fixtures" / "docker-info"


@pytest.mark.parametrize("shape", sorted(p.name for p in DOCKER_INFO.glob("*.json")))
def test_doctor_and_the_fingerprint_give_the_same_cdi_answer(shape, qwen):
    """One host-facts record, two readers: doctor's checks and a bundle's fingerprint say the same
    thing about CDI (state, the engine's folders as a list, spec files, devices) for each engine shape."""
    from kit.diagnose.facts import nvidia_of
    from kit.runtime.host import ToolFacts

    engine = engine_facts(json.loads((DOCKER_INFO / shape).read_text()))
    specs = {"/etc/cdi/nvidia.yaml": CDI_SPEC}  # read only where the engine's CDISpecDirs say
    facts = gpu_host(engine=engine, cdi=cdi_answer(engine, specs))
    checks = evaluate(qwen, facts)
    fingerprint = nvidia_of(
        facts.nvml.inventory,
        p2p=facts.nvml.p2p,
        topology=facts.nvml.topology,
        engine=engine,
        cdi=facts.cdi_answer,
        tools=ToolFacts(),
        why_no_nvml=None,
    )
    doctor_engine = by_id(checks, "docker-engine").details["cdi"]
    doctor_toolkit = by_id(checks, "container-toolkit").details["cdi"]
    assert doctor_engine == doctor_toolkit == fingerprint["cdi"]
    assert isinstance(fingerprint["cdi"]["spec_dirs"], list)
    if engine.cdi_spec_dirs:
        assert fingerprint["engine_runtimes"]["cdi_spec_dirs"] == fingerprint["cdi"]["spec_dirs"]
    # The plan doctor reports is the one kit up tries: a known way passes the toolkit check.
    toolkit = by_id(checks, "container-toolkit")
    assert (toolkit.status == "pass") == any(w["known"] for w in toolkit.details["plan"])


def test_an_engine_failure_is_recorded_as_one_not_as_a_missing_image(qwen):
    facts = gpu_host(engine=engine_failed("no Docker engine answers"), image_present=None)
    checks = evaluate(qwen, facts)
    assert status(checks, "docker-engine") == "fail"
    image = by_id(checks, "image")
    assert image.status == "not-checked" and image.why == "no Docker engine answers"
    assert by_id(checks, "docker-engine").summary == "no Docker engine answers"


def test_chosen_gpus_narrow_the_gpu_checks(qwen):
    nvml = FakeNvml.of(8)
    nvml.set_process(gpu=6, pid=4242, used_bytes=40 * GiB)  # someone else's job on GPU 6
    nvml.set_utilization(gpu=7, pct=100)  # and a wedged GPU 7
    everything = evaluate(qwen, gpu_host(nvml))
    assert status(everything, "gpu-busy") == "fail"
    chosen = dataclasses.replace(qwen, gpu_devices=("0", "1", "2", "3"))
    checks = evaluate(chosen, gpu_host(nvml))
    busy = by_id(checks, "gpu-busy")
    assert busy.status == "pass" and [u["index"] for u in busy.details["usage"]] == [0, 1, 2, 3]
    count = by_id(checks, "gpu-count")
    assert count.status == "pass" and "(chosen: 0,1,2,3)" in count.summary
    assert set(by_id(checks, "p2p-topology").details["p2p"]) == {"0", "1", "2", "3"}
    other = evaluate(dataclasses.replace(qwen, gpu_devices=("4", "5", "6", "7")), gpu_host(nvml))
    assert status(other, "gpu-busy") == "fail"
    missing = by_id(
        evaluate(dataclasses.replace(qwen, gpu_devices=("0", "1", "2", "9")), gpu_host(nvml)), "gpu-count"
    )
    assert missing.status == "fail" and "no GPU answers to 9" in missing.summary


def test_doctor_context_takes_gpus_from_the_flag_or_kit_gpus(monkeypatch):
    from kit.errors import InputError

    assert doctor_context("qwen-base", gpus="4,5,6,7").gpu_devices == ("4", "5", "6", "7")
    monkeypatch.setenv("KIT_GPUS", "0,1,2,3")
    assert doctor_context("qwen-base").gpu_devices == ("0", "1", "2", "3")
    assert doctor_context("tiny").gpu_devices == ()  # a CPU target ignores the variable
    with pytest.raises(InputError, match="KIT_GPUS: names 2 GPU"):
        monkeypatch.setenv("KIT_GPUS", "0,1")
        doctor_context("qwen-base")


def test_a_gpu_lost_after_a_hang_is_a_failed_check_not_a_traceback(qwen):
    nvml = FakeNvml.of(4)
    nvml.lose(gpu=2)
    facts = gpu_host(nvml)
    assert [g.index for g in facts.nvml.inventory.lost] == [2]
    checks = evaluate(qwen, facts)
    busy = by_id(checks, "gpu-busy")
    assert busy.status == "fail" and "GPU 2: GPU is lost" in busy.summary and "-i 2" in busy.fix
    assert status(checks, "gpu-count") == "fail"  # three answer; the target needs four
    # Lost in the middle of a reading (the handle was fine, the calls after it are not).
    later = FakeNvml.of(4)
    later.fail("nvmlDeviceGetMemoryInfo", gpu=1, error=NVMLError_GpuIsLost())
    late = gpu_host(later)
    assert [g.index for g in late.nvml.inventory.lost] == [1]
    assert status(evaluate(qwen, late), "gpu-busy") == "fail"
    result = run_doctor("qwen-base", nvml_lib=nvml)
    assert by_id(result.checks, "gpu-busy").status == "fail"
