"""The one Dockerfile and the manifests agree: every manifest feeds exactly the ARGs the Dockerfile
declares, and no ARG has a default that could silently stand in for a missing pin."""

from __future__ import annotations

import json
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
    assert fed["TORCH_INDEX_URL"] == (pins.torch_index or "")
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


# --- the install step itself, run by bash and real pip against local stand-in indexes ---------------


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


def _lock_step() -> str:
    """The RUN instruction right after `COPY images/${KIT_IMAGE_NAME}.lock ...`, as bash will run it."""
    steps = instructions(DOCKERFILE)
    at = steps.index(("COPY", "images/${KIT_IMAGE_NAME}.lock /opt/kit/lock.txt"))
    assert steps[at - 1] == ("COPY", "images/wheels/ /tmp/kit-wheels/")
    keyword, script = steps[at + 1]
    assert keyword == "RUN"
    return script


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run_lock_step(
    tmp_path: Path, lock: str, args: dict[str, str], pypi: list[Path]
) -> subprocess.CompletedProcess:
    wheels, venv, bindir = tmp_path / "kit-wheels", tmp_path / "venv", tmp_path / "bin"
    for folder in (venv, bindir):
        shutil.rmtree(folder, ignore_errors=True)
    bindir.mkdir()
    (tmp_path / "image.lock").write_text(lock, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # `python -m pip` in the step is this venv's pip, installing into the throw-away venv.
    (bindir / "python").write_text(
        f'#!/bin/sh\nshift 2\nexec {sys.executable} -m pip --python {venv}/bin/python "$@"\n'
    )
    (bindir / "python").chmod(0o755)
    script = (
        _lock_step()
        .replace("/tmp/kit-wheels", str(wheels))
        .replace("/opt/kit/lock.txt", str(tmp_path / "image.lock"))
    )
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "PIP_CONFIG_FILE": os.devnull,  # not this host's pip config (its find-links, indexes)
        "PIP_INDEX_URL": _simple_index(tmp_path / "pypi", pypi),  # a PyPI on disk: nothing leaves it
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **args,
    }
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", script], env=env, capture_output=True, text=True, timeout=300
    )


def _installed(tmp_path: Path) -> dict[str, str]:
    check = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps({d.name: d.version for d in m.distributions()}))"
    )
    python = tmp_path / "venv" / "bin" / "python"
    return json.loads(
        subprocess.run([python, "-c", check], capture_output=True, text=True, check=True).stdout
    )


@pytest.mark.slow
def test_the_install_step_installs_the_lock_and_nothing_else_and_refuses_a_file_it_does_not_name(tmp_path):
    """The CPU image's shape: torch from the wheel the kit sends (no torch index), the rest from
    PyPI; a dependency the lock leaves out is not resolved in, and a changed file is refused."""
    manifest = load_manifest("sglang-0.5.23-cpu", ROOT / "images")
    args = build_args(manifest, torch_wheel=f"torch-{manifest.pins.torch}-cp311-cp311-linux_x86_64.whl")
    assert args["TORCH_INDEX_URL"] == ""
    (tmp_path / "kit-wheels").mkdir()
    (tmp_path / "dl").mkdir()
    torch = _fake_wheel(tmp_path / "kit-wheels", "torch", manifest.pins.torch, "local")
    sglang = _fake_wheel(tmp_path / "dl", "sglang", manifest.pins.sglang, "pypi", ("unlocked==1.0",))
    unlocked = _fake_wheel(tmp_path / "dl", "unlocked", "1.0", "pypi")
    lock = (
        f"sglang=={manifest.pins.sglang} \\\n    --hash=sha256:{_sha256(sglang)}\n"
        f"torch=={manifest.pins.torch} \\\n    --hash=sha256:{_sha256(torch)}\n"
    )
    done = _run_lock_step(tmp_path, lock, args, [sglang, unlocked])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    installed = _installed(tmp_path)
    assert installed == {"sglang": manifest.pins.sglang, "torch": manifest.pins.torch}  # no 'unlocked'
    assert "download.pytorch.org" not in done.stdout + done.stderr
    assert not (tmp_path / "kit-wheels").exists()  # the step removes the wheels it was sent

    # The same lock, PyPI's sglang file changed under it: pip refuses the file, nothing is installed.
    (tmp_path / "kit-wheels").mkdir()
    torch = _fake_wheel(tmp_path / "kit-wheels", "torch", manifest.pins.torch, "local")
    (tmp_path / "dl2").mkdir()
    other = _fake_wheel(tmp_path / "dl2", "sglang", manifest.pins.sglang, "tampered")
    refused = _run_lock_step(tmp_path, lock, args, [other, unlocked])
    assert refused.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in refused.stdout + refused.stderr
    assert "sglang" not in _installed(tmp_path)
