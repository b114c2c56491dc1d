"""A proxy the server's own warm-up would go through: kit/proxyenv.py's rules, `kit doctor`'s
server-proxy check, `kit validate`'s finding and `kit up`'s warning (pure, no Docker)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import requests.utils  # the docker SDK's dependency: the same requests as the images lock
from test_doctor import gpu_host

from kit.pivot.doctor import doctor_context, evaluate
from kit.proxyenv import covered, docker_client_env, loopback_gap, redact
from kit.runtime.client_config import read_client_proxy_env
from kit.startup.prepare import proxy_warnings
from kit.validate import validate

PROXY = "http://proxy.corp.example:3128"
LOOPBACK = "127.0.0.1,localhost,0.0.0.0"


@pytest.mark.parametrize(
    ("no_proxy", "uncovered"),
    [
        ("", ("127.0.0.1", "localhost", "0.0.0.0")),
        ("localhost", ("127.0.0.1", "0.0.0.0")),  # a name does not cover an address
        ("localhost,127.0.0.1", ("0.0.0.0",)),
        (LOOPBACK, ()),
        ("*", ()),
        ("127.0.0.0/8, localhost, 0.0.0.0", ()),  # CIDR, as requests reads it
        (".localhost,127.0.0.1:30000,0.0.0.0", ()),  # a leading dot; host:port
    ],
)
def test_no_proxy_coverage_follows_requests(no_proxy, uncovered):
    gap = loopback_gap({"http_proxy": PROXY, "NO_PROXY": no_proxy})
    assert (gap.uncovered if gap else ()) == uncovered


def test_no_proxy_variable_no_gap():
    assert loopback_gap({"NO_PROXY": ""}) is None
    assert not covered("10.0.0.0/8", "127.0.0.1")


@pytest.mark.parametrize(
    ("env", "uncovered"),
    [
        ({"no_proxy": "localhost", "NO_PROXY": LOOPBACK}, ("127.0.0.1", "0.0.0.0")),  # lowercase alone
        ({"no_proxy": LOOPBACK, "NO_PROXY": "localhost"}, ()),
        ({"no_proxy": "", "NO_PROXY": LOOPBACK}, ()),  # empty lowercase: requests falls to NO_PROXY
        ({"NO_PROXY": LOOPBACK}, ()),
    ],
)
def test_the_lowercase_no_proxy_alone_counts_when_set_as_requests_reads_it(env, uncovered, monkeypatch):
    # requests' should_bypass_proxies reads `os.environ.get("no_proxy") or os.environ.get("NO_PROXY")`:
    # asked here of the requests this venv has (2.34.2, as the images lock it), the truth to agree with.
    for name in ("no_proxy", "NO_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**env, "http_proxy": PROXY}.items():
        monkeypatch.setenv(name, value)
    bypassed = tuple(
        host for host in ("127.0.0.1", "localhost", "0.0.0.0")
        if requests.utils.should_bypass_proxies(f"http://{host}:30000/model_info", no_proxy=None)
    )  # fmt: skip
    assert bypassed == tuple(h for h in ("127.0.0.1", "localhost", "0.0.0.0") if h not in uncovered)
    gap = loopback_gap({**env, "HTTPS_PROXY": PROXY})
    assert (gap.uncovered if gap else ()) == uncovered
    if uncovered:
        assert "no_proxy='localhost' (requests reads no_proxy alone" in gap.describe()


def test_credentials_never_leave_in_a_finding():
    gap = loopback_gap({"http_proxy": "http://alice:s3cret@proxy:3128"})
    assert "s3cret" not in gap.describe() and gap.proxy == "http://***@proxy:3128"
    assert redact("http://proxy:3128") == "http://proxy:3128"


def test_docker_client_config_proxies_become_container_env(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"proxies": {"default": {"httpProxy": PROXY, "noProxy": "localhost"}}}))
    env = read_client_proxy_env(config)
    assert env == {"HTTP_PROXY": PROXY, "http_proxy": PROXY, "NO_PROXY": "localhost", "no_proxy": "localhost"}
    assert docker_client_env({"auths": {}}) == {}
    assert read_client_proxy_env(tmp_path / "absent.json") == {}


def test_doctor_warns_for_a_target_whose_env_has_a_proxy():
    ctx = doctor_context("tiny", overrides=(f"env.HTTP_PROXY={PROXY}",))
    [check] = [c for c in evaluate(ctx, gpu_host()) if c.id == "server-proxy"]
    assert check.status == "warn"
    assert "HTTP_PROXY=http://proxy.corp.example:3128" in check.summary
    assert "NO_PROXY does not cover 127.0.0.1, localhost, 0.0.0.0" in check.summary
    assert "env.NO_PROXY=127.0.0.1,localhost,0.0.0.0" in check.fix


def test_doctor_counts_the_docker_clients_proxies_and_passes_with_no_proxy_set():
    facts = gpu_host(client_proxy_env={"HTTP_PROXY": PROXY, "http_proxy": PROXY})
    [check] = [c for c in evaluate(doctor_context("tiny"), facts) if c.id == "server-proxy"]
    assert check.status == "warn" and "config.json" in check.summary and "noProxy" in check.fix
    fixed = doctor_context("tiny", overrides=(f"env.NO_PROXY={LOOPBACK}",))
    [check] = [c for c in evaluate(fixed, facts) if c.id == "server-proxy"]
    assert check.status == "pass"


def test_doctor_without_a_target_reads_this_shell_for_host_servers():
    facts = dataclasses.replace(gpu_host(), shell_proxy_env={"https_proxy": PROXY})
    [check] = [c for c in evaluate(doctor_context(None), facts) if c.id == "server-proxy"]
    assert check.status == "warn" and "--unit/--pid" in check.summary
    [check] = [c for c in evaluate(doctor_context(None), gpu_host()) if c.id == "server-proxy"]
    assert check.status == "pass"


def test_validate_and_kit_up_warn_and_do_not_refuse():
    report = validate("tiny", overrides=(f"env.http_proxy={PROXY}",))
    [finding] = [f for f in report.findings if f.id == "server-proxy"]
    assert finding.severity == "warning" and report.ok
    from kit.launch import resolve

    spec = resolve("tiny")
    [line] = proxy_warnings(spec, {"HTTP_PROXY": PROXY})
    assert line.startswith("warning: the container's env") and "env.NO_PROXY" in line
    assert proxy_warnings(spec, {}) == []
    assert proxy_warnings(spec, {"HTTP_PROXY": PROXY, "NO_PROXY": LOOPBACK}) == []
