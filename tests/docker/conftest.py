"""Shared by the rehearsal docker tests: the rehearsal image with this checkout's fault switch, and
the server containers *this test* started (by its own label, KIT_RUN_LABELS)."""

from __future__ import annotations

import secrets

import pytest

TEST_LABEL = "io.kit.test"


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


@pytest.fixture
def new_servers(monkeypatch):
    """A callable listing the server containers this test started (by its own label)."""
    from kit.runtime.engine import client
    from kit.runtime.server import RUN_LABELS

    mark = f"{TEST_LABEL}={secrets.token_hex(6)}"
    monkeypatch.setenv(RUN_LABELS, mark)

    def created_since() -> list:
        return client().containers.list(all=True, filters={"label": mark})

    yield created_since
    for container in created_since():
        container.remove(force=True)
