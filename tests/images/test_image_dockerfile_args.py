"""The one Dockerfile and the manifests agree: every manifest feeds exactly the ARGs the Dockerfile
declares, and no ARG has a default that could silently stand in for a missing pin."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import quote

import pytest

from kit.images.build import build_args
from kit.images.manifest import list_manifests, load_manifest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    out = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def declared_args(text: str) -> dict[str, str | None]:
    """ARG name -> default (None when it has none)."""
    args: dict[str, str | None] = {}
    for keyword, rest in instructions(text):
        if keyword == "ARG":
            name, sep, default = rest.partition("=")
            args[name.strip()] = default if sep else None
    return args


ARGS = declared_args(DOCKERFILE)
MANIFESTS = list_manifests(ROOT / "images")


def test_the_dockerfile_declares_args():
    assert {
        "BASE_IMAGE",
        "SGLANG_VERSION",
        "TORCH_VERSION",
        "KIT_NCCL_VERSION",
        "TORCH_CUDA_ARCH_LIST",
    } <= set(ARGS)


def test_no_arg_has_a_default():
    defaulted = {name: default for name, default in ARGS.items() if default is not None}
    assert not defaulted, f"ARGs with defaults would hide a missing pin: {defaulted}"


@pytest.mark.parametrize("name", MANIFESTS)
@pytest.mark.parametrize("local_wheel", [False, True])
def test_every_manifest_feeds_exactly_the_declared_args(name: str, local_wheel: bool):
    wheel = "torch-2.14.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl" if local_wheel else ""
    fed = build_args(load_manifest(name, ROOT / "images"), torch_wheel=wheel)
    extra, missing = sorted(set(fed) - set(ARGS)), sorted(set(ARGS) - set(fed))
    assert not extra and not missing, f"fed but not declared: {extra}; declared but not fed: {missing}"
    assert all(isinstance(v, str) and "\n" not in v for v in fed.values())


def test_every_declared_arg_is_used():
    body = "\n".join(f"{k} {r}" for k, r in instructions(DOCKERFILE) if k != "ARG")
    unused = [name for name in ARGS if not re.search(r"\$\{?" + name + r"\b", body)]
    assert not unused, f"declared but never used: {unused}"


@pytest.mark.parametrize("name", [n for n in MANIFESTS if load_manifest(n, ROOT / "images").flavor == "cuda"])
def test_gpu_build_args_carry_every_pin(name: str):
    manifest = load_manifest(name, ROOT / "images")
    fed = build_args(manifest)
    pins = manifest.pins
    assert fed["TORCH_INDEX_URL"] == pins.torch_index
    assert (fed["NCCL_PACKAGE"], fed["KIT_NCCL_VERSION"]) == (pins.nccl_package, pins.nccl)
    assert "12.0" in fed["TORCH_CUDA_ARCH_LIST"].split(";")
    assert fed["BASE_IMAGE"].startswith("nvidia/cuda:") and "-cudnn-devel-ubuntu24.04" in fed["BASE_IMAGE"]


def test_args_used_after_from_are_declared_after_from():
    seen_from, in_stage, used = False, set(), set()
    for keyword, rest in instructions(DOCKERFILE):
        if keyword == "FROM":
            seen_from = True
            continue
        if not seen_from:
            continue
        if keyword == "ARG":
            in_stage.add(rest.partition("=")[0].strip())
        else:
            used |= {m for m in re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", rest) if m in ARGS}
    assert used <= in_stage, f"used after FROM without an ARG there: {sorted(used - in_stage)}"


# --- the torch step itself, run by bash and real pip against local stand-in indexes ---------------


def _fake_wheel(
    directory: Path, name: str, version: str, source: str, requires: tuple[str, ...] = ()
) -> Path:
    """A minimal pure-Python wheel whose module says where it came from (local or index)."""
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}/__init__.py", f"SOURCE = {source!r}\n")
        metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        wheel.writestr(f"{info}/METADATA", metadata + "".join(f"Requires-Dist: {r}\n" for r in requires))
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: kit-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


def _simple_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 index on disk (what pip reads from file:// URLs)."""
    for wheel in wheels:
        project = root / wheel.name.split("-")[0]
        project.mkdir(parents=True, exist_ok=True)
        (project / wheel.name).write_bytes(wheel.read_bytes())
        (project / "index.html").write_text(
            f'<a href="{quote(wheel.name)}">{wheel.name}</a>\n', encoding="utf-8"
        )
    root.mkdir(parents=True, exist_ok=True)
    return root.as_uri() + "/"


