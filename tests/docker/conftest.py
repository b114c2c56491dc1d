"""Shared by the rehearsal docker tests: the rehearsal image with this checkout's fault switch (the
server containers *this test* started: tests/conftest.py's new_servers)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def faults_image(built_image, tmp_path_factory):
    """The rehearsal image with this checkout's kit_faults.py; a derived one is removed after."""
    from rehearsal_faults_image import faults_image as make

    from kit.launch import resolve

    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)
    image = make(tmp_path_factory.mktemp("faults-image"), prefix="verdicts-test")
    yield image
    image.remove()
