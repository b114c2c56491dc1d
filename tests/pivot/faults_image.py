"""The rehearsal image with this checkout's fault switch, for the tests that plant `hang-p2p`.

Where the built rehearsal image already carries this checkout's kit/rehearsal/kit_faults.py, it is
used as it is. Otherwise (the image was built before the switch last changed) a test image is
derived from it, adding only that file, under its own tag and its own manifest name in a temporary
KIT_PROJECT_DIR; `remove()` deletes exactly that image. The shared image is never rebuilt here.
"""

from __future__ import annotations

from pathlib import Path

from rehearsal_faults_image import FAULTS, IN_IMAGE, FaultsImage, file_in_image
from rehearsal_faults_image import faults_image as _faults_image

__all__ = ["FAULTS", "IN_IMAGE", "FaultsImage", "faults_image", "file_in_image"]


def faults_image(workdir: Path) -> FaultsImage:
    return _faults_image(workdir, prefix="pivot-test")