def _torch_step() -> str:
    """The RUN instruction right after `COPY images/wheels/ /tmp/kit-wheels/`, as bash will run it."""
    steps = instructions(DOCKERFILE)
    at = steps.index(("COPY", "images/wheels/ /tmp/kit-wheels/"))
    keyword, script = steps[at + 1]
    assert keyword == "RUN"
    return script


def _run_torch_step(tmp_path: Path, args: dict[str, str]) -> subprocess.CompletedProcess:
    wheels, venv, bindir = tmp_path / "kit-wheels", tmp_path / "venv", tmp_path / "bin"
    bindir.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # `pip` in the step is this venv's pip, installing into the throw-away venv.
    (bindir / "pip").write_text(f'#!/bin/sh\nexec {sys.executable} -m pip --python {venv}/bin/python "$@"\n')
    (bindir / "pip").chmod(0o755)
    script = _torch_step().replace("/tmp/kit-wheels", str(wheels)).replace("/opt/venv", str(venv))
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "PIP_CONFIG_FILE": os.devnull,  # not this host's pip config (its find-links, indexes)
        "PIP_INDEX_URL": _simple_index(tmp_path / "pypi", []),  # an empty PyPI: nothing leaves the disk
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **args,
    }
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", script], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in MANIFESTS if load_manifest(n, ROOT / "images").flavor == "cuda"])
def test_the_torch_step_with_a_local_wheel_installs_it_and_torchvision_from_the_torch_index(tmp_path, name):
    manifest = load_manifest(name, ROOT / "images")
    pins = manifest.pins
    assert pins.torchvision
    (tmp_path / "kit-wheels").mkdir()
    (tmp_path / "dl").mkdir()
    local = _fake_wheel(tmp_path / "kit-wheels", "torch", pins.torch, "local")
    torch_index = _simple_index(
        tmp_path / "torch-index",
        [
            _fake_wheel(tmp_path / "dl", "torch", pins.torch, "index"),
            _fake_wheel(tmp_path / "dl", "torchvision", pins.torchvision, "index", (f"torch=={pins.torch}",)),
        ],
    )
    args = build_args(manifest, torch_wheel=local.name)
    assert args["TORCH_INDEX_URL"] == pins.torch_index
    args["TORCH_INDEX_URL"] = torch_index  # the same role, on disk

    done = _run_torch_step(tmp_path, args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    python = tmp_path / "venv" / "bin" / "python"
    check = (
        "import importlib.metadata as m, torch\n"
        "print(torch.SOURCE, m.version('torch'), m.version('torchvision'))"
    )
    installed = subprocess.run([python, "-c", check], capture_output=True, text=True, timeout=60, check=True)
    assert installed.stdout.split() == ["local", pins.torch, pins.torchvision]
    constraints = (tmp_path / "venv" / "kit-constraints.txt").read_text().split()
    assert constraints == [f"torch=={pins.torch}", f"torchvision=={pins.torchvision}"]
    assert not (tmp_path / "kit-wheels").exists()  # the step removes the wheels it was sent

    # What the step got before the fix: no index once torch came from a local wheel.
    (tmp_path / "kit-wheels").mkdir()
    local.write_bytes((tmp_path / "dl" / local.name).read_bytes())
    shutil.rmtree(tmp_path / "venv")
    shutil.rmtree(tmp_path / "bin")
    broken = _run_torch_step(tmp_path, {**args, "TORCH_INDEX_URL": ""})
    assert broken.returncode != 0
    assert (
        f"No matching distribution found for torchvision=={pins.torchvision}" in broken.stdout + broken.stderr
    )


@pytest.mark.slow
def test_the_torch_step_of_the_cpu_image_with_a_local_wheel_needs_no_torch_index(tmp_path):
    manifest = load_manifest("sglang-0.5.23-cpu", ROOT / "images")
    (tmp_path / "kit-wheels").mkdir()
    local = _fake_wheel(tmp_path / "kit-wheels", "torch", manifest.pins.torch, "local")
    args = build_args(manifest, torch_wheel=local.name)
    assert args["TORCH_INDEX_URL"] == "" and args["TORCHVISION_VERSION"] == ""
    done = _run_torch_step(tmp_path, args)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "download.pytorch.org" not in done.stdout + done.stderr
    constraints = (tmp_path / "venv" / "kit-constraints.txt").read_text().split()
    assert constraints == [f"torch=={manifest.pins.torch}"]
