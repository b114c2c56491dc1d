"""The engine side of `kit image show/verify/diff`: what a built image is, and reading files from it
without starting anything in it.

Everything here talks to Docker through kit.runtime.engine; the comparisons that use these facts
are pure functions elsewhere (kit.images.verify, kit.images.lock).
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kit.errors import EnvironmentProblem, KitError

# Containers the image commands start are short-lived and carry this label value, so a crashed run
# can be found and removed: `docker ps -a --filter label=io.kit.managed=verify`.
MANAGED_VALUE = "verify"


class NotInImage(KitError):
    """The image has no such file: it is not a kit image, or one built before the kit recorded it."""


@dataclass(frozen=True)
class ImageInfo:
    ref: str
    id: str
    size_bytes: int
    created: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def size_gb(self) -> float:
        return self.size_bytes / 1e9


def _info(image, ref: str) -> ImageInfo:
    attrs = image.attrs
    return ImageInfo(
        ref=ref,
        id=image.id,
        size_bytes=int(attrs.get("Size") or 0),
        created=str(attrs.get("Created") or ""),
        labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
    )


def image_info(ref: str) -> ImageInfo | None:
    """The image's facts, or None when it is not built. Raises EnvironmentProblem without an engine."""
    from docker.errors import ImageNotFound

    from kit.runtime.engine import client, translated

    with translated(f"inspecting {ref}"):
        try:
            return _info(client().images.get(ref), ref)
        except ImageNotFound:
            return None


def image_info_if_engine(ref: str) -> tuple[ImageInfo | None, str | None]:
    """(info, None), or (None, why) when no engine answers: listing manifests must not need Docker."""
    try:
        return image_info(ref), None
    except EnvironmentProblem as exc:
        return None, exc.one_line()


def require_image(ref: str, name: str | None = None) -> ImageInfo:
    """The image, or the one-line 'not built' error (exit 3) that says how to build it."""
    info = image_info(ref)
    if info is None:
        how = f"run 'kit image build {name}'" if name else "build or pull it first"
        raise EnvironmentProblem(f"image {ref} not built", hint=how)
    return info


@contextlib.contextmanager
def created_container(ref: str, *, label_image: str = "") -> Iterator[Any]:
    """A container of REF, created and never started (labelled so a crashed run can be found),
    removed on the way out: what reading an image's files without running it needs."""
    from kit.runtime.engine import LABEL_IMAGE, LABEL_MANAGED, client

    container = client().containers.create(
        ref,
        command=["true"],
        labels={LABEL_MANAGED: MANAGED_VALUE, LABEL_IMAGE: label_image or ref},
        network_disabled=True,
    )
    try:
        yield container
    finally:
        container.remove(force=True)


def read_file(ref: str, path: str, *, label_image: str = "") -> bytes:
    """A file's bytes from an image: create a container (never started), copy the file out, remove it."""
    from docker.errors import NotFound

    from kit.runtime.engine import translated

    with (
        translated(f"reading {path} from {ref}"),
        created_container(ref, label_image=label_image) as container,
    ):
        try:
            chunks, _ = container.get_archive(path)
        except NotFound as exc:
            raise NotInImage(
                f"{ref} has no {path}",
                hint="it is not a kit image, or one built before the kit recorded that file",
            ) from exc
        archive = io.BytesIO(b"".join(chunks))
    with tarfile.open(fileobj=archive) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        if member is None:
            raise KitError(f"{ref}: {path} is not a regular file")
        handle = tar.extractfile(member)
        assert handle is not None  # a regular file always has a body
        return handle.read()


def engine_info() -> dict:
    """`docker info` as a dict: what kit.images.gpu_access plans GPU access from."""
    from kit.runtime.engine import client, translated

    with translated("asking the engine about GPUs"):
        return dict(client().info())
