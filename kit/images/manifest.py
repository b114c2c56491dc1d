"""Image manifests: one TOML file per image in images/, every pin explicit.

A manifest is data; this module only loads and checks it. Unknown keys and missing pins are input
errors that name the file, the key and the allowed keys.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from kit import paths
from kit.errors import InputError

IMAGE_REPOSITORY = "kit/sglang"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
LOCAL_BASE = "local"
"""base.digest of a base built here from Debian packages (kit.images.base: its content is not fixed)."""


def _normal(dist: str) -> str:
    """PEP 503 name: 'Py_Spy' and 'py-spy' are one distribution."""
    return re.sub(r"[-_.]+", "-", dist.strip()).lower()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BaseSection(_Strict):
    image: str
    """The FROM image, e.g. nvidia/cuda:12.9.1-cudnn-devel-ubuntu24.04 or debian:bookworm-slim."""
    python: str
    """The distribution's interpreter package, e.g. python3.12; the venv is built from it."""
    apt_packages: tuple[str, ...] = ()
    debootstrap_suite: str | None = None
    """Where no registry answers, bootstrap builds this base from Debian packages (Debian bases only)."""
    digest: str | None = None
    """The registry's digest of `image` (sha256:...), which the build holds the local base to; or
    "local" for a base built here by debootstrap, whose content is not fixed (kit.images.base)."""

    @model_validator(mode="after")
    def _digest_names_a_base(self) -> BaseSection:
        if self.digest is None or _DIGEST.match(self.digest):
            return self
        if self.digest != LOCAL_BASE:
            raise ValueError(f"base.digest: '{self.digest}' is neither sha256:<64 hex> nor '{LOCAL_BASE}'")
        if not self.debootstrap_suite:
            raise ValueError(f"base.digest: '{LOCAL_BASE}' needs base.debootstrap_suite (how to build it)")
        return self


class Pins(_Strict):
    torch: str
    torch_index: str | None = None
    torchvision: str | None = None
    sglang: str
    sglang_kernel: str | None = None
    flashinfer: str | None = None
    nccl_package: str | None = None
    nccl: str | None = None
    cuda: str | None = None
    torch_cuda_arch_list: str | None = None


# Pins a GPU image must carry: without them the image is not reproducible or not provably sm_120.
# torch_index is not among them: PyPI's torch may be the very CUDA build (torch 2.14.1 is CUDA 13.0).
_CUDA_REQUIRED = (
    "torchvision",
    "sglang_kernel",
    "flashinfer",
    "nccl_package",
    "nccl",
    "cuda",
    "torch_cuda_arch_list",
)
# The CPU rehearsal runs SGLang without its CUDA-only packages; pinning them there would be a lie.
_CPU_FORBIDDEN = ("sglang_kernel", "flashinfer", "nccl_package", "nccl", "cuda", "torch_cuda_arch_list")


