"""One word for a start-up that stopped before ready: HUNG, in `kit analyze`, in a bundle of the same
log, and in bundles colleagues made when the kit still wrote "stalled"; and what `kit bundle create`
exits for a bundle of a hung run (0: the bundle is written; the run's own code stays in result.json)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bundle_helpers import FIXTURES, run_kit

from kit.diagnose.bundle import read_bundle, write_bundle
from kit.diagnose.repro import compare
from kit.errors import ExitCode

HANG_LOG = FIXTURES / "sglang-logs" / "19_dsr1-pd-decode-2node-tp16-hang-init-nccl-v0.5.8.post1.log"
IMAGE = "sglang-0.5.10.post1-cu129-sm120"


def _create(out: Path) -> dict:
    proc = run_kit(
        "bundle", "create", "--from-log", str(HANG_LOG), "--target", "qwen-base", "--image", IMAGE,
        "-o", str(out), "--json",
    )  # fmt: skip
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr  # written: 0, whatever the verdict
    return json.loads(proc.stdout)


def test_analyze_and_a_bundle_of_the_same_log_say_hung_with_exit_4(tmp_path):
    analysed = run_kit("analyze", str(HANG_LOG), "--json")
    assert analysed.returncode == ExitCode.HUNG
    report = json.loads(analysed.stdout)

    made = _create(tmp_path / "hang.tar.gz")
    assert made["verdict"] == report["outcome"] == "hung"
    assert made["run_exit_code"] == report["exit_code"] == ExitCode.HUNG
    assert made["headline"].startswith("HUNG in init: the log ends before ready")

    bundle = read_bundle(tmp_path / "hang.tar.gz")
    assert (bundle.result["verdict"], bundle.result["exit_code"]) == ("hung", ExitCode.HUNG)
    assert bundle.meta["verdict"] == "hung"
    assert bundle.summary.startswith("# HUNG in init")
    assert "STALLED" not in bundle.summary and "stalled" not in bundle.text("result.json").lower()

    again = run_kit("analyze", str(tmp_path / "hang.tar.gz"), "--json")  # the bundle's log: same verdict
    assert again.returncode == ExitCode.HUNG
    assert json.loads(again.stdout)["phase"] == report["phase"] == "init"


def _as_an_old_kit_wrote_it(path: Path, old: Path) -> None:
    """The same bundle in the words of a kit before issue 20: "stalled" in result.json and bundle.json,
    "# STALLED" in summary.md, the checksums in bundle.json made again."""
    bundle = read_bundle(path)
    members = dict(bundle.members)
    result = json.loads(members["result.json"])
    result["verdict"] = "stalled"
    result["analysed"] = "offline, from the log: no activity samples, so a quiet log is STALLED, not HUNG"
    members["result.json"] = (json.dumps(result, indent=2) + "\n").encode()
    summary = members["summary.md"].decode()
    assert summary.startswith("# HUNG in init: the log ends before ready")
    members["summary.md"] = summary.replace("# HUNG", "# STALLED", 1).encode()
    meta = json.loads(members.pop("bundle.json"))
    meta["verdict"] = "stalled"
    meta["members"] = {
        rel: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        for rel, data in sorted(members.items())
    }
    members["bundle.json"] = (json.dumps(meta, indent=2) + "\n").encode()
    write_bundle(old, bundle.name, members)


def test_an_old_bundle_that_says_stalled_is_read_as_hung(tmp_path):
    _create(tmp_path / "new.tar.gz")
    old = tmp_path / "old.tar.gz"
    _as_an_old_kit_wrote_it(tmp_path / "new.tar.gz", old)
    assert b'"stalled"' in read_bundle(old).members["result.json"]  # the file as it was written

    bundle = read_bundle(old)
    assert bundle.result["verdict"] == "hung" and bundle.meta["verdict"] == "hung"
    assert "STALLED" not in bundle.result["analysed"]

    shown = run_kit("bundle", "show", str(old))
    assert shown.returncode == ExitCode.OK, shown.stderr
    assert shown.stdout.startswith("# HUNG in init")
    assert "disagrees" not in shown.stdout  # the old word is not taken for a hand edit
    view = json.loads(run_kit("bundle", "show", str(old), "--json").stdout)
    assert view["verdict"] == "hung" and not any("summary.md" in line for line in view["trust"])

    same, rows = compare(
        bundle.result, {"verdict": "hung", "phase": "init", "stuck_ranks": bundle.result["stuck_ranks"]}
    )
    assert rows[0].bundle == "HUNG" and rows[0].same and same
