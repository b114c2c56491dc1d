"""`kit image resolve`: the GPU manifests' pins through pip's resolver for the image's platform, and the
base image's CUDA against what torch asks for, without building anything.

The pure parts are tested on what pip really printed (tests/images/fixtures/pip-report-cu130.excerpt.json
is an excerpt of `pip install --dry-run --report` for the cu130 pins, 2026-12-03). The last test asks
pip for real, for every cuda manifest, and holds the report to honesty, not to a pass: from a machine
that cannot reach download.pytorch.org (this project's CI) it must say NOT verified, name the index
and what it checked instead; where every index answers it must resolve or show pip's refusal.
"""

from __future__ import annotations

import json

import pytest
from image_helpers import ROOT, run_kit

from kit.images.manifest import list_manifests, load_manifest
from kit.images.resolve import (
    CudaCheck,
    IndexProbe,
    Installed,
    ask_for,
    base_cuda,
    conflict_lines,
    cuda_asked,
    distribution,
    judge_cuda,
    network_trouble,
    parse_report,
    pip_args,
    platform_tags,
    requirements_for,
    verdict,
    without_local_labels,
)

IMAGES = ROOT / "images"
FIXTURES = ROOT / "tests" / "images" / "fixtures"
CU130 = load_manifest("sglang-0.5.23-cu130-sm120", IMAGES)
CU129 = load_manifest("sglang-0.5.10.post1-cu129-sm120", IMAGES)
REPORT = json.loads((FIXTURES / "pip-report-cu130.excerpt.json").read_text(encoding="utf-8"))
# pip 26.3's words. no-wheel: what it printed when the platform list held only manylinux_2_34/_2_28
# tags (cuDNN's wheels are manylinux_2_27; pip does not widen an explicit --platform to older tags).
PIP_NO_WHEEL = (FIXTURES / "pip-stderr-no-wheel.txt").read_text(encoding="utf-8")
PIP_CONFLICT = (FIXTURES / "pip-stderr-conflict.txt").read_text(encoding="utf-8")
PIP_OFFLINE = (FIXTURES / "pip-stderr-offline.txt").read_text(encoding="utf-8")


def test_the_platform_is_the_images_not_this_machines():
    assert (
        distribution(CU130.base.image) == "ubuntu24.04" and distribution("debian:bookworm-slim") == "bookworm"
    )
    tags = platform_tags("2.39")
    assert tags[0] == "manylinux_2_39_x86_64" and "manylinux_2_27_x86_64" in tags  # cuDNN's wheels
    assert tags[-4:] == ("manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64")
    assert ask_for(CU130).extra_indexes == ()  # PyPI's torch 2.14.1 is the CUDA 13.0 build
    ask = ask_for(CU129)
    assert ask.python == "3.12" and ask.glibc == "2.39" and ask.extra_indexes == (CU129.pins.torch_index,)
    args = pip_args(ask, ask.requirements, report=ROOT / "r.json", extra_indexes=ask.extra_indexes)
    assert args[:4] == [
        "install",
        "--isolated",
        "--dry-run",
        "--ignore-installed",
    ]  # not this host's pip.conf
    for flag in ("--only-binary=:all:", "--use-feature=fast-deps"):
        assert flag in args
    assert args[args.index("--python-version") + 1] == "3.12"
    assert args[args.index("--index-url") + 1] == "https://pypi.org/simple"
    assert args[args.index("--extra-index-url") + 1] == "https://download.pytorch.org/whl/cu129"
    assert args.count("--platform") == len(tags) and args[-len(ask.requirements) :] == list(ask.requirements)
    assert "--no-deps" in pip_args(ask, ["x==1"], report=ROOT / "r.json", extra_indexes=(), no_deps=True)


def test_the_requirements_are_the_dockerfiles():
    together, looked_up = requirements_for(CU130)
    assert together == (
        "torch==2.14.1",
        "torchvision==0.29.1",
        "sglang==0.5.23",
        "sglang-kernel==0.4.10",
        "flashinfer-python==0.7.2",
        "py-spy==0.4.3",
    )
    assert looked_up == ("nvidia-nccl-cu13==2.30.7",)  # forced over torch's own pins (a lock override)
    together, looked_up = requirements_for(CU129)
    assert looked_up == ("nvidia-nccl-cu12==2.28.3", "nvidia-cudnn-cu12==9.16.0.29")
    assert together[:2] == ("torch==2.9.1+cu129", "torchvision==0.24.1+cu129")
    plain, replaced = without_local_labels(together)
    assert plain[:2] == ("torch==2.9.1", "torchvision==0.24.1") and plain[2:] == together[2:]
    assert replaced == (
        "torch==2.9.1+cu129 -> torch==2.9.1",
        "torchvision==0.24.1+cu129 -> torchvision==0.24.1",
    )


def test_torch_2_14_1_asks_for_cuda_toolkit_13_0_3_and_a_13_0_1_base_is_too_old():
    rows = parse_report(REPORT)
    torch = next(r for r in rows if r.name == "torch")
    assert torch.version == "2.14.1" and cuda_asked(torch.requires) == ("cuda-toolkit", "13.0.3")
    old = judge_cuda("nvidia/cuda:13.0.1-cudnn-devel-ubuntu24.04", torch, "torch 2.14.1")
    assert old.ok is False and "older than 13.0.3" in old.detail
    assert base_cuda(CU130.base.image) == "13.0.3"  # the manifest, fixed
    assert judge_cuda(CU130.base.image, torch, "torch 2.14.1").ok is True
    assert judge_cuda("nvidia/cuda:12.9.1-cudnn-devel-ubuntu24.04", torch, "t").ok is False  # another major


