from __future__ import annotations

import sys
from pathlib import Path

# catalog_helpers (scratch catalogs, the CLI in-process) lives beside the catalog tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "catalog"))


import pytest


@pytest.fixture(autouse=True)
def _no_host_choices(monkeypatch):
    """Renders of this repository (compose.yaml) must not depend on the tester's GPU choice or volume."""
    monkeypatch.delenv("KIT_GPUS", raising=False)
    monkeypatch.delenv("KIT_COMPILE_CACHE_VOLUME", raising=False)
