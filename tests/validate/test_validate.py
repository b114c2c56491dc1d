"""`kit validate`: parallelism, memory fit, the release's rules and pitfalls, in well under a second."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from catalog_helpers import run_cli

from kit import paths
from kit.launch import resolve_full
from kit.validate import memory_fit, validate
from kit.validate._memory import GIB

OLD = "sglang-0.5.10.post1-cu129-sm120"
NEW = "sglang-0.5.23-cu130-sm120"
# The failing deployment's first launch: MTP on 0.5.10 with the no_buffer default.
FIRST_FAILURE = ["validate", "qwen-mtp", "--image", OLD, "--set", "mamba_cache=no_buffer"]


def _ids(report):
    return {f.id for f in report.findings if f.severity == "error"}


@pytest.mark.parametrize("target", ["qwen-base", "qwen-mtp", "tiny"])
@pytest.mark.parametrize("image", [None, OLD, NEW])
def test_shipped_targets_are_valid_on_every_image_of_their_kind(target, image):
    if target == "tiny" and image:
        image = "sglang-0.5.23-cpu"
    report = validate(target, image=image)
    assert report.ok, report.findings


def test_the_first_failing_launch_is_rejected():
    # How fast: benchmarks/validate_bench.py (timing goals are measured there, not gated here).
    code, out, err = run_cli(FIRST_FAILURE)
    assert code == 1 and err == ""
    assert "INVALID qwen-mtp on sglang-0.5.10.post1-cu129-sm120 (dialect sglang-0.5.10)" in out
    assert (
        "error sglang-0.5.10:mtp-hybrid-no-buffer: Speculative decoding for "
        "Qwen3_5MoeForConditionalGeneration is not compatible with radix cache "
        "when using --mamba-scheduler-strategy no_buffer" in out
    )
    assert "fix: --set mamba_cache=extra_buffer" in out


def test_the_same_override_on_0_5_23_needs_the_overlap_schedule_off():
    # 0.5.14+ no longer raise the MTP ValueError, but no_buffer with the radix cache asserts against
    # the overlap schedule (docs/conformance.md, mamba rows).
    refused = validate("qwen-mtp", image=NEW, overrides=["mamba_cache=no_buffer"])
    assert not refused.ok and "sglang-0.5.21:no-buffer-overlap" in _ids(refused)
    assert validate("qwen-mtp", image=NEW, overrides=["mamba_cache=no_buffer", "overlap_schedule=false"]).ok


@pytest.mark.parametrize("fix", ["mamba_cache=extra_buffer", "radix_cache=false", "mamba_cache=auto"])
def test_each_documented_fix_passes(fix):
    assert validate("qwen-mtp", image=OLD, overrides=["mamba_cache=no_buffer", fix]).ok


def test_json_report_shape():
    code, out, _ = run_cli([*FIRST_FAILURE, "--json"])
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert {"target", "image", "dialect", "findings", "memory", "argv", "env", "notes", "seconds"} <= set(
        report
    )
    assert report["findings"][0]["id"] == "sglang-0.5.10:mtp-hybrid-no-buffer"
    assert report["memory"]["fits"] is True


def test_tp_must_divide_heads_and_equal_the_gpus():
    assert _ids(validate("qwen-base", overrides=["tp=3"])) >= {"tp-heads", "tp-gpus"}
    assert "tp-gpus" in _ids(validate("qwen-base", overrides=["tp=8"]))
    assert "tp-gpus" not in _ids(validate("qwen-base", overrides=["tp=8", "nnodes=2"]))


def test_memory_fit_numbers_for_qwen_base():
    r = resolve_full("qwen-base")
    fit = memory_fit(r.model.facts, r.profile, r.hardware, "no_buffer")
    assert fit.weights_gib == 234 / 4
    # 2 (K,V) x 12 attention layers x 1 KV head per GPU (2 heads over TP 4, replicated) x 256 x 2 bytes
    assert fit.kv_bytes_per_token == 2 * 12 * 1 * 256 * 2
    assert fit.kv_tokens == 262144
    assert fit.kv_reserve_gib == pytest.approx(12288 * 262144 / GIB, abs=1e-3)
    assert fit.budget_gib == pytest.approx(95.6 * 0.8, abs=1e-3)
    assert fit.fits and 10 < fit.headroom_gib < 20


def test_memory_that_cannot_fit_is_an_error_with_numbers():
    report = validate("qwen-base", overrides=["tp=2"])
    finding = next(f for f in report.findings if f.id == "memory-fit")
    assert (
        "does not fit: 120.1 GiB needed of 76.5 GiB per GPU (95.6 GiB x 0.8): weights 117.0"
        in finding.message
    )


def test_mtp_adds_the_draft_layer():
    base, mtp = validate("qwen-base").memory, validate("qwen-mtp").memory
    assert mtp.draft_gib > 0 == base.draft_gib
    assert mtp.kv_bytes_per_token == base.kv_bytes_per_token * 13 // 12


@pytest.mark.parametrize(
    ("overrides", "finding"),
    [
        (["container.ipc_host=false"], "pitfall:shm-too-small"),
        (["container.ulimits={}"], "pitfall:memlock"),
        (["cuda_graph=false"], "pitfall:cuda-graph-off"),
        (["mamba_cache=no_buffer"], "sglang-0.5.21:no-buffer-overlap"),
    ],
)
def test_pitfalls_and_rules(overrides, finding):
    report = validate("qwen-mtp", overrides=overrides)
    assert finding in {f.id for f in report.findings}


def test_p2p_pitfall_goes_away_once_p2p_is_off():
    ids = {f.id for f in validate("qwen-base").findings}
    assert "pitfall:sm120-pcie-p2p" in ids
    assert "pitfall:sm120-pcie-p2p" not in {
        f.id for f in validate("qwen-base", overrides=["env.NCCL_P2P_DISABLE=1"]).findings
    }


def test_extra_buffer_on_a_model_without_mamba_state():
    # tiny is not hybrid: 0.5.21+ refuse an explicit extra_buffer with the radix cache on.
    report = validate("tiny", overrides=["mamba_cache=extra_buffer"])
    assert "sglang-0.5.21:extra-buffer-needs-mamba" in _ids(report)
    assert validate("tiny", overrides=["mamba_cache=extra_buffer", "radix_cache=false"]).ok


@pytest.fixture
def project_with_0_5_9(tmp_path, monkeypatch):
    """A project whose images/ adds a 0.5.9 manifest (the kit ships none)."""
    images = tmp_path / "images"
    shutil.copytree(paths.images_dir(), images)
    text = (images / f"{OLD}.toml").read_text()
    text = (
        text.replace(f'name = "{OLD}"', 'name = "sglang-0.5.9-test"')
        .replace('dialect = "sglang-0.5.10"', 'dialect = "sglang-0.5.9"')
        .replace('sglang = "0.5.10.post1"', 'sglang = "0.5.9"')
    )
    (images / "sglang-0.5.9-test.toml").write_text(text)
    monkeypatch.setenv("KIT_PROJECT_DIR", str(tmp_path))
    return "sglang-0.5.9-test"


def test_0_5_9_needs_triton_on_sm120(project_with_0_5_9):
    image = project_with_0_5_9
    report = validate("qwen-base", image=image)
    assert report.ok and "--attention-backend" in report.argv
    assert report.argv[report.argv.index("--attention-backend") + 1] == "triton"
    bad = validate("qwen-base", image=image, overrides=["attention_backend=flashinfer"])
    assert "sglang-0.5.9:sm120-hybrid-attention" in _ids(bad)
    # 0.5.9 only warns about MTP with no_buffer (it disables the radix cache itself).
    warned = validate("qwen-mtp", image=image, overrides=["mamba_cache=no_buffer"])
    assert warned.ok and "sglang-0.5.9:mtp-hybrid-no-buffer" in {f.id for f in warned.findings}


def test_unknown_image_is_exit_2():
    code, _, err = run_cli(["validate", "qwen-base", "--image", "nope"])
    assert code == 2 and err.startswith("kit: error: image: unknown image 'nope' (known images:")


def test_a_fresh_process_answers():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "from kit.cli import main; main()", *FIRST_FAILURE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "mtp-hybrid-no-buffer" in done.stdout


def test_a_model_path_the_image_does_not_hold_is_named_before_sglang_calls_it_a_repo_id(
    tmp_path, monkeypatch
):
    """Set through the catalog (no --set key for it): validate used to pass it and SGLang then
    stopped with 'Repo id must use alphanumeric chars'."""
    from catalog_helpers import copy_catalog

    root = copy_catalog(tmp_path)
    model = root / "models" / "tiny.toml"
    model.write_text(
        model.read_text().replace('path = "/opt/kit/models/tiny"', 'path = "/opt/kit/models/tinyy"')
    )
    monkeypatch.setenv("KIT_CATALOG_DIR", str(root))
    code, out, err = run_cli(["validate", "tiny"])
    assert code != 0 and "model-path-missing" in out + err and "/opt/kit/models/tinyy" in out + err
    assert "Repo id must be in the form" in out + err  # SGLang 0.5.23's own words for it
    report = validate("tiny")
    [found] = [f for f in report.findings if f.id == "model-path-missing"]
    assert found.severity == "error" and "/opt/kit/models/tiny" in found.fix


def test_the_image_folders_validate_knows_are_the_dockerfiles():
    from kit.validate import IMAGE_MODELS

    dockerfile = (paths.project_root() / "Dockerfile").read_text()
    built = set(re.findall(r"(/opt/kit/models/[\w.-]+)", dockerfile))
    assert built == set(IMAGE_MODELS["cpu"]) and set(IMAGE_MODELS["cuda"]) < built
