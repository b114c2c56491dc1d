"""Fingerprints: versions read from a lock, GPUs from NVML (over the fake pynvml), the launch with
secrets masked, and the diff that puts likely suspects first."""

from __future__ import annotations

import copy
from pathlib import Path

from kit.diagnose import fingerprint as fp
from kit.diagnose.redact import MASK
from kit.images.lock import parse_lock
from kit.launch import resolve
from kit.logs.limits import limits_from_spec
from kit.runtime.nvml import open_nvml
from kit.scenarios.fake_nvml import FakeNvml

LOCKS = Path(__file__).parents[1] / "fixtures" / "locks"
# What a cu129 image's lock holds for the packages that decide a start-up (pins of
# images/sglang-0.5.10.post1-cu129-sm120.toml, as pip freeze writes them).
GPU_LOCK = """\
flashinfer-python==0.6.7.post3
nvidia-nccl-cu12==2.28.3
sglang==0.5.10.post1
sglang-kernel==0.4.1
torch==2.9.1+cu129
transformers==4.57.1
"""


def test_versions_of_the_cpu_rehearsal_come_from_its_real_lock():
    lock = parse_lock((LOCKS / "sglang-0.5.23-cpu.lock.txt").read_text())
    versions = fp.versions_from_lock(lock, {"io.kit.pin.python": "python3.11"}, "lock")
    assert versions["sglang"] == "0.5.23"
    assert versions["torch"] == "2.13.0+cpu"
    assert versions["nccl"] == "not installed"
    assert versions["cuda"] == "none (torch 2.13.0+cpu is a CPU build)"
    assert versions["python"] == "python3.11"


def test_versions_of_a_cuda_image_name_nccl_and_cuda():
    versions = fp.versions_from_lock(parse_lock(GPU_LOCK), {}, "lock")
    assert (versions["sglang"], versions["nccl"], versions["cuda"]) == ("0.5.10.post1", "2.28.3", "12.9")
    assert versions["flashinfer"] == "0.6.7.post3"
    assert fp.is_unknown(versions["python"])  # no label: unknown, and why
    assert "io.kit.pin.python" in versions["python"]["unknown"]


