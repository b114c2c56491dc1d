"""The bundle: one .tar.gz that captures a start-up, and the reader that trusts nothing in it.

Layout (every member under one folder, so `tar xzf` makes one directory):

    NAME/bundle.json        kind, format, kit version, how it was made, each member's sha256
    NAME/summary.md         what happened, in a page
    NAME/fingerprint.json   image, versions, host, GPUs, launch (kit/diagnose/fingerprint.py)
    NAME/result.json        verdict, phase, ranks, timeline, stacks' verdicts, likely causes
    NAME/startup.svg        ranks by phase over time
    NAME/log/server.log     the whole log, or its head and tail when over LOG_KEEP_BYTES
    NAME/log/tails/R.txt    the last lines of each rank (continuation lines go with their record)
    NAME/stacks/R.txt       py-spy dumps of each scheduler at the verdict
    NAME/stacks/R.sampleN.txt   the stack samples a HUNG rests on (the last two taken while quiet)
    NAME/lock.txt           the image's lock, when it was read
    NAME/upstream/FILE      the upstream tools' raw answers: NCCL RAS snapshots (ras-1.json, ras-2.json
                            or .txt), the flight recorder's fr_trace report (fr_trace.txt)

Everything passes through a `Redactor` before it is written (kit/diagnose/redact.py). Building the
members is pure; `write_bundle` writes a temporary file and renames it, so a failure leaves nothing.
`read_bundle` checks the gzip stream, every member's name, type, size and checksum, the format
version, and the JSON members; anything wrong is one InputError (exit 2) naming what.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import zlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import kit
from kit.diagnose.fingerprint import known, show_value
from kit.diagnose.picture import svg_of_result
from kit.diagnose.redact import Redactor
from kit.errors import InputError

KIND = "kit-bundle"
FORMAT = 1
SUFFIX = ".tar.gz"
LOG_KEEP_BYTES = 4_000_000
LOG_HEAD_BYTES = 500_000
TAIL_LINES = 40
MAX_MEMBER_BYTES = 64 << 20
MAX_TOTAL_BYTES = 256 << 20
MAX_MEMBERS = 512

REQUIRED = ("bundle.json", "summary.md", "fingerprint.json", "result.json", "log/server.log")
_OPTIONAL = ("startup.svg", "lock.txt")
_PER_RANK = re.compile(r"(?:stacks|log/tails)/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\.txt")
_UPSTREAM = re.compile(r"upstream/[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # safe_stem's names
_FOLDERS = {"log", "stacks", "log/tails", "upstream"}
_STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_FIX_DAMAGED = "copy the whole file again, or make it again with 'kit bundle create'"
_FIX_FOREIGN = "give a .tar.gz made by 'kit bundle create'"


def safe_stem(text: str) -> str:
    """A member-folder and file name from free text: letters, digits, '.', '_' and '-' only."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "bundle"
    return stem[:128]


def rank_file(rank: str) -> str:
    return safe_stem(rank.replace(" ", "_"))[:60] + ".txt"


# -- the log -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogKept:
    text: str
    lines: int
    bytes: int
    whole: bool
    left_out_lines: int = 0
    left_out_bytes: int = 0


def keep_log(text: str, keep_bytes: int = LOG_KEEP_BYTES, head_bytes: int = LOG_HEAD_BYTES) -> LogKept:
    """The whole log, or its head and tail (cut at line ends) with a line saying what was left out."""
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    size = len(text.encode("utf-8", "replace"))
    if size <= keep_bytes:
        return LogKept(text, lines, size, True)
    # Character offsets stand in for bytes: SGLang logs are ASCII apart from the odd tqdm glyph.
    head_end = text.rfind("\n", 0, head_bytes) + 1 or head_bytes
    tail_start = text.find("\n", max(head_end, len(text) - (keep_bytes - head_bytes))) + 1 or len(text)
    left = text[head_end:tail_start]
    left_lines = left.count("\n")
    marker = (
        f"[kit bundle: {left_lines} lines ({len(left)} bytes) of {lines} left out here; "
        f"the first {head_end} and the last {len(text) - tail_start} bytes are kept]\n"
    )
    return LogKept(text[:head_end] + marker + text[tail_start:], lines, size, False, left_lines, len(left))


