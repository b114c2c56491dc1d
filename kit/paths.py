"""Where the kit's project files live: installed from a wheel, or in a checkout (editable install)."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def project_root() -> Path:
    """The folder holding `images/`, `Dockerfile` and `compose.yaml`.

    KIT_PROJECT_DIR wins; then the copy a wheel carries (`kit/_project`); then the checkout the
    package was installed from in editable mode.
    """
    override = os.environ.get("KIT_PROJECT_DIR")
    if override:
        return Path(override)
    bundled = _PACKAGE / "_project"
    if bundled.is_dir():
        return bundled
    return _PACKAGE.parent


def images_dir() -> Path:
    return project_root() / "images"


def dockerfile() -> Path:
    return project_root() / "Dockerfile"


def compose_file() -> Path:
    return project_root() / "compose.yaml"


def package_dir() -> Path:
    return _PACKAGE


def cache_dir() -> Path:
    """Per-user cache for the kit (check venvs, build contexts)."""
    if os.environ.get("KIT_CACHE_DIR"):
        return Path(os.environ["KIT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kit"
