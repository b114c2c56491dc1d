"""kit bundle create/show/diff and kit analyze on bundles, through the real CLI, without Docker:
bundles made from real SGLang logs (--from-log) and from a replayed GPU hang (kit up's own code)."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from bundle_helpers import FIXTURES, run_kit

from kit.diagnose.bundle import read_bundle
from kit.diagnose.record import bundle_from_run
from kit.scenarios import run_scenario

TINY_LOG = FIXTURES / "kit-logs" / "sglang-0.5.23-cpu-tiny-tp2-ready.log"
HANG_LOG = FIXTURES / "sglang-logs" / "19_dsr1-pd-decode-2node-tp16-hang-init-nccl-v0.5.8.post1.log"


def kit(*args: str) -> subprocess.CompletedProcess:
    return run_kit(*args)


def kit_json(*args: str, exit_code: int = 0) -> dict:
    proc = kit(*args, "--json")
    assert proc.returncode == exit_code, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def from_log(log: Path, target: str, image: str, out: Path) -> Path:
    made = kit_json(
        "bundle", "create", "--from-log", str(log), "--target", target, "--image", image, "-o", str(out)
    )
    assert made["bundle"] == str(out)
    return out


def test_a_pasted_log_makes_a_bundle_with_what_it_cannot_know_marked_unknown(tmp_path):
    path = from_log(HANG_LOG, "qwen-base", "sglang-0.5.10.post1-cu129-sm120", tmp_path / "hang.tar.gz")
    bundle = read_bundle(path)
    finger = bundle.fingerprint
    assert bundle.result["verdict"] == "hung" and bundle.result["phase"] == "init"
    assert finger["versions"]["sglang"] == "0.5.10.post1"  # the manifest's pin, and it says so
    assert "pins (the image that ran was not inspected)" in finger["versions"]["from"]
    assert finger["versions"]["nccl"] == "2.29.3 (from the log)"  # 'sglang is using nccl==2.29.3'
    for field in (finger["image"]["id"], finger["host"]["kernel"], finger["nvidia"]["driver"]):
        assert set(field) == {"unknown"} and "pasted log" in field["unknown"]
    assert set(finger["launch"]["argv"]) == {"unknown"}
    assert finger["launch"]["catalog_argv"][:3] == ["python", "-m", "sglang.launch_server"]
    assert "HUNG in init: the log ends before ready" in bundle.summary


def test_bundle_show_prints_summary_timeline_causes_and_the_picture(tmp_path, kit_cache):
    path = from_log(HANG_LOG, "qwen-base", "sglang-0.5.10.post1-cu129-sm120", tmp_path / "hang.tar.gz")
    proc = kit("bundle", "show", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# HUNG in init")
    assert "## Likely causes" in proc.stdout and "## Timeline" in proc.stdout
    picture = Path(proc.stdout.rsplit("picture: ", 1)[1].strip())
    assert picture.is_relative_to(kit_cache) and picture.read_text().startswith("<svg")
    view = kit_json("bundle", "show", str(path))
    assert (view["verdict"], view["phase"]) == ("hung", "init")
    assert view["timeline"] and view["likely_causes"]
    assert view["picture"] == str(picture)


def test_bundle_diff_of_two_images_lists_their_version_differences_first(tmp_path):
    old = from_log(HANG_LOG, "qwen-base", "sglang-0.5.10.post1-cu129-sm120", tmp_path / "old.tar.gz")
    new = from_log(TINY_LOG, "tiny", "sglang-0.5.23-cpu", tmp_path / "new.tar.gz")
    report = kit_json("bundle", "diff", str(old), str(new))
    keys = [d["key"] for d in report["differences"]]
    groups = [d["group"] for d in report["differences"]]
    assert keys[:4] == ["versions.sglang", "versions.nccl", "versions.torch", "versions.cuda"]
    first_other = groups.index(next(g for g in groups if g != "versions"))
    assert set(groups[:first_other]) == {"versions"}
    assert report["differences"][0]["a"] == "0.5.10.post1" and report["differences"][0]["b"] == "0.5.23"
    assert report["equal"] > 0
    human = kit("bundle", "diff", str(old), str(new))
    lines = human.stdout.splitlines()
    assert lines[3] == "likely suspects:"
    assert lines[4] == "  [versions] versions.sglang: 0.5.10.post1 (A) -> 0.5.23 (B)"


def test_kit_analyze_reads_a_bundles_log(tmp_path):
    path = from_log(HANG_LOG, "qwen-base", "sglang-0.5.10.post1-cu129-sm120", tmp_path / "hang.tar.gz")
    # kit analyze exits by outcome as kit up does: 4 for a log that ends hung in init.
    of_bundle = kit_json("analyze", str(path), exit_code=4)
    of_log = kit_json("analyze", str(HANG_LOG), exit_code=4)
    assert of_bundle["source"] == str(path)
    for key in ("outcome", "phase", "last_milestone", "lines", "stuck", "missing"):
        assert of_bundle[key] == of_log[key], key


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "give exactly one of RUN, CONTAINER, --last, --from-log FILE, --pid N or --unit NAME"),
        (["x", "--last"], "give exactly one of"),
        (["--from-log", str(TINY_LOG)], "--target: --from-log needs the catalog target"),
        (["--from-log", "/no/such.log", "--target", "tiny"], "--from-log: cannot read /no/such.log"),
        (["--from-log", str(TINY_LOG), "--target", "nope"], "target: unknown target 'nope'"),
        (["--last"], "--last: no runs recorded in"),
    ],
)
def test_bad_create_input_is_one_line_exit_2_and_writes_nothing(args, says, kit_cache):
    before = sorted(kit_cache.rglob("*"))
    proc = kit("bundle", "create", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and says in proc.stderr
    assert sorted(kit_cache.rglob("*")) == before


def test_a_replayed_gpu_hang_is_bundled_by_kit_ups_own_code_with_its_gpus(kit_cache):
    run = run_scenario("init-hang-tp4")
    assert run.ok, run.expectations
    result = run.result
    assert result.bundle and Path(result.bundle).is_relative_to(kit_cache / "bundles")
    bundle = read_bundle(result.bundle)
    nvidia = bundle.fingerprint["nvidia"]
    assert nvidia["gpu_count"] == 4
    assert nvidia["gpu_models"] == ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"]
    assert nvidia["topology"]["0"]["1"] == "PHB"
    assert nvidia["p2p"]["0"]["1"] == "OK"
    assert bundle.fingerprint["launch"]["target"] == "qwen-base"
    assert bundle.result["verdict"] == "hung" and bundle.result["stuck_ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    # A quiet init (~0 CPU) puts the rendezvous, a missing rank and NCCL's bootstrap first (issue 17).
    assert bundle.result["likely_causes"][0]["id"] in ("rendezvous-timeout", "rank-missing", "nccl-bootstrap")
    # The runs folder next to it holds the same record, and `kit bundle create RUN` remakes the bundle.
    folder = Path(result.diagnostics)
    assert {p.name for p in folder.iterdir()} >= {
        "server.log",
        "result.json",
        "fingerprint.json",
        "startup.svg",
    }
    again = read_bundle(bundle_from_run(folder, kit_cache / "again.tar.gz"))
    assert again.fingerprint == bundle.fingerprint and again.result == bundle.result


def test_a_run_folder_without_a_fingerprint_gets_the_builders_one_saying_why(kit_cache, tmp_path):
    # A runs folder from a kit that wrote no fingerprint.json: fingerprint.build with nothing to read
    # (the shape of a fingerprint whose source is gone), not a dict of unknowns made by hand.
    folder = Path(run_scenario("stalled-load").result.diagnostics)
    (folder / "fingerprint.json").unlink()
    bundle = read_bundle(bundle_from_run(folder, tmp_path / "old.tar.gz"))
    assert set(bundle.fingerprint) == {"format", "made", "error"}
    assert bundle.fingerprint["made"]["by"] == "kit bundle create RUN"
    assert bundle.fingerprint["error"] == {
        "unknown": "the run was recorded by a kit that wrote no fingerprint"
    }


def test_bundle_create_last_takes_the_newest_run(kit_cache, tmp_path):
    run_scenario("stalled-load")
    newest = run_scenario("init-hang-tp4").result
    made = kit_json("bundle", "create", "--last", "-o", str(tmp_path / "last.tar.gz"))
    assert read_bundle(made["bundle"]).result["container"] == newest.container
    with tarfile.open(made["bundle"]) as tar:
        assert any(name.endswith("/startup.svg") for name in tar.getnames())


def test_bundle_create_last_says_which_run_and_never_passes_an_older_one_off_as_the_newest_start(
    kit_cache, tmp_path
):
    hung = run_scenario("init-hang-tp4").result
    made = kit_json("bundle", "create", "--last", "-o", str(tmp_path / "last.tar.gz"))
    run = Path(hung.diagnostics).name
    assert made["run"].startswith(f"run {run} (qwen-base, HUNG), recorded 20"), made["run"]
    assert run_scenario("harmless-traceback-load").result.verdict == "ready"  # a start that records no run
    done = kit("bundle", "create", "--last", "-o", str(tmp_path / "older.tar.gz"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "the newest start, replay-harmless-traceback-load" in done.stderr
    assert f"kit bundle create {run}" in done.stderr and not (tmp_path / "older.tar.gz").exists()
    named = kit_json("bundle", "create", run, "-o", str(tmp_path / "named.tar.gz"))  # named: taken
    assert read_bundle(named["bundle"]).result["container"] == hung.container


@pytest.mark.docker
def test_repro_plan_prints_the_plan_and_starts_nothing(hung_bundle):
    """`kit repro --plan`: the plan (the engine is asked which images it has), then exit; no container."""
    import docker

    client = docker.from_env()
    before = {c.id for c in client.containers.list(all=True)}
    done = run_kit("repro", str(hung_bundle), "--plan")
    assert done.returncode in (0, 2, 3), done.stderr  # 2: the trust policy refuses; 3: image not built
    if done.returncode == 0:
        assert "sglang.launch_server" in done.stdout
    assert "READY" not in done.stdout and "reproduced" not in done.stdout
    assert {c.id for c in client.containers.list(all=True)} == before
