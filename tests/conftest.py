"""Project-wide test policy.

In CI (CI=true) a skipped test is a failure unless its reason is on tests/skip_policy.py's
ALLOWED_SKIPS: CI installs and starts the engine, builds the rehearsal image and installs the tests'
CPU torch (scripts/test), so a skip there means the set-up broke, not that the test does not apply.
What CI cannot have is a GPU: the `gpu` and `full_model` tests skip with a reason naming it (a GPU
runner turns their skips into failures with --kit-require-gpu, see kit/testing/plugin.py).
"""

from __future__ import annotations

import os
import secrets

import pytest
from skip_policy import allowed_skip

from kit.testing.plugin import skip_reason

IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = skip_reason(report)
        if allowed_skip(reason) is None:
            report.outcome = "failed"
            report.longrepr = (
                f"skipped in CI, which must run it (not on tests/conftest.py's ALLOWED_SKIPS): {reason}"
            )


pytest_plugins = ["pytester"]


def require_image(image_ref: str, image: str) -> None:
    """Go on only where `image_ref` is built: skip here, fail in CI (which builds the images it tests).

    The one guard for "the image is not built here"; the `built_image` fixture hands it out."""
    from kit.runtime.engine import image_exists

    if image_exists(image_ref):
        return
    why = f"image {image_ref} not built (run 'kit image build {image}')"
    if IN_CI:
        pytest.fail(f"{why}: CI builds it before the tests, so its set-up broke", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def check_venv_python():
    """A callable: the Python of the `kit check` venv for an SGLang release (CPU torch), built on first
    use by this fixture, so no test depends on another having run `kit check` before it."""
    from kit.check import ensure_venv

    def python(version: str) -> str:
        venv, _ = ensure_venv(version)
        return str(venv / "bin" / "python")

    return python


@pytest.fixture(scope="session")
def built_image():
    """`built_image(image_ref, image)`: skips here, or fails in CI, when the image is not built."""
    return require_image


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