def test_a_cuda_12_torch_pins_the_runtime_and_only_major_minor_count():
    torch = Installed(
        "torch", "2.9.1", "", ('nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"',)
    )
    assert cuda_asked(torch.requires) == ("nvidia-cuda-runtime-cu12", "12.8.90")
    assert judge_cuda(CU129.base.image, torch, "torch 2.9.1").ok is True  # 12.9.1 >= 12.8
    assert judge_cuda("nvidia/cuda:12.6.3-devel-ubuntu24.04", torch, "t").ok is False
    assert judge_cuda("debian:bookworm-slim", torch, "t").ok is None
    assert judge_cuda(CU129.base.image, Installed("torch", "2.9.1", ""), "torch 2.9.1").ok is None


def test_pips_refusals_are_read_and_network_trouble_is_not_a_refusal():
    assert conflict_lines(PIP_NO_WHEEL)[0].startswith("ERROR: Could not find a version that satisfies")
    lines = conflict_lines(PIP_CONFLICT)
    assert "sglang 0.5.23 depends on torch==2.14.1" in lines and lines[-1].startswith(
        "ERROR: ResolutionImpossible"
    )
    assert network_trouble(PIP_CONFLICT) is None and network_trouble(PIP_NO_WHEEL) is None
    assert "Temporary failure in name resolution" in (network_trouble(PIP_OFFLINE) or "")


PYPI = IndexProbe("https://pypi.org/simple", True, "HTTP 200")
TORCH_DOWN = IndexProbe("https://download.pytorch.org/whl/cu130", False, "ConnectError")
GOOD_CUDA = CudaCheck("13.0.3", "cuda-toolkit==13.0.3", True, "meets it")


def test_a_pass_needs_every_index_and_nothing_replaced():
    common = {"conflict": (), "missing": (), "cuda": GOOD_CUDA, "asked": True}
    assert verdict(unreachable=(), substituted=(), **common)[0] == "resolves"
    status, line = verdict(
        unreachable=(TORCH_DOWN,), substituted=("torch==2.14.1+cu130 -> torch==2.14.1",), **common
    )
    assert status == "unverified" and line.startswith(
        "NOT verified: cannot reach https://download.pytorch.org"
    )
    assert "torch==2.14.1+cu130 -> torch==2.14.1" in line
    assert (
        verdict(
            unreachable=(PYPI, TORCH_DOWN), substituted=(), conflict=(), missing=(), cuda=None, asked=False
        )[0]
        == "unreachable"
    )
    assert (
        verdict(unreachable=(), substituted=(), trouble="Max retries exceeded", **common)[0] == "unverified"
    )


def test_a_conflict_is_a_conflict_even_where_part_could_not_be_checked():
    found = ("ERROR: ResolutionImpossible",)
    assert (
        verdict(
            unreachable=(TORCH_DOWN,),
            substituted=("a -> b",),
            conflict=found,
            missing=(),
            cuda=None,
            asked=True,
        )[0]
        == "conflict"
    )
    old = CudaCheck("13.0.1", "cuda-toolkit==13.0.3", False, "older")
    assert (
        verdict(unreachable=(), substituted=(), conflict=(), missing=(), cuda=old, asked=True)[0]
        == "conflict"
    )
    assert (
        verdict(unreachable=(), substituted=(), conflict=(), missing=("x: no wheel",), cuda=None, asked=True)[
            0
        ]
        == "conflict"
    )


@pytest.mark.slow
def test_every_gpu_manifest_resolves_or_says_why_it_could_not(capsys):
    """Real pip, real PyPI (and the torch index where it answers): minutes, in parallel per image."""
    names = [n for n in list_manifests(IMAGES) if load_manifest(n, IMAGES).flavor == "cuda"]
    code = run_kit(["image", "resolve", "--json"])
    out, err = capsys.readouterr()
    reports = json.loads(out)
    print(
        json.dumps(
            [{k: r[k] for k in ("image", "status", "summary", "substituted")} for r in reports], indent=1
        )
    )
    assert sorted(r["image"] for r in reports) == sorted(names)
    for r in reports:
        manifest = load_manifest(r["image"], IMAGES)
        unreachable = [p["url"] for p in r["indexes"] if not p["reachable"]]
        if unreachable:
            assert r["status"] != "resolves", r["summary"]
            if r["status"] in ("unverified", "unreachable"):
                assert all(url in r["summary"] for url in unreachable)
            if manifest.pins.torch_index in unreachable:  # its +cuXXX pins were replaced, and it says so
                assert any(line.startswith(f"torch=={manifest.pins.torch} -> ") for line in r["substituted"])
        else:
            assert r["substituted"] == [] and r["status"] in ("resolves", "conflict")
        if r["status"] == "conflict":  # a refusal shows its evidence
            assert r["conflict"] or r["missing"] or (r["cuda"] and r["cuda"]["ok"] is False)
        if r["status"] != "unreachable" and any(i["name"] == "torch" for i in r["resolved"]):
            assert r["cuda"]["asked"], "torch resolved: what it asks of CUDA was read"
    expected = 1 if any(r["status"] == "conflict" for r in reports) else 0
    if not expected and any(r["status"] != "resolves" for r in reports):
        expected = 3
    assert code == expected, err


def test_pip_running_past_the_timeout_is_no_answer_not_a_conflict(monkeypatch, tmp_path):
    """`kit image resolve --timeout 30` with a slow or unreachable index: ENVIRONMENT (3), not CONFLICT."""
    import subprocess

    import kit.images.resolve as resolve

    def too_slow(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout"))

    monkeypatch.setattr(resolve.subprocess, "run", too_slow)
    run = resolve.run_pip(["install", "--dry-run", "torch"], tmp_path / "report.json", timeout_s=30)
    assert run.returncode == 124
    assert network_trouble(run.stderr) == "ERROR: pip did not finish within 30 s"
