"""Shared by the bundle tests: a private kit cache, and a valid bundle on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from bundle_helpers import hung_input

from kit.diagnose.bundle import build_members, write_bundle
from kit.diagnose.redact import Redactor


@pytest.fixture(autouse=True)
def kit_cache(tmp_path_factory, monkeypatch) -> Path:
    """Every bundle test writes into its own cache, never ~/.cache/kit."""
    cache = tmp_path_factory.mktemp("kit-cache")
    monkeypatch.setenv("KIT_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def hung_bundle(tmp_path) -> Path:
    """A valid bundle on disk, built from a real hang's stacks and a real rehearsal log."""
    bundle = hung_input()
    return write_bundle(tmp_path / "b.tar.gz", bundle.name, build_members(bundle, Redactor()))
