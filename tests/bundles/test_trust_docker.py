"""A colleague's bundle against the real engine (issue 19): each hand-edited bundle exits 2 before any
container starts (no container carries this test's label afterwards), and with --trust-bundle the
launch runs after the plan is printed, without this machine's GITHUB_TOKEN.

The refusals start nothing, so they take seconds. The trusted run is one short container of the
rehearsal image whose command prints the variables it got and exits: CRASHED in a few seconds.
Every `kit repro` runs with KIT_RUN_LABELS naming this test's label, so anything it started would
carry it; the fixture removes exactly those.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from bundle_helpers import crafted_bundle

from kit.diagnose.bundle import read_bundle
from kit.launch import resolve
from kit.runtime.engine import client

pytestmark = [pytest.mark.docker]
KIT = [sys.executable, "-m", "kit"]
TEST_LABEL = "io.kit.test"
SGLANG = list(resolve("tiny").argv)
TOKEN = "ghp_" + uuid.uuid4().hex + uuid.uuid4().hex[:4]


@pytest.fixture(autouse=True)
def _rehearsal_image(built_image):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)


@pytest.fixture
def mark():
    """This test's label value; every container carrying it is removed afterwards (only those)."""
    value = uuid.uuid4().hex[:8]
    yield value
    for container in client().containers.list(all=True, filters={"label": f"{TEST_LABEL}={value}"}):
        container.remove(force=True)


def labelled(mark: str) -> list:
    return client().containers.list(all=True, filters={"label": f"{TEST_LABEL}={mark}"})


def the_image() -> dict:
    spec = resolve("tiny")
    return {"name": spec.image, "tag": spec.image_ref, "id": client().images.get(spec.image_ref).id}


def repro(mark: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "KIT_RUN_LABELS": f"{TEST_LABEL}={mark}", "GITHUB_TOKEN": TOKEN}
    return subprocess.run([*KIT, "repro", *args], capture_output=True, text=True, timeout=timeout, env=env)


ECHO = ["sh", "-c", 'echo "token=[$GITHUB_TOKEN]"; exec "$@"', "x", *SGLANG]


@pytest.mark.parametrize(
    ("edit", "sets", "named"),
    [
        ({"argv": ECHO, "env": {"GITHUB_TOKEN": TOKEN}}, [], ["argv: not the image's SGLang entry point"]),
        ({"container": {"cap_add": ["SYS_ADMIN", "NET_ADMIN"]}}, [], ["cap SYS_ADMIN", "cap NET_ADMIN"]),
        ({"env": {"LD_PRELOAD": "/tmp/evil.so"}}, [], ["env LD_PRELOAD"]),
        ({"summary": "# READY after 1.0 s\n"}, [], ["summary.md: says what fingerprint.json does not"]),
        ({}, ["--set", "nnodes=1"], ["--set: nnodes=1 changes nothing"]),
    ],
    ids=["sh-c-and-github-token", "caps", "ld-preload", "tampered-summary", "set-nothing"],
)
def test_a_hand_edited_bundle_exits_2_naming_what_it_refuses_and_starts_nothing(
    tmp_path, mark, edit, sets, named
):
    path = crafted_bundle(tmp_path / "b.tar.gz", image=the_image(), **edit)
    proc = repro(mark, str(path), *sets)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    for item in named:
        assert item in proc.stderr, proc.stderr
    assert "what will run:" in proc.stdout and "python -m sglang.launch_server" in proc.stdout
    assert TOKEN not in proc.stdout + proc.stderr
    assert labelled(mark) == []


def test_with_trust_bundle_it_runs_after_the_plan_and_gets_no_variable_it_was_not_given(tmp_path, mark):
    command = ["sh", "-c", 'echo "token=[$GITHUB_TOKEN] hf=[$HF_TOKEN]"; exit 3']
    path = crafted_bundle(
        tmp_path / "b.tar.gz",
        image=the_image(),
        argv=command,
        env={"GITHUB_TOKEN": TOKEN, "HF_TOKEN": "hf_" + "x" * 34},
    )
    proc = repro(mark, str(path), "--trust-bundle", "--json", "--keep")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    plan, result = lines[0], lines[-1]
    assert plan["type"] == "plan" and result["type"] == "result", proc.stdout[-3000:] + proc.stderr[-3000:]
    assert plan["trusted"] is True and plan["command"][:3] == command
    assert any(line.startswith("argv: not the image's SGLang entry point") for line in plan["refused"])
    assert plan["not_passed"] == ["GITHUB_TOKEN", "HF_TOKEN"] and plan["from_this_machine"] == []
    assert result["verdict"] == "crashed", result
    # The container it started: this test's label, and neither token in its environment.
    (container,) = labelled(mark)
    environment = container.attrs["Config"]["Env"]
    assert not [item for item in environment if item.startswith(("GITHUB_TOKEN=", "HF_TOKEN="))]
    assert "token=[] hf=[]" in container.logs().decode()
    replayed = read_bundle(result["bundle"])
    assert "token=[] hf=[]" in replayed.log_text and TOKEN not in replayed.log_text
