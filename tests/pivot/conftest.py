"""Shared by the pivot's docker tests: the rehearsal image, the one with this checkout's fault switch,
and the containers *this test* started (preflight and server ones, by the test's own label)."""

from __future__ import annotations

import secrets

import pytest


@pytest.fixture
def rehearsal_image(built_image):
    from kit.launch import resolve

    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)
    return spec.image


@pytest.fixture(scope="session")
def faults_image(built_image, tmp_path_factory):
    """The rehearsal image with this checkout's kit_faults.py (hang-p2p); a derived one is removed after."""
    from faults_image import faults_image as make

    from kit.launch import resolve

    built_image(resolve("tiny").image_ref, resolve("tiny").image)
    image = make(tmp_path_factory.mktemp("faults-image"))
    yield image
    image.remove()


@pytest.fixture
def new_containers(monkeypatch):
    """A callable listing the kit's preflight and server containers this test started: each test marks
    what it starts with its own label (KIT_RUN_LABELS, which the kit puts on every container it
    starts; subprocesses inherit it), so other people's containers on a shared engine are never
    counted or removed."""
    from kit.runtime.engine import LABEL_MANAGED, client
    from kit.runtime.server import RUN_LABELS

    mark = f"io.kit.test={secrets.token_hex(6)}"
    monkeypatch.setenv(RUN_LABELS, mark)

    def created_since() -> list:
        return [
            c
            for c in client().containers.list(all=True, filters={"label": mark})
            if c.labels.get(LABEL_MANAGED) in ("preflight", "server")
        ]

    yield created_since
    for container in created_since():
        container.remove(force=True)
