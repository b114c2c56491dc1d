"""summary.txt from the steps' recorded lines (kit/hostcheck/report.py): each step's worst line leads,
the commit that ran is named, and what the bash runner wrote into WORK is read back in order."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kit.hostcheck.record import Status
from kit.hostcheck.report import commit_of, read_steps, summarise

ROOT = Path(__file__).resolve().parents[2]


def test_the_summary_leads_with_each_steps_worst_line():
    text = summarise(
        [
            ("nvml", [("ok", "1 GPU"), ("finding", "memory differs"), ("finding", "second")], "3 s"),
            ("doctor", [("ok", "exit 1 as expected")], ""),
            ("watch-hang", [], "TIMED OUT"),
        ]
    )
    head = text.splitlines()
    assert head[0] == "gpu-host-check: 3 steps: 1 ok, 1 finding, 1 error"
    assert head[2].split()[:3] == ["nvml", "finding", "memory"]
    assert head[4].startswith("watch-hang") and "no result recorded" in head[4] and "[TIMED OUT]" in head[4]
    assert "all lines:" in head and "nvml         finding  second" in head


def test_the_summary_names_the_commit_the_run_used(tmp_path):
    text = summarise([("env", [("ok", "1 GPU")], "1 s")], commit="0" * 40)
    assert text.splitlines()[:2] == [
        "gpu-host-check: 1 steps: 1 ok, 0 finding, 0 error",
        f"commit: {'0' * 40}",
    ]
    # Given (a device machine's copy has no .git), else git's own answer, else it says it does not know.
    assert commit_of(tmp_path, "abc123") == "abc123 (KIT_CHECK_COMMIT)"
    assert commit_of(tmp_path, None).startswith("unknown: not a git checkout")
    head = commit_of(ROOT, None)
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert head.split()[0] == git.stdout.strip()


def test_what_the_steps_and_the_runner_wrote_is_read_back_in_the_order_asked(tmp_path):
    """Status lines as a step writes them, the timing lines as scripts/gpu-host-check writes them."""
    Status(tmp_path, "env").ok("nvidia-smi:   1 GPU\n(two lines)")
    Status(tmp_path, "env").finding("no torch")
    Status(tmp_path, "wheels").error("no wheels")
    (tmp_path / "status" / "env").open("a").write("garbage line without a status\n")
    (tmp_path / "timing").write_text("wheels\t0 s\nenv\t3 s, TIMED OUT\n")

    steps = read_steps(tmp_path, ["env", "wheels", "ties"])

    assert steps == [
        ("env", [("ok", "nvidia-smi: 1 GPU (two lines)"), ("finding", "no torch")], "3 s, TIMED OUT"),
        ("wheels", [("error", "no wheels")], "0 s"),
        ("ties", [], ""),
    ]
    head = summarise(steps).splitlines()
    assert head[0] == "gpu-host-check: 3 steps: 0 ok, 1 finding, 2 error"
    assert head[4].startswith("ties         error    no result recorded")
