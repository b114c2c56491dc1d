"""Which ways verify, `kit up`, preflight and the renders give a container the host's GPUs, from
`docker info` (and the CDI spec files of the engine's own CDISpecDirs), without Docker.

The first engine is this machine's, recorded (Debian's 20.10, no toolkit). The others are
CONSTRUCTED from the Engine API's documented fields (Runtimes, DefaultRuntime, CDISpecDirs: 'an
empty list indicates that CDI device injection is disabled', DiscoveredDevices: {Source, ID}, API
1.50+), for the setups the issue names: the runtime registered, the runtime hook alone, and CDI.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.errors import InputError
from kit.images.gpu_access import Attempt, granted, not_asked, plan, refused
from kit.runtime.host import cdi_answer, choose_gpus, engine_facts, gpu_plan, parse_gpus, way_of_container

RECORDED_DEBIAN_20_10 = {
    "ServerVersion": "20.10.24+dfsg1",
    "Runtimes": {
        "io.containerd.runc.v2": {"path": "runc"},
        "io.containerd.runtime.v1.linux": {"path": "runc"},
        "runc": {"path": "runc"},
    },
    "DefaultRuntime": "runc",
    "CDISpecDirs": None,
    "DiscoveredDevices": None,
}
TOOLKIT_RUNTIME = {  # nvidia-ctk runtime configure --runtime=docker, Engine 24
    "ServerVersion": "24.0.7",
    "Runtimes": {"runc": {"path": "runc"}, "nvidia": {"path": "nvidia-container-runtime"}},
    "DefaultRuntime": "runc",
}
CDI_ENGINE_28 = {  # Engine 28.2+, toolkit base package (CDI only: no hook, no runtime)
    "ServerVersion": "28.3.2",
    "Runtimes": {"runc": {"path": "runc"}},
    "DefaultRuntime": "runc",
    "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"],
    "DiscoveredDevices": [
        {"Source": "cdi", "ID": f"nvidia.com/gpu={i}"} for i in range(4)
    ] + [{"Source": "cdi", "ID": "nvidia.com/gpu=all"}],
}  # fmt: skip
CDI_ENGINE_27 = {  # CDI enabled, the engine does not list devices yet
    "ServerVersion": "27.5.1",
    "Runtimes": {"runc": {"path": "runc"}},
    "DefaultRuntime": "runc",
    "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"],
}
CDI_OFF_26 = {**CDI_ENGINE_27, "ServerVersion": "26.1.4", "CDISpecDirs": []}
CDI_WITHOUT_NVIDIA = {**CDI_ENGINE_28, "DiscoveredDevices": [{"Source": "cdi", "ID": "intel.com/gpu=card0"}]}


def hows(info) -> list[tuple[str, bool]]:
    return [(p.how, p.known) for p in plan(info).plans]


def test_this_engine_gets_one_trial_of_the_runtime_hook():
    result = plan(RECORDED_DEBIAN_20_10)
    assert hows(RECORDED_DEBIAN_20_10) == [("gpu-request", False)]
    assert "docker info does not show" in result.plans[0].evidence
    assert result.notes == ("engine 20.10.24+dfsg1 does not report CDI (Engine 25+ does)",)


def test_a_registered_runtime_is_evidence_and_the_runtime_itself_is_the_fallback():
    assert hows(TOOLKIT_RUNTIME) == [("gpu-request", True), ("nvidia-runtime", True)]
    kwargs = plan(TOOLKIT_RUNTIME).plans[1].sdk_kwargs()
    assert kwargs == {"runtime": "nvidia", "environment": {"NVIDIA_VISIBLE_DEVICES": "all"}}
    assert hows({**TOOLKIT_RUNTIME, "Runtimes": {}, "DefaultRuntime": "nvidia"})[0] == ("gpu-request", True)


def test_discovered_cdi_devices_come_first_on_a_cdi_only_host():
    result = plan(CDI_ENGINE_28)
    assert hows(CDI_ENGINE_28) == [("cdi", True), ("gpu-request", False)]
    assert (
        "nvidia.com/gpu=0, nvidia.com/gpu=1, nvidia.com/gpu=2, nvidia.com/gpu=3, ..."
        in result.plans[0].evidence
    )
    request = result.plans[0].sdk_kwargs()["device_requests"][0]
    assert request["Driver"] == "cdi" and request["DeviceIDs"] == ["nvidia.com/gpu=all"]


def test_cdi_on_without_a_device_list_is_a_trial_after_the_hook():
    assert hows(CDI_ENGINE_27) == [("gpu-request", False), ("cdi", False)]
    assert "/etc/cdi, /var/run/cdi" in plan(CDI_ENGINE_27).plans[1].evidence


@pytest.mark.parametrize(
    ("info", "note"),
    [
        (CDI_OFF_26, "CDI is off on this engine (docker info: CDISpecDirs is empty)"),
        (CDI_WITHOUT_NVIDIA, "the engine found no nvidia.com/gpu device"),
    ],
)
def test_what_docker_info_rules_out_is_noted_not_tried(info, note):
    result = plan(info)
    assert [p.how for p in result.plans] == ["gpu-request"]
    assert any(note in n for n in result.notes)


def test_the_gpu_request_is_what_docker_run_gpus_all_sends():
    request = plan(TOOLKIT_RUNTIME).plans[0].sdk_kwargs()["device_requests"][0]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]] and request["Driver"] == ""


def test_access_says_how_and_why():
    chosen = plan(CDI_ENGINE_27).plans[1]
    refusal = Attempt("gpu-request", 'could not select device driver "" with capabilities: [[gpu]]')
    access = granted("auto", chosen, [refusal], [])
    assert access.granted and access.how == "cdi" and not access.waived
    assert access.why.startswith("CDI device nvidia.com/gpu=all: CDI is on") and access.why.endswith(
        "it started"
    )
    assert access.detail == [f"a GPU device request (docker run --gpus all): {refusal.error}"]
    none = refused("auto", [refusal], ["engine 20.10 does not report CDI (Engine 25+ does)"])
    assert not none.granted and none.why == (
        "no GPU reached the container (the engine refused a GPU device request (docker run --gpus all))"
    )
    assert len(none.detail) == 2
    assert refused("auto", [], ["CDI is off"]).why == "no GPU: CDI is off"
    assert not_asked("none", "--gpus none").waived


# -- the launch's plan: N chosen GPUs, over the four shapes a host can have ----------------------------

NVIDIA_SPEC = """\
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
- name: "1"
- name: "2"
- name: "3"
- name: GPU-fake0000-0000-0000-0000-000000000002
- name: all
containerEdits: {}
"""
BOTH = {**TOOLKIT_RUNTIME, "ServerVersion": "28.3.2", "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"],
        "DiscoveredDevices": CDI_ENGINE_28["DiscoveredDevices"]}  # fmt: skip
NEITHER = {**CDI_OFF_26}
SHAPES = {"runtime only": TOOLKIT_RUNTIME, "CDI only": CDI_ENGINE_28, "both": BOTH, "neither": NEITHER}


def launch(info, devices=(), count=4, specs=None):
    engine = engine_facts(info)
    return gpu_plan(engine, cdi_answer(engine, specs), count=count, devices=devices)


@pytest.mark.parametrize(
    ("shape", "ways"),
    [
        ("runtime only", [("gpu-request", True), ("nvidia-runtime", True)]),
        ("CDI only", [("cdi", True), ("gpu-request", False)]),
        ("both", [("gpu-request", True), ("cdi", True), ("nvidia-runtime", True)]),
        ("neither", [("gpu-request", False)]),
    ],
)
def test_a_launch_of_four_gpus_gets_the_ways_the_host_has_first(shape, ways):
    planned = launch(SHAPES[shape])
    assert [(w.how, w.known) for w in planned.ways] == ways
    kwargs = [w.sdk_kwargs() for w in planned.ways]
    for way, made in zip(planned.ways, kwargs, strict=True):
        if way.how == "gpu-request":  # docker run --gpus 4: the first four
            assert made["device_requests"][0]["Count"] == 4
        elif way.how == "cdi":
            assert made["device_requests"][0]["DeviceIDs"] == [f"nvidia.com/gpu={i}" for i in range(4)]
        else:
            assert made == {"runtime": "nvidia", "environment": {"NVIDIA_VISIBLE_DEVICES": "0,1,2,3"}}
    if shape == "neither":
        assert planned.notes == ("CDI is off on this engine (docker info: CDISpecDirs is empty)",)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_chosen_gpus_reach_every_way(shape):
    planned = launch(SHAPES[shape], devices=("2", "3"), count=2)
    for way in planned.ways:
        made = way.sdk_kwargs()
        if way.how == "gpu-request":
            assert made["device_requests"][0]["DeviceIDs"] == ["2", "3"]
        elif way.how == "cdi":
            assert made["device_requests"][0]["DeviceIDs"] == ["nvidia.com/gpu=2", "nvidia.com/gpu=3"]
        else:
            assert made["environment"] == {"NVIDIA_VISIBLE_DEVICES": "2,3"}


def test_cdi_devices_come_from_the_spec_files_of_the_engines_own_folders():
    engine_27 = {**CDI_ENGINE_27}
    specs = {"/etc/cdi/nvidia.yaml": NVIDIA_SPEC, "/opt/elsewhere/nvidia.yaml": NVIDIA_SPEC}
    answer = cdi_answer(engine_facts(engine_27), specs)
    assert answer.state == "on" and answer.specs == ("/etc/cdi/nvidia.yaml",)  # not /opt: not the engine's
    assert answer.devices[:4] == tuple(f"nvidia.com/gpu={i}" for i in range(4))
    assert answer.devices[-1] == "nvidia.com/gpu=all" and answer.devices_from == "spec files"
    planned = launch(engine_27, specs=specs)
    assert [(w.how, w.known) for w in planned.ways] == [("cdi", True), ("gpu-request", False)]
    # A chosen GPU the spec does not define: CDI is noted, not planned.
    missing = launch(engine_27, devices=("5",), count=1, specs=specs)
    assert [w.how for w in missing.ways] == ["gpu-request"]
    assert "CDI defines no nvidia.com/gpu=5" in missing.notes[0]


def test_the_cdi_answer_is_a_list_also_when_cdi_is_off_or_not_reported():
    for info in (RECORDED_DEBIAN_20_10, CDI_OFF_26, CDI_ENGINE_28):
        answer = cdi_answer(engine_facts(info)).as_dict()
        assert isinstance(answer["spec_dirs"], list) and isinstance(answer["devices"], list)
    assert cdi_answer(engine_facts(RECORDED_DEBIAN_20_10)).state == "not reported"
    assert cdi_answer(engine_facts(CDI_OFF_26)).state == "off"


def test_gpus_are_chosen_by_flag_then_environment():
    assert choose_gpus("0,1,2,3", 4, target="qwen-base", env={}) == ("0", "1", "2", "3")
    assert choose_gpus(None, 4, target="qwen-base", env={"KIT_GPUS": "4,5,6,7"}) == ("4", "5", "6", "7")
    assert choose_gpus("0,1,2,3", 4, target="qwen-base", env={"KIT_GPUS": "4,5,6,7"})[0] == "0"
    assert choose_gpus(None, 4, target="qwen-base", env={}) == ()
    assert choose_gpus(None, 0, target="tiny", env={"KIT_GPUS": "0"}) == ()  # CPU: the variable is moot
    assert choose_gpus(None, 2, target="x", env={"KIT_GPUS": "0,1,2,3"}, strict=False) == ("0", "1")
    with pytest.raises(InputError, match="--gpus: tiny runs on CPU"):
        choose_gpus("0", 0, target="tiny", env={})
    with pytest.raises(InputError, match="KIT_GPUS: names 2 GPU"):
        choose_gpus(None, 4, target="qwen-base", env={"KIT_GPUS": "0,1"})
    with pytest.raises(InputError, match="names a GPU twice"):
        parse_gpus("0,0")
    assert parse_gpus("all") == ()
    assert parse_gpus("GPU-fake0000-0000-0000-0000-000000000002") == (
        "GPU-fake0000-0000-0000-0000-000000000002",
    )


@given(st.text(max_size=40))
def test_any_gpus_text_is_a_device_list_or_one_input_error(text):
    try:
        devices = parse_gpus(text)
    except InputError as exc:
        assert exc.field == "--gpus" and exc.hint
    else:
        assert all(d.isdigit() or d.startswith(("GPU-", "MIG-")) for d in devices)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_containers_gpus_are_read_back_whatever_way_gave_them(shape):
    """What the fingerprint records: the way and the devices, from the container's own settings."""
    for way in launch(SHAPES[shape], devices=("1", "2"), count=2).ways:
        made = way.sdk_kwargs()
        requests = [dict(r) for r in made.get("device_requests", [])]
        attrs = {
            "HostConfig": {"DeviceRequests": requests, "Runtime": made.get("runtime", "runc")},
            "Config": {"Env": [f"{k}={v}" for k, v in made.get("environment", {}).items()]},
        }
        assert way_of_container(attrs) == {"how": way.how, "gpus": 2, "devices": ["1", "2"]}
