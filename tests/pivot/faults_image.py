"""The rehearsal image with this checkout's fault switch, for the tests that plant `hang-p2p`.

Where the built rehearsal image already carries this checkout's kit/rehearsal/kit_faults.py, it is
used as it is. Otherwise (the image was built before the switch last changed) a test image is
derived from it, adding only that file, under its own tag and its own manifest name in a temporary
KIT_PROJECT_DIR; `remove()` deletes exactly that image. The shared image is never rebuilt here.
"""

from __future__ import annotations

import io
import os
import secrets
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from kit.images.manifest import IMAGE_REPOSITORY
from kit.launch import resolve
from kit.runtime.engine import client

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ROOT / "kit" / "rehearsal" / "kit_faults.py"
IN_IMAGE = "/opt/kit/rehearsal/kit_faults.py"
TEST_LABEL = "io.kit.test"


@dataclass
class FaultsImage:
    image: str
    """The manifest name to pass as --image."""
    project_dir: Path | None
    """KIT_PROJECT_DIR for the derived image's manifest (None: the shared image is current)."""
    built_ref: str | None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.project_dir is not None:
            env["KIT_PROJECT_DIR"] = str(self.project_dir)
        return env

    def remove(self) -> None:
        if self.built_ref:
            client().images.remove(self.built_ref, force=True)
        if self.project_dir is not None:
            shutil.rmtree(self.project_dir, ignore_errors=True)


def file_in_image(ref: str, path: str) -> bytes | None:
    """A file's bytes from an image, read from a created (never started) container."""
    container = client().containers.create(ref, command=["true"], labels={TEST_LABEL: "pivot-read"})
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.getmembers()[0]
            handle = tar.extractfile(member)
            return handle.read() if handle else None
    finally:
        container.remove(force=True)


def faults_image(workdir: Path) -> FaultsImage:
    spec = resolve("tiny")
    if file_in_image(spec.image_ref, IN_IMAGE) == FAULTS.read_bytes():
        return FaultsImage(spec.image, None, None)
    name = f"pivot-test-{secrets.token_hex(3)}"
    ref = f"{IMAGE_REPOSITORY}:{name}"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for member, data in (
            (
                "Dockerfile",
                f"FROM {spec.image_ref}\nCOPY kit_faults.py {IN_IMAGE}\nLABEL {TEST_LABEL}=pivot\n".encode(),
            ),
            ("kit_faults.py", FAULTS.read_bytes()),
        ):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client().images.build(fileobj=context, custom_context=True, tag=ref, rm=True, forcerm=True)
    project = workdir / "project"
    (project / "images").mkdir(parents=True)
    manifest = (ROOT / "images" / f"{spec.image}.toml").read_text(encoding="utf-8")
    (project / "images" / f"{name}.toml").write_text(
        manifest.replace(f'name = "{spec.image}"', f'name = "{name}"', 1), encoding="utf-8"
    )
    return FaultsImage(name, project, ref)