_RANK_PREFIX = re.compile(r"\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d+)?((?: [A-Z][A-Z_]*\d+)+)\]")
_MAIN_PREFIX = re.compile(r"\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d+)?\]")


def rank_tails(text: str, lines_per_rank: int = TAIL_LINES) -> dict[str, list[str]]:
    """The last lines of each rank ('TP0', 'DP0 TP1', 'main'); a line without an SGLang prefix
    (a traceback's body, NCCL's own output) belongs to the record before it."""
    tails: dict[str, deque[str]] = {}
    current = "main"
    for line in text.split("\n"):
        if not line:
            continue
        head = line[:160]
        if "[" in head:
            found = _RANK_PREFIX.search(head)
            if found:
                current = found[1].strip()
            elif _MAIN_PREFIX.search(head):
                current = "main"
        tail = tails.get(current)
        if tail is None:
            tail = tails[current] = deque(maxlen=lines_per_rank)
        tail.append(line)
    return {rank: list(lines) for rank, lines in tails.items()}


# -- the summary ---------------------------------------------------------------------------------


# Words older kits wrote in result.json and bundle.json: a log that ended before ready, analysed
# offline, was "stalled" where `kit analyze` said HUNG. Bundles made then are read in today's word.
OLD_VERDICTS = {"stalled": "hung"}
OFFLINE = (
    "offline, from the log: no activity samples, so HUNG means the log ends before ready without a crash"
)


def current_words(document: Mapping[str, Any]) -> dict:
    """A result.json or bundle.json in today's words (an old bundle's "stalled" is "hung")."""
    verdict = document.get("verdict")
    if verdict not in OLD_VERDICTS:
        return dict(document)
    renamed = {**document, "verdict": OLD_VERDICTS[verdict]}
    if "analysed" in document:
        renamed["analysed"] = OFFLINE
    return renamed


def current_summary(text: str) -> str:
    """An old summary.md's headline in today's word, so `kit bundle show` does not take the rename
    for a hand edit."""
    return text.replace("# STALLED", "# HUNG", 1) if text.startswith("# STALLED") else text


def headline(result: Mapping[str, Any]) -> str:
    verdict = str(result.get("verdict") or "unknown")
    verdict = OLD_VERDICTS.get(verdict, verdict)
    phase = f" in {result['phase']}" if result.get("phase") else ""
    if verdict == "hung":
        quiet = result.get("quiet_for_s")
        if result.get("analysed"):  # offline: the log's end is all there is; quiet from timestamps
            since = f"; quiet for {quiet:.0f} s" if quiet else ""
            return f"HUNG{phase}: the log ends before ready, without a crash{since}"
        return f"HUNG{phase}: no log line and no activity for {quiet:.0f} s" if quiet else f"HUNG{phase}"
    if verdict == "deadline":
        limit = result.get("limit_s")
        return f"DEADLINE{phase}: still going after {limit:.0f} s" if limit else f"DEADLINE{phase}"
    if verdict == "crashed":
        return f"CRASHED{phase}: {result.get('exception') or 'the server stopped'}"
    if verdict == "ready":
        startup = result.get("startup_s")
        return f"READY after {startup:.1f} s" if startup is not None else "READY"
    if verdict == "failed":
        return f"FAILED: ready, but the first token failed: {result.get('exception')}"
    return f"{verdict.upper()}{phase}"


def _fact(value: Any) -> str:
    return show_value(value) if value is not None else "unknown"


