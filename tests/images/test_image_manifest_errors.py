"""A bad manifest fails with one line naming the file, the key and the allowed keys, exit 2; random
damage to a manifest never produces a traceback."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from image_helpers import ROOT, run_kit

from kit.errors import InputError
from kit.images.manifest import parse_manifest

GPU = "sglang-0.5.23-cu130-sm120"
CPU = "sglang-0.5.23-cpu"


def edit(project: Path, name: str, old: str, new: str) -> Path:
    path = project / "images" / f"{name}.toml"
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


@pytest.mark.parametrize(
    ("name", "old", "new", "key", "allowed"),
    [
        # an unknown key in [pins]
        (GPU, 'nccl = "2.30.7"', 'nccl = "2.30.7"\nncc = "2.30.7"', "pins.ncc", "torch, torch_index"),
        # a missing pin that a cuda image must carry
        (GPU, 'nccl = "2.30.7"', "", "pins.nccl", "nccl_package, nccl, cuda"),
        # a pin that is required for every image
        (CPU, 'sglang = "0.5.23"', "", "pins.sglang", "sglang_kernel, flashinfer"),
        # an unknown top-level key
        (CPU, 'flavor = "cpu"', 'flavor = "cpu"\nflavour = "cpu"', "flavour", "name, flavor, dialect"),
        # an unknown key in [base]
        (GPU, 'python = "python3.12"', 'python = "python3.12"\npyhton = "x"', "base.pyhton", "image, python"),
        # a cuda image without 12.0
        (
            GPU,
            'torch_cuda_arch_list = "12.0"',
            'torch_cuda_arch_list = "9.0"',
            "pins.torch_cuda_arch_list",
            "torch",
        ),
        # a CUDA pin in the CPU image
        (CPU, 'sglang = "0.5.23"', 'sglang = "0.5.23"\nnccl = "2.28.3"', "pins.nccl", "torch"),
    ],
)
@pytest.mark.parametrize("command", [["image", "show"], ["image", "verify"], ["image", "build-args"]])
def test_bad_manifest_is_one_line_exit_2(project, capsys, command, name, old, new, key, allowed):
    path = edit(project, name, old, new)
    assert run_kit([*command, name]) == 2
    line = one_error_line(capsys)
    assert str(path) in line
    assert f": {key}:" in line, line
    assert "allowed keys: " in line and allowed in line, line


def test_list_fails_on_any_bad_manifest(project, capsys):
    edit(project, GPU, 'nccl = "2.30.7"', "")
    assert run_kit(["image", "list"]) == 2
    assert "pins.nccl: missing pin" in one_error_line(capsys)


def test_broken_toml_is_one_line(project, capsys):
    edit(project, CPU, 'flavor = "cpu"', 'flavor = "cpu')
    assert run_kit(["image", "show", CPU]) == 2
    line = one_error_line(capsys)
    assert "sglang-0.5.23-cpu.toml: not valid TOML" in line


def test_missing_top_level_key_is_not_called_a_pin(project, capsys):
    edit(project, CPU, 'dialect = "sglang-0.5.21"', "")
    assert run_kit(["image", "show", CPU]) == 2
    line = one_error_line(capsys)
    assert ": dialect: missing key" in line and "allowed keys: name, flavor, dialect" in line


# --- property: random damage never escapes as a traceback ------------------------------------------

SOURCES = {name: (ROOT / "images" / f"{name}.toml").read_text(encoding="utf-8") for name in (GPU, CPU)}
VALUES = st.one_of(
    st.text(max_size=12),
    st.integers(),
    st.booleans(),
    st.lists(st.text(max_size=5), max_size=3),
    st.just({}),
    st.floats(allow_nan=False),
)
KEYS = st.sampled_from(
    [
        "name",
        "flavor",
        "dialect",
        "description",
        "extra_pip",
        "base",
        "pins",
        "image",
        "python",
        "apt_packages",
        "torch",
        "nccl",
        "cuda",
        "sglang",
        "torch_cuda_arch_list",
        "bogus",
        "12.0",
    ]
)


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').encode("unicode_escape").decode() + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{}"


@st.composite
def damaged(draw) -> tuple[str, str]:
    name = draw(st.sampled_from(sorted(SOURCES)))
    lines = SOURCES[name].splitlines()
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "set", "add", "garble", "section"]))
        if action == "delete":
            del lines[index]
        elif action == "set" and re.match(r"^\w+\s*=", lines[index]):
            key = lines[index].split("=", 1)[0].strip()
            lines[index] = f"{key} = {toml_value(draw(VALUES))}"
        elif action == "add":
            lines.insert(index, f"{draw(KEYS)} = {toml_value(draw(VALUES))}")
        elif action == "garble":
            lines[index] = draw(st.text(max_size=20))
        else:
            lines.insert(index, f"[{draw(KEYS)}]")
        if not lines:
            lines = [""]
    return name, "\n".join(lines)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_random_damage_is_an_input_error_or_a_manifest(case):
    name, text = case
    try:
        manifest = parse_manifest(text, Path(f"/x/images/{name}.toml"))
    except InputError as exc:
        line = exc.one_line()
        assert "\n" not in line and line.startswith(f"/x/images/{name}.toml")
        if "unknown key" in line or "missing" in line:
            assert "allowed keys: " in line
    else:
        assert manifest.name == name
        tomllib.loads(text)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damaged())
def test_random_damage_through_the_cli(project, capsys, case):
    name, text = case
    (project / "images" / f"{name}.toml").write_text(text, encoding="utf-8")
    capsys.readouterr()
    code = run_kit(["image", "build-args", name, "--format", "json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert code in (0, 2), captured.err
    if code == 2:
        assert len(captured.err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", [GPU, CPU])
def test_a_manifest_without_a_py_spy_pin_is_one_line(project, capsys, name):
    """Every image carries py-spy at a pinned version: stacks of hung ranks depend on it."""
    path = project / "images" / f"{name}.toml"
    text = path.read_text(encoding="utf-8")
    path.write_text(re.sub(r'\s*"py-spy==[^"]+",?', "", text, count=1), encoding="utf-8")
    assert run_kit(["image", "show", name]) == 2
    line = one_error_line(capsys)
    assert f"{path}: extra_pip: no py-spy pin" in line and "name==1.2.3" in line
