"""Project-wide test policy.

In CI (CI=true) a skipped `docker` test is a failure: CI installs and starts the engine and builds
the rehearsal image, so a skip there means the set-up broke, not that the test does not apply.
`gpu` and `full_model` tests are exempt: CI has no GPU and they skip with a reason naming what is
missing (a GPU runner turns their skips into failures with --kit-require-gpu, see kit/testing/plugin.py).
"""

from __future__ import annotations

import os
import secrets

import pytest

from kit.testing.plugin import needs_gpu, skip_reason

IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and item.get_closest_marker("docker") and not needs_gpu(item):
        report.outcome = "failed"
        report.longrepr = f"a docker test skipped in CI, which must run it: {skip_reason(report)}"


pytest_plugins = ["pytester"]

TEST_LABEL = "io.kit.test"


@pytest.fixture
def new_servers(monkeypatch):
    """A callable listing the server containers this test started, removed afterwards.

    The engine may be shared (a session-scoped server from tests/smoke, a parallel test worker,
    another developer's run, on a GPU runner the production server), so each test marks what it
    starts with its own label (KIT_RUN_LABELS, which the kit puts on every container it starts;
    subprocesses inherit it) and looks at, and cleans up, only containers carrying it."""
    from kit.runtime.engine import client
    from kit.runtime.server import RUN_LABELS

    mark = f"{TEST_LABEL}={secrets.token_hex(6)}"
    monkeypatch.setenv(RUN_LABELS, mark)

    def created_since() -> list:
        return client().containers.list(all=True, filters={"label": mark})

    yield created_since
    for container in created_since():
        container.remove(force=True)
