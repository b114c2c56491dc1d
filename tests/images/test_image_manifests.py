"""The manifests in images/: they load, GPU ones are provably sm_120 with every pin, each pin says
where it came from, and `kit image show/list` print what the issue asks for."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from image_helpers import ROOT, run_kit

from kit.images.manifest import list_manifests, load_manifest

IMAGES = ROOT / "images"
ALL = list_manifests(IMAGES)
GPU = [n for n in ALL if load_manifest(n, IMAGES).flavor == "cuda"]


def test_the_three_images_exist():
    assert {"sglang-0.5.10.post1-cu129-sm120", "sglang-0.5.23-cu130-sm120", "sglang-0.5.23-cpu"} <= set(ALL)
    assert len(GPU) >= 2


@pytest.mark.parametrize("name", GPU)
def test_gpu_manifests_pin_everything_for_sm120(name: str):
    m = load_manifest(name, IMAGES)
    assert m.base.image.startswith("nvidia/cuda:") and m.base.image.endswith("-cudnn-devel-ubuntu24.04")
    assert m.base.python == "python3.12"  # Ubuntu 24.04's interpreter; both sglang wheels exist for it
    assert "12.0" in m.arch_list
    # Exact pins: no ranges, and the CUDA build of torch matches the CUDA pin and index; or PyPI's
    # build, no extra index (its CUDA is held by the lock: cuda-toolkit, CUDA wheels at the minor).
    cu = "cu" + m.pins.cuda.replace(".", "")
    if m.pins.torch_index:
        assert m.pins.torch.endswith("+" + cu) and m.pins.torchvision.endswith("+" + cu)
        assert m.pins.torch_index == f"https://download.pytorch.org/whl/{cu}"
    else:
        assert "+" not in m.pins.torch and "+" not in m.pins.torchvision
    assert m.pins.nccl_package == f"nvidia-nccl-cu{m.pins.cuda.split('.')[0]}"
    assert m.base.image.split(":")[1].startswith(m.pins.cuda + ".")
    for value in (m.pins.sglang, m.pins.sglang_kernel, m.pins.flashinfer, m.pins.nccl):
        assert re.fullmatch(r"\d+(\.\d+)+(\.?post\d+)?", value), value


# Pins read together from one source share its comment; every other pin has its own.
_PIN_GROUPS = ({"torch", "torch_index"}, {"nccl_package", "nccl"})
# What a comment names when it says where a pin came from.
_SOURCE = re.compile(r"METADATA|PyPI|Dockerfile|https?://|\w/[\w.-]+#\d+|torch\.version|\.whl|docs/")


def _pin_comments(name: str) -> dict[str, str]:
    """Each pin of the manifest's [pins] table -> the comment block that covers it ('' if none)."""
    lines = (IMAGES / f"{name}.toml").read_text(encoding="utf-8").splitlines()
    comments: dict[str, str] = {}
    block: list[str] = []
    previous_pin = None
    for line in lines[lines.index("[pins]") + 1 :]:
        if line.startswith("["):
            break
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped)
            previous_pin = None
        elif pin := re.match(r"^(\w+)\s*=", line):
            key = pin.group(1)
            same_group = previous_pin and any({key, previous_pin} <= group for group in _PIN_GROUPS)
            comments[key] = comments[previous_pin] if same_group else " ".join(block)
            block, previous_pin = [], key
    return comments


@pytest.mark.parametrize("name", GPU)
def test_every_gpu_pin_says_where_it_came_from(name: str):
    """Each pin, or group of related pins (torch + torch_index), sits under a comment naming its source."""
    comments = _pin_comments(name)
    assert set(comments) >= {"torch", "sglang", "sglang_kernel", "flashinfer", "nccl", "cuda"}
    for pin, comment in comments.items():
        assert _SOURCE.search(comment), f"{name}: pin {pin!r} has no comment naming its source ({comment!r})"


@pytest.mark.parametrize("name", ALL)
def test_the_dialect_exists(name: str):
    dialects = ROOT / "kit" / "dialects"
    if not dialects.is_dir():
        pytest.skip("kit/dialects not in this tree")
    dialect = load_manifest(name, IMAGES).dialect
    assert (dialects / f"{dialect}.toml").is_file(), f"{name}: no kit/dialects/{dialect}.toml"


