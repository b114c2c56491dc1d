"""`docker compose up SERVICE --no-start` with no image present builds it from the manifest and never
asks a registry: the CPU service proves the mechanism the GPU services share (build: + pull_policy).

The image is built under a throw-away tag, from the context `kit image build` would send (same
layout, same CA bundle and local wheels), so the engine's build cache makes a repeat run quick;
kit/sglang:sglang-0.5.23-cpu itself is never touched.
"""

from __future__ import annotations

import io
import secrets
import shutil
import subprocess
import tarfile

import pytest
import yaml

from kit.images.build import BuildOptions, write_context
from kit.images.manifest import load_manifest
from kit.images.pipconfig import pip_defaults
from kit.launch import resolve
from kit.render.compose import compose_document, header
from kit.runtime.engine import client, image_exists

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _compose() -> list[str]:
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("docker compose (v2) is not installed (scripts/bootstrap installs it)")
    return [docker, "compose"]


def test_compose_up_no_start_builds_from_the_manifest_and_never_pulls(tmp_path):
    compose = _compose()
    spec = resolve("tiny")
    manifest = load_manifest(spec.image)
    if not image_exists(manifest.base.image):
        pytest.skip(f"base image {manifest.base.image} missing (scripts/bootstrap makes it)")
    tag = f"kit/sglang:kit-test-build-{secrets.token_hex(3)}"
    assert not image_exists(tag)
    before = client().images.get(spec.image_ref).id if image_exists(spec.image_ref) else None
    # The checkout's layout, as `kit image build` assembles it (with the host's CA bundle and wheels).
    defaults = pip_defaults()
    buffer = io.BytesIO()
    torch_source = write_context(
        buffer, manifest, BuildOptions(ca_bundle=defaults.cert, wheel_dirs=defaults.find_links)
    )
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        tar.extractall(tmp_path, filter="tar")
    document = compose_document([spec.model_copy(update={"image_ref": tag})])
    service = document["services"]["tiny"]
    assert service["pull_policy"] == "never"
    if torch_source.startswith("local"):  # what `kit image build` passes when the wheel is in the context
        service["build"]["args"]["TORCH_INDEX_URL"] = ""
    (tmp_path / "compose.yaml").write_text(header([spec]) + yaml.safe_dump(document, sort_keys=False))
    project = f"kit-test-{secrets.token_hex(3)}"
    cmd = [*compose, "-p", project, "-f", str(tmp_path / "compose.yaml")]
    try:
        done = subprocess.run(
            [*cmd, "up", "tiny", "--no-start"], capture_output=True, text=True, timeout=1500, cwd=tmp_path
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-3000:]
        assert "Pulling" not in output and "registry" not in output.lower(), output[-2000:]
        # The manifest's build ran: its lock's COPY and install steps are named whether the engine
        # ran them or took them from its build cache (pip's own "Collecting" lines appear only when
        # the layer is built afresh, so they cannot be asserted on a machine that built it before).
        assert "Dockerfile" in output and f"images/{spec.image}.lock" in output, output[-3000:]
        assert "--require-hashes" in output and "/opt/kit/lock.txt" in output, output[-3000:]
        labels = client().images.get(tag).labels
        assert labels["io.kit.image"] == spec.image and labels["io.kit.managed"] == "image"
        assert labels["io.kit.pin.sglang"] == manifest.pins.sglang
        [container] = client().containers.list(
            all=True, filters={"label": f"com.docker.compose.project={project}"}
        )
        assert container.status == "created" and container.image.tags == [tag]
    finally:
        subprocess.run([*cmd, "down", "--timeout", "5"], capture_output=True, timeout=120)
        if image_exists(tag):
            client().images.remove(tag)
    assert not image_exists(tag)
    after = client().images.get(spec.image_ref).id if image_exists(spec.image_ref) else None
    assert after == before  # the real rehearsal tag is left as it was
