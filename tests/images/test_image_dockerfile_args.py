"""The one Dockerfile and the manifests agree: every manifest feeds exactly the ARGs the Dockerfile
declares, and no ARG has a default that could silently stand in for a missing pin."""

from __future__ import annotations

import re
from pathlib import Path

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
    fed = build_args(load_manifest(name, ROOT / "images"), torch_from_local_wheel=local_wheel)
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
    fed = build_args(manifest, torch_from_local_wheel=False)
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
