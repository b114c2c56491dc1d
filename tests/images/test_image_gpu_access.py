"""Which ways verify tries to give a container the host's GPUs, from `docker info`, without Docker.

The first engine is this machine's, recorded (Debian's 20.10, no toolkit). The others are
CONSTRUCTED from the Engine API's documented fields (Runtimes, DefaultRuntime, CDISpecDirs: 'an
empty list indicates that CDI device injection is disabled', DiscoveredDevices: {Source, ID}, API
1.50+), for the setups the issue names: the runtime registered, the runtime hook alone, and CDI.
"""

from __future__ import annotations

import pytest

from kit.images.gpu_access import Attempt, granted, not_asked, plan, refused

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
    assert result.notes == ["engine 20.10.24+dfsg1 does not report CDI (Engine 25+ does)"]


def test_a_registered_runtime_is_evidence_and_the_runtime_itself_is_the_fallback():
    assert hows(TOOLKIT_RUNTIME) == [("gpu-request", True), ("nvidia-runtime", True)]
    kwargs = plan(TOOLKIT_RUNTIME).plans[1].container_kwargs()
    assert kwargs == {"runtime": "nvidia", "environment": {"NVIDIA_VISIBLE_DEVICES": "all"}}
    assert hows({**TOOLKIT_RUNTIME, "Runtimes": {}, "DefaultRuntime": "nvidia"})[0] == ("gpu-request", True)


def test_discovered_cdi_devices_come_first_on_a_cdi_only_host():
    result = plan(CDI_ENGINE_28)
    assert hows(CDI_ENGINE_28) == [("cdi", True), ("gpu-request", False)]
    assert (
        "nvidia.com/gpu=0, nvidia.com/gpu=1, nvidia.com/gpu=2, nvidia.com/gpu=3, ..."
        in result.plans[0].evidence
    )
    request = result.plans[0].container_kwargs()["device_requests"][0]
    assert request["Driver"] == "cdi" and request["DeviceIDs"] == ["nvidia.com/gpu=all"]


def test_cdi_on_without_a_device_list_is_a_trial_after_the_hook():
    assert hows(CDI_ENGINE_27) == [("gpu-request", False), ("cdi", False)]
    assert "/etc/cdi, /var/run/cdi" in plan(CDI_ENGINE_27).plans[1].evidence


@pytest.mark.parametrize(
    ("info", "note"),
    [
        (CDI_OFF_26, "CDI is off on this engine (docker info: CDISpecDirs is empty)"),
        (CDI_WITHOUT_NVIDIA, "no nvidia.com/gpu device was found"),
    ],
)
def test_what_docker_info_rules_out_is_noted_not_tried(info, note):
    result = plan(info)
    assert [p.how for p in result.plans] == ["gpu-request"]
    assert any(note in n for n in result.notes)


def test_the_gpu_request_is_what_docker_run_gpus_all_sends():
    request = plan(TOOLKIT_RUNTIME).plans[0].container_kwargs()["device_requests"][0]
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
