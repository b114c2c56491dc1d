"""Shared by the end-to-end start-up tests: the server containers *this test* started.

The engine may be shared: a session-scoped server from tests/smoke, another developer's test run, or
on a GPU runner the production server itself. Each test therefore marks what it starts with its own
label (KIT_RUN_LABELS, which the kit puts on every container it starts) and looks at, and cleans up,
only containers carrying it.
"""

from __future__ import annotations

import secrets

import pytest

from kit.runtime.engine import client
from kit.runtime.server import RUN_LABELS

TEST_LABEL = "io.kit.test"


@pytest.fixture
def new_servers(monkeypatch):
    """A callable listing the server containers this test started (by its own label)."""
    mark = f"{TEST_LABEL}={secrets.token_hex(6)}"
    monkeypatch.setenv(RUN_LABELS, mark)

    def created_since() -> list:
        return client().containers.list(all=True, filters={"label": mark})

    yield created_since
    for container in created_since():
        container.remove(force=True)
