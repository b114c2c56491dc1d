"""Bases by digest and the lock's system part (pure): what the build says about its base, the
dpkg database read into lock lines and back, the check that holds them to the manifest, and the
verify rows that hold an image to them."""

from __future__ import annotations

from pathlib import Path

import pytest
from image_helpers import ROOT

from kit.images.base import LocalBase, base_line, content_digest, judge_base
from kit.images.image_lock import check_lock
from kit.images.manifest import load_manifest
from kit.images.system_lock import (
    SystemLock,
    SystemPackage,
    apt_names,
    compare_packages,
    parse_dpkg_status,
    snapshot_url,
    system_of,
    with_system,
)
from kit.images.verify import DRIFT, NOT_CHECKED, OK, base_row, system_rows

IMAGES = ROOT / "images"
CPU, GPU = "sglang-0.5.23-cpu", "sglang-0.5.23-cu130-sm120"
GPU_DIGEST = "sha256:0230b7f243483cb15969fa3cc724a9459599604427052fc2a0d4291c7c0647dd"
LAYER = "sha256:" + "1" * 64

STATUS = """Package: bash
Status: install ok installed
Priority: required
Architecture: amd64
Version: 5.2.15-2+b7
Description: GNU Bourne Again SHell
 Bash is an sh-compatible command language interpreter.
 .
 Status: install ok installed (a continuation line is not a field)

Package: removed-one
Status: deinstall ok config-files
Version: 1.0

Package: g++
Status: install ok installed
Architecture: amd64
Version: 4:12.2.0-3
"""


def _local(*, pulled: str | None = None, ref: str = "debian:bookworm-slim") -> LocalBase:
    repo = ref.rsplit(":", 1)[0]
    return LocalBase(ref, "sha256:" + "9" * 64, (f"{repo}@{pulled}",) if pulled else (), (LAYER,))


def test_a_registry_base_must_be_the_manifests_digest_and_the_refusal_says_how_to_pull_it():
    gpu = load_manifest(GPU, IMAGES)
    image = gpu.base.image
    assert judge_base(gpu, None, _local(pulled=GPU_DIGEST, ref=image)).ok
    other = judge_base(gpu, None, _local(pulled="sha256:" + "2" * 64, ref=image))
    assert not other.ok and "the manifest names @" + GPU_DIGEST in other.line
    assert other.fix == f"docker pull {image}@{GPU_DIGEST} && docker tag {image}@{GPU_DIGEST} {image}"
    imported = judge_base(gpu, None, _local(ref=image))
    assert not imported.ok and "built or imported locally" in imported.line
    absent = judge_base(gpu, None, None)
    assert not absent.ok and absent.fix.startswith("docker pull ")


def test_a_local_base_is_accepted_and_said_not_fixed_unless_it_is_the_one_the_lock_was_made_on():
    cpu = load_manifest(CPU, IMAGES)
    here = _local()
    assert base_line(here) == f"debian:bookworm-slim local {LAYER} (not fixed)"
    same = judge_base(cpu, base_line(here), here)
    assert same.ok and same.line.endswith("the one the lock was made on")
    other = judge_base(cpu, "debian:bookworm-slim local sha256:" + "3" * 64 + " (not fixed)", here)
    assert (
        other.ok
        and "not fixed" in other.line
        and "the lock was made on debian:bookworm-slim local" in other.line
    )
    unrecorded = judge_base(cpu, None, here)
    assert unrecorded.ok and "the lock records no base" in unrecorded.line
    assert content_digest([LAYER]) == LAYER and content_digest([LAYER, LAYER]) != LAYER


