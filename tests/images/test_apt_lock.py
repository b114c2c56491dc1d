"""The Dockerfile's apt step (kit/images/inimage/apt-lock.sh) on the local Debian base: a locked
version the mirror no longer serves stops it before anything is installed, naming the package and
the snapshot of the lock's date."""

from __future__ import annotations

import io
import tarfile
import uuid

import pytest
from image_helpers import ROOT

pytestmark = pytest.mark.docker

SCRIPT = ROOT / "kit" / "images" / "inimage" / "apt-lock.sh"
SNAPSHOT = "https://snapshot.debian.org/archive/debian/20261205T123106Z/"


def _run_script(lock: str, *args: str) -> tuple[int, str]:
    from kit.errors import EnvironmentProblem
    from kit.runtime.engine import client

    try:
        engine = client()
    except EnvironmentProblem as exc:
        pytest.skip(exc.one_line())
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in (("apt-lock.sh", SCRIPT.read_bytes()), ("test.lock", lock.encode())):
            info = tarfile.TarInfo(f"kit-apt/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    container = engine.containers.create(
        "debian:bookworm-slim",
        command=["bash", "/tmp/kit-apt/apt-lock.sh", "/tmp/kit-apt/test.lock", *args],
        labels={"io.kit.test": f"apt-lock-{uuid.uuid4().hex[:8]}"},
    )
    try:
        container.put_archive("/tmp", archive.getvalue())
        container.start()
        code = container.wait(timeout=180)["StatusCode"]
        return code, container.logs().decode("utf-8", "replace")
    finally:
        container.remove(force=True)


def test_a_locked_version_the_mirror_lacks_names_the_package_and_the_snapshot():
    lock = (
        f"# kit-lock apt-snapshot: {SNAPSHOT}\n"
        "# kit-apt: libnuma1 2.0.16-1+kit.gone amd64\n"
        "# kit-apt: bash 0.0-kit.gone amd64\n"
    )
    code, out = _run_script(lock, "locked", "libnuma1")
    assert code == 1, out
    assert "kit: 2 locked system package version(s) not served by the mirror, first: " in out
    assert "libnuma1 2.0.16-1+kit.gone" in out and "bash 0.0-kit.gone" in out
    assert f"rebuild from the snapshot of the lock's date: {SNAPSHOT}" in out
    assert "Setting up" not in out  # nothing was installed


def test_an_unknown_apt_mode_is_refused():
    code, out = _run_script("", "latest", "libnuma1")
    assert code == 2 and "apt mode 'latest' is not locked, snapshot or today" in out


def test_a_lock_line_that_is_no_debian_package_never_reaches_apt():
    code, out = _run_script("# kit-apt: -oAPT::Get::AllowUnauthenticated=true 1 x\n", "locked", "procps")
    assert code == 2 and "not a Debian package, version and architecture: # kit-apt: -oAPT" in out
    assert "Reading package lists" not in out