def summary_md(meta: Mapping[str, Any], fingerprint: Mapping[str, Any], result: Mapping[str, Any]) -> str:
    image = fingerprint.get("image") or {}
    versions = fingerprint.get("versions") or {}
    host = fingerprint.get("host") or {}
    nvidia = fingerprint.get("nvidia") or {}
    launch = fingerprint.get("launch") or {}
    image_id = known(image.get("id"))
    gpus = known(nvidia.get("gpu_models"))
    if gpus:
        gpu_line = (
            f"- GPUs: {nvidia.get('gpu_count')} x {', '.join(gpus)}; driver {_fact(nvidia.get('driver'))}, "
            f"CUDA driver {_fact(nvidia.get('cuda_driver'))}"
        )
    else:
        gpu_line = f"- GPUs: {_fact(nvidia.get('gpu_models'))}"
    lines = [
        f"# {headline(result)}",
        "",
        f"- target **{result.get('target')}** on image **{result.get('image')}**, container "
        f"`{result.get('container') or '-'}`",
        f"- made {meta.get('created')} by {meta.get('made_by')} (kit {meta.get('kit_version')})",
        f"- image {_fact(image.get('tag'))} {('(' + str(image_id)[:19] + ')') if image_id else ''}".rstrip(),
        "- versions: "
        + ", ".join(
            f"{name} {_fact(versions.get(name))}"
            for name in ("sglang", "torch", "nccl", "cuda", "flashinfer")
        )
        + f" (from {_fact(versions.get('from'))})",
        f"- host: kernel {_fact(host.get('kernel'))}, Docker {_fact(host.get('docker_engine'))}, "
        f"Compose {_fact(host.get('compose'))}",
        gpu_line,
        f"- launch: profile {_fact(launch.get('profile'))}, dialect {_fact(launch.get('dialect'))}, "
        f"overrides {_fact(launch.get('overrides'))}, fault {launch.get('fault') or 'none'}",
    ]
    if isinstance(launch.get("argv"), list):
        lines += ["", "```", show_value(launch["argv"]), "```"]
    if result.get("missing"):  # a part that could not be read (a host process's piped output)
        lines += ["", "## Missing", "", *(f"- {str(m)[:300]}" for m in result["missing"])]
    ranks = result.get("ranks") or []
    if ranks:
        lines += ["", "## Ranks", "", "| rank | phase | last milestone | in phase |", "|---|---|---|---|"]
        lines += [
            f"| {r.get('rank')} | {r.get('phase') or '-'} | {r.get('last_milestone') or '-'} | "
            f"{r.get('in_phase_s') if r.get('in_phase_s') is not None else '-'} s |"
            for r in ranks
        ]
    who = [("waiting", r) for r in result.get("waiting_ranks") or []]
    who += [("missing", r) for r in result.get("missing_ranks") or []]
    stacks = {s.get("rank"): s for s in result.get("stacks") or []}
    if who or stacks:
        lines += ["", "## Where the ranks are (stacks)", ""]
        named = {rank for _, rank in who}
        for role, rank in who:
            s = stacks.get(rank)
            lines.append(f"- **{rank}** {role}" + (f": {s.get('kind')}: `{s.get('where')}`" if s else ""))
        lines += [
            f"- {rank}: {s.get('kind')}: `{s.get('where')}`"
            for rank, s in stacks.items()
            if rank not in named
        ]
    lines += _sample_lines(result.get("stack_samples"))
    upstream = result.get("upstream") or []
    counters = result.get("counters") or {}
    if upstream or counters:
        lines += ["", "## What the watch and the upstream tools could see", ""]
        if counters:
            lines.append(f"- counters read: {', '.join(counters.get('read') or []) or 'none'}")
            if counters.get("unread"):
                lines.append(f"- counters not readable here: {', '.join(counters['unread'])}")
        lines += [f"- {str(line).strip()[:300]}" for line in upstream]
    causes = result.get("likely_causes") or []
    if causes:
        lines += ["", "## Likely causes", ""]
        for number, cause in enumerate(causes[:5], start=1):
            lines.append(f"{number}. **{cause.get('title')}**: {cause.get('why')}")
            lines += [f"   - try: {step}" for step in (cause.get("what_to_try") or [])[:3]]
    evidence = result.get("evidence") or []
    if evidence:
        lines += ["", "## Last lines", "", "```", *[str(e)[:300] for e in evidence[-8:]], "```"]
    log = meta.get("log") or {}
    kept = "whole" if log.get("whole") else f"head and tail; {log.get('left_out_lines')} lines left out"
    lines += [
        "",
        "## Replay and compare",
        "",
        f"- `kit repro {meta.get('name')}{SUFFIX}` starts the same image, argv and environment under the "
        "same limits and says whether it reproduced; add `--set env.NAME=VALUE` to try a fix",
        f"- `kit bundle diff {meta.get('name')}{SUFFIX} OTHER{SUFFIX}` lists what differs, suspects first",
        f"- files: fingerprint.json, result.json, startup.svg, "
        f"log/server.log ({log.get('lines')} lines, {kept}), log/tails/, stacks/",
    ]
    return "\n".join(lines) + "\n"


