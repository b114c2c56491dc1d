"""verify and diff against the real CPU rehearsal image on the local engine."""

from __future__ import annotations

import json
import time

import pytest
from image_helpers import CPU_IMAGE, run_kit

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
def cpu_image(engine):
    from docker.errors import ImageNotFound

    try:
        engine.images.get(TAG)
    except ImageNotFound:
        pytest.skip(f"{TAG} not built (kit image build {CPU_IMAGE})")
    return TAG


def verify_containers(engine) -> list:
    return engine.containers.list(all=True, filters={"label": ["io.kit.managed=verify"]})


def test_verify_passes_on_the_built_cpu_image(cpu_image, engine, capsys):
    started = time.monotonic()
    assert run_kit(["image", "verify", CPU_IMAGE, "--json"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] and result["tag"] == TAG and time.monotonic() - started < 60
    rows = {r["check"]: r for r in result["rows"]}
    assert rows["sglang"]["found"] == "0.5.23"
    assert rows["sglang-kernel"]["found"].startswith("kit stand-in")
    assert rows["NCCL wheel"]["found"] == "not installed"
    assert result["report"]["torch"]["version"] == "2.13.0+cpu"
    assert not verify_containers(engine)  # the probe's container is gone


def test_verify_human_table(cpu_image, capsys):
    assert run_kit(["image", "verify", CPU_IMAGE, "--gpus", "none"]) == 0
    out = capsys.readouterr().out
    assert "matches its manifest" in out and "compiled arch list" in out and "DRIFT" not in out


def test_verify_names_drift_and_exits_1(cpu_image, project, capsys):
    """The same image against a manifest that pins another sglang: one drift row, exit 1."""
    path = project / "images" / f"{CPU_IMAGE}.toml"
    path.write_text(path.read_text().replace('sglang = "0.5.23"', 'sglang = "0.5.22"'), encoding="utf-8")
    assert run_kit(["image", "verify", CPU_IMAGE]) == 1
    captured = capsys.readouterr()
    assert "DRIFT" in captured.out and "0.5.22" in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "differs from images/sglang-0.5.23-cpu.toml in 1 check(s): sglang" in err[0]


def test_verify_of_an_unbuilt_image_is_exit_3(engine, capsys):
    assert run_kit(["image", "verify", "sglang-0.5.23-cu130-sm120"]) == 3 or pytest.skip(
        "GPU image built here"
    )
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