def test_gpus_p2p_and_topology_come_from_nvml():
    nvml = FakeNvml.of(4, name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition", capability=(12, 0))
    gpus = open_nvml(nvml)
    assert gpus is not None
    section = fp.nvidia_section(
        gpus.inventory(),
        p2p=gpus.p2p_matrix(),
        topology=gpus.topology(),
        toolkit="nvidia-ctk 1.17.8",
        runtimes={"runtimes": ["nvidia", "runc"]},
        cdi=[],
        smi_topo=fp.unknown("nvidia-smi is not installed on this host"),
    )
    assert section["gpu_count"] == 4
    assert section["gpu_models"] == ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"]
    assert {g["compute_capability"] for g in section["gpus"]} == {"12.0"}
    assert len({g["uuid"] for g in section["gpus"]}) == 4
    assert set(section["p2p"]["0"]) == {"1", "2", "3"}
    assert section["topology"]["0"]["1"] in ("PIX", "PXB", "PHB", "NODE", "SYS")


def test_without_nvml_every_gpu_field_says_unknown_and_why():
    section = fp.nvidia_section(
        None,
        p2p=None,
        topology=None,
        toolkit=None,
        runtimes=None,
        cdi=None,
        smi_topo=None,
        why_no_nvml="no driver",
    )
    for key in ("driver", "cuda_driver", "gpu_count", "gpu_models", "gpus", "p2p", "topology"):
        assert section[key] == {"unknown": "no driver"}


def test_the_launch_keeps_secret_names_and_drops_their_values():
    spec = resolve("tiny", overrides=["env.NCCL_DEBUG=INFO"])
    launch = fp.launch_section(
        target=spec.target,
        profile=spec.profile,
        model=spec.model,
        dialect=spec.dialect,
        device=spec.device,
        ranks=spec.ranks,
        overrides=fp.overrides_of(spec.notes),
        argv=[*spec.argv, "--api-key", "sk-abcdef123456"],
        env={**spec.env, "HF_TOKEN": "hf_abcdefgh", "KIT_FAULT": "hang-init:rank=1"},
        container={},
        limits=fp.limits_data(limits_from_spec(spec)),
        argv_from="test",
    )
    assert launch["overrides"] == ["env.NCCL_DEBUG=INFO"]
    assert launch["env"]["HF_TOKEN"] == MASK and launch["secrets"] == ["HF_TOKEN"]
    assert launch["argv"][-2:] == ["--api-key", MASK] and launch["secret_flags"] == ["--api-key"]
    assert launch["fault"] == "hang-init:rank=1"
    assert "sk-abcdef123456" not in str(launch) and "hf_abcdefgh" not in str(launch)


def test_phase_limits_survive_the_trip_through_json():
    spec = resolve("qwen-mtp")
    limits = limits_from_spec(spec, stall_windows={"init": 45})
    assert fp.limits_from_data(fp.limits_data(limits)) == limits


def _fingerprint(sglang: str, nccl: str, kernel: str, env: dict, gpus: int, lock: dict) -> dict:
    return {
        "format": 1,
        "made": {"by": "test", "at": "now"},
        "image": {"name": "x", "id": "sha256:1", "lock": {"from": "here", "packages": lock}},
        "versions": {"from": "lock", "sglang": sglang, "nccl": nccl, "torch": "2.9.1+cu129"},
        "host": {"kernel": kernel, "docker_engine": "28.0.1"},
        "nvidia": {
            "driver": "580.95.05",
            "gpu_count": gpus,
            "gpu_models": ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"],
            "p2p": {"0": {"1": "OK"}},
            "topology": fp.unknown("no NVML"),
        },
        "launch": {
            "env": env,
            "argv": ["python", "-m", "sglang.launch_server", "--tp", str(gpus)],
            "overrides": [],
        },
    }


def test_diff_lists_suspects_first_in_their_order_and_counts_equal_fields():
    a = _fingerprint("0.5.10.post1", "2.28.3", "6.8.0", {"A": "1"}, 4, {"torch": "2.9.1", "numpy": "2.0"})
    b = _fingerprint(
        "0.5.23",
        "2.29.1",
        "6.11.0",
        {"A": "1", "NCCL_P2P_DISABLE": "1"},
        2,
        {"torch": "2.9.1", "numpy": "2.1"},
    )
    b["made"] = {
        "by": "another",
        "at": "later",
    }  # when and how a bundle was made is not a fact of the start-up
    found = fp.diff(a, b)
    keys = [d.key for d in found.differences]
    assert keys[:2] == ["versions.sglang", "versions.nccl"]
    assert (
        keys.index("nvidia.gpu_count") < keys.index("launch.env.NCCL_P2P_DISABLE") < keys.index("launch.argv")
    )
    assert keys.index("launch.argv") < keys.index("image.lock.packages.numpy") < keys.index("host.kernel")
    assert all(not k.startswith("made") for k in keys)
    assert [d.matters for d in found.differences][:5] == [True] * 5
    assert not next(d for d in found.differences if d.key == "host.kernel").matters
    assert found.unknown_both == 1  # nvidia.topology
    assert found.equal >= 6  # versions.torch, driver, models, p2p, env.A, lock torch, docker_engine...
    argv = next(d for d in found.differences if d.key == "launch.argv")
    assert argv.describe() == "launch.argv: 4 -> 2"


def test_identical_fingerprints_have_no_differences():
    a = _fingerprint("0.5.23", "2.28.3", "6.8.0", {}, 4, {})
    found = fp.diff(a, copy.deepcopy(a))
    assert found.differences == ()
    assert found.equal > 0


def test_a_value_known_on_one_side_only_is_listed():
    a = _fingerprint("0.5.23", "2.28.3", "6.8.0", {}, 4, {})
    b = copy.deepcopy(a)
    b["nvidia"]["driver"] = fp.unknown("NVML is not available here")
    (driver,) = [d for d in fp.diff(a, b).differences if d.key == "nvidia.driver"]
    assert driver.matters and driver.one_side_unknown
    assert "unknown (NVML is not available here)" in driver.describe("bundle", "here")
