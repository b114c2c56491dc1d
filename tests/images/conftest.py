"""Fixtures for the image tests: a scratch copy of the project files, and no Docker for unit tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from image_helpers import ROOT


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch copy of images/ and the Dockerfile, which the kit reads via KIT_PROJECT_DIR."""
    shutil.copytree(ROOT / "images", tmp_path / "images")
    shutil.copy2(ROOT / "Dockerfile", tmp_path / "Dockerfile")
    monkeypatch.setenv("KIT_PROJECT_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests must not depend on a Docker engine: every image reads as 'no engine'."""
    from kit.images import inspect

    monkeypatch.setattr(inspect, "image_info_if_engine", lambda ref: (None, "no Docker engine answers"))
