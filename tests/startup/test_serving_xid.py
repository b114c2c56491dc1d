"""A fatal Xid while serving (issue 29): the GSP watchdog hard hang of RTX PRO 6000 hosts is reported
by the driver as Xid 8 or 119 (https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1159,
https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1111) while the HTTP server goes on
accepting connections. NVIDIA's Xid catalog lists both as fatal
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).

The chain under test is the real one: the NVML adapter (kit/runtime/nvml.py) reads the driver's
Xid critical-error event in a sample, the sample carries it as gpu_error, and the serving reducer
(kit/logs/serving.py) turns it into evidence: DEGRADED while the probes still answer, named in the
HUNG verdict once a probe times out with nothing served. Only the pynvml library is a fake
(kit/scenarios/fake_nvml.py, the scenarios' own)."""

from __future__ import annotations

from kit.logs import ActivitySample
from kit.logs.serving import Probe, Serving, ServingLimits, ServingState
from kit.runtime.nvml import open_nvml
from kit.scenarios.fake_nvml import FakeNvml

GiB = 1 << 30
LIMITS = ServingLimits(probe_every_s=5, probe_timeout_s=15, probe_budget_s=3)
RANKS = (("TP0", 4240, "sleeping"), ("TP1", 4241, "sleeping"), ("TP2", 4242, "sleeping"))


def _sample(gpus, t: float) -> ActivitySample:
    usage = gpus.usage([pid for _, pid, _ in RANKS])
    return ActivitySample(t=t, rank_processes=RANKS, gpu_error=usage.error)


def test_an_xid_119_while_serving_degrades_then_names_the_hang():
    nvml = FakeNvml.of(4)
    for index, (_, pid, _) in enumerate(RANKS):
        nvml.set_process(gpu=index, pid=pid, used_bytes=80 * GiB)
    gpus = open_nvml(nvml)
    state = ServingState.start(LIMITS, 0.0).observe_sample(_sample(gpus, 0.0))
    state = state.probe_sent(1.0).probe_answered(Probe(1.0, 2.0, 200))
    assert state.verdict(3.0).verdict is Serving.SERVING

    nvml.xid(gpu=2, code=119)  # the driver's event, read by the next sample
    state = state.observe_sample(_sample(gpus, 10.0))
    call = state.verdict(10.0)
    assert call.verdict is Serving.DEGRADED  # evidence, not a verdict of harm: nothing is removed
    assert "fatal Xid 119 on GPU 2" in call.why and "probes still answer" in call.why

    state = state.probe_sent(11.0)  # the ranks wait on GPU 2 for ever: no answer, no batch line
    hung = state.verdict(11.0 + LIMITS.probe_timeout_s)
    assert hung.verdict is Serving.HUNG
    assert "nothing served since" in hung.why and "fatal Xid 119 on GPU 2 (GSP RPC timeout" in hung.why
    assert state.summary(30.0)["gpu_fault"].startswith("gpu error: fatal Xid 119")


def test_an_xid_the_catalog_does_not_call_fatal_changes_nothing():
    nvml = FakeNvml.of(4)
    nvml.set_process(gpu=0, pid=4240, used_bytes=GiB)
    gpus = open_nvml(nvml)
    state = ServingState.start(LIMITS, 0.0).probe_sent(1.0).probe_answered(Probe(1.0, 2.0, 200))
    nvml.xid(gpu=0, code=13)  # an application's own fault (graphics engine exception)
    state = state.observe_sample(_sample(gpus, 5.0))
    assert state.verdict(5.0).verdict is Serving.SERVING and state.gpu_fault is None
