"""`kit repro` compares the bundle's image lock with the local image's and lists every difference,
those that decide a start-up first (torch, NCCL, CUDA wheels, SGLang, flashinfer, transformers)."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

from kit.diagnose.repro import lock_differences
from kit.images.image_lock import lock_digest

ROOT = Path(__file__).resolve().parents[2]
HERE = (ROOT / "images" / "sglang-0.5.23-cu130-sm120.lock").read_text(encoding="utf-8")


def _moved(text: str, name: str, version: str) -> str:
    out, n = re.subn(rf"^{re.escape(name)}==\S+", f"{name}=={version}", text, flags=re.M)
    assert n == 1, name
    return out


def test_a_bundle_whose_lock_differs_lists_every_difference_those_that_matter_first():
    bundle = HERE
    for name, version in (
        ("aiohttp", "3.0.0"),
        ("transformers", "5.25.0"),
        ("nvidia-nccl-cu13", "2.27.5"),
        ("torch", "2.14.0"),
        ("nvidia-cuda-nvcc", "13.5.37"),
        ("flashinfer-python", "0.7.1"),
        ("sglang", "0.5.22"),
    ):
        bundle = _moved(bundle, name, version)
    bundle += "zzz-extra==1.0\n"
    title, lines = lock_differences(bundle, HERE)
    assert title == "image lock, bundle -> here"
    assert lines[0] == f"bundle {lock_digest(bundle)}, here {lock_digest(HERE)}: 8 differences"
    names = [line.split(":")[0].strip() for line in lines[1:]]
    assert names == [
        "torch",
        "nvidia-nccl-cu13",
        "nvidia-cuda-nvcc",
        "sglang",
        "flashinfer-python",
        "transformers",
        "aiohttp",
        "zzz-extra",
    ]
    assert "  torch: 2.14.0 (bundle) -> 2.14.1 (here)" in lines
    assert "  zzz-extra: 1.0 only in bundle" in lines


def test_the_same_lock_and_a_missing_one_say_so():
    assert lock_differences(HERE, HERE)[1] == (
        f"bundle {lock_digest(HERE)}, here {lock_digest(HERE)}: the same packages",
    )
    assert lock_differences(None, HERE)[1] == ("not compared: the bundle carries no lock",)
    assert "could not be read" in lock_differences(HERE, None)[1][0]


def test_bundle_text_is_printable_and_bounded():
    bundle = HERE + "evil\x1b[2J==" + "9" * 400 + "\n"
    lines = lock_differences(bundle, HERE)[1]
    assert all(line.isprintable() and len(line) < 200 for line in lines)


class _LockedContainer:
    """A stopped server container of a locked image, as the engine answers for it: its attributes, and
    /opt/kit/lock.txt (the image's copy of images/NAME.lock) as `docker cp` streams it (a tar)."""

    name = "kit-tiny-locked"

    def __init__(self, lock: str):
        self._lock = lock.encode()
        config = {"Image": "kit/sglang:sglang-0.5.23-cpu", "Env": ["A=1"], "Cmd": ["python", "-m", "x"]}
        self.attrs = {"Image": "sha256:" + "0" * 64, "Name": "/kit-tiny-locked", "Config": config}

    def get_archive(self, path: str):
        assert path == "/opt/kit/lock.txt"
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            info = tarfile.TarInfo("lock.txt")
            info.size = len(self._lock)
            tar.addfile(info, io.BytesIO(self._lock))
        return [out.getvalue()], {}


class _Followed:
    """What kit up followed: the container, its log."""

    name = "kit-tiny-locked"

    def __init__(self, container):
        self.container = container

    def log_text(self) -> str:
        return "[2026-01-01 00:00:00] Init torch distributed begin.\n"


def test_the_bundle_of_a_locked_images_run_records_the_lock_it_ran(monkeypatch, tmp_path):
    """kit up's record of a run (record_run -> the runs folder -> the bundle) carries the lock read
    from inside the container: lock.txt is images/NAME.lock's text, and the fingerprint names it by
    that text's digest, with the versions taken from it."""
    from kit.diagnose import facts
    from kit.diagnose import fingerprint as fp
    from kit.diagnose.bundle import read_bundle
    from kit.diagnose.record import record_run
    from kit.launch import resolve

    lock = (ROOT / "images" / "sglang-0.5.23-cpu.lock").read_text(encoding="utf-8")
    monkeypatch.setattr(facts, "_docker_image", lambda ref: (None, f"image {ref} is not here"))
    monkeypatch.setattr(facts, "host_facts", lambda: fp.host_unknown("not read in this test"))
    monkeypatch.setattr(facts, "nvidia_facts", lambda gpus=None: {"unknown": "not read in this test"})
    result = {"target": "tiny", "image": "sglang-0.5.23-cpu", "verdict": "hung", "phase": "init"}
    recorded = record_run("s1", _Followed(_LockedContainer(lock)), resolve("tiny"), None, {}, result)
    bundle = read_bundle(recorded.bundle)
    assert bundle.text("lock.txt") == lock
    section = bundle.fingerprint["image"]["lock"]
    assert "sha256:" + section["sha256"] == lock_digest(lock)
    assert section["from"] == "/opt/kit/lock.txt in container kit-tiny-locked"
    assert section["packages"]["torch"] == bundle.fingerprint["versions"]["torch"]
    assert section["count"] == len(re.findall(r"^[A-Za-z0-9._-]+==", lock, flags=re.M))


def test_repro_says_whether_the_local_image_matches_the_bundles_lock_digest_and_base():
    base = "debian:bookworm-slim local sha256:" + "1" * 64 + " (not fixed)"
    other = "debian:bookworm-slim local sha256:" + "2" * 64 + " (not fixed)"
    assert lock_differences(HERE, HERE, (base, base))[1][0] == (
        f"the local image matches the bundle's: the same lock digest, the same base ({base})"
    )
    moved = _moved(HERE, "torch", "2.14.0")
    assert lock_differences(moved, HERE, (base, other))[1][0] == (
        "the local image does NOT match the bundle's: another lock digest, "
        f"another base (bundle {base}, here {other})"
    )
    assert lock_differences(HERE, HERE, (None, base))[1][0] == (
        "the local image does NOT match the bundle's: the same lock digest, "
        "base not compared (the bundle records none)"
    )
