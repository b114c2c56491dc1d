"""What `kit image list` and `kit image show` report: manifest pins, plus the built image if any.

Pure functions over a Manifest and an optional ImageInfo; the CLI fetches the ImageInfo.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kit.images.inspect import ImageInfo
from kit.images.manifest import Manifest


@dataclass(frozen=True)
class Pin:
    key: str
    value: str


@dataclass(frozen=True)
class ShowResult:
    name: str
    tag: str
    flavor: str
    dialect: str
    description: str
    base_image: str
    python: str
    pins: list[Pin]
    extra_pip: list[str]
    build_args: dict[str, str]
    built: bool | None
    """None when no engine answered, so nobody knows."""
    image: ImageInfo | None = None
    engine_problem: str | None = None
    label_drift: list[str] = field(default_factory=list)
    """Labels of the built image that disagree with the manifest (it was built from other pins)."""


# Display order and names; every Pins field appears, unset ones as '-'.
_PIN_LABELS = (
    ("cuda", "CUDA"),
    ("nccl", "NCCL"),
    ("nccl_package", "NCCL package"),
    ("torch", "torch"),
    ("torch_index", "torch index"),
    ("torchvision", "torchvision"),
    ("sglang", "sglang"),
    ("sglang_kernel", "sglang-kernel"),
    ("flashinfer", "flashinfer"),
    ("torch_cuda_arch_list", "TORCH_CUDA_ARCH_LIST"),
)

# Manifest pins vs the io.kit.pin.* labels the Dockerfile writes.
_LABEL_OF = {
    "python": "io.kit.pin.python",
    "cuda": "io.kit.pin.cuda",
    "torch": "io.kit.pin.torch",
    "torchvision": "io.kit.pin.torchvision",
    "sglang": "io.kit.pin.sglang",
    "sglang_kernel": "io.kit.pin.sglang-kernel",
    "flashinfer": "io.kit.pin.flashinfer",
    "torch_cuda_arch_list": "io.kit.pin.torch-cuda-arch-list",
}


def pins_of(manifest: Manifest) -> list[Pin]:
    return [Pin(label, getattr(manifest.pins, key) or "-") for key, label in _PIN_LABELS]


def label_drift(manifest: Manifest, labels: dict[str, str]) -> list[str]:
    """'torch: manifest 2.9.1+cu129, image 2.9.0' for every pin label that disagrees."""
    drift = []
    for key, label in _LABEL_OF.items():
        want = manifest.base.python if key == "python" else (getattr(manifest.pins, key) or "")
        have = labels.get(label)
        if key == "cuda" and have and want and have.split(".")[:2] == want.split(".")[:2]:
            # nvidia/cuda bases set ENV CUDA_VERSION=X.Y.Z, which wins over the build arg in labels.
            continue
        if have is not None and have != want:
            drift.append(f"{key}: manifest {want or '-'}, image {have or '-'}")
    return drift


def show_result(
    manifest: Manifest, build_args: dict[str, str], image: ImageInfo | None, engine_problem: str | None
) -> ShowResult:
    return ShowResult(
        name=manifest.name,
        tag=manifest.tag,
        flavor=manifest.flavor,
        dialect=manifest.dialect,
        description=manifest.description,
        base_image=manifest.base.image,
        python=manifest.base.python,
        pins=pins_of(manifest),
        extra_pip=list(manifest.extra_pip),
        build_args=build_args,
        built=None if engine_problem else image is not None,
        image=image,
        engine_problem=engine_problem,
        label_drift=label_drift(manifest, image.labels) if image else [],
    )


@dataclass(frozen=True)
class ListRow:
    name: str
    flavor: str
    sglang: str
    torch: str
    cuda: str
    built: bool | None


def list_row(manifest: Manifest, built: bool | None) -> ListRow:
    return ListRow(
        manifest.name,
        manifest.flavor,
        manifest.pins.sglang,
        manifest.pins.torch,
        manifest.pins.cuda or "-",
        built,
    )
