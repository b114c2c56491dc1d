"""A host environment's facts, pure: site-packages from /proc/PID/maps, the interpreter's version,
METADATA headers, SGLang's flags in an argv, the variables a replay keeps; and the nearest kit image
to a set of versions (over the kit's real manifests)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kit.diagnose.hostenv import (
    launch_env,
    launch_facts,
    parse_metadata,
    python_version,
    site_dirs_from_maps,
)
from kit.diagnose.nearest import compare, manifest_versions, nearest_image, replay_argv, similarity
from kit.images.manifest import load_all

MAPS = """\
7f1a-7f2a r-xp 00000000 08:01 1 /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so
7f1b-7f2b r-xp 00000000 08:01 2 /usr/lib/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so
7f1c-7f2c r-xp 00000000 08:01 3 /usr/lib/python3/dist-packages/yaml/_yaml.so
7f1d-7f2d rw-p 00000000 00:00 0
7f1e-7f2e r-xp 00000000 08:01 4 /opt/venv/lib/python3.11/site-packages/numpy/core/x.so
"""


def test_site_packages_and_the_python_version_from_the_maps():
    assert site_dirs_from_maps(MAPS) == [
        "/opt/venv/lib/python3.11/site-packages",
        "/usr/lib/python3/dist-packages",
    ]
    assert python_version("/usr/bin/python3.11", MAPS) == "3.11"
    assert python_version(None, "", "home = /usr/bin\nversion = 3.12.3\n") == "3.12.3"
    assert python_version("/usr/bin/python3.12", "") == "3.12"
    assert python_version(None, "") is None


@given(st.text(max_size=400))
def test_any_maps_text_gives_folders_ending_in_site_or_dist_packages(text):
    assert all(d.endswith(("site-packages", "dist-packages")) for d in site_dirs_from_maps(text))


def test_metadata_headers_stop_at_the_body():
    text = "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n\nName: not-this\n"
    assert parse_metadata(text) == ("sglang", "0.5.23")
    assert parse_metadata("Name: x\n") is None


def test_sglang_flags_in_an_argv():
    argv = [
        "/srv/venv/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3.5",
        "--tp-size=4",
    ]
    facts = launch_facts([*argv, "--port=31000", "--host", "0.0.0.0", "--api-key", "sk-abcdef"])
    assert facts.launcher and facts.device == "cuda" and facts.port == 31000
    assert facts.base_url == "http://127.0.0.1:31000" and facts.model == "Qwen/Qwen3.5"
    assert facts.api_key == "sk-abcdef"
    assert not launch_facts(["python", "train.py"]).launcher


def test_a_replay_keeps_the_variables_that_decide_a_start_up():
    env = {"PATH": "/usr/bin", "HOME": "/home/u", "NCCL_P2P_DISABLE": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
    env |= {
        "CUDA_HOME": "/usr/local/cuda",
        "SGLANG_ENABLE_SPEC_V2": "1",
        "HF_TOKEN": "hf_x",
        "MASTER_PORT": "1",
    }
    env |= {"TRITON_CACHE_DIR": "/home/u/.triton", "LD_PRELOAD": "/lib/x.so"}  # host paths: not replayed
    assert launch_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_TOKEN": "hf_x",  # by name: masked in the fingerprint, read from the replay's environment
        "MASTER_PORT": "1",
        "NCCL_P2P_DISABLE": "1",
        "SGLANG_ENABLE_SPEC_V2": "1",
    }


def test_the_launcher_is_replaced_by_the_images_own():
    argv = ["/srv/venv/bin/python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "2"]
    assert replay_argv(argv, ["python", "-m", "sglang.launch_server"]) == [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "m",
        "--tp",
        "2",
    ]
    assert replay_argv(["python", "serve.py", "--x"], ["python"]) is None


# -- the nearest image, over the kit's own manifests ---------------------------------------------


def _versions(**changes):
    """A host environment like the CPU rehearsal's, with CHANGES."""
    base = {
        "sglang": "0.5.23",
        "torch": "2.13.0+cpu",
        "nccl": "not installed",
        "cuda": "none (torch 2.13.0+cpu is a CPU build)",
        "flashinfer": "not installed",
        "sglang_kernel": "not installed",
        "python": "python3.11",
    }
    return {**base, **changes}


@pytest.fixture(scope="module")
def manifests():
    return load_all()


def test_the_rehearsals_own_environment_picks_the_cpu_image_with_no_difference(manifests):
    choice = nearest_image(manifests, _versions())
    assert choice.manifest == "sglang-0.5.23-cpu" and choice.differences == () and choice.score == choice.best


def test_a_cuda_environment_is_not_matched_with_the_cpu_image_on_sglang_alone(manifests):
    cuda = manifest_versions(next(m for m in manifests if m.name == "sglang-0.5.23-cu130-sm120"))
    host = {**cuda, "python": "python3.11", "nccl": "2.29.7"}
    choice = nearest_image(manifests, host)
    assert choice.manifest == "sglang-0.5.23-cu130-sm120"
    assert {d.name: (d.host, d.image) for d in choice.differences} == {
        "nccl": ("2.29.7", "2.30.7"),
        "python": ("python3.11", "python3.12"),
    }


def test_an_older_sglang_picks_the_nearest_release(manifests):
    old = manifest_versions(next(m for m in manifests if m.name == "sglang-0.5.10.post1-cu129-sm120"))
    choice = nearest_image(manifests, {**old, "sglang": "0.5.11", "torch": "2.9.1+cu129"})
    assert choice.manifest == "sglang-0.5.10.post1-cu129-sm120"
    assert "sglang" in {d.name for d in choice.differences}


@settings(deadline=None)  # the first example reads every manifest: seconds on a loaded machine
@given(st.dictionaries(st.sampled_from(["sglang", "torch", "cuda", "nccl", "python"]), st.text(max_size=12)))
def test_any_versions_get_a_manifest_and_its_differences(versions):
    manifests = load_all()
    choice = nearest_image(manifests, versions)
    assert choice.manifest in {m.name for m in manifests}
    assert 0 <= choice.score <= choice.best
    same, different = compare(
        versions, manifest_versions(next(m for m in manifests if m.name == choice.manifest))
    )
    assert len(same) + len(different) == 7


def test_similarity_orders_releases_by_their_leading_parts():
    assert similarity("0.5.23", "0.5.23") == (1.0, 0.0)
    assert similarity("2.14.1", "2.14.1+cu130")[0] == 0.75
    near, far = similarity("0.5.22", "0.5.23"), similarity("0.5.22", "0.5.10")
    assert near[0] == far[0] and near[1] < far[1]
    assert similarity("0.6.0", "0.5.23")[0] < near[0]
