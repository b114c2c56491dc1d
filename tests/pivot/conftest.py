"""Shared by the pivot's docker tests: the rehearsal image, the one with this checkout's fault switch,
and the containers *this test* started (preflight and server ones), removed by their own ids."""

from __future__ import annotations

import pytest


@pytest.fixture
def rehearsal_image():
    from kit.launch import resolve
    from kit.runtime.engine import image_exists

    spec = resolve("tiny")
    if not image_exists(spec.image_ref):
        pytest.skip(f"image {spec.image_ref} not built (run 'kit image build {spec.image}')")
    return spec.image


@pytest.fixture(scope="session")
def faults_image(tmp_path_factory):
    """The rehearsal image with this checkout's kit_faults.py (hang-p2p); a derived one is removed after."""
    from faults_image import faults_image as make

    from kit.launch import resolve
    from kit.runtime.engine import image_exists

    if not image_exists(resolve("tiny").image_ref):
        pytest.skip("the rehearsal image is not built (run 'kit image build sglang-0.5.23-cpu')")
    image = make(tmp_path_factory.mktemp("faults-image"))
    yield image
    image.remove()


def _kit_containers() -> list:
    from kit.runtime.engine import LABEL_MANAGED, client

    return [
        c
        for c in client().containers.list(all=True, filters={"label": LABEL_MANAGED})
        if c.labels.get(LABEL_MANAGED) in ("preflight", "server")
    ]


@pytest.fixture
def new_containers():
    """A callable listing the kit's preflight and server containers created since the test began."""
    before = {c.id for c in _kit_containers()}

    def created_since() -> list:
        return [c for c in _kit_containers() if c.id not in before]

    yield created_since
    for container in created_since():
        container.remove(force=True)
