"""`kit up` builds a missing pinned image first, as Compose builds a missing service image, and
`--no-build` refuses instead (ENVIRONMENT, naming `kit image build`). The compile-cache volume that
run creates (a volume of its own here, KIT_COMPILE_CACHE_VOLUME) carries Compose's labels for
compose.yaml's project, so a `docker compose` run after it does not warn that the volume "already
exists but was not created by Docker Compose".

The shared rehearsal image is never removed or rebuilt here: the image that is missing is a test-only
manifest (a copy of the rehearsal's, under a name of its own, with its lock) in a KIT_PROJECT_DIR whose
Dockerfile derives from the rehearsal image, so the kit's own builder (context, lock, build args,
progress, labels) runs for real in seconds. The start that follows carries a planted load crash: the
build is what is tested, and a crash is the quickest verdict a started server gives.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from kit.images.manifest import IMAGE_REPOSITORY
from kit.launch import resolve
from kit.runtime.engine import client, image_exists

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]
ROOT = Path(__file__).resolve().parents[2]
TEST_LABEL = "io.kit.test"
# What the kit's builder sends (kit/images/build.py write_context: this Dockerfile, images/NAME.lock,
# the in-image files) and every build arg it feeds; only the base differs from the real Dockerfile.
DOCKERFILE = """\
ARG BASE_IMAGE
FROM {base}
ARG KIT_IMAGE_NAME
COPY images/${{KIT_IMAGE_NAME}}.lock /opt/kit/lock.txt
LABEL io.kit.image="${{KIT_IMAGE_NAME}}" {label}=up-builds-missing
"""


@pytest.fixture
def unbuilt_manifest(tmp_path, built_image):
    """(name, KIT_PROJECT_DIR) of a manifest whose image is not built; its image removed afterwards."""
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)
    name = f"up-builds-{secrets.token_hex(3)}"
    project = tmp_path / "project"
    (project / "images").mkdir(parents=True)
    manifest = (ROOT / "images" / f"{spec.image}.toml").read_text(encoding="utf-8")
    (project / "images" / f"{name}.toml").write_text(
        manifest.replace(f'name = "{spec.image}"', f'name = "{name}"', 1), encoding="utf-8"
    )
    lock = (ROOT / "images" / f"{spec.image}.lock").read_bytes()
    (project / "images" / f"{name}.lock").write_bytes(lock)
    (project / "Dockerfile").write_text(DOCKERFILE.format(base=spec.image_ref, label=TEST_LABEL))
    ref = f"{IMAGE_REPOSITORY}:{name}"
    assert not image_exists(ref)
    yield name, project
    if image_exists(ref):
        client().images.remove(ref, force=True)


@pytest.fixture
def cache_volume(monkeypatch):
    """A compile-cache volume of this test's own (never the user's), removed afterwards."""
    name = f"kit-test-cache-{secrets.token_hex(3)}"
    monkeypatch.setenv("KIT_COMPILE_CACHE_VOLUME", name)
    yield name
    with contextlib.suppress(Exception):
        client().volumes.get(name).remove(force=True)


def kit(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KIT_PROJECT_DIR": str(project)}  # KIT_RUN_LABELS: new_servers' label
    return subprocess.run([*KIT, *args], capture_output=True, text=True, timeout=600, env=env)


def test_kit_up_builds_the_missing_image_with_progress_then_starts_it(
    unbuilt_manifest, new_servers, cache_volume, tmp_path
):
    name, project = unbuilt_manifest
    ref = f"{IMAGE_REPOSITORY}:{name}"

    refused = kit(project, "up", "tiny", "--image", name, "--no-build")
    assert refused.returncode == 3 and refused.stdout == "", refused.stderr
    assert refused.stderr.startswith(f"kit: error: image {ref} not built (--no-build)"), refused.stderr
    assert f"run 'kit image build {name}'" in refused.stderr and refused.stderr.count("\n") == 1
    assert not image_exists(ref) and not new_servers()

    run = kit(project, "up", "tiny", "--image", name, "--fault", "crash-load", "--no-first-token")
    said = run.stdout[-2000:] + run.stderr[-2000:]
    assert f"image {ref} not built: building it from images/{name}.lock" in run.stderr, said
    assert f"building {ref}" in run.stderr and f"built {ref} (sha256:" in run.stderr, said
    image = client().images.get(ref)
    assert image.labels[TEST_LABEL] == "up-builds-missing" and image.labels["io.kit.image"] == name
    # then it starts that image: a container of it ran, and the planted crash is its verdict
    assert run.returncode == 1 and "CRASHED" in run.stdout, said
    assert f"kit up tiny ({name}, " in run.stdout, said

    # The compile-cache volume it made is Compose's own for compose.yaml's project: no warning.
    volume = client().volumes.get(cache_volume)
    labels = volume.attrs.get("Labels") or {}
    assert labels == {"com.docker.compose.project": "kit", "com.docker.compose.volume": cache_volume}
    compose_file = tmp_path / "compose.yaml"
    rendered = subprocess.run([*KIT, "render", "compose", "tiny"], capture_output=True, text=True, timeout=60)
    assert rendered.returncode == 0, rendered.stderr
    compose_file.write_text(rendered.stdout)
    compose = ["docker", "compose", "-f", str(compose_file)]
    try:
        created = subprocess.run([*compose, "create", "tiny"], capture_output=True, text=True, timeout=120)
        assert created.returncode == 0, created.stderr
        assert "already exists" not in created.stderr and "external: true" not in created.stderr, (
            created.stderr
        )
    finally:
        subprocess.run([*compose, "rm", "--force", "--stop", "tiny"], capture_output=True, timeout=120)
