"""SGLang's own accepted-draft simulation does what the MTP smoke's expectation assumes: run the
0.5.23 code (srt/speculative/spec_utils.py) inside the CPU rehearsal image, with the env the smoke
sets (kit/testing/speculative.py simulated_overrides). Its CPU path of
generate_simulated_accept_index is the same accounting the CUDA kernel
(kernels/ops/speculative/simulated_accept.py) implements; the GPU start itself is the gpu-marked
test_smoke.py::test_under_sglangs_draft_simulation_... (no CPU draft backend: docs/rehearsal.md)."""

from __future__ import annotations

import json

import pytest

from kit.launch import resolve
from kit.testing import speculative

pytestmark = [pytest.mark.docker]

# Runs in the image's own Python: SGLang reads the env at import, as a server's scheduler does.
PROBE = r"""
import json, torch
from sglang.srt.speculative import spec_utils as su
fixed = [su.sample_simulated_acc_len(su.SIMULATE_ACC_LEN, su.SIMULATE_ACC_METHOD, 4) for _ in range(200)]
half = [su.sample_simulated_acc_len(2.5, "match-expected", 4) for _ in range(400)]
accept_index = torch.tensor([[0, 1, -1, -1], [4, -1, -1, -1]], dtype=torch.int32)
predict = torch.full((8,), 7, dtype=torch.int32)
drafts_ok = torch.zeros(2, dtype=torch.int32)
candidates = torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]])
target = torch.tensor([[30, 31, 32, 33], [40, 41, 42, 43]])
index = su.generate_simulated_accept_index(accept_index, predict, drafts_ok, candidates, target, 2, 3)
print("PROBE " + json.dumps({
    "env": [su.SIMULATE_ACC_LEN, su.SIMULATE_ACC_METHOD, su.SIMULATE_ACC_TOKEN_MODE],
    "fixed": sorted(set(fixed)), "half": sorted(set(half)), "half_mean": sum(half) / len(half),
    "index": index.tolist(), "drafts_ok": drafts_ok.tolist(), "predict": predict.tolist(),
}))
"""


def test_sglangs_simulation_accepts_the_length_the_smoke_expects(new_servers):
    from kit.runtime.engine import client, image_exists
    from kit.runtime.server import run_labels

    image = resolve("tiny-qwen").image_ref
    if not image_exists(image):
        pytest.skip(f"image {image} not built (run 'kit image build sglang-0.5.23-cpu')")
    mtp = resolve("qwen-tiny-mtp")
    env = dict(item.removeprefix("env.").split("=", 1) for item in speculative.simulated_overrides(mtp))
    out = client().containers.run(
        image,
        ["python", "-c", PROBE],
        entrypoint=[],
        environment=env,
        labels=run_labels(),
        remove=True,
        stderr=False,
    )
    [line] = [line for line in out.decode().splitlines() if line.startswith("PROBE ")]
    probe = json.loads(line.removeprefix("PROBE "))
    assert probe["env"] == [3.0, "match-expected", "real-draft-token"]
    # An integer length is drawn the same every verify step: SGLang's average is exactly it.
    assert probe["fixed"] == [speculative.expected_accept_length(3.0, mtp)]
    assert probe["half"] == [2, 3] and abs(probe["half_mean"] - 2.5) < 0.1  # a fraction: floor or +1
    # Each request's row accepts 3 positions: 2 of the draft's own tokens, then the target's token.
    assert probe["index"] == [[0, 1, 2, -1], [4, 5, 6, -1]]
    assert probe["drafts_ok"] == [2, 2]  # accept length = drafts + 1 = 3
    assert probe["predict"] == [11, 12, 32, 7, 21, 22, 42, 7]
    assert not new_servers()