def test_the_dpkg_database_becomes_lock_lines_and_back(tmp_path: Path):
    installed = parse_dpkg_status(STATUS)
    assert installed == {
        "bash": SystemPackage("bash", "5.2.15-2+b7", "amd64"),
        "g++": SystemPackage("g++", "4:12.2.0-3", "amd64"),
    }
    epoch = 1796472000
    assert snapshot_url("bookworm", epoch) == "https://snapshot.debian.org/archive/debian/20261205T120000Z/"
    assert snapshot_url("ubuntu24.04", epoch) == "https://snapshot.ubuntu.com/ubuntu/20261205T120000Z/"
    system = SystemLock(
        "debian:bookworm-slim local x (not fixed)", epoch, snapshot_url("bookworm", epoch), installed
    )
    text = (IMAGES / f"{CPU}.lock").read_text(encoding="utf-8")
    locked = with_system(text, system)
    assert system_of(locked) == system
    assert "# kit-apt: g++ 4:12.2.0-3 amd64\n" in locked
    # pip reads none of it (comments), the Python closure is untouched, and it is placed once.
    body = [ln for ln in locked.splitlines() if not ln.startswith("#")]
    assert body == [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert with_system(locked, system) == locked


def test_check_holds_the_system_part_to_the_manifest():
    cpu = load_manifest(CPU, IMAGES)
    text = (IMAGES / f"{CPU}.lock").read_text(encoding="utf-8")
    packages = {n: SystemPackage(n, "1") for n in apt_names(cpu)}
    good = with_system(text, SystemLock("debian:bookworm-slim local x (not fixed)", 1, "u", packages))
    assert check_lock(cpu, good) == []
    without_gxx = {n: p for n, p in packages.items() if n != "g++"}
    problems = check_lock(
        cpu, with_system(text, SystemLock("debian:bookworm-slim local x", 1, "u", without_gxx))
    )
    assert [(p.package, p.detail) for p in problems] == [
        ("g++", "the manifest installs g++; the lock's system packages do not hold it")
    ]
    other_base = check_lock(cpu, with_system(text, SystemLock("ubuntu:24.04@sha256:x", 1, "u", packages)))
    assert [p.package for p in other_base] == ["base"]


def test_verify_rows_hold_the_image_to_the_lock():
    cpu = load_manifest(CPU, IMAGES)
    names = apt_names(cpu)
    status = "\n\n".join(
        f"Package: {n}\nStatus: install ok installed\nVersion: 1.0\nArchitecture: amd64"
        for n in (*names, "bash")
    )
    text = (IMAGES / f"{CPU}.lock").read_text(encoding="utf-8")
    locked = with_system(
        text, SystemLock(f"debian:bookworm-slim local {LAYER} (not fixed)", 1, "u", parse_dpkg_status(status))
    )
    rows = system_rows(cpu, locked, status)
    assert [r.check for r in rows] == [*(f"apt {n}" for n in names), "system packages"]
    assert {r.status for r in rows} == {OK} and rows[-1].found == f"0 differences ({len(names) + 1} packages)"
    moved = status.replace(
        "Package: bash\nStatus: install ok installed\nVersion: 1.0",
        "Package: bash\nStatus: install ok installed\nVersion: 1.1",
    )
    last = system_rows(cpu, locked, moved)[-1]
    assert last.status == DRIFT and last.found == "1 difference(s): bash: 1.0 -> 1.1"
    without = with_system(text, SystemLock())  # a lock with no system part yet
    assert system_rows(cpu, without, status)[0].status == NOT_CHECKED

    assert base_row(cpu, locked, f"debian:bookworm-slim local {LAYER} (not fixed)").status == OK
    other = base_row(cpu, locked, "debian:bookworm-slim local sha256:" + "4" * 64 + " (not fixed)")
    assert other.status == OK and other.why == "a locally built base is not fixed"
    assert base_row(cpu, locked, None).status == NOT_CHECKED
    gpu = load_manifest(GPU, IMAGES)
    named = f"{gpu.base.image}@{GPU_DIGEST}"
    assert base_row(gpu, None, named).status == OK
    assert base_row(gpu, None, f"{gpu.base.image}@sha256:" + "5" * 64).status == DRIFT


@pytest.mark.parametrize("value", ["sha256:abc", "latest", "LOCAL"])
def test_a_base_digest_that_names_nothing_is_refused_with_the_key(tmp_path: Path, value: str):
    from kit.errors import InputError
    from kit.images.manifest import parse_manifest

    text = (IMAGES / f"{GPU}.toml").read_text(encoding="utf-8").replace(GPU_DIGEST, value)
    with pytest.raises(InputError) as error:
        parse_manifest(text, tmp_path / f"{GPU}.toml")
    assert error.value.field.endswith("base.digest")
    assert error.value.problem == f"'{value}' is neither sha256:<64 hex> nor 'local'"
    local_gpu = (IMAGES / f"{GPU}.toml").read_text(encoding="utf-8").replace(GPU_DIGEST, "local")
    with pytest.raises(InputError, match=r"needs base\.debootstrap_suite"):
        parse_manifest(local_gpu, tmp_path / f"{GPU}.toml")
    assert compare_packages({}, {}).differences == []
