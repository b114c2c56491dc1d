"""The rehearsal image with this checkout's test-only fault switch, for any docker test that plants a
fault newer than the shared image (generalised from tests/pivot/faults_image.py).

Where the built rehearsal image already carries this checkout's kit/rehearsal/kit_faults.py (CI
builds it from the merged tree), it is used as it is. Otherwise a test image is derived from it,
adding only that file, under its own tag and its own manifest name in a temporary KIT_PROJECT_DIR;
`remove()` deletes exactly that image. The shared image is never rebuilt here.
"""

from __future__ import annotations

from pathlib import Path

from derived_image import DerivedImage, derive, file_in_image

from kit.launch import resolve

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ROOT / "kit" / "rehearsal" / "kit_faults.py"
IN_IMAGE = "/opt/kit/rehearsal/kit_faults.py"
FaultsImage = DerivedImage


def faults_image(workdir: Path, prefix: str = "faults-test") -> FaultsImage:
    spec = resolve("tiny")
    if file_in_image(spec.image_ref, IN_IMAGE) == FAULTS.read_bytes():
        return FaultsImage(spec.image, None, None)
    return derive(workdir, {IN_IMAGE: FAULTS.read_bytes()}, prefix, prefix=prefix)
