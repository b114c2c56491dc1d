"""The tiny production-architecture model in the CPU image: reproducible, and served by the real SGLang.

`kit up tiny-qwen` to READY and a first token: SGLang 0.5.23's own
Qwen3_5MoeForConditionalGeneration on CPU at TP 2 (Gated-DeltaNet and attention layers, MoE, the
mamba cache, the vision warmup), its hybrid kernels from the rehearsal's plain-torch stand-ins.
(NEXTN does not run on a CPU without AMX in 0.5.23: docs/rehearsal.md.) The image is the shared
rehearsal image when it carries this checkout's stand-ins and model (CI builds it from the merged
tree), else a test image derived from it (tests/rehearsal/qwen_image.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from qwen_image import MODEL, qwen_image

from kit.launch import resolve
from kit.runtime.engine import LABEL_MANAGED, client

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]


@pytest.fixture(scope="module")
def image(built_image, tmp_path_factory):
    spec = resolve("tiny-qwen")
    built_image(spec.image_ref, spec.image)
    built = qwen_image(tmp_path_factory.mktemp("qwen-image"))
    yield built
    built.remove()


TWICE = " && ".join(
    [
        "python /opt/kit/rehearsal/tiny_qwen3_5.py /tmp/a >/dev/null",
        "python /opt/kit/rehearsal/tiny_qwen3_5.py /tmp/b >/dev/null",
        f"cd {MODEL} && for f in *; do sha256sum $f /tmp/a/$f /tmp/b/$f; done",
        "du -sk /tmp/a",
    ]
)


def test_the_model_in_the_image_is_what_two_fresh_generations_give_byte_for_byte(image):
    out = (
        client()
        .containers.run(
            image.ref, ["sh", "-c", TWICE], remove=True, network_disabled=True, labels={LABEL_MANAGED: "test"}
        )
        .decode()
    )
    lines = out.strip().splitlines()
    digests: dict[str, set[str]] = {}
    for line in lines[:-1]:
        digest, path = line.split()
        digests.setdefault(path.rsplit("/", 1)[-1], set()).add(digest)
    assert {"config.json", "model.safetensors.index.json", "tokenizer.json"} <= set(digests)
    assert sum(name.endswith(".safetensors") for name in digests) == 2
    differ = sorted(name for name, seen in digests.items() if len(seen) != 1)
    assert not differ, f"differ between generations: {differ}"
    kib = int(lines[-1].split()[0])
    assert 1024 < kib < 32 * 1024, f"{kib} KiB: the model is meant to be a few MB"
    print(f"\nqwen-tiny: {len(digests)} files, {kib} KiB, identical across 3 generations")


def up(target: str, image, timeout: float = 1500) -> tuple[int, dict]:
    proc = subprocess.run(
        [*KIT, "up", target, "--image", image.image, "--json"],
        capture_output=True, text=True, timeout=timeout, env=image.env(),
    )  # fmt: skip
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    results = [line for line in lines if line.get("type") == "result"]
    assert results, f"no result line; stdout={proc.stdout[-3000:]} stderr={proc.stderr[-3000:]}"
    return proc.returncode, results[-1]


def test_the_production_architecture_serves_on_cpu_with_a_first_token(image, new_servers):
    code, result = up("tiny-qwen", image)
    assert code == 0, json.dumps(result)[-3000:]
    assert result["verdict"] == "ready"
    assert result["reply"]
    assert result["container_removed"] is True
    print(f"\ntiny-qwen: READY in {result['startup_s']} s, first token in {result['first_token_s']} s")
    assert not new_servers()
