"""verify and diff against the real CPU rehearsal image on the local engine."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest
from image_helpers import CPU_IMAGE, ROOT, run_kit

from kit.images.system_lock import system_of

pytestmark = pytest.mark.docker

TAG = f"kit/sglang:{CPU_IMAGE}"


@pytest.fixture(scope="module")
def engine():
    from kit.errors import EnvironmentProblem
    from kit.runtime.engine import client

    try:
        return client()
    except EnvironmentProblem as exc:
        pytest.skip(exc.one_line())


@pytest.fixture(scope="module")
def cpu_image(engine, built_image):
    built_image(TAG, CPU_IMAGE)
    return TAG


def verify_containers(engine) -> list:
    return engine.containers.list(all=True, filters={"label": ["io.kit.managed=verify"]})


def test_verify_passes_on_the_built_cpu_image(cpu_image, engine, capsys):
    started = time.monotonic()
    assert run_kit(["image", "verify", CPU_IMAGE, "--json"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["verdict"] == "pass" and result["tag"] == TAG
    assert time.monotonic() - started < 120
    rows = {r["check"]: r for r in result["rows"]}
    assert {r["status"] for r in result["rows"]} == {"ok"}
    assert rows["sglang"]["found"] == "0.5.23"
    assert rows["sglang-kernel"]["found"].startswith("kit stand-in")
    assert rows["NCCL wheel"]["found"] == "not installed"
    # What runs: the stand-in's op, a real gloo all_reduce over two processes, py-spy's binary.
    assert rows["sgl_kernel op"]["why"] == "the kit's stand-in, not a CUDA kernel"
    assert rows["all_reduce"]["found"].startswith("2 ranks (gloo): 3 on every rank")
    assert rows["py-spy"]["found"] == "0.4.3; 'py-spy 0.4.3'"
    # The image holds exactly its lock: what pip installed (installed.txt) against images/NAME.lock,
    # its dpkg database against the lock's system packages, and the base it was built on.
    assert rows["lock"]["found"].startswith("0 differences")
    locked = system_of((ROOT / "images" / f"{CPU_IMAGE}.lock").read_text(encoding="utf-8")).packages
    assert rows["system packages"]["found"] == f"0 differences ({len(locked)} packages)"
    assert rows["apt g++"]["expected"] == rows["apt g++"]["found"] != "not installed"
    assert rows["base"]["found"].startswith("debian:bookworm-slim ")
    ranks = result["report"]["all_reduce"]["ranks"]
    assert [r["stage"] for r in ranks] == ["done", "done"] and all(
        r["low"] == r["high"] == 3.0 for r in ranks
    )
    assert result["report"]["torch"]["version"] == "2.13.0+cpu"
    assert not verify_containers(engine)  # the probe's container is gone


def test_verify_human_table(cpu_image, capsys):
    assert run_kit(["image", "verify", CPU_IMAGE, "--gpus", "none"]) == 0
    out = capsys.readouterr().out
    # 12 checks of the manifest, the image's lock, its base and its system packages (7 named, all)
    assert "matches its manifest: all 22 checks ran and matched" in out and "compiled arch list" in out
    assert "apt python3.11-dev" in out and "system packages" in out
    assert "0 differences" in out
    assert "DRIFT" not in out and "not checked" not in out


# The probe builds SGLang's own groups (kit/images/inimage/sglang_groups.py), whose set-up runs the
# first collective: a rank blocked in its first all_reduce is stuck in init, as the server's would be.
@pytest.mark.parametrize(
    ("fault", "stage"), [("hang-collective:rank=1", "init"), ("hang-init:rank=1", "init")]
)
def test_a_rank_that_hangs_is_killed_at_the_deadline_and_named(cpu_image, engine, fault, stage):
    """The rehearsal's real fault switch blocks rank 1 inside torch.distributed; the probe kills
    both ranks at the collective timeout and says where each one stood."""
    from kit.images.manifest import load_manifest
    from kit.images.verify import compare, run_probe

    manifest = load_manifest(CPU_IMAGE)
    started = time.monotonic()
    report, access = run_probe(
        TAG, name=CPU_IMAGE, flavor="cpu", collective_timeout_s=8, environment={"KIT_FAULT": fault}
    )
    facts = report["all_reduce"]
    # not long after the deadline; `import sglang` before the ranks start (setup_s) is outside it
    assert time.monotonic() - started - facts["setup_s"] < 90
    assert facts["ran"] and not facts["ok"] and facts["timed_out"] and 8 <= facts["seconds"] < 30
    hung = facts["ranks"][1]
    assert hung["stage"] == stage and "did not finish in 8 s (killed)" in hung["error"]
    rows = {r.check: r for r in compare(manifest, report, access=access)}
    assert rows["all_reduce"].status == "drift"
    assert rows["all_reduce"].found.startswith("2 ranks (gloo) timed out after 8 s:")
    assert f"rank 1: stuck in {stage}" in rows["all_reduce"].found
    assert [c for c, r in rows.items() if r.status != "ok"] == ["all_reduce"]
    assert not verify_containers(engine)


def test_a_gpu_image_on_this_engine_asks_for_gpus_and_reports_the_answer(cpu_image, engine):
    """The GPU path against the real engine: the ways gpu_access plans are tried on a container
    start. Without an NVIDIA toolkit the engine refuses, the refusal is the evidence, and the probe
    still runs, without GPUs. (The image is the CPU one; only the GPU access is under test.)"""
    from kit.errors import EnvironmentProblem
    from kit.images.gpu_access import plan
    from kit.images.inspect import engine_info
    from kit.images.verify import run_probe

    planned = plan(engine_info())
    report, access = run_probe(TAG, name=CPU_IMAGE, flavor="cuda", mode="auto", collective_timeout_s=30)
    assert report["schema"] == 2 and report["kernels"]["ran"]
    if access.granted:  # a host with the NVIDIA toolkit
        assert access.how in {p.how for p in planned.plans}
    else:
        assert [a.how for a in access.attempts] == [p.how for p in planned.plans]
        assert all(a.error for a in access.attempts)
        assert access.why.startswith("no GPU")
        assert "all_reduce" not in report and report["torch"]["gpus"] == []  # ran with --skip-gpu
        with pytest.raises(EnvironmentProblem, match="--gpus all: no GPU"):
            run_probe(TAG, name=CPU_IMAGE, flavor="cuda", mode="all")
    assert not verify_containers(engine)


def test_verify_names_drift_and_exits_1(cpu_image, project, capsys):
    """The same image against a manifest that pins another sglang: one drift row, exit 1."""
    path = project / "images" / f"{CPU_IMAGE}.toml"
    path.write_text(path.read_text().replace('sglang = "0.5.23"', 'sglang = "0.5.22"'), encoding="utf-8")
    assert run_kit(["image", "verify", CPU_IMAGE]) == 1
    captured = capsys.readouterr()
    assert "DRIFT" in captured.out and "0.5.22" in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "differs from images/sglang-0.5.23-cpu.toml in 1 check(s): sglang" in err[0]


def test_verify_names_each_package_where_the_image_and_its_lock_differ(cpu_image, project, capsys):
    """The committed lock moved on (relocked, not rebuilt): the lock row is the one drift, naming it."""
    path = project / "images" / f"{CPU_IMAGE}.lock"
    text = path.read_text(encoding="utf-8")
    installed = re.search(r"^filelock==(\S+) ", text, flags=re.M)
    assert installed
    path.write_text(text.replace(f"filelock=={installed[1]} ", "filelock==0.0.1 ", 1), encoding="utf-8")
    assert run_kit(["image", "verify", CPU_IMAGE, "--json"]) == 1
    rows = {r["check"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert [c for c, r in rows.items() if r["status"] != "ok"] == ["lock"]
    assert (
        rows["lock"]["found"] == f"1 difference(s): filelock 0.0.1 in the lock, {installed[1]} in the image"
    )


def test_verify_of_an_unbuilt_image_is_exit_3(engine, capsys):
    from kit.runtime.engine import image_exists

    if image_exists("kit/sglang:sglang-0.5.23-cu130-sm120"):
        pytest.skip("the GPU image is built here: no unbuilt image to verify")
    assert run_kit(["image", "verify", "sglang-0.5.23-cu130-sm120"]) == 3
    err = capsys.readouterr().err.strip()
    assert err == (
        "kit: error: image kit/sglang:sglang-0.5.23-cu130-sm120 not built "
        "(run 'kit image build sglang-0.5.23-cu130-sm120')"
    )


def test_diff_of_an_image_with_itself(cpu_image, engine, capsys):
    assert run_kit(["image", "diff", CPU_IMAGE, TAG, "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert diff["added"] == diff["removed"] == diff["changed"] == []
    assert diff["unchanged"] > 50
    assert not verify_containers(engine)


def test_the_lock_lists_what_verify_saw(cpu_image):
    from kit.images.lock import read_image_lock

    lock = read_image_lock(TAG)
    assert lock["sglang"].version == "0.5.23" and lock["torch"].version == "2.13.0+cpu"
    assert "flashinfer-python" not in lock and "sglang-kernel" not in lock


def test_show_reports_the_built_image(cpu_image, capsys):
    assert run_kit(["image", "show", CPU_IMAGE, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["built"] is True and shown["image"]["labels"]["io.kit.image"] == CPU_IMAGE
    assert shown["label_drift"] == []


@pytest.fixture
def own_cpu_manifest(cpu_image, engine, project):
    """The CPU image under a tag and manifest name of this test's own, so the containers it looks
    for (labelled with that name) can only be its own. The tag is removed afterwards; the image
    keeps its other tags."""
    name = f"verify-interrupt-{uuid.uuid4().hex[:8]}"
    source = (project / "images" / f"{CPU_IMAGE}.toml").read_text(encoding="utf-8")
    (project / "images" / f"{name}.toml").write_text(
        source.replace(f'name = "{CPU_IMAGE}"', f'name = "{name}"'), encoding="utf-8"
    )
    engine.images.get(TAG).tag("kit/sglang", name)
    yield name
    engine.images.remove(f"kit/sglang:{name}", noprune=True)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupting_verify_removes_the_probe_container(own_cpu_manifest, engine, sig):
    name = own_cpu_manifest
    mine = {"label": ["io.kit.managed=verify", f"io.kit.image={name}"]}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kit", "image", "verify", name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # started with SIGINT ignored, as under nohup: verify must still be interruptible
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    deadline = time.monotonic() + 120
    try:
        while not engine.containers.list(filters={**mine, "status": "running"}):
            assert time.monotonic() < deadline, "the probe's container never ran"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        os.kill(proc.pid, sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout + stderr
    assert stderr.strip() == "kit: error: interrupted" and "Traceback" not in stdout + stderr
    assert not engine.containers.list(all=True, filters=mine)


def test_lock_system_reads_the_built_image_into_its_lock(cpu_image, project, capsys):
    """The lock's system part comes from the built image's dpkg database and the base it was built
    on (its layers), without starting it; the result holds under --check."""
    from kit.images.system_lock import SystemLock, with_system

    lock = project / "images" / f"{CPU_IMAGE}.lock"
    lock.write_text(with_system(lock.read_text(encoding="utf-8"), SystemLock()), encoding="utf-8")
    assert run_kit(["image", "lock", CPU_IMAGE, "--system"]) == 0, capsys.readouterr().err
    system = system_of(lock.read_text(encoding="utf-8"))
    assert system.base and system.base.startswith("debian:bookworm-slim local sha256:")
    assert system.base.endswith(" (not fixed)")
    assert {"python3.11", "python3.11-dev", "g++", "libnuma1", "procps", "bash"} <= set(system.packages)
    assert system.apt_snapshot and system.apt_snapshot.startswith(
        "https://snapshot.debian.org/archive/debian/"
    )
    assert run_kit(["image", "lock", CPU_IMAGE, "--check"]) == 0
    assert "system packages at exact versions" in capsys.readouterr().out
