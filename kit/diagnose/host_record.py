"""Bundles of servers that run as host processes, with `kit bundle create --pid N | --unit NAME`
(the end of `kit watch --pid/--unit` is record.record_run(host=...)). The same runs folder and
bundle as for a container (kit/diagnose/record.py), with the host process's fingerprint
(kit/diagnose/fact_sources.py, HostProcessFacts) and the environment's package list as the lock.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from kit.diagnose import fingerprint as fp
from kit.diagnose import hostenv
from kit.diagnose.bundle import safe_stem
from kit.diagnose.fact_sources import HostProcessFacts
from kit.diagnose.record import (
    bundle_from_run,
    bundle_name,
    default_path,
    result_from_analysis,
    runs_dir,
    write_run_folder,
)
from kit.diagnose.redact import Redactor
from kit.errors import InputError
from kit.logs.stacks import RankStack, classify_stack, rank_of_process

# -- kit bundle create --pid / --unit ------------------------------------------------------------


def host_stacks(pids: list[int]) -> dict[str, RankStack]:
    """py-spy stacks of the schedulers among PIDS, by rank."""
    from kit.runtime import processes as procs

    stacks: dict[str, RankStack] = {}
    for process in procs.processes(pids):
        rank = rank_of_process(procs.title(process))
        if rank is not None:
            stacks[rank] = classify_stack(rank, procs.dump_stack(process.pid), process.pid)
    return stacks


def _read_log(source: Any) -> str:
    """Everything the log holds now (a file to its end; journalctl without --follow to its end)."""
    from kit.runtime.host_source import _JournalLog

    log = source.log
    if isinstance(log, _JournalLog):
        log.follower.done.wait(timeout=30)
    else:
        log.drain(0)
    return source.log_text()


def bundle_of_host(
    *,
    pid: int | None = None,
    unit: str | None = None,
    log: str | None = None,
    target: str | None = None,
    out: Path | None = None,
) -> Path:
    """A host server as it is now: its log analysed offline, its stacks read now, its environment."""
    from kit.launch import resolve
    from kit.logs import PhaseLimits, analyze_text
    from kit.logs.limits import limits_from_spec
    from kit.runtime import processes as procs
    from kit.runtime.host_source import HostSource, PidTree, _JournalLog
    from kit.runtime.journal import JournalFollower, journal_argv

    if (pid is None) == (unit is None):
        raise InputError("--pid | --unit", "give exactly one of --pid N or --unit NAME", "see --help")
    missing: list[str] = []
    if pid is not None:
        try:
            source: Any = HostSource.for_pid(pid, log=log)
        except InputError as exc:
            if log is not None or exc.field != "--log":
                raise
            # Stdout is a pipe or a terminal: no log to read, but the process is there to read.
            source = _NoLog(PidTree(pid))
            missing.append(f"log: {exc.problem}; add it with --log FILE, or use --unit NAME for a service")
        main: int | None = pid
        unit = procs.unit_of(pid)
    else:
        source = HostSource.for_unit(str(unit), log=log)
        main = source.where.main_pid()  # type: ignore[attr-defined]
        unit = source.where.name
        if isinstance(source.log, _JournalLog):  # to its end, not followed
            source.log.close()
            since = source.where.started_wall
            source.log = _JournalLog(
                JournalFollower(journal_argv(unit, since_wall=since, follow=False)), unit
            )
    given = main
    main = (procs.find_launcher(main) or main) if main else main  # through docker-init, tini, a shell
    try:
        text = _read_log(source) if not missing else ""
        argv = procs.read_cmdline(main) if main else None
        target = target or (hostenv.infer_target(argv) if argv else None)
        spec = resolve(target) if target else None
        limits = limits_from_spec(spec) if spec is not None else PhaseLimits()
        pids = source.where.pids()
        stacks = host_stacks(pids) if main else {}
        report = analyze_text(text, source=source.name, limits=limits)
        device = spec.device if spec is not None else hostenv.launch_facts(argv or []).device
        result = result_from_analysis(
            report,
            target=target or "host",
            image=image_label(main),
            container=source.name,
            stacks=stacks,
            device=device,
            quiet_for_s=_quiet_for(source, text),
        )
        if given is not None and main != given:
            result["notes"] = [f"followed pid {main}, the SGLang launcher under pid {given}"]
        result["processes"] = _process_tree(pids)
        if missing:
            result["missing"] = missing
            result["notes"] = [*result.get("notes", []), *(f"missing: {m}" for m in missing)]
        by = f"kit bundle create {'--pid ' + str(pid) if pid is not None else '--unit ' + str(unit)}"
        facts = HostProcessFacts(given if given is not None else main, spec, unit=unit, gpus=None, by=by)
        built = fp.build(facts, limits)  # the facts find the launcher under the pid themselves
    finally:
        source.close()
    redactor = Redactor.for_launch(built.raw_env, built.raw_argv, machine_env=os.environ)
    stem = safe_stem(f"host-{unit or 'pid'}-{main or pid}")
    folder = runs_dir() / f"{stem}-snapshot"
    result["diagnostics"] = str(folder)
    texts = {r: s.text for r, s in stacks.items()}
    write_run_folder(folder, text, texts, result, built.fingerprint, built.lock, redactor)
    name = bundle_name(target or "host", stem, result["verdict"])
    return bundle_from_run(folder, out or default_path(name), redactor=redactor)


def _process_tree(pids: list[int]) -> list[dict]:
    """pid, parent and name of each process (names only: a command line may carry a key)."""
    import psutil

    rows = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            rows.append({"pid": pid, "ppid": process.ppid(), "name": process.name()})
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return rows


class _NoLog:
    """A process to read whose output cannot be followed: its tree, and an empty log."""

    def __init__(self, where: Any):
        self.where = where
        self.name = where.name
        self.log = None

    def log_text(self) -> str:
        return ""

    def close(self) -> None:
        pass


def image_label(pid: int | None) -> str:
    """What ran the server, in the result's `image` field: no kit image, the environment's versions."""
    if pid is None:
        return "host"
    env = hostenv.read_python_env(pid)
    parts = [f"{n} {env.packages[n].version}" for n in ("sglang", "torch") if n in env.packages]
    return f"host ({', '.join(parts)})" if parts else "host"


def _quiet_for(source: Any, text: str) -> float | None:
    """Seconds since the log last grew (a file's mtime), while the server is still there."""
    follower = getattr(source.log, "follower", None)
    path = getattr(follower, "path", None)
    if path is None or not text:
        return None
    try:
        return max(0.0, time.time() - os.stat(path).st_mtime)
    except OSError:
        return None
