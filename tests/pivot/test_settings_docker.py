"""Preflight and image verify run the same settings: SGLang's own, read from the image's release.

Three runs in the rehearsal image, compared on what decides NCCL's path (NCCL_*,
CUDA_DEVICE_MAX_CONNECTIONS): the release's own ServerArgs resolution and `_set_envs_and_config`
called directly over the image's real tiny model; `/opt/kit/verify.py`'s collective, baked into an
image derived with this checkout's kit/images/inimage/ (the shared image carries main's copy); and
`kit preflight tiny`. Both kit paths run one piece of code (kit/images/inimage/sglang_groups.py).
"""

from __future__ import annotations

import json

import pytest
from derived_image import TEST_LABEL, derive
from pivot_helpers import run_kit

from kit.images.verify import MARKER, PROBE
from kit.pivot.steps import NOTABLE
from kit.runtime.engine import client

pytestmark = [pytest.mark.docker]

# SGLang's own launcher steps, over the model the rehearsal serves (not preflight's stand-in config).
RELEASE = """
import json, os
before = dict(os.environ)
from sglang.srt.server_args import ServerArgs
from sglang.srt.entrypoints.engine import _set_envs_and_config
args = ServerArgs(model_path="/opt/kit/models/tiny", device="cpu", tp_size=2)
getattr(args, "resolve_once", lambda: None)()
_set_envs_and_config(args)
print("RELEASE " + json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))
"""


@pytest.fixture(scope="module")
def probe_image(built_image, tmp_path_factory, request):
    from kit.launch import resolve

    built_image(resolve("tiny").image_ref, resolve("tiny").image)
    files = {f"/opt/kit/{path.name}": path.read_bytes() for path in sorted(PROBE.parent.glob("*.py"))}
    image = derive(tmp_path_factory.mktemp("probe-image"), files, "pivot-probe")
    yield image
    image.remove()


def _run(ref: str, command: list[str], environment: dict[str, str]) -> str:
    container = client().containers.create(
        ref,
        entrypoint=["python"],
        command=command,
        environment=environment,
        network_disabled=True,
        labels={TEST_LABEL: "pivot-settings"},
    )
    try:
        container.start()
        status = container.wait(timeout=900)
        out = container.logs(stdout=True, stderr=False).decode("utf-8", errors="replace")
        assert status["StatusCode"] == 0, container.logs().decode(errors="replace")[-3000:]
        return out
    finally:
        container.remove(force=True)


def _nccl(settings: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in settings.items() if key.startswith(NOTABLE)}


def test_preflight_and_the_baked_verify_apply_the_settings_the_release_itself_sets(
    probe_image, new_containers
):
    cpu = {"SGLANG_CPU_OMP_THREADS_BIND": "0|1", "SGLANG_USE_CPU_ENGINE": "1"}
    out = _run(probe_image.ref, ["-c", RELEASE], cpu)
    release = _nccl(json.loads(next(line for line in out.splitlines() if line.startswith("RELEASE "))[8:]))
    assert release["NCCL_CUMEM_ENABLE"] == "0" and release["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"

    out = _run(
        probe_image.ref,
        ["/opt/kit/verify.py", "--skip-gpu", "--no-kernels", "--all-reduce", "gloo", "--world", "2"],
        {},
    )
    collective = json.loads(
        next(line for line in out.splitlines() if line.startswith(MARKER))[len(MARKER) :]
    )["all_reduce"]
    assert collective["ok"] and collective["sglang"] == "0.5.23" and not collective["setup_error"]
    assert {r["groups"] for r in collective["ranks"]} == {"sglang"}  # SGLang's own groups, as preflight's
    verified = {k: v["value"] for k, v in collective["settings"].items() if v["source"] == "sglang"}

    code, result, _, _ = run_kit("preflight", "tiny", "--until", "allreduce", timeout=600)
    assert code == 0, result
    preflight = {k: v["value"] for k, v in result["settings"].items() if v["source"] == "sglang"}

    assert _nccl(verified) == _nccl(preflight) == release
    assert not new_containers()
