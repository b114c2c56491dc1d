"""Inside the rehearsal image: the sgl_kernel stand-in matches SGLang's kernel semantics, and the tiny
model is the same every time it is generated (fixed seed, no hub)."""

from __future__ import annotations

import pytest

from kit.launch import resolve
from kit.runtime.engine import LABEL_MANAGED, client

pytestmark = pytest.mark.docker

# The triton kernel's contract (sglang/srt/mem_cache/allocation.py::assign_req_to_token_pool):
# request i writes the slice of out_cache_loc after all earlier requests' slices into
# req_to_token[req_pool_indices[i], start[i]:end[i]]. Checked against a direct reference.
SHIM_CHECK = r"""
import torch
from sgl_kernel import assign_req_to_token_pool_cpu
g = torch.Generator().manual_seed(0)
for trial in range(200):
    rows, width = 8, 64
    batch = int(torch.randint(1, 6, (1,), generator=g))
    pool = torch.randperm(rows, generator=g)[:batch]
    start = torch.randint(0, 32, (batch,), generator=g)
    end = start + torch.randint(0, 32, (batch,), generator=g)
    out = torch.randint(0, 10_000, (int((end - start).sum()),), generator=g)
    got = torch.zeros(rows, width, dtype=torch.int32)
    want = got.clone()
    assign_req_to_token_pool_cpu(pool, got, start, end, out, width)
    taken = 0
    for i in range(batch):
        n = int(end[i] - start[i])
        want[int(pool[i]), int(start[i]):int(end[i])] = out[taken:taken + n]
        taken += n
    assert torch.equal(got, want), trial
try:
    from sgl_kernel import fused_experts_cpu
    fused_experts_cpu()
except NotImplementedError as e:
    assert "fused_experts_cpu" in str(e)
else:
    raise AssertionError("a stand-in op must raise")
try:
    from sgl_kernel import not_a_cpu_op  # noqa
except ImportError:
    pass
else:
    raise AssertionError("non-_cpu names must not import")
print("shim ok")
"""

TINY_TWICE = " && ".join(
    [
        "python /opt/kit/rehearsal/tiny_model.py /tmp/a >/dev/null",
        "python /opt/kit/rehearsal/tiny_model.py /tmp/b >/dev/null",
        "sha256sum /tmp/a/model.safetensors /tmp/b/model.safetensors /opt/kit/models/tiny/model.safetensors"
        " /tmp/a/tokenizer.json /opt/kit/models/tiny/tokenizer.json",
        'python -c \'import json; c = json.load(open("/opt/kit/models/tiny/config.json"));'
        ' print(c["architectures"][0], c["hidden_size"], c["num_hidden_layers"],'
        ' c["num_attention_heads"], c["num_key_value_heads"], c["vocab_size"])\'',
    ]
)


@pytest.fixture(scope="module")
def image(built_image):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)
    return spec.image_ref


def run_in(image: str, script: list[str]) -> str:
    output = client().containers.run(
        image, script, remove=True, network_disabled=True, labels={LABEL_MANAGED: "test"}, stderr=False
    )
    return output.decode()


def test_the_sgl_kernel_stand_in_matches_the_kernel_contract(image):
    assert "shim ok" in run_in(image, ["python", "-c", SHIM_CHECK])


def test_the_tiny_model_is_reproducible_and_has_the_promised_shape(image):
    lines = run_in(image, ["sh", "-c", TINY_TWICE]).strip().splitlines()
    digests = [line.split()[0] for line in lines[:5]]
    assert digests[0] == digests[1] == digests[2], "weights differ between generations"
    assert digests[3] == digests[4], "tokenizer differs between generations"
    arch, hidden, layers, heads, kv_heads, vocab = lines[-1].split()
    assert (arch, hidden, layers, heads, kv_heads) == ("Qwen2ForCausalLM", "64", "2", "4", "2")
    assert 900 <= int(vocab) <= 1100
