"""Bundles and replays against the real rehearsal server (Docker): the issue's Done-when, end to end.

Four container runs in all (each ~40-90 s on the 2-core CI machine): kit up with a planted init
hang, its replay, its replay with the fault removed, and a hand-started container (docker run, no kit
labels) followed by kit watch, then replayed. Stall windows are shortened with --stall init=10 (the
replays inherit them from the bundles, as they must). Each test removes exactly the containers it
started: the kit's by the label KIT_RUN_LABELS puts on them, the hand-started one by its own.
"""

from __future__ import annotations

import gzip
import json
import os
import secrets
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from bundle_helpers import FIXTURES

from kit.diagnose.bundle import read_bundle
from kit.images.image_lock import lock_digest
from kit.launch import resolve
from kit.runtime.engine import client, image_exists

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]
HANG_LOG = FIXTURES / "sglang-logs" / "19_dsr1-pd-decode-2node-tp16-hang-init-nccl-v0.5.8.post1.log"
TEST_LABEL = "io.kit.test"


@pytest.fixture(autouse=True)
def _rehearsal_image(built_image):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)


def kit(*args: str, env: dict | None = None, timeout: float = 400) -> tuple[int, dict, str]:
    """Run the CLI with --json; (exit code, the last result line, stdout+stderr)."""
    proc = subprocess.run(
        [*KIT, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},  # KIT_RUN_LABELS: new_servers' label
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [line for line in lines if line.get("type") == "result"]
    assert results, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.returncode, results[-1], proc.stdout + proc.stderr


def from_log(out: Path) -> None:
    """A bundle of a real GPU hang log on the 0.5.10 image (a different image than the rehearsal's)."""
    args = [
        "--from-log",
        str(HANG_LOG),
        "--target",
        "qwen-base",
        "--image",
        "sglang-0.5.10.post1-cu129-sm120",
    ]
    made = subprocess.run(
        [*KIT, "bundle", "create", *args, "-o", str(out)], capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stderr


def test_an_init_hang_is_bundled_replayed_reproduced_and_not_reproduced_with_the_fix(new_servers, tmp_path):
    code, up, _ = kit("up", "tiny", "--fault", "hang-init:rank=1", "--stall", "init=10")
    assert code == 4 and (up["verdict"], up["phase"]) == ("hung", "init"), up
    bundle = read_bundle(up["bundle"])
    # The waiting rank's stack is inside distributed init; the planted rank is named as missing.
    assert bundle.result["waiting_ranks"] == ["TP0"] and bundle.result["missing_ranks"] == ["TP1"]
    assert "_create_c10d_store" in bundle.stacks["TP0"] and "init_process_group" in bundle.stacks["TP0"]
    assert "kit_fault_hang_init" in bundle.stacks["TP1"]
    finger = bundle.fingerprint
    assert finger["versions"]["sglang"] == "0.5.23" and finger["versions"]["torch"].endswith("+cpu")
    assert finger["image"]["id"] == client().images.get(resolve("tiny").image_ref).id
    # The lock read from inside the container is the repository's, by digest and as lock.txt.
    lock = (Path(__file__).resolve().parents[2] / "images" / "sglang-0.5.23-cpu.lock").read_text()
    assert bundle.text("lock.txt") == lock
    assert "sha256:" + finger["image"]["lock"]["sha256"] == lock_digest(lock)
    assert finger["launch"]["env"]["KIT_FAULT"] == "hang-init:rank=1"
    assert finger["launch"]["limits"]["stall_window_s"]["init"] == 10
    assert finger["host"]["docker_engine"] == client().version()["Version"]
    assert bundle.svg and bundle.svg.count('class="phase"') >= 2

    # Against another image's bundle, the version differences come first.
    other = tmp_path / "other.tar.gz"
    from_log(other)
    diff = subprocess.run(
        [*KIT, "bundle", "diff", up["bundle"], str(other), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    groups = [d["group"] for d in json.loads(diff.stdout)["differences"]]
    assert groups[0] == "versions" and groups.count("versions") >= 3

    code, again, output = kit("repro", up["bundle"])
    assert code == 4, output[-3000:]
    assert (again["verdict"], again["phase"]) == ("hung", "init")
    assert again["repro"]["reproduced"] is True, again["repro"]

    code, fixed, output = kit("repro", up["bundle"], "--set", "env.KIT_FAULT=none")
    assert code == 0, output[-3000:]
    assert fixed["verdict"] == "ready"
    assert fixed["repro"]["reproduced"] is False
    assert "env KIT_FAULT: hang-init:rank=1 -> (unset)" in fixed["repro"]["changes"]
    assert not new_servers()


@pytest.fixture
def hand_started():
    """A container started the way a colleague would, with `docker run`: no kit labels, our own label."""
    mark = uuid.uuid4().hex[:8]
    yield mark
    for container in client().containers.list(all=True, filters={"label": f"{TEST_LABEL}={mark}"}):
        container.remove(force=True)


def test_a_hand_started_hang_followed_by_kit_watch_is_bundled_without_secrets_and_replayed(
    new_servers, hand_started
):
    spec = resolve("tiny")
    token = "hf_" + secrets.token_hex(17)
    api_key = "sk-" + secrets.token_hex(16)
    wrapper = 'echo "starting with HF token $HF_TOKEN"; exec "$@"'
    container = client().containers.run(
        spec.image_ref,
        command=["sh", "-c", wrapper, "server", *spec.argv, "--api-key", api_key],
        environment={**spec.env, "KIT_FAULT": "hang-init:rank=1", "HF_TOKEN": token},
        labels={TEST_LABEL: hand_started},
        name=f"handrun-{hand_started}",
        shm_size="2g",
        cap_add=["SYS_PTRACE"],  # what py-spy needs to read the ranks' stacks
        detach=True,
    )
    code, watched, output = kit("watch", container.name, "--target", "tiny", "--stall", "init=10")
    assert code == 4 and (watched["verdict"], watched["phase"]) == ("hung", "init"), output[-3000:]
    assert watched["container_removed"] is False  # kit watch never removes what it did not start
    bundle_path = Path(watched["bundle"])
    bundle = read_bundle(bundle_path)
    launch = bundle.fingerprint["launch"]
    assert launch["argv"][:2] == ["sh", "-c"] and "not the catalog's launch" in launch["argv_from"]
    assert launch["secrets"] == ["HF_TOKEN"] and launch["secret_flags"] == ["--api-key"]
    assert "starting with HF token <redacted>" in bundle.log_text
    for secret in (token, api_key):
        for data in (bundle_path.read_bytes(), gzip.decompress(bundle_path.read_bytes())):
            assert secret.encode() not in data
        for path in Path(watched["diagnostics"]).rglob("*"):
            assert not path.is_file() or secret.encode() not in path.read_bytes()

    # A colleague's own wrapper is not the kit's: it runs with --trust-bundle, and HF_TOKEN (which tiny
    # does not pass itself) only because it is named.
    code, replay, output = kit(
        "repro", str(bundle_path), "--trust-bundle", "--pass-env", "HF_TOKEN", env={"HF_TOKEN": token}
    )
    assert code == 4, output[-3000:]
    assert replay["repro"]["reproduced"] is True, replay["repro"]
    assert not any("HF_TOKEN" in note for note in replay["repro"]["notes"])  # taken from here, by name
    replayed = read_bundle(replay["bundle"])
    assert replayed.fingerprint["launch"]["argv"][:2] == ["sh", "-c"]
    assert "starting with HF token <redacted>" in replayed.log_text
    assert token.encode() not in Path(replay["bundle"]).read_bytes()
    assert not new_servers()


def test_replaying_a_bundle_whose_image_is_not_here_prints_the_build_command_and_exits_3(tmp_path):
    bundle = tmp_path / "other.tar.gz"
    from_log(bundle)
    if image_exists("kit/sglang:sglang-0.5.10.post1-cu129-sm120"):
        pytest.skip("the GPU image is built here")
    proc = subprocess.run([*KIT, "repro", str(bundle)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1
    assert "run 'kit image build sglang-0.5.10.post1-cu129-sm120'" in proc.stderr