class Manifest(_Strict):
    name: str
    flavor: Literal["cuda", "cpu"]
    dialect: str
    description: str
    base: BaseSection
    pins: Pins
    extra_pip: tuple[str, ...] = ()
    """More pip requirements, pinned (==). CPU rehearsal: SGLang's light dependencies."""
    force_pip: tuple[str, ...] = ()
    """Pins installed last with --force-reinstall --no-deps, as SGLang's own Dockerfile does for
    libraries torch pins lower (NCCL is pins.nccl; e.g. nvidia-cudnn-cu12 on torch 2.9.1)."""

    @field_validator("name")
    @classmethod
    def _name_is_a_tag(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("must be lower case letters, digits, '.', '_' or '-' (it becomes an image tag)")
        return value

    @model_validator(mode="after")
    def _pins_fit_flavor(self) -> Manifest:
        pins = self.pins
        if self.base.digest is None:
            raise ValueError(
                "base.digest: missing (the registry's sha256:... of base.image, or 'local' with "
                "base.debootstrap_suite)"
            )
        if self.flavor == "cuda":
            missing = [k for k in _CUDA_REQUIRED if getattr(pins, k) in (None, "")]
            if missing:
                raise ValueError(
                    f"pins.{missing[0]}: missing pin (a cuda image pins {', '.join(_CUDA_REQUIRED)})"
                )
            arches = {a.strip() for a in re.split(r"[;\s]+", pins.torch_cuda_arch_list or "") if a.strip()}
            if not arches & {"12.0", "12.0+PTX", "12.0a"}:
                raise ValueError(
                    "pins.torch_cuda_arch_list: must include 12.0 (sm_120, RTX PRO 6000 Blackwell)"
                )
        else:
            present = [k for k in _CPU_FORBIDDEN if getattr(pins, k) not in (None, "")]
            if present:
                raise ValueError(
                    f"pins.{present[0]}: not allowed in a cpu image (it installs no CUDA packages)"
                )
        for key in ("extra_pip", "force_pip"):
            loose = [r for r in getattr(self, key) if "==" not in r]
            if loose:
                raise ValueError(f"{key}: '{loose[0]}' is not pinned with ==")
        if not self.pip_pin("py-spy"):
            raise ValueError(
                "extra_pip: no py-spy pin (every image carries py-spy==VERSION: it dumps a hung rank's stack)"
            )
        return self

    def pip_pin(self, name: str) -> str | None:
        """The version extra_pip pins for a distribution ('py-spy' and 'py_spy' are one), or None."""
        wanted = _normal(name)
        for requirement in self.extra_pip:
            dist, sep, version = requirement.partition("==")
            if sep and _normal(dist.split("[", 1)[0]) == wanted:
                return version.strip()
        return None

    @property
    def tag(self) -> str:
        return f"{IMAGE_REPOSITORY}:{self.name}"

    @property
    def arch_list(self) -> tuple[str, ...]:
        return tuple(a for a in re.split(r"[;\s]+", self.pins.torch_cuda_arch_list or "") if a)


def _allowed_keys(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


_SECTIONS: dict[str, type[BaseModel]] = {"": Manifest, "base": BaseSection, "pins": Pins}


def _translate(path: Path, exc: ValidationError) -> InputError:
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    key = ".".join(loc) or "(top level)"
    section = loc[0] if len(loc) > 1 else ""
    model = _SECTIONS.get(section, Manifest)
    if err["type"] == "extra_forbidden":
        return InputError(f"{path}: {key}", "unknown key", f"allowed keys: {_allowed_keys(model)}")
    if err["type"] == "missing":
        # Only [pins] holds pins; a missing 'dialect' or [base] is a missing key.
        what = "missing pin" if section == "pins" else "missing key"
        return InputError(f"{path}: {key}", what, f"allowed keys: {_allowed_keys(model)}")
    message = err["msg"].removeprefix("Value error, ")
    if message.startswith(("pins.", "base.")):  # our cross-field checks name their own key
        key, _, message = message.partition(": ")
        keys = _allowed_keys(Pins if key.startswith("pins.") else BaseSection)
        return InputError(f"{path}: {key}", message, f"allowed keys: {keys}")
    if message.startswith("extra_pip: "):
        return InputError(
            f"{path}: extra_pip", message.removeprefix("extra_pip: "), "pin it like 'name==1.2.3'"
        )
    return InputError(f"{path}: {key}", message, f"allowed keys: {_allowed_keys(model)}")


def parse_manifest(text: str, path: Path) -> Manifest:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), f"not valid TOML ({exc})", "fix the syntax") from exc
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise _translate(path, exc) from exc
    if manifest.name != path.stem:
        raise InputError(
            f"{path}: name", f"'{manifest.name}' differs from the file name", f"use '{path.stem}'"
        )
    return manifest


def manifest_path(name: str, directory: Path | None = None) -> Path:
    return (directory or paths.images_dir()) / f"{name}.toml"


LOCK_SUFFIX = ".lock"


def lock_path(name: str, directory: Path | None = None) -> Path:
    """images/NAME.lock, beside its manifest (kit.images.image_lock writes and checks it)."""
    return (directory or paths.images_dir()) / f"{name}{LOCK_SUFFIX}"


def list_manifests(directory: Path | None = None) -> list[str]:
    directory = directory or paths.images_dir()
    return sorted(p.stem for p in directory.glob("*.toml"))


def load_manifest(name: str, directory: Path | None = None) -> Manifest:
    # Only a name images/ lists: no path built from '../x' or a 5000-character name is ever opened.
    path = manifest_path(name, directory) if name in list_manifests(directory) else None
    if path is None or not path.is_file():
        known = ", ".join(list_manifests(directory)) or "none"
        raise InputError("image", f"unknown image '{name}'", f"known images: {known}")
    return parse_manifest(path.read_text(encoding="utf-8"), path)


def load_all(directory: Path | None = None) -> list[Manifest]:
    return [load_manifest(n, directory) for n in list_manifests(directory)]
