"""The one host-facts module (kit/runtime/host): engine facts from recorded `docker info` shapes, the CDI
answer from the engine's own folders, a read of this host that never raises, and the fingerprint's
view of the same facts (a lost GPU included)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kit.diagnose.facts import host_section, nvidia_of, runtimes_section
from kit.runtime.host import (
    ToolFacts,
    cdi_answer,
    engine_facts,
    engine_failed,
    read_cdi_specs,
    read_host,
)
from kit.runtime.host.cdi import spec_devices
from kit.runtime.nvml import read_inventory
from kit.scenarios.fake_nvml import FakeNvml

DOCKER_INFO = Path(__file__).resolve().parents[1] / "fixtures" / "docker-info"


def shape(name: str) -> dict:
    return json.loads((DOCKER_INFO / name).read_text())


def test_engine_facts_keep_cdi_unreported_apart_from_cdi_off():
    old = engine_facts(shape("debian-20.10-recorded.json"))
    assert old.version == "20.10.24+dfsg1" and old.cdi_spec_dirs is None and old.discovered_devices is None
    assert old.runtimes == ("io.containerd.runc.v2", "io.containerd.runtime.v1.linux", "runc")
    off = engine_facts(shape("cdi-off-26.json"))
    assert off.cdi_spec_dirs == () and not off.nvidia_runtime
    cdi = engine_facts(shape("cdi-only-28.json"))
    assert cdi.discovered_devices[-1] == "nvidia.com/gpu=all" and cdi.cdi_spec_dirs == (
        "/etc/cdi",
        "/var/run/cdi",
    )
    assert engine_facts(shape("runtime-only-24.json")).nvidia_runtime


def test_an_engine_that_did_not_answer_is_said_so_in_every_section():
    failed = engine_failed("no Docker engine answers (start one)")
    assert cdi_answer(failed).state == "unknown" and "did not answer" in cdi_answer(failed).why
    host = host_section(failed, ToolFacts(compose_version="2.26.1"))
    assert "no Docker engine answers" in host["docker_engine"]["unknown"] and host["compose"] == "2.26.1"
    assert "did not answer" in runtimes_section(failed)["unknown"]


def test_spec_files_are_read_from_the_engines_folders_only(tmp_path):
    (tmp_path / "etc-cdi").mkdir()
    (tmp_path / "etc-cdi" / "nvidia.yaml").write_text(
        'kind: nvidia.com/gpu\ndevices: [{name: "0"}, {name: all}]\n'
    )
    (tmp_path / "etc-cdi" / "intel.json").write_text(
        json.dumps({"kind": "intel.com/gpu", "devices": [{"name": "c0"}]})
    )
    (tmp_path / "etc-cdi" / "notes.txt").write_text("kind: nvidia.com/gpu")
    (tmp_path / "etc-cdi" / "broken.yaml").write_text("kind: [unclosed")
    texts = read_cdi_specs([str(tmp_path / "etc-cdi"), str(tmp_path / "missing")])
    assert sorted(Path(p).name for p in texts) == ["broken.yaml", "intel.json", "nvidia.yaml"]
    engine = engine_facts({"ServerVersion": "27.5.1", "CDISpecDirs": [str(tmp_path / "etc-cdi")]})
    answer = cdi_answer(engine, texts)
    assert answer.specs == (str(tmp_path / "etc-cdi" / "nvidia.yaml"),)
    assert answer.devices == ("nvidia.com/gpu=0", "nvidia.com/gpu=all")


@given(st.text(max_size=300))
def test_any_spec_file_text_gives_devices_or_none(text):
    found = spec_devices(text)
    assert found is None or all(d.startswith("nvidia.com/gpu=") for d in found)


def test_reading_this_host_never_raises_and_records_why():
    facts = read_host(nvml_lib=FakeNvml(available=False), port=0)
    assert facts.nvml.inventory.error and facts.nvml.inventory.count == 0
    assert facts.engine.answered or facts.engine.error
    assert facts.cdi.state in ("on", "off", "not reported", "unknown")
    assert isinstance(facts.cdi.as_dict()["spec_dirs"], list)
    assert facts.gpu_plan(count=4).ways  # never empty: the device request is always a trial


def test_a_lost_gpu_is_in_the_fingerprint():
    nvml = FakeNvml.of(4)
    nvml.lose(gpu=3)
    engine = engine_facts(shape("runtime-only-24.json"))
    section = nvidia_of(
        read_inventory(nvml),
        p2p=None,
        topology=None,
        engine=engine,
        cdi=cdi_answer(engine),
        tools=ToolFacts(),
        why_no_nvml=None,
    )
    assert section["gpu_count"] == 3
    assert section["lost_gpus"] == [{"index": 3, "error": "GPU is lost", "lost": True}]
    assert section["cdi"]["state"] == "not reported" and section["cdi"]["spec_dirs"] == []


def test_an_engine_failure_looking_up_an_image_is_not_reported_as_a_missing_image(monkeypatch):
    """A fingerprint made while the engine fails says so; 'not here' is only for ImageNotFound."""
    from docker.errors import APIError, ImageNotFound

    from kit.diagnose import facts
    from kit.runtime import engine

    class Images:
        def __init__(self, error):
            self.error = error

        def get(self, ref):
            raise self.error

    class Client:
        def __init__(self, error):
            self.images = Images(error)

    monkeypatch.setattr(engine, "client", lambda: Client(APIError("500 Server Error: daemon is restarting")))
    section, _, lock = facts.image_facts_of_ref("kit/sglang:x", "sglang-0.5.23-cpu")
    assert (
        lock is None and "the Docker engine failed looking up image kit/sglang:x" in section["id"]["unknown"]
    )
    assert "is not here" not in section["id"]["unknown"]
    monkeypatch.setattr(engine, "client", lambda: Client(ImageNotFound("no such image")))
    section, _, _ = facts.image_facts_of_ref("kit/sglang:x", "sglang-0.5.23-cpu")
    assert section["id"]["unknown"] == "image kit/sglang:x is not here"
