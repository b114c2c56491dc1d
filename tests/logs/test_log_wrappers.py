"""Pasted logs: the wrapper a collector put on each line is stripped, reported, and changes nothing.

Real pastes from public issues are in tests/fixtures/pasted-logs (each with its URL in the facts
JSON beside it). The other shapes wrap real SGLang logs from tests/fixtures/sglang-logs in the
format each tool documents (the `source` of each wrapper in kit/logs/wrappers.toml): the verdict of
a wrapped log must be the verdict of the same text unwrapped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kit.cli import main
from kit.logs.analyze import analyze_text
from kit.logs.schema import validate
from kit.logs.wrappers import Unwrapper, peel, suffixes, unwrap, wrappers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SGLANG_LOGS = sorted((FIXTURES / "sglang-logs").glob("*.log"))
PASTED = sorted((FIXTURES / "pasted-logs").glob("*.log"))
# SGLang's own `Exception: Capture cuda graph failed` traceback (sgl-project/sglang#4205) and a
# capture crash under milestones (sgl-project/sglang#1751).
CAPTURE_TRACEBACK = FIXTURES / "sglang-logs" / "30_capture-gloo-connection-closed.log"
CAPTURE_MILESTONES = FIXTURES / "sglang-logs" / "08_phi35-mini-tp1-cudagraph-capture-crash-v0.3-EXCERPT.log"


def _judged(text: str) -> tuple:
    report = analyze_text(text)
    return report.outcome, report.phase, report.phase_from, report.last_milestone, report.exception


def _wrap(text: str, prefix) -> str:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return "\n".join(prefix(n) + line for n, line in enumerate(lines)) + "\n"


# Each shape as its tool prints it; n is the line number (Ray's driver tags only worker lines).
SHAPES = {
    "compose-v2": (lambda n: "sglang-1  | ", ["compose"]),
    "compose-v1": (lambda n: "kit_sglang_1  | ", ["compose"]),
    "compose-v2-colour": (lambda n: "\x1b[36msglang-1  |\x1b[0m ", ["ansi", "compose"]),
    "compose-timestamps": (
        lambda n: "sglang-1  | 2026-12-04T21:53:13.123456789Z ",
        ["compose", "timestamps"],
    ),
    "kubectl-prefix": (lambda n: "[pod/sglang-0/server] ", ["kubectl-prefix"]),
    "kubectl-prefix-timestamps": (
        lambda n: "[pod/sglang-0/server] 2026-12-04T21:53:13.5+01:00 ",
        ["kubectl-prefix", "timestamps"],
    ),
    "docker-logs-t": (lambda n: "2026-12-04T21:53:13.123456789Z ", ["timestamps"]),
    "journalctl-short": (lambda n: "Dec 04 21:53:13 gpu-host sglang[4242]: ", ["journalctl-short"]),
    "journalctl-short-precise": (
        lambda n: "Dec  4 21:53:13.123456 gpu-host python3[4242]: ",
        ["journalctl-short"],
    ),
    "journalctl-short-iso": (
        lambda n: "2026-12-04T21:53:13+0000 gpu-host sglang[4242]: ",
        ["journalctl-short-iso"],
    ),
    "journalctl-short-iso-precise": (
        lambda n: "2026-12-04T21:53:13.123456+00:00 gpu-host sglang[4242]: ",
        ["journalctl-short-iso"],
    ),
    "journalctl-cat": (lambda n: "", []),  # -o cat prints the message alone: nothing to strip
    "ray-pid": (lambda n: "(pid=123) " if n % 2 else "", ["ray"]),
    "ray-worker": (lambda n: "(RayWorkerWrapper pid=123, ip=10.0.0.2) ", ["ray"]),
    "ansi": (lambda n: "\x1b[32m", ["ansi"]),
    # A CI console quoted in an issue comment: the Markdown quote, then Jenkins' Pipeline stamp.
    "markdown-quote-jenkins": (
        lambda n: "> [2025-11-06T02:10:00.702Z] ",
        ["markdown-quote", "ci-timestamps"],
    ),
    "cri-file": (lambda n: "2024-01-01T00:00:00.123456789Z stdout F ", ["cri"]),
    "cri-file-stderr-untagged": (lambda n: "2016-10-06T00:17:09.669794202Z stderr ", ["cri"]),
    "github-actions": (
        lambda n: ("\ufeff" if n == 0 else "") + "2025-01-01T00:00:00.0000000Z ",
        ["timestamps"],
    ),
    "short-stamp": (lambda n: "04-20 13:32:25.784 ", ["short-stamp"]),
    "short-stamp-unspaced": (lambda n: "04-20 13:32:25.784", ["short-stamp"]),
    "pm2": (lambda n: "0|sglang  | ", ["pm2"]),
    "ray-actor-repr": (lambda n: "(SGLangEngine(rank=0) pid=482120) ", ["ray"]),
    "ray-actor-colour": (lambda n: "\x1b[36m(WorkerDict pid=29239)\x1b[0m ", ["ansi", "ray"]),
    "srun-label": (lambda n: "0: ", []),  # a record prefix: looked past, not taken off
}


@pytest.mark.parametrize("wrapper", wrappers(), ids=lambda w: w.kind)
def test_each_wrapper_example_is_read_as_that_wrapper(wrapper):
    [(found, matched)] = peel(wrapper.example + "[2026-12-02 13:46:15 TP0] Load weight begin.")
    assert (found.kind, matched) == (wrapper.kind, wrapper.example)


@pytest.mark.parametrize("log", [CAPTURE_TRACEBACK, CAPTURE_MILESTONES], ids=lambda p: p.name[:2])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_a_wrapped_capture_failure_is_crashed_in_capture_and_says_which_wrapper(shape, log):
    prefix, kinds = SHAPES[shape]
    plain = log.read_text(encoding="utf-8")
    report = analyze_text(_wrap(plain, prefix))
    assert (report.outcome, report.phase and report.phase.value) == ("crashed", "capture")
    assert [w.kind for w in report.wrappers] == kinds
    assert _judged(_wrap(plain, prefix)) == _judged(plain)
    validate(report.model_dump(mode="json"), "analyze")


def test_compose_capture_failure_text_report_names_the_wrapper(capsys, tmp_path):
    log = tmp_path / "compose.log"
    log.write_text(_wrap(CAPTURE_TRACEBACK.read_text(encoding="utf-8"), lambda n: "sglang-1  | "))
    with pytest.raises(SystemExit) as exit_info:
        main(["analyze", str(log)])
    out = capsys.readouterr().out
    assert exit_info.value.code == 1
    assert out.startswith("CRASHED in phase capture")
    assert "Docker Compose service prefix" in out and "'sglang-1  | ' stripped from 18 lines" in out
    assert "Exception: Capture cuda graph failed" in out


def test_crlf_line_ends_are_read_like_the_log_itself():
    plain = CAPTURE_TRACEBACK.read_text(encoding="utf-8")
    report = analyze_text(plain.replace("\n", "\r\n"))
    assert [(w.kind, w.count) for w in report.wrappers] == [("crlf", plain.count("\n"))]
    assert _judged(plain.replace("\n", "\r\n")) == _judged(plain)


@pytest.mark.parametrize("log", SGLANG_LOGS, ids=lambda p: p.name[:2])
def test_every_real_log_reads_the_same_under_compose_and_kubectl_prefixes(log):
    plain = log.read_text(encoding="utf-8", errors="replace")
    judged = _judged(plain)
    assert _judged(_wrap(plain, lambda n: "sglang-1  | ")) == judged
    assert _judged(_wrap(plain, lambda n: "[pod/sglang-0/server] 2026-12-04T21:53:13Z ")) == judged


@pytest.mark.parametrize("log", SGLANG_LOGS, ids=lambda p: p.name[:2])
def test_an_unwrapped_real_log_loses_nothing_but_worker_prefixes(log):
    plain = log.read_text(encoding="utf-8", errors="replace")
    unwrapped = unwrap(plain)
    carried = {"ray", "ray-dedup"}  # vLLM/Ray worker logs in the corpus
    if log.name.startswith("52_"):  # a CI console quoted in a comment: '> [2024-09-05T00:38:34Z] '
        carried |= {"markdown-quote", "ci-timestamps"}
    assert {w.kind for w in unwrapped.seen} <= carried
    if not unwrapped.seen:
        assert unwrapped.text is plain or unwrapped.text == plain


@pytest.mark.parametrize("log", PASTED, ids=lambda p: p.name[:2])
def test_real_pastes_from_public_issues(log):
    facts = json.loads(log.with_suffix(".json").read_text(encoding="utf-8"))
    assert facts["source"].startswith("https://github.com/")
    text = log.read_text(encoding="utf-8")
    report = analyze_text(text)
    assert [w.kind for w in report.wrappers] == facts["wrappers"]
    if "outcome" in facts["expected"]:
        assert report.outcome == facts["expected"]["outcome"]
    # The same paste with each line's wrapper cut by hand (everything up to the first `| ` or TAB)
    by_hand = "".join(re.sub(r"^[^|\t]*(?:\|[ ]|\t)", "", line) for line in text.splitlines(keepends=True))
    assert _judged(text) == _judged(by_hand)


def test_text_that_only_looks_like_a_wrapper_on_a_few_lines_is_left_alone():
    text = CAPTURE_TRACEBACK.read_text(encoding="utf-8") + "table  | row\n"
    assert unwrap(text).text == text


def test_a_ci_console_quoted_in_a_comment_is_read_as_the_console():
    # A comment quoting a Jenkins Pipeline console: every line '> [ISO stamp] ', and Markdown's
    # quoted blank line between the lines. SGLang 0.5.4's load_weights raising KeyError is load
    # (the load rule's frame), and the main process' SIGQUIT line ends it.
    body = [
        "Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", line 632, in load_model',
        "    self.load_weights_and_postprocess(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_vl2.py", line 252, in load_weights',
        "    param = params_dict[name]",
        "            ~~~~~~~~~~~^^^^^^",
        "KeyError: 'lm_head.weight'",
        "",
        "[2025-11-06 02:10:00] Received sigquit from a child process. It usually means the child failed.",
    ]
    # The quote's blank lines stay (a line count is kept), and a blank line cuts a traceback: the
    # phase comes from its frames, the exception line is read on its own.
    plain = "".join(f"{line}\n\n" for line in body)
    quoted = "".join(f"> [2025-11-06T02:10:00.702Z] {line}\n> \n" for line in body)
    report = analyze_text(quoted)
    assert (report.outcome, report.phase and report.phase.value) == ("crashed", "load")
    assert [w.kind for w in report.wrappers] == ["markdown-quote", "ci-timestamps"]
    assert _judged(quoted) == _judged(plain)


@pytest.mark.parametrize("stamp", ["04-20 13:32:25.784", "04-20 13:32:25.784 "], ids=["unspaced", "spaced"])
def test_a_stamped_traceback_cut_inside_its_frames_is_still_a_crash(stamp):
    # A collector's 'MM-DD HH:MM:SS.mmm' stamp on each line of a traceback pasted without its opener
    # or exception: its frames are read as frames (indented), so the paste is a crash, not a hang.
    plain = CAPTURE_TRACEBACK.read_text(encoding="utf-8").split("\n")
    frames = plain[plain.index("Traceback (most recent call last):") + 1 : -1]
    cut = [line for line in frames if not line.startswith("Exception")][:-2]
    stamped = "".join(f"{stamp}{line}\n" for line in cut)
    report = analyze_text(stamped)
    assert report.outcome == "crashed"
    assert [w.kind for w in report.wrappers] == ["short-stamp"]
    assert _judged(stamped) == _judged("\n".join(cut) + "\n")
    if not stamp.endswith(" "):  # no space after the stamp: each frame keeps its own indentation
        assert unwrap(stamped).text == "\n".join(cut) + "\n"


def test_a_github_actions_log_loses_its_byte_order_mark_with_the_first_stamp():
    plain = CAPTURE_TRACEBACK.read_text(encoding="utf-8")
    log = _wrap(plain, lambda n: ("\ufeff" if n == 0 else "") + "2025-01-01T00:00:00.0000000Z ")
    assert unwrap(log).text == plain


@pytest.mark.parametrize("suffix", suffixes(), ids=lambda w: w.kind)
def test_each_suffix_example_is_found_at_a_lines_end(suffix):
    line = "(RayWorkerWrapper pid=5356) [2026-12-02 13:46:15 TP0] Load weight begin." + suffix.example
    assert suffix.hint in suffix.example
    assert suffix.regex.search(line).group() == suffix.example


def test_rays_deduplication_note_comes_off_the_lines_it_ends():
    # Ray prints a line several workers printed once, with ' [repeated Nx across cluster]' (the first
    # time with its explanation): off, the log reads as the workers printed it, line by line or whole.
    dedup = suffixes()[0].example
    plain = CAPTURE_TRACEBACK.read_text(encoding="utf-8")
    lines = plain.rstrip("\n").split("\n")
    ends = [
        dedup if n == 3 else " [repeated 2x across cluster]" if n % 3 == 0 and line.strip() else ""
        for n, line in enumerate(lines)
    ]
    wrapped = "".join(f"(WorkerDict pid=29239) {line}{end}\n" for line, end in zip(lines, ends, strict=True))
    report = analyze_text(wrapped)
    assert [(w.kind, w.count) for w in report.wrappers] == [
        ("ray", len(lines)),
        ("ray-dedup", sum(map(bool, ends))),
    ]
    assert _judged(wrapped) == _judged(plain)
    reader = Unwrapper()
    assert "\n".join(reader.line(piece) for piece in wrapped.split("\n")) == unwrap(wrapped).text == plain
