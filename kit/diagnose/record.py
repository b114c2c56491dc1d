"""Making bundles: at the end of `kit up` / `kit watch`, and with `kit bundle create` from a runs
folder, a container, or a pasted log.

    record_run(...)            kit up / kit watch (a container or, with host=, host processes) on a
                               verdict other than READY: the runs folder (~/.cache/kit/runs/SESSION:
                               server.log, stacks/, result.json, fingerprint.json, lock.txt,
                               startup.svg) and a bundle made from it. The one record of a start-up:
                               kit.startup calls it, and nothing here imports kit.startup.
    bundle_from_run(folder)    kit bundle create RUN / --last
    bundle_from_container(c)   kit bundle create CONTAINER (its log analysed offline, its stacks now)
    bundle_from_log(file, t)   kit bundle create --from-log FILE --target T [--image N]

Bundles go to ~/.cache/kit/bundles/ unless an output path is given. Secrets are masked before
anything is written, in the runs folder as in the bundle (kit/diagnose/redact.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit import paths
from kit.diagnose import fingerprint as fp
from kit.diagnose.bundle import (
    OFFLINE,
    SUFFIX,
    BundleInput,
    build_members,
    rank_file,
    safe_stem,
    write_bundle,
)
from kit.diagnose.fact_sources import ContainerFacts, HostServer, PastedLogFacts, Unrecorded, facts_of_run
from kit.diagnose.picture import svg_of_result
from kit.diagnose.redact import Redactor
from kit.errors import InputError, KitError
from kit.logs.stacks import RankStack, classify_stack, explain_hang, rank_of_process
from kit.spec import LaunchSpec


def runs_dir() -> Path:
    return paths.cache_dir() / "runs"


def bundles_dir() -> Path:
    return paths.cache_dir() / "bundles"


def bundle_name(target: str, run: str, verdict: str) -> str:
    prefix = "" if run.startswith(f"kit-{target}-") else f"kit-{target}-"
    return safe_stem(f"{prefix}{run}-{verdict}")


def default_path(name: str) -> Path:
    """Where a bundle goes without -o: the kit's cache, its folder created here (an -o's is not)."""
    bundles_dir().mkdir(parents=True, exist_ok=True)
    return bundles_dir() / f"{name}{SUFFIX}"


def _json_text(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"


@dataclass(frozen=True)
class Recorded:
    folder: Path
    bundle: Path | None
    note: str | None = None


# -- the end of kit up / kit watch ---------------------------------------------------------------


def record_run(
    session: str,
    source: Any,
    spec: LaunchSpec | None,
    limits: Any,
    stacks: Mapping[str, RankStack],
    result: dict,
    *,
    host: HostServer | None = None,
    upstream: Mapping[str, str] | None = None,
    samples: Mapping[str, str] | None = None,
) -> Recorded:
    """The runs folder and a bundle for a verdict other than READY: the one record of a start-up,
    for kit up, kit watch CONTAINER, a replayed scenario and kit watch --pid/--unit (HOST) alike.

    Never raises for the bundle: the verdict matters more than its record, so a failure becomes a
    note on the result."""
    target = spec.target if spec is not None else str(result.get("target"))
    folder = runs_dir() / session
    target_path = default_path(bundle_name(target, session, str(result.get("verdict"))))
    result = {**result, "diagnostics": str(folder), "bundle": str(target_path)}
    built = fp.build(facts_of_run(source, spec, host=host), limits)
    redactor = Redactor.for_launch(built.raw_env, built.raw_argv, machine_env=os.environ)
    # The verdict's stacks (stacks/RANK.txt) and the samples a HUNG rests on (stacks/RANK.sampleN.txt).
    texts = {**{rank: stack.text for rank, stack in stacks.items()}, **(samples or {})}
    write_run_folder(
        folder, source.log_text(), texts, result, built.fingerprint, built.lock, redactor, upstream
    )
    try:
        return Recorded(folder, bundle_from_run(folder, target_path, redactor=redactor))
    except (KitError, OSError) as exc:
        why = exc.one_line() if isinstance(exc, KitError) else str(exc)
        return Recorded(folder, None, f"could not write a bundle: {why}")


def write_run_folder(
    folder: Path,
    log_text: str,
    stacks: Mapping[str, str],
    result: Mapping[str, Any],
    fingerprint: Mapping[str, Any],
    lock_text: str | None,
    redactor: Redactor,
    upstream: Mapping[str, str] | None = None,
) -> Path:
    """UPSTREAM: the upstream tools' raw answers by file name (RAS snapshots, fr_trace's report)."""
    (folder / "stacks").mkdir(parents=True, exist_ok=True)
    if upstream:
        (folder / "upstream").mkdir(exist_ok=True)
        for name, text in upstream.items():
            (folder / "upstream" / safe_stem(name)).write_text(redactor.text(text), encoding="utf-8")
    (folder / "server.log").write_text(redactor.text(log_text), encoding="utf-8")
    for rank, text in stacks.items():
        (folder / "stacks" / rank_file(rank)).write_text(redactor.text(text), encoding="utf-8")
    masked = redactor.data(dict(result))
    (folder / "result.json").write_text(redactor.literal(_json_text(masked)), encoding="utf-8")
    fingerprint_text = _json_text(redactor.data(dict(fingerprint)))
    (folder / "fingerprint.json").write_text(redactor.literal(fingerprint_text), encoding="utf-8")
    if lock_text is not None:
        (folder / "lock.txt").write_text(redactor.text(lock_text), encoding="utf-8")
    svg = svg_of_result(
        masked,
        title=f"{masked.get('target')} on {masked.get('image')}",
        verdict=str(masked.get("verdict")),
    )
    (folder / "startup.svg").write_text(svg, encoding="utf-8")
    return folder


# -- kit bundle create RUN / --last --------------------------------------------------------------


_LAST_START = "last-start.json"


def note_start(session: str, target: str, container: str) -> None:
    """Remember the newest start kit up / kit watch followed: a READY start records no run, so
    `--last` must not quietly take an older one for it. Best effort: a cache that cannot be
    written never stops a start."""
    import time

    entry = {"session": session, "target": target, "container": container, "started": time.time()}
    try:
        runs_dir().mkdir(parents=True, exist_ok=True)
        (runs_dir() / _LAST_START).write_text(json.dumps(entry) + "\n", encoding="utf-8")
    except OSError:
        pass


def _when(epoch: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds")


def last_run() -> Path:
    """The newest recorded run; refused (InputError) when a newer start recorded none (it was READY,
    or is still going): `--last` would otherwise bundle an older run as if it were that start."""
    folder = runs_dir()
    runs = sorted(
        (p for p in folder.glob("*/result.json") if p.is_file()),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    if not runs:
        raise InputError(
            "--last", f"no runs recorded in {folder}", "a kit up or kit watch that is not READY makes one"
        )
    newest = runs[0].parent
    try:
        start = json.loads((folder / _LAST_START).read_text(encoding="utf-8"))
        session, started = str(start["session"]), float(start["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return newest
    recorded = runs[0].stat().st_mtime
    if session != newest.name and started > recorded:
        raise InputError(
            "--last",
            f"the newest start, {session} ({start.get('target')}, {_when(started)}), recorded no run "
            f"(READY, or still going); the newest recorded run, {newest.name}, is older ({_when(recorded)})",
            f"name the run you mean: kit bundle create {newest.name}; or a running server: kit bundle create "
            f"{start.get('container')}",
        )
    return newest


def run_taken(folder: Path) -> str:
    """Which run a bundle is made of, and when: 'run S (TARGET, VERDICT), recorded TIME'."""
    result = _read_json(folder / "result.json", "RUN")
    recorded = _when((folder / "result.json").stat().st_mtime)
    verdict = str(result.get("verdict") or "?").upper()
    return f"run {folder.name} ({result.get('target')}, {verdict}), recorded {recorded}"


def find_run(ref: str) -> Path | None:
    """A runs folder by path or session id, or None (then REF names a container)."""
    for candidate in (Path(ref), runs_dir() / ref):
        if candidate.is_dir() and (candidate / "result.json").is_file():
            return candidate
    return None


def _read_json(path: Path, what: str) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(what, f"cannot read {path} ({exc.strerror or exc})", "give a runs folder") from exc
    except ValueError as exc:
        raise InputError(what, f"{path} is not valid JSON", "the run's record is damaged") from exc
    if not isinstance(value, dict):
        raise InputError(what, f"{path} is not a JSON object", "the run's record is damaged")
    return value


def bundle_from_run(folder: Path, out: Path | None = None, *, redactor: Redactor | None = None) -> Path:
    """A bundle from a runs folder (the files kit up / kit watch wrote)."""
    result = _read_json(folder / "result.json", "RUN")
    fingerprint_path = folder / "fingerprint.json"
    if fingerprint_path.is_file():
        fingerprint = _read_json(fingerprint_path, "RUN")
    else:
        why = "the run was recorded by a kit that wrote no fingerprint"
        fingerprint = fp.build(Unrecorded("kit bundle create RUN", why), None).fingerprint
    log_path = folder / "server.log"
    log = log_path.read_text(encoding="utf-8", errors="replace") if log_path.is_file() else ""
    stacks = {
        p.stem.replace("_", " "): p.read_text(encoding="utf-8", errors="replace")
        for p in sorted((folder / "stacks").glob("*.txt"))
    }
    lock_path = folder / "lock.txt"
    lock = lock_path.read_text(encoding="utf-8", errors="replace") if lock_path.is_file() else None
    upstream = {
        p.name: p.read_text(encoding="utf-8", errors="replace")
        for p in sorted((folder / "upstream").glob("*"))
    }
    name = bundle_name(str(result.get("target")), folder.name, str(result.get("verdict")))
    made_by = (fingerprint.get("made") or {}).get("by") if isinstance(fingerprint.get("made"), dict) else None
    bundle = BundleInput(
        name=name,
        made_by=f"{made_by or 'kit'} (run {folder.name})",
        fingerprint=fingerprint,
        result=result,
        log_text=log,
        stacks=stacks,
        lock_text=lock,
        upstream=upstream,
    )
    redactor = redactor or Redactor.for_launch(machine_env=os.environ)
    return write_bundle(out or default_path(name), name, build_members(bundle, redactor))


# -- kit bundle create CONTAINER -----------------------------------------------------------------


def container_stacks(container: Any) -> dict[str, RankStack]:
    """py-spy stacks of a running container's schedulers (none when it is not running)."""
    from kit.runtime import server as runtime

    if not (container.attrs.get("State") or {}).get("Running"):
        return {}
    stacks: dict[str, RankStack] = {}
    for pid, title in sorted(runtime.list_processes(container).items()):
        rank = rank_of_process(title)
        if rank is not None:
            stacks[rank] = classify_stack(rank, runtime.dump_stack(container, pid), pid)
    return stacks


