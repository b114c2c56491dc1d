"""What a build sends: the assembled context, where torch comes from, and the host pip's defaults."""

from __future__ import annotations

import io
import re
import tarfile
from fnmatch import fnmatch
from pathlib import Path

import pytest

from kit.errors import InputError
from kit.images.build import BuildOptions, build_args, local_torch_wheel, write_context
from kit.images.manifest import load_manifest
from kit.images.pipconfig import parse_pip_config
from kit.images.resolve import find_local_wheel, python_tag

CPU = "sglang-0.5.23-cpu"


def context_names(options: BuildOptions) -> tuple[list[str], str]:
    buffer = io.BytesIO()
    source = write_context(buffer, load_manifest(CPU), options)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        return sorted(tar.getnames()), source


def test_the_context_holds_only_what_the_dockerfile_copies(tmp_path):
    names, source = context_names(BuildOptions())
    assert "Dockerfile" in names
    assert "kit/rehearsal/kit_faults.py" in names
    assert "kit/rehearsal/shims/sgl_kernel/__init__.py" in names
    assert "kit/rehearsal/tiny_model.py" in names
    assert "kit/rehearsal/tiny_qwen3_5.py" in names
    assert "kit/images/inimage/verify.py" in names
    assert "images/ca/.keep" in names and "images/wheels/.keep" in names
    assert f"images/{CPU}.lock" in names  # what the Dockerfile installs, and nothing else
    assert not any(n.startswith(("tests/", ".git", "kit/cli", "kit/catalog")) for n in names)
    assert all(
        n in ("Dockerfile", f"images/{CPU}.lock") or n.startswith(("images/ca/", "images/wheels/", "kit/"))
        for n in names
    )
    assert source.startswith("index https://download.pytorch.org/whl/cpu")


def test_a_local_torch_wheel_goes_into_the_context_and_the_cpu_image_asks_no_torch_index(tmp_path):
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    (tmp_path / "torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"wrong python")
    names, source = context_names(BuildOptions(wheel_dirs=(tmp_path,)))
    assert f"images/wheels/{wheel.name}" in names
    assert source == f"local wheel {wheel}"
    assert local_torch_wheel(load_manifest(CPU), BuildOptions(wheel_dirs=(tmp_path,))) == wheel
    # Nothing else in the CPU image comes from the torch index, which may be unreachable.
    args = build_args(load_manifest(CPU), torch_wheel=wheel.name)
    assert args["TORCH_INDEX_URL"] == ""


@pytest.mark.parametrize("name", ["sglang-0.5.23-cu130-sm120", "sglang-0.5.10.post1-cu129-sm120"])
def test_a_gpu_build_with_a_local_torch_wheel_keeps_the_torch_index(tmp_path, name):
    """torchvision (and torchaudio) +cuXXX builds live only on the torch index: a local torch wheel
    must not take that index away (it did: TORCH_INDEX_URL was emptied)."""
    manifest = load_manifest(name)
    wheel = tmp_path / f"torch-{manifest.pins.torch}-cp312-cp312-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"not really a wheel")
    options = BuildOptions(wheel_dirs=(tmp_path,))
    assert local_torch_wheel(manifest, options) == wheel
    args = build_args(manifest, torch_wheel=wheel.name)
    assert args["TORCH_INDEX_URL"] == (manifest.pins.torch_index or "")
    if manifest.pins.torch_index:
        assert args["TORCHVISION_VERSION"].endswith("+cu" + manifest.pins.cuda.replace(".", ""))
    buffer = io.BytesIO()
    if (Path(__file__).resolve().parents[2] / "images" / f"{name}.lock").is_file():
        assert write_context(buffer, manifest, options) == f"local wheel {wheel}"
    else:  # no lock, no build: the Dockerfile installs the lock alone
        with pytest.raises(InputError, match=f"{name} has no lock") as raised:
            write_context(buffer, manifest, options)
        assert raised.value.hint == f"run 'kit image lock {name}' first"


def test_a_ca_bundle_is_sent_as_ca_bundle_crt(tmp_path):
    bundle = tmp_path / "corp.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    names, _ = context_names(BuildOptions(ca_bundle=bundle))
    assert "images/ca/ca-bundle.crt" in names
    assert "images/ca/.keep" not in names


def test_a_missing_ca_bundle_is_an_input_error(tmp_path):
    with pytest.raises(InputError) as info:
        context_names(BuildOptions(ca_bundle=tmp_path / "absent.pem"))
    assert info.value.field == "--ca-bundle"


def test_two_contexts_with_the_same_files_are_byte_identical():
    first, second = io.BytesIO(), io.BytesIO()
    write_context(first, load_manifest(CPU), BuildOptions())
    write_context(second, load_manifest(CPU), BuildOptions())
    assert first.getvalue() == second.getvalue()


def test_python_tags_and_wheel_matching(tmp_path):
    assert python_tag("python3.11") == "cp311"
    assert python_tag("python3.12") == "cp312"
    with pytest.raises(InputError):
        python_tag("py3")
    assert find_local_wheel("torch", "2.13.0+cpu", "cp311", [tmp_path / "absent"]) is None


def test_pip_config_environment_values_win_over_files():
    text = (
        "global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
        ":env:.cert='/corp/ca.pem'\n"
        "global.find-links='/opt/wheels /srv/more'\n"
        "garbage line\n"
    )
    assert parse_pip_config(text) == {"cert": "/corp/ca.pem", "find-links": "/opt/wheels /srv/more"}


def test_the_dockerfile_is_where_the_kit_finds_it():
    from kit import paths

    assert paths.dockerfile() == Path(__file__).parents[2] / "Dockerfile"


def test_dockerignore_lets_through_exactly_the_context_paths():
    # compose.yaml builds from the checkout: .dockerignore must keep what the Dockerfile copies.
    from kit import paths

    ignore = (paths.project_root() / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    names, _ = context_names(BuildOptions())
    for name in names:
        if name.endswith(".keep"):
            continue
        assert any(fnmatch(name, a) or name.startswith(a + "/") for a in allowed), name
    copies = [line.split()[1].rstrip("/") for line in (paths.dockerfile()).read_text().splitlines()
              if line.startswith("COPY ")]  # fmt: skip
    copies = [re.sub(r"\$\{[A-Z_]+\}", "*", c) for c in copies]  # images/${KIT_IMAGE_NAME}.lock
    assert all(any(c == a or a.startswith(c + "/") for a in allowed) for c in copies), copies
    for folder in ("images/ca", "images/wheels"):
        assert (paths.project_root() / folder / ".keep").is_file()
