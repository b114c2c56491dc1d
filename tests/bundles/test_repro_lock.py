"""`kit repro` compares the bundle's image lock with the local image's and lists every difference,
those that decide a start-up first (torch, NCCL, CUDA wheels, SGLang, flashinfer, transformers)."""

from __future__ import annotations

import re
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


def test_a_bundle_of_a_locked_image_names_its_lock_by_digest():
    """The image keeps its lock as /opt/kit/lock.txt; the fingerprint's image.lock.sha256 is then the
    digest of images/NAME.lock, and the bundle carries its text (lock.txt)."""
    from kit.diagnose.facts import lock_section

    section = lock_section(HERE, "unused", "/opt/kit/lock.txt in image x")
    assert "sha256:" + section["sha256"] == lock_digest(HERE)
    assert section["packages"]["torch"] == "2.14.1" and section["count"] == 208


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
