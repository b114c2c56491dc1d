"""One builder, four sources: fingerprint.build asks a container, a replay, a host process and a
pasted log the same questions (kit/diagnose/fact_sources.py), so their fingerprints have one shape,
and what the builder makes is what the three paths it replaced made.

tests/fixtures/fingerprints/*.json are the fingerprints the code before the builder wrote for the
same inputs (kit 22ba743: facts.fingerprint_of_replay, facts.fingerprint_of_log), with `made.at`
blanked and the set `launch.limits.compile_counts_in` sorted (its order changed per process then).
A field the builder writes beyond them may only be an unknown marker that fills the common shape.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kit
from kit.diagnose import fingerprint as fp
from kit.diagnose.fact_sources import (
    ContainerFacts,
    HereFacts,
    HostProcessFacts,
    HostServer,
    PastedLogFacts,
    ReplayFacts,
    facts_of_run,
)
from kit.launch import resolve
from kit.logs.limits import limits_from_spec
from kit.runtime.nvml import open_nvml
from kit.scenarios.fake_nvml import FakeNvml

FIXTURES = Path(__file__).parents[1] / "fixtures" / "fingerprints"
SECTIONS = ("image", "versions", "host", "nvidia", "launch")


def _spec(image: str | None = "sglang-0.5.23-cpu"):
    spec = resolve("tiny", image=image)
    return spec, limits_from_spec(spec)


def _fake_gpus():
    return open_nvml(
        FakeNvml.of(4, name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition", capability=(12, 0))
    )


@pytest.fixture
def host_process():
    """A real process on this machine, started as a server would be (its argv names a model and port)."""
    code = "import sys, time; sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--model-path", "/models/tiny", "--port", "31999"],
        stdout=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "NCCL_DEBUG": "INFO", "HF_TOKEN": "hf_secret_value_123"},
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    yield proc.pid
    proc.kill()
    proc.wait(timeout=10)


def _shape(fingerprint: dict) -> dict[str, set[str]]:
    """The keys of each section ('catalog_argv' is there only where another argv than the catalog's ran)."""
    shape = {"": set(fingerprint) - {"process"}}
    for section in SECTIONS:
        shape[section] = set(fingerprint[section]) - {"catalog_argv"}
    return shape


def _no_error(fingerprint: dict) -> dict:
    assert "error" not in fingerprint, fingerprint.get("error")
    return fingerprint


def test_the_replay_the_pasted_log_and_a_host_process_answer_in_one_shape(host_process):
    spec, limits = _spec()
    replay = fp.build(ReplayFacts(spec, gpus=_fake_gpus(), scenario="s1"), limits)
    pasted = fp.build(PastedLogFacts(spec, spec.image, "2.27.3"), limits)
    host = fp.build(HostProcessFacts(host_process, spec, unit=None, gpus=None, by="test"), limits)
    shapes = [_shape(_no_error(b.fingerprint)) for b in (replay, pasted, host)]
    assert shapes[0] == shapes[1] == shapes[2]
    assert set(shapes[0]["host"]) == set(fp.HOST_KEYS)
    assert "process" in host.fingerprint and "process" not in replay.fingerprint
    # The host process's own facts, read from /proc: its argv, and its environment masked.
    assert host.raw_argv[-4:] == ["--model-path", "/models/tiny", "--port", "31999"]
    assert host.fingerprint["process"]["env"]["HF_TOKEN"] != "hf_secret_value_123"
    assert host.raw_env["HF_TOKEN"] == "hf_secret_value_123"  # for the Redactor, never written
    launch = host.fingerprint["launch"]
    assert launch["env"]["NCCL_DEBUG"] == "INFO" and "PATH" not in launch["env"]  # only what decides a start
    assert launch["env"]["HF_TOKEN"] != "hf_secret_value_123" and "HF_TOKEN" in launch["secrets"]


@pytest.mark.docker
def test_a_container_and_kit_repros_here_answer_in_the_same_shape(built_image, new_servers):
    """A real container of the rehearsal image (only `sleep`: its image, lock, settings are read), and
    kit repro's side of the diff for the same image (its lock read without starting it)."""
    from kit.runtime.engine import client
    from kit.runtime.server import RUN_LABELS

    spec, limits = _spec()
    built_image(spec.image_ref, spec.image)
    key, _, value = os.environ[RUN_LABELS].partition("=")
    container = client().containers.run(
        spec.image_ref, entrypoint=["sleep", "60"], detach=True, labels={key: value}, environment=["A=1"]
    )
    try:
        built = fp.build(ContainerFacts(container, spec, gpus=None, by="test"), limits)
        replay = fp.build(ReplayFacts(spec, gpus=None, scenario="s1"), limits)
        here = fp.build(HereFacts(spec, spec.image_ref, tag=None, present={"HF_TOKEN": "<set here>"}), limits)
    finally:
        container.remove(force=True)
    assert (
        _shape(_no_error(built.fingerprint))
        == _shape(replay.fingerprint)
        == _shape(_no_error(here.fingerprint))
    )
    assert here.lock == built.lock  # one image: the same lock, read from it and from inside the container
    assert built.lock and built.fingerprint["image"]["lock"]["count"] > 0  # read from inside it
    assert built.raw_argv == ["sleep", "60"] and built.raw_env["A"] == "1"
    assert built.fingerprint["launch"]["catalog_argv"]  # it did not run the catalog's launch


def _same_as_before(made: dict, fixture: str) -> None:
    before = json.loads((FIXTURES / fixture).read_text())
    assert made["kit"] == {"version": kit.__version__}
    now = fp.flatten({**made, "made": {**made["made"], "at": "<at>"}, "kit": before["kit"]})
    then = fp.flatten(before)
    changed = {k: (then[k], now.get(k)) for k in then if now.get(k) != then[k]}
    assert not changed, changed
    added = {k: v for k, v in now.items() if k not in then}
    assert all(fp.is_unknown(v) for v in added.values()), added


def test_a_replay_is_fingerprinted_as_before():
    spec, limits = _spec()
    built = fp.build(ReplayFacts(spec, gpus=_fake_gpus(), scenario="s1"), limits)
    assert built.lock is None and built.raw_argv == list(spec.argv)
    _same_as_before(built.fingerprint, "replay-tiny.json")


@pytest.mark.parametrize(
    ("image", "nccl", "fixture"),
    [("sglang-0.5.23-cpu", "2.27.3", "pasted-log-tiny.json"), (None, None, "pasted-log-no-image.json")],
)
def test_a_pasted_log_is_fingerprinted_as_before(image, nccl, fixture):
    spec, limits = _spec(image)
    built = fp.build(PastedLogFacts(spec, image, nccl), limits)
    assert built.lock is None and built.raw_env == {} and built.raw_argv == []
    _same_as_before(built.fingerprint, fixture)


def test_a_host_server_whose_process_is_gone_says_why():
    built = fp.build(facts_of_run(object(), None, host=HostServer(None, "sglang.service")), None)
    assert set(built.fingerprint) == {"format", "made", "error"}
    assert "sglang.service" in built.fingerprint["error"]["unknown"]
    assert built.fingerprint["made"]["by"] == "kit watch (host)"
    assert (built.lock, built.raw_env, built.raw_argv) == (None, {}, [])


class _Replayed:
    """A replayed scenario's source as record_run sees it: a name and its (fake) GPUs, no container."""

    name = "s1"
    gpus = None


def test_record_run_picks_the_adapter_at_run_time(host_process):
    spec, _ = _spec()
    assert isinstance(facts_of_run(_Replayed(), spec), ReplayFacts)
    host = facts_of_run(_Replayed(), spec, host=HostServer(host_process))
    assert isinstance(host, HostProcessFacts) and host.by == "kit watch (host)"
