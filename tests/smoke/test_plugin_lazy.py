"""The plugin waits to be asked: installed, it loads in every pytest session of the environment, and a
session that uses no kit fixture and no kit marker must not reach the Docker engine, pull anything or
change the process environment (issue 20, Build 6).

The engine is a listening socket that counts connections: DOCKER_HOST points the docker SDK (and
testcontainers) at it, so any engine call of the inner session, a ping, an image lookup, a pull of the
reaper image, shows up as a connection. The marker case is the control that the counter sees calls.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest


@dataclass
class CountingEngine:
    """A TCP listener standing in for the Docker engine: counts connections, answers nothing."""

    connections: int = 0
    server: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.server.getsockname()[1]}"

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed at the end of the test
                return
            self.connections += 1
            conn.close()


@pytest.fixture
def engine(monkeypatch) -> Iterator[CountingEngine]:
    fake = CountingEngine()
    threading.Thread(target=fake.serve, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", fake.url)
    monkeypatch.delenv("TESTCONTAINERS_RYUK_DISABLED", raising=False)
    monkeypatch.delenv("KIT_REQUIRE_GPU", raising=False)
    yield fake
    fake.server.close()


PLAIN_TESTS = """
import os

def test_arithmetic():
    assert 1 + 1 == 2

def test_the_environment_is_untouched():
    assert "TESTCONTAINERS_RYUK_DISABLED" not in os.environ

def test_the_kit_plugin_is_loaded(pytestconfig):
    assert pytestconfig.pluginmanager.has_plugin("kit")
"""


def test_a_plain_pytest_run_makes_no_engine_call_and_sets_nothing(pytester, engine):
    pytester.makepyfile(PLAIN_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=3)
    assert engine.connections == 0


def test_a_deselected_docker_test_makes_no_engine_call_either(pytester, engine):
    pytester.makepyfile(
        PLAIN_TESTS
        + """
import pytest

@pytest.mark.docker
def test_needs_docker():
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "not docker")
    result.assert_outcomes(passed=3, deselected=1)
    assert engine.connections == 0


def test_a_docker_marker_is_what_asks_the_engine(pytester, engine):
    """The control: the counter does see the engine calls a marked test makes (its skip reason)."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.docker
        def test_needs_docker():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    assert "no Docker engine answers" in result.stdout.str()
    assert engine.connections >= 1
