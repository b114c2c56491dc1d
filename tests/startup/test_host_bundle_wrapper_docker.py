"""`kit bundle create --pid` of a container's init (docker-init, PID 1 inside): it follows the
SGLang launcher under it, and with no followable log (the init's output is a pipe to the engine)
it still writes a bundle that says the log is missing and how to add it. The real rehearsal server
in a container of the test's own (tests/startup/test_host_watch_docker.py's harness)."""

from __future__ import annotations

import json
import tarfile

import psutil
import pytest
from test_host_watch_docker import kit, start_host_server

from kit.launch import resolve
from kit.runtime.engine import image_exists

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _member(bundle, name: str) -> dict:
    with tarfile.open(bundle) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(f"/{name}"))
        return json.loads(tar.extractfile(member).read())


def test_bundle_of_a_containers_init_pid_follows_the_launcher_and_says_the_log_is_missing(
    new_servers, tmp_path
):
    spec = resolve("tiny")
    if not image_exists(spec.image_ref):
        pytest.skip(f"image {spec.image_ref} not built (run 'kit image build {spec.image}')")
    container, launcher, log = start_host_server(tmp_path)
    try:
        init = container.attrs["State"]["Pid"]
        assert init != launcher and "init" in psutil.Process(init).name()
        bundle = tmp_path / "init.tar.gz"
        made = kit("bundle", "create", "--pid", str(init), "-o", str(bundle), timeout=300)
        assert made.returncode == 0, made.stderr
        fingerprint, result = _member(bundle, "fingerprint.json"), _member(bundle, "result.json")
        assert fingerprint["versions"]["sglang"] == "0.5.23"
        assert (fingerprint["process"]["pid"], fingerprint["process"]["given_pid"]) == (launcher, init)
        assert fingerprint["launch"]["argv"][1:3] == ["-m", "sglang.launch_server"]
        [missing] = result["missing"]
        assert missing.startswith(f"log: process {init} writes its output to") and "--log FILE" in missing
        assert f"followed pid {launcher}, the SGLang launcher under pid {init}" in result["notes"]

        with_log = tmp_path / "init-log.tar.gz"
        made = kit("bundle", "create", "--pid", str(init), "--log", log, "-o", str(with_log), timeout=300)
        assert made.returncode == 0, made.stderr
        assert "missing" not in _member(with_log, "result.json")
        assert _member(with_log, "fingerprint.json")["versions"]["sglang"] == "0.5.23"
    finally:
        container.remove(force=True)
    assert not new_servers()
