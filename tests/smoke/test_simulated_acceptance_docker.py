"""SGLang's own accepted-draft simulation does what the MTP smoke's expectation assumes: run the
0.5.23 code (srt/speculative/spec_utils.py) inside the CPU rehearsal image, with the env the smoke
sets (kit/testing/speculative.py simulated_overrides). Its CPU path of
generate_simulated_accept_index is the same accounting the CUDA kernel
(kernels/ops/speculative/simulated_accept.py) implements; the GPU start itself is the gpu-marked
test_smoke.py::test_under_sglangs_draft_simulation_... (no CPU draft backend: docs/rehearsal.md).

The same run takes one simulated request of the smoke's length through 0.5.23's own per-request
figure: ServerArgs for the qwen-tiny-mtp flags (NEXTN 3/1/4, on the tiny-qwen CPU launch, which
resolves on CPU) published as the tokenizer manager's process reads them, one verify step after
another drawn by generate_simulated_accept_index, each step committing drafts + 1 tokens (the
first token from prefill, the last step cut by max_new_tokens), as
scheduler_components/batch_result_processor.py counts spec_verify_ct and spec_num_correct_drafts;
then TokenizerManager._calculate_spec_decoding_metrics writes the response's meta_info. The smoke's
own reader (kit/testing/speculative.py acceptance_of, judge_simulated) must pass on that meta_info:
what the GPU smoke reads from /generate, field for field."""

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

# One request of the smoke's length under the simulation, counted as the scheduler counts it, and
# its meta_info as the tokenizer manager writes it.
import sys, types
from sglang.srt import runtime_context
from sglang.srt.managers.tokenizer_manager import TokenizerManager
from sglang.srt.server_args import prepare_server_args
args = prepare_server_args(json.loads(sys.argv[1]))
runtime_context.publish(args, role="test")
steps, drafts, wanted = args.speculative_num_steps, args.speculative_num_draft_tokens, int(sys.argv[2])
completion, verify_ct, correct = 1, 0, 0  # the first token comes from prefill
while completion < wanted:
    row_index = torch.full((1, drafts), -1, dtype=torch.int32)
    row_ok = torch.zeros(1, dtype=torch.int32)
    su.generate_simulated_accept_index(
        row_index, torch.zeros(drafts, dtype=torch.int32), row_ok,
        torch.arange(drafts).view(1, -1), torch.arange(100, 100 + drafts).view(1, -1), 1, steps,
    )
    completion = min(wanted, completion + int(row_ok[0]) + 1)
    verify_ct, correct = verify_ct + 1, correct + int(row_ok[0])
recv = types.SimpleNamespace(
    completion_tokens=[completion], spec_verify_ct=[verify_ct], spec_num_correct_drafts=[correct],
    spec_correct_drafts_histogram=[[]], spec_num_cap_tokens=None,
)
meta = {"completion_tokens": completion}
TokenizerManager._calculate_spec_decoding_metrics(types.SimpleNamespace(), meta, recv, 0)

print("PROBE " + json.dumps({
    "env": [su.SIMULATE_ACC_LEN, su.SIMULATE_ACC_METHOD, su.SIMULATE_ACC_TOKEN_MODE],
    "fixed": sorted(set(fixed)), "half": sorted(set(half)), "half_mean": sum(half) / len(half),
    "index": index.tolist(), "drafts_ok": drafts_ok.tolist(), "predict": predict.tolist(),
    "meta": meta, "spec": [args.speculative_algorithm, steps, args.speculative_eagle_topk, drafts],
}))
"""


def mtp_flags_on_the_cpu_launch() -> list[str]:
    """tiny-qwen's CPU launch with qwen-tiny-mtp's speculative flags (what kit check accepts on CPU)."""
    mtp = list(resolve("qwen-tiny-mtp").argv)
    flags = []
    for i, arg in enumerate(mtp):
        if arg.startswith("--speculative-"):
            flags += mtp[i : i + 2]
    return [*resolve("tiny-qwen").argv[3:], *flags]


def test_sglangs_simulation_accepts_the_length_the_smoke_expects(new_servers):
    from kit.runtime.engine import client, image_exists
    from kit.runtime.server import run_labels

    image = resolve("tiny-qwen").image_ref
    if not image_exists(image):
        pytest.skip(f"image {image} not built (run 'kit image build sglang-0.5.23-cpu')")
    mtp = resolve("qwen-tiny-mtp")
    env = dict(item.removeprefix("env.").split("=", 1) for item in speculative.simulated_overrides(mtp))
    tokens = speculative.smoke_of(mtp).greedy_tokens
    out = client().containers.run(
        image,
        ["python", "-c", PROBE, json.dumps(mtp_flags_on_the_cpu_launch()), str(tokens)],
        entrypoint=[],
        environment={**env, "SGLANG_USE_CPU_ENGINE": "1"},
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
    # The response's own acceptance, as SGLang wrote it, through the smoke's reader and judge.
    assert probe["spec"] == ["NEXTN", 3, 1, 4]
    accepted = speculative.acceptance_of(probe["meta"])
    steps = -(-(tokens - 1) // 3)  # the prefill token, then 3 per verify step, the last one cut
    assert accepted == speculative.Acceptance(tokens / steps, steps, tokens)
    verdict = speculative.judge_simulated(
        [accepted] * 3,
        speculative.expected_accept_length(3.0, mtp),
        speculative.smoke_of(mtp).accept_length_tolerance,
    )
    assert verdict.ok, verdict.detail
    assert not new_servers()