def _causes(report: Any, device: str | None, stacks: Mapping[str, RankStack]) -> list[dict]:
    """The report's likely causes that can happen on DEVICE, a planted fault first when a stack sits in it."""
    from kit.logs.causes import default_causes

    devices = {c.id: c.devices for c in default_causes().causes}
    rows = [
        {"id": c.id, "title": c.title, "why": c.why, "what_to_try": list(c.what_to_try)}
        for c in report.likely_causes
        if device is None or devices.get(c.id) is None or device in devices[c.id]
    ]
    if any(s.kind.value == "planted-fault" for s in stacks.values()):
        rows.insert(
            0,
            {
                "id": "planted-fault",
                "title": "a planted test fault (KIT_FAULT)",
                "why": "a rank's stack sits in the rehearsal image's test-only fault switch",
                "what_to_try": ["run without the fault (kit repro --set env.KIT_FAULT=none)"],
            },
        )
    return rows


def result_from_analysis(
    report: Any,
    *,
    target: str,
    image: str,
    container: str | None,
    stacks: Mapping[str, RankStack] = {},
    device: str | None = None,
    quiet_for_s: float | None = None,
) -> dict:
    """An offline analysis (kit.logs.AnalysisReport) in the shape of kit up's result.

    quiet_for_s: how long the server has said nothing since its last line (a container's own
    timestamps); open phases and ranks' time in phase run on by that much.
    """
    from kit.output import jsonable

    verdict = report.outcome  # kit analyze's word: ready, crashed or hung (the log ends before ready)
    extra = quiet_for_s if verdict == "hung" and quiet_for_s else 0.0
    # The report's rows are kit up's rows (kit/logs/rows.py); an open span runs on while it is quiet.
    timeline = [
        {
            "rank": span.rank,
            "phase": span.phase,
            "start_s": span.start_s,
            "elapsed_s": round(span.elapsed_s + (extra if span.open else 0.0), 2),
            "open": span.open,
        }
        for span in report.timeline
    ]
    missing: list[str] = []
    for row in report.missing:
        missing += [r for r in row.ranks if r not in missing]
    explanation = explain_hang(stacks) if stacks else None
    waiting = [s.rank for s in explanation.waiting] if explanation else []
    if explanation and explanation.missing:
        missing = [s.rank for s in explanation.missing]
    return {
        "target": target,
        "image": image,
        "container": container,
        "verdict": verdict,
        "exit_code": report.exit_code,
        "phase": jsonable(report.phase),
        "startup_s": report.startup_s,
        "stuck_ranks": list(report.stuck),
        "missing_ranks": missing,
        "waiting_ranks": waiting,
        "exception": report.exception,
        "evidence": [e.text for e in report.evidence],
        "ranks": [
            {
                "rank": r.rank,
                "phase": r.phase,
                "last_milestone": r.last_milestone,
                "in_phase_s": None if r.in_phase_s is None else round(r.in_phase_s + extra, 2),
            }
            for r in report.ranks
        ],
        "timeline": timeline,
        "stacks": [
            {"rank": s.rank, "pid": s.pid, "kind": s.kind.value, "where": s.where} for s in stacks.values()
        ],
        "likely_causes": _causes(report, device, stacks),
        "quiet_for_s": None if quiet_for_s is None else round(quiet_for_s, 1),
        "analysed": OFFLINE,
        # What the serving stretch of the log shows (kit/logs/digest.py): the picture's serving row.
        "serving_stretch": jsonable(report.serving),
    }


