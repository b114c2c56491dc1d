"""The CPU image as the tiny-qwen targets need it: this checkout's stand-ins and generated Qwen3.5 model.

CI builds the shared rehearsal image from the merged tree, so there it already carries this
checkout's kit/rehearsal/shims, tiny_qwen3_5.py and /opt/kit/models/qwen-tiny, and is used as it
is. Where it was built from an older tree, a test image is derived from it adding only those (the
generator runs in it, as the Dockerfile runs it), under its own tag and its own manifest name in a
temporary KIT_PROJECT_DIR (the pattern of tests/pivot/faults_image.py); `remove()` deletes exactly
that image. The shared image is never rebuilt here.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from derived_image import TEST_LABEL, DerivedImage, derive

from kit.launch import resolve
from kit.runtime.engine import client

ROOT = Path(__file__).resolve().parents[2]
REHEARSAL = ROOT / "kit" / "rehearsal"
IN_IMAGE = "/opt/kit/rehearsal"
MODEL = "/opt/kit/models/qwen-tiny"
GENERATORS = ("tiny_model.py", "tiny_qwen3_5.py")
QwenImage = DerivedImage


def _checkout_files() -> dict[str, bytes]:
    files = {f"{IN_IMAGE}/{name}": (REHEARSAL / name).read_bytes() for name in GENERATORS}
    for path in sorted((REHEARSAL / "shims").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix == ".py":
            files[f"{IN_IMAGE}/shims/{path.relative_to(REHEARSAL / 'shims').as_posix()}"] = path.read_bytes()
    return files


def _image_files(ref: str) -> dict[str, bytes]:
    """The image's /opt/kit (rehearsal files and the model's config), read from a created container."""
    container = client().containers.create(ref, command=["true"], labels={TEST_LABEL: "qwen-read"})
    found: dict[str, bytes] = {}
    try:
        for folder in (IN_IMAGE, MODEL):
            try:
                stream, _ = container.get_archive(folder)
            except Exception:  # docker.errors.NotFound: an image built before the model existed
                continue
            parent = folder.rsplit("/", 1)[0]
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                for member in tar.getmembers():
                    handle = tar.extractfile(member) if member.isfile() else None
                    if handle and member.name.endswith((".py", "config.json")):
                        found[f"{parent}/{member.name}"] = handle.read()
    finally:
        container.remove(force=True)
    return found


def qwen_image(workdir: Path) -> QwenImage:
    spec = resolve("tiny-qwen")
    wanted = _checkout_files()
    have = _image_files(spec.image_ref)
    current = f"{MODEL}/config.json" in have and all(have.get(path) == data for path, data in wanted.items())
    if current:
        return QwenImage(spec.image, None, None)
    generate = f"rm -rf {MODEL} && python {IN_IMAGE}/tiny_qwen3_5.py {MODEL}"
    return derive(workdir, wanted, "qwen", prefix="qwen-test", run=generate)