@pytest.mark.parametrize("name", ALL)
def test_manifest_files_are_plain_toml_named_after_themselves(name: str):
    data = tomllib.loads((IMAGES / f"{name}.toml").read_text(encoding="utf-8"))
    assert data["name"] == name


@pytest.mark.parametrize("name", GPU)
def test_show_prints_cuda_nccl_torch_sglang_and_the_arch_list(name: str, capsys, no_engine):
    assert run_kit(["image", "show", name]) == 0
    out = capsys.readouterr().out
    m = load_manifest(name, IMAGES)
    for label, value in (
        ("CUDA", m.pins.cuda),
        ("NCCL", m.pins.nccl),
        ("torch", m.pins.torch),
        ("sglang", m.pins.sglang),
        ("TORCH_CUDA_ARCH_LIST", "12.0"),
    ):
        assert re.search(rf"^{re.escape(label)}\s.*{re.escape(value)}", out, re.M), (label, value, out)
    assert "built: unknown" in out


def test_show_json(capsys, no_engine):
    assert run_kit(["image", "show", "sglang-0.5.23-cu130-sm120", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    pins = {p["key"]: p["value"] for p in shown["pins"]}
    assert pins["NCCL"] == "2.30.7" and pins["TORCH_CUDA_ARCH_LIST"] == "12.0"
    assert shown["built"] is None and shown["build_args"]["NCCL_PACKAGE"] == "nvidia-nccl-cu13"


def test_list_shows_every_manifest(capsys, no_engine):
    assert run_kit(["image", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ALL
    cpu = next(r for r in rows if r["flavor"] == "cpu")
    assert cpu["cuda"] == "-" and cpu["built"] is None


def test_build_args_env_format(capsys):
    assert run_kit(["image", "build-args", "sglang-0.5.10.post1-cu129-sm120"]) == 0
    lines = capsys.readouterr().out.splitlines()
    args = dict(line.split("=", 1) for line in lines)
    assert args["KIT_NCCL_VERSION"] == "2.28.3" and args["TORCH_INDEX_URL"].endswith("/cu129")
    assert args["BASE_IMAGE"] == "nvidia/cuda:12.9.1-cudnn-devel-ubuntu24.04"


def test_unknown_image_is_a_usage_error(capsys):
    assert run_kit(["image", "show", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown image 'nope'" in err and "sglang-0.5.23-cpu" in err


def test_image_help_lists_the_commands(capsys):
    assert run_kit(["image", "--help"]) == 0
    out = capsys.readouterr().out
    for command in ("build", "list", "show", "verify", "diff", "build-args"):
        assert re.search(rf"^\s+{command}\b", out, re.M), command
    assert not re.search(r"^\s+bases\b", out, re.M)  # hidden


def test_paths_are_relative_to_the_project(project: Path, capsys, no_engine):
    """KIT_PROJECT_DIR decides where manifests come from (the CLI error tests rely on it)."""
    (project / "images" / "sglang-0.5.23-cpu.toml").rename(project / "images" / "renamed.toml")
    assert run_kit(["image", "list", "--json"]) == 2  # the name inside no longer matches the file
    assert "renamed.toml: name" in capsys.readouterr().err


def test_the_cu129_image_force_pins_cudnn_after_torch_like_sglangs_own_install():
    from kit.images.image_lock import lock_ask
    from kit.images.manifest import parse_manifest

    m = load_manifest("sglang-0.5.10.post1-cu129-sm120", IMAGES)
    assert m.force_pip == ("nvidia-cudnn-cu12==9.16.0.29",)
    # The lock forces it over torch's own cuDNN pin (a uv override), beside NCCL.
    assert lock_ask(m).overrides == ("nvidia-nccl-cu12==2.28.3", "nvidia-cudnn-cu12==9.16.0.29")
    assert lock_ask(load_manifest("sglang-0.5.23-cpu", IMAGES)).overrides == ()
    cpu = IMAGES / "sglang-0.5.23-cpu.toml"
    text = cpu.read_text().replace("[base]", 'force_pip = ["nvidia-cudnn-cu12"]\n\n[base]', 1)
    with pytest.raises(Exception, match="force_pip: 'nvidia-cudnn-cu12' is not pinned with =="):
        parse_manifest(text, cpu)