def _quiet_for(container: Any) -> float | None:
    """Seconds since the container's last log line (the engine's timestamps), to now or its end."""
    import time

    from kit.runtime.docker_source import parse_docker_time

    try:
        raw = container.logs(stdout=True, stderr=True, timestamps=True, tail=1).decode("utf-8", "replace")
    except Exception:
        return None
    last = parse_docker_time(raw.partition(" ")[0])
    state = container.attrs.get("State") or {}
    end = time.time() if state.get("Running") else parse_docker_time(str(state.get("FinishedAt") or ""))
    return None if last is None or end is None else max(0.0, end - last)


def bundle_from_container(
    ref: str, *, target: str | None = None, image: str | None = None, out: Path | None = None
) -> Path:
    """A container (running or stopped, started by anyone): its log, its stacks now, its fingerprint."""
    from kit.launch import resolve
    from kit.logs import analyze_text
    from kit.logs.limits import limits_from_spec
    from kit.runtime import server as runtime
    from kit.runtime.engine import LABEL_IMAGE, LABEL_TARGET

    container = runtime.attach(ref)
    labels = container.labels
    target = target or labels.get(LABEL_TARGET)
    if not target:
        raise InputError(
            "--target", f"container {container.name} has no {LABEL_TARGET} label", "pass --target TARGET"
        )
    spec = resolve(target, image=image or labels.get(LABEL_IMAGE))
    limits = limits_from_spec(spec)
    log = runtime.logs_text(container)
    stacks = container_stacks(container)
    report = analyze_text(log, source=container.name, limits=limits)
    result = result_from_analysis(
        report,
        target=spec.target,
        image=spec.image,
        container=container.name,
        stacks=stacks,
        device=spec.device,
        quiet_for_s=_quiet_for(container),
    )
    built = fp.build(ContainerFacts(container, spec, gpus=None, by="kit bundle create CONTAINER"), limits)
    redactor = Redactor.for_launch(built.raw_env, built.raw_argv, machine_env=os.environ)
    # Not the container's bare name: `kit bundle create NAME` must find the container again, not this.
    folder = runs_dir() / f"{safe_stem(container.name)}-snapshot"
    result["diagnostics"] = str(folder)
    texts = {r: s.text for r, s in stacks.items()}
    write_run_folder(folder, log, texts, result, built.fingerprint, built.lock, redactor)
    name = bundle_name(spec.target, safe_stem(container.name), result["verdict"])
    return bundle_from_run(folder, out or default_path(name), redactor=redactor)