def _sample_lines(samples: Any) -> list[str]:
    """The stack samples a HUNG rests on, one line each: when, and each rank's state and place."""
    lines = ["", "Stack samples the verdict rests on (stacks/RANK.sampleN.txt):", ""]
    for sample in (samples if isinstance(samples, list) else [])[:4]:
        if not isinstance(sample, dict):
            continue
        ranks = [r for r in sample.get("ranks") or [] if isinstance(r, dict)]
        said = "; ".join(
            f"{r.get('rank')} {r.get('state')}{' ' + str(r['held']) if r.get('held') else ''}: "
            f"`{str(r.get('where'))[:100]}`"
            for r in ranks
        )
        why = f"unreadable: {str(sample['unreadable'])[:200]}" if sample.get("unreadable") else said
        lines.append(f"- sample {sample.get('number')} at {sample.get('t_s')} s: {why}")
    return lines if len(lines) > 3 else []


# -- building and writing ------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleInput:
    """What one bundle holds before masking. `result` is an UpResult as JSON (jsonable)."""

    name: str
    made_by: str
    fingerprint: Mapping[str, Any]
    result: Mapping[str, Any]
    log_text: str
    stacks: Mapping[str, str] = field(default_factory=dict)
    lock_text: str | None = None
    created: str | None = None
    upstream: Mapping[str, str] = field(default_factory=dict)
    """The upstream tools' raw answers (NCCL RAS snapshots, fr_trace's report), by file name."""


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode("utf-8")


def build_members(bundle: BundleInput, redactor: Redactor) -> dict[str, bytes]:
    """Every member's bytes, masked; bundle.json last, with each other member's checksum."""
    name = safe_stem(bundle.name)
    fingerprint = redactor.data(dict(bundle.fingerprint))
    result = redactor.data(dict(bundle.result))
    kept = keep_log(bundle.log_text)
    log = redactor.text(kept.text)
    created = bundle.created or datetime.now().astimezone().isoformat(timespec="seconds")
    meta: dict[str, Any] = {
        "kind": KIND,
        "format": FORMAT,
        "kit_version": kit.__version__,
        "name": name,
        "created": created,
        "made_by": redactor.text(bundle.made_by),
        "target": result.get("target"),
        "image": result.get("image"),
        "verdict": result.get("verdict"),
        "phase": result.get("phase"),
        "log": {
            "lines": kept.lines,
            "bytes": kept.bytes,
            "whole": kept.whole,
            "left_out_lines": kept.left_out_lines,
            "left_out_bytes": kept.left_out_bytes,
        },
    }
    members: dict[str, bytes] = {
        "summary.md": redactor.text(summary_md(meta, fingerprint, result)).encode("utf-8"),
        "fingerprint.json": redactor.literal(_json_bytes(fingerprint).decode("utf-8")).encode("utf-8"),
        "result.json": redactor.literal(_json_bytes(result).decode("utf-8")).encode("utf-8"),
        "log/server.log": log.encode("utf-8", "replace"),
    }
    title = f"{result.get('target')} on {result.get('image')}: {headline(result)}"
    svg = svg_of_result(result, title=title, verdict=headline(result))
    members["startup.svg"] = redactor.text(svg).encode("utf-8")
    for rank, lines in sorted(rank_tails(log).items()):
        members[f"log/tails/{rank_file(rank)}"] = ("\n".join(lines) + "\n").encode("utf-8", "replace")
    for rank, text in sorted(bundle.stacks.items()):
        members[f"stacks/{rank_file(rank)}"] = redactor.text(text).encode("utf-8", "replace")
    if bundle.lock_text is not None:
        members["lock.txt"] = redactor.text(bundle.lock_text).encode("utf-8")
    for file, text in sorted(bundle.upstream.items()):
        members[f"upstream/{safe_stem(file)}"] = redactor.text(text).encode("utf-8", "replace")
    meta["members"] = {
        rel: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        for rel, data in sorted(members.items())
    }
    members["bundle.json"] = redactor.literal(_json_bytes(meta).decode("utf-8")).encode("utf-8")
    return members


