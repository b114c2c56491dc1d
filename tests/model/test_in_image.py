"""The rehearsal model is generated inside its image at build time: verify runs there, with the
image's own Python and the same standard-library checks (bind-mounted, no network)."""

from __future__ import annotations

import pytest
from catalog_helpers import run_cli

from kit.launch import resolve

pytestmark = pytest.mark.docker


def test_the_tiny_targets_generated_model_passes_verify_inside_its_image(built_image):
    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)
    code, out, err = run_cli(["model", "verify", "tiny"])
    assert code == 0, out + err
    assert f"where: {spec.image_ref}:/opt/kit/models/tiny" in out
    assert "OK /opt/kit/models/tiny" in out
    code, out, _ = run_cli(["model", "verify", "tiny", "--json"])
    import json

    report = json.loads(out)
    kinds = {row["kind"] for row in report["files"]}
    assert code == 0 and {"config", "tokenizer", "shard"} <= kinds
    assert all(row["status"] == "ok" for row in report["files"])