# -- kit bundle create --from-log ----------------------------------------------------------------

_NCCL_IN_LOG = re.compile(r"(?:nccl==|NCCL version )(\d+\.\d+\.\d+)")


def bundle_from_log(log_file: str, *, target: str, image: str | None = None, out: Path | None = None) -> Path:
    """A pasted log: the verdict from the log alone; what the kit cannot know is marked unknown."""
    from kit.files import read_log
    from kit.launch import resolve
    from kit.logs import analyze_text
    from kit.logs.limits import limits_from_spec

    text = read_log(log_file, field="--from-log").text  # bounded; empty or binary is refused
    spec = resolve(target, image=image)
    limits = limits_from_spec(spec)
    report = analyze_text(text, source=log_file, limits=limits)
    result = result_from_analysis(
        report, target=target, image=image or "unknown", container=None, device=spec.device
    )
    nccl = _NCCL_IN_LOG.search(text)
    fingerprint = fp.build(PastedLogFacts(spec, image, nccl[1] if nccl else None), limits).fingerprint
    digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:8]
    name = bundle_name(target, f"log-{digest}", result["verdict"])
    bundle = BundleInput(
        name=name,
        made_by=f"kit bundle create --from-log {Path(log_file).name}",
        fingerprint=fingerprint,
        result=result,
        log_text=text,
    )
    redactor = Redactor.for_launch(machine_env=os.environ)
    return write_bundle(out or default_path(name), name, build_members(bundle, redactor))
