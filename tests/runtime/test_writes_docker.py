"""Compile progress of a server in a container, on the real engine: the bytes a process in the
container writes are read from the host's /proc/PID/io of the tree under the container's init PID
(DockerSource, as `kit up` samples it), with no cache walk and no engine exec."""

from __future__ import annotations

import secrets
import time

import pytest

from kit.launch import resolve
from kit.runtime.docker_source import DockerSource
from kit.runtime.engine import client, image_exists

pytestmark = [pytest.mark.docker]

# PID 1 starts a child that waits 3 s, then writes 2 MiB into the container's own filesystem (a
# "kernel" into a cache folder) and stays alive: the bytes come from a process other than PID 1.
WRITER = (
    "import os, subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', \"import os, time; time.sleep(3); "
    "os.makedirs('/root/.triton/cache/ab', exist_ok=True); "
    "f = open('/root/.triton/cache/ab/kernel.cubin', 'wb'); f.write(os.urandom(2 << 20)); f.flush(); "
    'time.sleep(120)"]); time.sleep(120)'
)


def test_a_child_writing_in_a_container_is_compile_progress_read_from_the_host():
    spec = resolve("tiny")
    if not image_exists(spec.image_ref):
        pytest.skip(f"image {spec.image_ref} not built (run 'kit image build {spec.image}')")
    container = client().containers.run(
        spec.image_ref,
        ["python", "-c", WRITER],
        name=f"kit-test-writes-{secrets.token_hex(4)}",
        labels={"io.kit.test": "writes"},
        detach=True,
    )
    source = None
    try:
        container.reload()
        source = DockerSource(container)
        first = source.sample(source.clock())
        assert first is not None and first.compile_bytes == 0  # the baseline, before the child wrote
        written, deadline = 0, time.monotonic() + 60
        while written < 2 << 20 and time.monotonic() < deadline:
            time.sleep(0.5)
            sample = source.sample(source.clock())
            written = (sample.compile_bytes or 0) if sample is not None else 0
        assert written >= 2 << 20, f"{written} bytes seen"
        assert source.notes == []  # readable from here: not unknown
    finally:
        if source is not None:
            source.close()
        container.remove(force=True)
