"""Shared by the rehearsal docker tests: the rehearsal image with this checkout's fault switch (the
server containers *this test* started: tests/conftest.py's new_servers)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def faults_image(tmp_path_factory):
    """The rehearsal image with this checkout's kit_faults.py; a derived one is removed after."""
    from rehearsal_faults_image import faults_image as make

    from kit.launch import resolve
    from kit.runtime.engine import image_exists

    spec = resolve("tiny")
    if not image_exists(spec.image_ref):
        pytest.skip(f"image {spec.image_ref} not built (run 'kit image build {spec.image}')")
    image = make(tmp_path_factory.mktemp("faults-image"), prefix="verdicts-test")
    yield image
    image.remove()
