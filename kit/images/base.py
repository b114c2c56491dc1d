"""An image's base, by digest: what the manifest names, what the lock was made on, what is here.

    content_digest(layers)                 a local image's content: its layers' digests (diff IDs)
    base_line(local)                       how a lock and a label name a base: 'TAG@sha256:...' pulled
                                           from a registry, or 'TAG local sha256:... (not fixed)'
    judge_base(manifest, lock_base, local) -> BaseCheck   build on it, or refuse and say how to get it
    local_base(ref) -> LocalBase | None    the adapter: `docker image inspect`

A base pulled from a registry is named by its registry digest (the manifest's `base.digest`); the
build refuses another one and says how to pull the named one. A base built here from Debian packages
(scripts/bootstrap's debootstrap, where no registry answers: this project's machines and CI) has no
registry digest, and its content is not fixed either: a fresh debootstrap of the live mirror writes
its own logs, package lists and times, and moves with Debian's point releases (no snapshot mirror
answers from here). So a manifest that allows it says `digest = "local"`, the lock records the
content digest it was made on with '(not fixed)', and the build accepts a local base whose content
differs, saying so; the system packages the lock holds are installed at their versions on top.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from kit.images.manifest import LOCAL_BASE, Manifest

NOT_FIXED = "(not fixed)"


@dataclass(frozen=True)
class LocalBase:
    ref: str
    id: str
    repo_digests: tuple[str, ...]
    """'debian@sha256:...' for a pulled image; empty for one built or imported here."""
    layers: tuple[str, ...]

    @property
    def pulled(self) -> bool:
        return bool(self.repo_digests)

    def digest(self) -> str | None:
        """The registry digest this image was pulled by (its repository's), else None."""
        repository = self.ref.rsplit(":", 1)[0] if ":" in self.ref.rsplit("/", 1)[-1] else self.ref
        for entry in self.repo_digests:
            name, _, digest = entry.partition("@")
            if _same_repository(name, repository):
                return digest
        return self.repo_digests[0].partition("@")[2] if self.repo_digests else None


def _same_repository(a: str, b: str) -> bool:
    def bare(name: str) -> str:
        name = name.removeprefix("docker.io/")
        return name.removeprefix("library/")

    return bare(a) == bare(b)


def content_digest(layers: Sequence[str]) -> str:
    """One layer: its own diff ID; several: the sha256 of their diff IDs, one a line."""
    if len(layers) == 1:
        return layers[0]
    return "sha256:" + hashlib.sha256("\n".join(layers).encode()).hexdigest()


def base_line(local: LocalBase) -> str:
    """'nvidia/cuda:13.0.3-...@sha256:...' or 'debian:bookworm-slim local sha256:... (not fixed)'."""
    digest = local.digest()
    if digest:
        return f"{local.ref}@{digest}"
    return f"{local.ref} local {content_digest(local.layers)} {NOT_FIXED}"


@dataclass(frozen=True)
class BaseCheck:
    ok: bool
    line: str
    """What the build says about its base (printed before the build starts)."""
    fix: str = ""
    """How to get the named base, when not ok."""


def _pull(manifest: Manifest) -> str:
    image, digest = manifest.base.image, manifest.base.digest
    if digest and digest != LOCAL_BASE:
        return f"docker pull {image}@{digest} && docker tag {image}@{digest} {image}"
    if manifest.base.debootstrap_suite:
        return "scripts/bootstrap pulls it, or builds it from Debian packages where no registry answers"
    return f"docker pull {image}"


def judge_base(manifest: Manifest, lock_base: str | None, local: LocalBase | None) -> BaseCheck:
    """Whether a build may start on the local base (pure). `lock_base` is the lock's
    '# kit-lock base:' line, or None for a lock made before it recorded one."""
    image, named = manifest.base.image, manifest.base.digest
    if local is None:
        return BaseCheck(False, f"base {image} is not here", _pull(manifest))
    here = base_line(local)
    digest = local.digest()
    if named and named != LOCAL_BASE:
        if digest == named:
            return BaseCheck(True, f"base {image}@{named}: the manifest's")
        if digest:
            return BaseCheck(
                False, f"base {image} here is @{digest}, the manifest names @{named}", _pull(manifest)
            )
        return BaseCheck(
            False,
            f"base {image} here was built or imported locally ({content_digest(local.layers)}); "
            f"the manifest names the registry's @{named}",
            _pull(manifest),
        )
    # A manifest that allows a local base: its content is not fixed (module docstring); said, never silent.
    if lock_base == here:
        return BaseCheck(True, f"base {here}: the one the lock was made on")
    made_on = f"the lock was made on {lock_base}" if lock_base else "the lock records no base"
    kind = f"pulled by tag ({digest})" if digest else f"built here ({content_digest(local.layers)})"
    return BaseCheck(
        True,
        f"base {image} {kind}; {made_on}: accepted, a local base's content is not fixed "
        "(the lock's system packages are installed at their versions on top)",
    )


def pull_named(manifest: Manifest) -> bool:
    """Pull the manifest's base by its registry digest and tag it as base.image (what FROM names).
    False where there is no registry digest or the pull fails (no registry: the caller refuses)."""
    from docker.errors import DockerException

    from kit.runtime.engine import client

    image, digest = manifest.base.image, manifest.base.digest
    if not digest or digest == LOCAL_BASE:
        return False
    repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    try:
        pulled = client().images.pull(repository, tag=digest)
        pulled.tag(repository, tag)
    except DockerException:
        return False
    return True


def local_base(ref: str) -> LocalBase | None:
    """The local image REF as a base, or None when it is not here (raises without an engine)."""
    from docker.errors import ImageNotFound

    from kit.runtime.engine import client, translated

    with translated(f"inspecting the base {ref}"):
        try:
            attrs = client().images.get(ref).attrs
        except ImageNotFound:
            return None
    return LocalBase(
        ref=ref,
        id=str(attrs.get("Id") or ""),
        repo_digests=tuple(attrs.get("RepoDigests") or ()),
        layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
    )