def tar_gz(name: str, members: Mapping[str, bytes], mtime: float = 0.0) -> bytes:
    """A deterministic .tar.gz: sorted members under NAME/, no owner names, one mtime."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        order = ["bundle.json", *sorted(k for k in members if k != "bundle.json")]
        for rel in order:
            if rel not in members:
                continue
            info = tarfile.TarInfo(f"{name}/{rel}")
            info.size = len(members[rel])
            info.mtime = int(mtime)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(members[rel]))
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(raw.getvalue()) + compressor.flush()


def write_bundle(path: Path, name: str, members: Mapping[str, bytes], mtime: float = 0.0) -> Path:
    """Write atomically: a temporary file next to PATH, renamed over it when complete."""
    from kit.files import write_atomic

    # A device, a FIFO or a folder at PATH is refused, never replaced; only the kit's own cache
    # folder is created (record.default_path), never the folder of an -o.
    return write_atomic(Path(path), tar_gz(safe_stem(name), members, mtime), field="-o")


# -- reading -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bundle:
    path: Path
    name: str
    meta: Mapping[str, Any]
    members: Mapping[str, bytes]

    def text(self, rel: str) -> str:
        return self.members[rel].decode("utf-8", "replace")

    @property
    def fingerprint(self) -> dict:
        return json.loads(self.members["fingerprint.json"])

    @property
    def result(self) -> dict:
        return current_words(json.loads(self.members["result.json"]))

    @property
    def log_text(self) -> str:
        return self.text("log/server.log")

    @property
    def summary(self) -> str:
        return self.text("summary.md")

    @property
    def svg(self) -> str | None:
        return self.text("startup.svg") if "startup.svg" in self.members else None

    @property
    def stacks(self) -> dict[str, str]:
        return {
            rel.removeprefix("stacks/").removesuffix(".txt"): self.text(rel)
            for rel in sorted(self.members)
            if rel.startswith("stacks/")
        }


def _bad(path: Path, problem: str, fix: str = _FIX_DAMAGED) -> InputError:
    return InputError(str(path), problem, fix)


def _shown(value: object, limit: int = 120) -> str:
    """Text taken from an untrusted bundle, safe to print: printable characters only, bounded."""
    text = str(value)
    return "".join(c if c.isprintable() else "?" for c in text[:limit])


def _decompress(path: Path, data: bytes) -> bytes:
    if not data.startswith(b"\x1f\x8b"):
        raise _bad(path, "not a gzip file, so not a kit bundle", _FIX_FOREIGN)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        raw = inflater.decompress(data, MAX_TOTAL_BYTES + 1)
    except zlib.error as exc:
        raise _bad(path, f"damaged gzip data ({exc})") from exc
    if len(raw) > MAX_TOTAL_BYTES:
        raise _bad(path, f"unpacks to more than {MAX_TOTAL_BYTES >> 20} MB, more than any kit bundle")
    if not inflater.eof:
        raise _bad(path, "truncated: the gzip stream ends early")
    if inflater.unused_data.strip(b"\0"):
        raise _bad(path, "has data after the end of its gzip stream: not a kit bundle", _FIX_FOREIGN)
    return raw


def _member_rel(path: Path, member: tarfile.TarInfo, stem: str | None) -> tuple[str, str]:
    """(the bundle's folder, the member's path inside it); unsafe or stray names are refused."""
    name = member.name
    parts = name.rstrip("/").split("/")
    if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise _bad(path, f"member '{_shown(name)}' has an unsafe path: not a kit bundle", "do not unpack it")
    top = parts[0]
    if not _STEM.fullmatch(top) or (stem is not None and top != stem):
        raise _bad(
            path, f"member '{_shown(name)}' is outside the bundle's folder: not a kit bundle", _FIX_FOREIGN
        )
    return top, "/".join(parts[1:])


def read_bundle(path: str | Path) -> Bundle:
    """A bundle, validated; any problem is one InputError (exit 2) naming the file and what is wrong."""
    from kit.files import read_bounded

    path = Path(path)
    # A bundle is a regular file no bigger than what it may unpack to (a device never ends).
    fix = "give the path of a bundle (.tar.gz)"
    data = read_bounded(path, MAX_TOTAL_BYTES, field=str(path), fix=fix, name="it")
    raw = _decompress(path, data)
    members: dict[str, bytes] = {}
    stem: str | None = None
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            for count, member in enumerate(tar):
                if count >= MAX_MEMBERS:
                    raise _bad(path, f"has more than {MAX_MEMBERS} members: not a kit bundle", _FIX_FOREIGN)
                stem, rel = _member_rel(path, member, stem)
                if member.isdir():
                    if rel and rel not in _FOLDERS:
                        raise _bad(
                            path, f"foreign folder '{_shown(member.name)}': not a kit bundle", _FIX_FOREIGN
                        )
                    continue
                if not member.isreg():
                    raise _bad(
                        path,
                        f"member '{_shown(member.name)}' is a link or device: not a kit bundle",
                        _FIX_FOREIGN,
                    )
                known = rel in REQUIRED or rel in _OPTIONAL
                if not (known or _PER_RANK.fullmatch(rel) or _UPSTREAM.fullmatch(rel)):
                    raise _bad(
                        path, f"foreign member '{_shown(member.name)}': not a kit bundle", _FIX_FOREIGN
                    )
                if rel in members:
                    raise _bad(path, f"member '{_shown(rel)}' appears twice")
                if member.size > MAX_MEMBER_BYTES:
                    raise _bad(path, f"member '{_shown(rel)}' is larger than {MAX_MEMBER_BYTES >> 20} MB")
                total += member.size
                handle = tar.extractfile(member)
                body = handle.read() if handle is not None else b""
                if len(body) != member.size:
                    raise _bad(path, f"truncated: member '{rel}' is cut short")
                members[rel] = body
    except tarfile.TarError as exc:
        raise _bad(path, f"truncated or damaged tar data ({exc})") from exc
    if stem is None or "bundle.json" not in members:
        raise _bad(path, "has no bundle.json: not a kit bundle", _FIX_FOREIGN)
    meta = _json_member(path, members, "bundle.json")
    _check_meta(path, meta, members)
    for rel in ("fingerprint.json", "result.json"):
        _json_member(path, members, rel)
    return Bundle(path, stem, current_words(meta), members)


def _json_member(path: Path, members: Mapping[str, bytes], rel: str) -> dict:
    try:
        value = json.loads(members[rel])
    except (ValueError, UnicodeDecodeError) as exc:
        raise _bad(path, f"{rel} is not valid JSON ({str(exc)[:80]})") from exc
    if not isinstance(value, dict):
        raise _bad(path, f"{rel} is not a JSON object")
    return value


def _check_meta(path: Path, meta: Mapping[str, Any], members: Mapping[str, bytes]) -> None:
    if meta.get("kind") != KIND:
        raise _bad(
            path,
            f"bundle.json says kind={_shown(repr(meta.get('kind')), 40)}, not {KIND!r}: not a kit bundle",
            _FIX_FOREIGN,
        )
    version = meta.get("format")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _bad(path, f"bundle.json has no valid format number ({_shown(repr(version), 40)})")
    if version > FORMAT:
        raise _bad(
            path,
            f"made by a newer kit ({_shown(meta.get('kit_version', '?'), 40)}, bundle format {version}); "
            f"this kit ({kit.__version__}) reads format {FORMAT}",
            "upgrade the kit",
        )
    listed = meta.get("members")
    if not isinstance(listed, dict):
        raise _bad(path, "bundle.json lists no members")
    for rel in REQUIRED:
        if rel != "bundle.json" and rel not in listed:
            raise _bad(path, f"bundle.json does not list {rel}, which every bundle has")
    for rel, entry in listed.items():
        if rel not in members:
            raise _bad(
                path, f"missing file: bundle.json lists {_shown(rel)} but the bundle has no such member"
            )
        digest = entry.get("sha256") if isinstance(entry, dict) else None
        if digest != hashlib.sha256(members[rel]).hexdigest():
            raise _bad(path, f"{_shown(rel)} is damaged: its checksum differs from bundle.json's")
    for rel in members:
        if rel != "bundle.json" and rel not in listed:
            raise _bad(path, f"foreign member '{rel}': bundle.json does not list it", _FIX_FOREIGN)


def looks_like_bundle(path: str | Path) -> bool:
    """A .tar.gz/.tgz name, or gzip's magic bytes: `kit analyze` then reads it as a bundle."""
    name = str(path)
    if name.endswith((SUFFIX, ".tgz")):
        return True
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def bundle_log_text(path: str | Path) -> str:
    """The full log a bundle holds (its head and tail when the log was large)."""
    return read_bundle(path).log_text
