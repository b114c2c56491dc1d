"""A throwaway image derived from the rehearsal image with only some of this checkout's files on top.

The shared rehearsal image is built from main and never rebuilt by tests; a test that needs this
checkout's version of an in-image file (the fault switch, /opt/kit/'s probe modules) derives one
under its own tag, with a manifest copy in a temporary KIT_PROJECT_DIR so the kit can name it;
`remove()` deletes exactly that image and folder.
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

ROOT = Path(__file__).resolve().parents[1]
TEST_LABEL = "io.kit.test"


@dataclass
class DerivedImage:
    image: str
    """The manifest name to pass as --image."""
    project_dir: Path | None
    """KIT_PROJECT_DIR for the derived image's manifest (None: the shared image is used as it is)."""
    built_ref: str | None

    @property
    def ref(self) -> str:
        return self.built_ref or resolve("tiny").image_ref

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
    container = client().containers.create(ref, command=["true"], labels={TEST_LABEL: "derived-read"})
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            handle = tar.extractfile(tar.getmembers()[0])
            return handle.read() if handle else None
    finally:
        container.remove(force=True)


def derive(
    workdir: Path,
    files: dict[str, bytes],
    purpose: str,
    *,
    prefix: str = "pivot-test",
    run: str | None = None,
) -> DerivedImage:
    """FROM the rehearsal image, COPY each of FILES ({path in the image: bytes}), then RUN `run` if
    given (the qwen image generates its model so), under a tag of its own."""
    spec = resolve("tiny")
    name = f"{prefix}-{secrets.token_hex(3)}"
    ref = f"{IMAGE_REPOSITORY}:{name}"
    lines = [f"FROM {spec.image_ref}"]
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for index, (target, data) in enumerate(sorted(files.items())):
            member = f"file{index}"
            lines.append(f"COPY {member} {target}")
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if run:
            lines.append(f"RUN {run}")
        dockerfile = "\n".join([*lines, f"LABEL {TEST_LABEL}={purpose}"]).encode() + b"\n"
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    client().images.build(fileobj=context, custom_context=True, tag=ref, rm=True, forcerm=True)
    project = workdir / "project"
    (project / "images").mkdir(parents=True)
    manifest = (ROOT / "images" / f"{spec.image}.toml").read_text(encoding="utf-8")
    (project / "images" / f"{name}.toml").write_text(
        manifest.replace(f'name = "{spec.image}"', f'name = "{name}"', 1), encoding="utf-8"
    )
    return DerivedImage(name, project, ref)
