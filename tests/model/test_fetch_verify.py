"""kit model fetch / verify against a local fake of the hub (no network): resume, bad input, and
verify naming a missing shard, a truncated shard and a corrupt header."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from catalog_helpers import run_cli
from fake_hub import COMMIT, REPO, model_files

from kit.errors import ExitCode, InputError
from kit.launch import resolve
from kit.model import cache, fetch, require_model, verify
from kit.model.fetch import Interrupted
from kit.model.hub import ConnectionLost

SHARD2 = "model-00002-of-00003.safetensors"


def snapshot(hf_home):
    return cache.snapshot_dir(hf_home, REPO, COMMIT)


def test_fetch_takes_only_what_a_launch_needs_into_the_hf_cache_layout(env):
    result = fetch("fake")
    assert result.revision == COMMIT and result.files == 7 and result.bytes_fetched == result.bytes_total
    folder = snapshot(env)
    names = sorted(p.name for p in folder.iterdir())
    assert "README.md" not in names and "original" not in names
    assert all((folder / n).is_symlink() for n in names)  # -> ../../blobs/<etag>, like the hub's own
    for name in names:
        assert (folder / name).read_bytes() == model_files()[name]
    assert not list((cache.repo_dir(env, REPO) / "blobs").glob("*.incomplete"))
    assert verify("fake").ok
    again = fetch("fake")  # everything is there: nothing crosses the network
    assert again.bytes_fetched == 0 and again.bytes_kept == again.bytes_total


def test_an_interrupted_download_resumes_where_it_stopped(env, hub):
    hub.drop_after[SHARD2] = 250_000
    with pytest.raises(ConnectionLost) as info:
        fetch("fake", retries=0)
    assert info.value.exit_code == ExitCode.ENVIRONMENT
    line = info.value.one_line()
    assert SHARD2 in line and "250000 of" in line and "resume" in line and "\n" not in line
    [partial] = (cache.repo_dir(env, REPO) / "blobs").glob("*.incomplete")
    assert partial.stat().st_size == 250_000
    with pytest.raises(InputError):
        require_model(resolve("fake"))
    hub.requests.clear()
    result = fetch("fake")
    ranges = [r for method, path, r in hub.requests if method == "GET" and path.endswith(SHARD2)]
    assert ranges == ["bytes=250000-"]  # picked up where it stopped, not from zero
    assert result.bytes_kept >= 250_000
    assert (snapshot(env) / SHARD2).read_bytes() == model_files()[SHARD2]
    require_model(resolve("fake"))
    assert verify("fake").ok


def test_ctrl_c_mid_file_keeps_the_bytes_and_says_how_to_resume(env):
    seen = []

    def stop_after_some(progress):
        seen.append(progress)
        if progress.file == SHARD2 and progress.file_done:
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as info:
        fetch("fake", on_progress=stop_after_some)
    assert (
        info.value.exit_code == ExitCode.INTERRUPTED and "run the same command again" in info.value.one_line()
    )
    assert fetch("fake").bytes_kept > 0
    assert verify("fake").ok


def test_a_wrong_revision_is_one_line_exit_2(env):
    code, out, err = run_cli(["model", "fetch", "fake", "--revision", "f" * 40])
    last = err.strip().splitlines()[-1]
    assert code == 2 and not out and last.startswith("kit: error: --revision:")
    assert "f" * 40 in last and REPO in last


def test_no_network_is_one_line_exit_3(env, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    code, _, err = run_cli(["model", "fetch", "fake"])
    assert code == 3 and "cannot reach http://127.0.0.1:9" in err
    assert err.strip().splitlines()[-1].startswith("kit: error:")


def test_no_space_left_is_one_line_exit_3_and_writes_nothing(env, monkeypatch):
    import importlib
    import shutil

    fetch_module = importlib.import_module("kit.model.fetch")  # the package's `fetch` is the function
    full = shutil.disk_usage("/")._replace(free=1000)
    monkeypatch.setattr(fetch_module.shutil, "disk_usage", lambda path: full)
    code, _, err = run_cli(["model", "fetch", "fake"])
    last = err.strip().splitlines()[-1]
    assert code == 3 and last.startswith("kit: error: not enough space: 1.8 MB still to fetch, 0.0 MB free")
    assert not snapshot(env).exists()


def test_verify_names_a_missing_shard_a_truncated_shard_and_a_corrupt_header(env):
    fetch("fake")
    folder = snapshot(env)
    (folder / "model-00001-of-00003.safetensors").unlink()  # missing
    blob2 = (folder / SHARD2).resolve()
    blob2.write_bytes(blob2.read_bytes()[:-1000])  # truncated
    blob3 = (folder / "model-00003-of-00003.safetensors").resolve()
    data = bytearray(blob3.read_bytes())
    data[8:20] = b"\xff" * 12  # the JSON header no longer parses; same size
    blob3.write_bytes(bytes(data))
    code, out, _ = run_cli(["model", "verify", "fake"])
    assert code == 1
    assert "model-00001-of-00003.safetensors missing" in out
    assert f"{SHARD2} truncated" in out
    assert "model-00003-of-00003.safetensors corrupt header" in out
    assert "fix: kit model fetch fake" in out
    code, out, _ = run_cli(["model", "verify", "fake", "--json"])
    report = json.loads(out)
    assert code == 1 and {r["name"]: r["status"] for r in report["files"] if r["status"] != "ok"} == {
        "model-00001-of-00003.safetensors": "missing",
        SHARD2: "truncated",
        "model-00003-of-00003.safetensors": "corrupt header",
    }


def test_verify_uses_the_saved_listing_offline_and_headers_without_one(env, monkeypatch):
    fetch("fake")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    report = verify("fake")
    assert report.ok and "saved by kit model fetch" in report.sizes_from
    cache.listing_path(REPO, COMMIT).unlink()
    report = verify("fake")
    assert report.ok and "headers only" in report.sizes_from
    blob = (snapshot(env) / SHARD2).resolve()
    blob.write_bytes(blob.read_bytes()[:-10])
    assert [r.status for r in verify("fake", online=False).problems] == ["truncated"]


def test_kit_up_without_the_model_exits_2_before_any_container_with_the_fetch_command(env):
    # Before any container and any engine call (its speed: benchmarks/missing_model_bench.py).
    code, out, err = run_cli(["up", "fake"])
    assert code == 2 and not out and "run 'kit model fetch fake'" in err and REPO in err
    code, _, err = run_cli(["smoke", "fake"])
    assert code == 2 and "kit model fetch fake" in err


def test_kit_up_qwen_base_without_the_model_exits_2_in_a_fresh_process(tmp_path):
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "KIT_CACHE_DIR": str(tmp_path / "c")}
    argv = [sys.executable, "-m", "kit", "up", "qwen-base"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert done.returncode == 2, done.stderr
    assert "kit model fetch qwen-base" in done.stderr and done.stderr.count("\n") == 1


def test_require_model_passes_a_model_inside_the_image():
    require_model(resolve("tiny"))  # generated in the image at build time; verified there (docker test)


@pytest.mark.docker
def test_the_plugin_skips_a_target_whose_model_is_missing_without_starting_it(built_image, env, pytester):
    from kit.launch import resolve as resolve_target

    built_image(resolve_target("fake").image_ref, resolve_target("fake").image)
    pytester.makepyfile(
        """
        def test_uses_the_server(kit_server):
            raise AssertionError("a container was started")
        """
    )
    result = pytester.runpytest_subprocess(
        "--kit-target", "fake", "-p", "no:cacheprovider", "-rs", timeout=120
    )
    result.assert_outcomes(skipped=1)
    assert "run 'kit model fetch fake'" in result.stdout.str()
