"""Shared by the end-to-end start-up tests: which server containers *this test* started.

A session-scoped server from another suite (tests/smoke's kit_server) may be running at the same
time; "no container left behind" means none of this test's, and cleanup touches only those.
"""

from __future__ import annotations

import pytest

from kit.runtime.engine import LABEL_MANAGED, client


def _servers() -> list:
    return client().containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=server"})


@pytest.fixture
def new_servers():
    """A callable listing the kit's server containers created since the test began."""
    before = {c.id for c in _servers()}

    def created_since() -> list:
        return [c for c in _servers() if c.id not in before]

    yield created_since
    for container in created_since():
        container.remove(force=True)
