"""A systemd service: its unit file, its restart policy, and where it stands (`systemctl show`).

    restart_of(unit_text)          Restart= of a unit file and its drop-ins, as systemd reads it (pure)
    parse_show(text)               `systemctl show` KEY=VALUE output as a dict (pure)
    UnitStatus.of(props)           main PID, cgroup, state, exit status, restarts (pure)
    will_restart(policy, status)   would systemd start it again after this ending (pure)
    SystemdUnit(name)              the adapter: `systemctl show` / `systemctl cat`, bounded by timeouts

Restart semantics are systemd.service(5)'s table: `on-failure` restarts after an unclean exit code,
an unclean signal, a timeout or the watchdog; `on-abnormal` after a signal, a timeout or the
watchdog; `on-abort` after an unclean signal; `always` always; `on-success` only after a clean exit.
Clean signals are SIGHUP, SIGINT, SIGTERM and SIGPIPE. SGLang ends a failed start by SIGKILLing
itself (docs/sources.md#sglang-stops-itself), which every policy but `no` and `on-success` restarts.

The watcher speaks Docker's vocabulary (kit/runtime/source.py SourceState.restart_policy), so a
unit's policy is translated: while it runs, a policy that restarts after a crash reads
"on-failure" (or "always"); once it stopped, "always" when systemd will start it again (or already
says `auto-restart`), else "no".
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from kit.errors import InputError

RESTART_VALUES = ("no", "always", "on-success", "on-failure", "on-abnormal", "on-abort", "on-watchdog")
_CLEAN_SIGNALS = {1, 2, 13, 15}  # SIGHUP, SIGINT, SIGPIPE, SIGTERM
_TIMEOUT_S = 10
SHOW_PROPERTIES = (
    "Id",
    "LoadState",
    "MainPID",
    "ControlGroup",
    "ActiveState",
    "SubState",
    "Result",
    "Restart",
    "NRestarts",
    "ExecMainStatus",
    "ExecMainCode",
    "ExecMainStartTimestampMonotonic",
    "FragmentPath",
    "DropInPaths",
    "StandardOutput",
    "User",
)


# -- the unit file (pure) -----------------------------------------------------------------------


def _logical_lines(text: str) -> list[str]:
    """Lines with `\\` continuations joined and comments (# or ; first) dropped, as systemd reads them."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if pending and line[:1] in "#;":
            continue  # a comment inside a continuation is skipped, the continuation goes on
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    if pending.strip():
        out.append(pending.strip())
    return out


def service_settings(*texts: str) -> dict[str, str]:
    """[Service] settings of a unit file and its drop-ins in order: a later assignment wins, an empty
    one resets to the default (removes the key)."""
    settings: dict[str, str] = {}
    for text in texts:
        section = None
        for line in _logical_lines(text):
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
                continue
            if section != "Service" or "=" not in line:
                continue
            key, _, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if value:
                settings[key] = value
            else:
                settings.pop(key, None)
    return settings


def restart_of(*texts: str) -> str:
    """The unit's Restart= ('no' when unset); an unknown value is what systemd does with it: ignored."""
    value = service_settings(*texts).get("Restart", "no")
    return value if value in RESTART_VALUES else "no"


def split_cat(text: str) -> list[str]:
    """`systemctl cat UNIT` output -> the unit file and each drop-in (each starts `# /path`)."""
    parts: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("# /") and (not parts or parts[-1]):
            parts.append([])
        if parts:
            parts[-1].append(line)
    return ["\n".join(p) for p in parts] or ([text] if text.strip() else [])


# -- where it stands (pure) ---------------------------------------------------------------------


def parse_show(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and key.strip() == key:
            props[key] = value
    return props


def _int(value: str | None, default: int = 0) -> int:
    try:
        return int(value) if value not in (None, "") else default
    except ValueError:
        return default


# ExecMainCode is a siginfo si_code: CLD_EXITED 1, CLD_KILLED 2, CLD_DUMPED 3.
_CLD_EXITED, _CLD_KILLED, _CLD_DUMPED = 1, 2, 3


@dataclass(frozen=True)
class UnitStatus:
    name: str
    main_pid: int | None
    cgroup: str | None
    active: str  # ActiveState: active, activating, deactivating, inactive, failed
    sub: str  # SubState: running, auto-restart, exited, dead, failed, start, ...
    result: str  # Result: success, exit-code, signal, core-dump, timeout, watchdog, ...
    restart: str  # Restart=
    restarts: int  # NRestarts
    exit_status: int | None  # ExecMainStatus: the exit code, or the signal when killed
    killed: bool  # ended by a signal (exit_status is the signal's number)
    started_mono_s: float | None  # ExecMainStartTimestampMonotonic, on CLOCK_MONOTONIC
    fragment: str | None
    drop_ins: tuple[str, ...]
    stdout: str  # StandardOutput: journal, inherit, file:/path, append:/path, ...
    user: str | None

    @classmethod
    def of(cls, props: Mapping[str, str]) -> UnitStatus:
        pid = _int(props.get("MainPID"))
        code = _int(props.get("ExecMainCode"))
        started = _int(props.get("ExecMainStartTimestampMonotonic"))
        return cls(
            name=props.get("Id", ""),
            main_pid=pid or None,
            cgroup=props.get("ControlGroup") or None,
            active=props.get("ActiveState", ""),
            sub=props.get("SubState", ""),
            result=props.get("Result", ""),
            restart=props.get("Restart") or "no",
            restarts=_int(props.get("NRestarts")),
            exit_status=_int(props.get("ExecMainStatus")) if code else None,
            killed=code in (_CLD_KILLED, _CLD_DUMPED),
            started_mono_s=started / 1e6 if started else None,
            fragment=props.get("FragmentPath") or None,
            drop_ins=tuple(p for p in (props.get("DropInPaths") or "").split() if p),
            stdout=props.get("StandardOutput", ""),
            user=props.get("User") or None,
        )

    @property
    def running(self) -> bool:
        return (
            self.active in ("active", "activating", "reloading")
            and self.sub != "auto-restart"
            and bool(self.main_pid)
        )

    @property
    def exit_code(self) -> int | None:
        """Docker's convention: the exit code, or 128 + the signal for a process killed by one."""
        if self.exit_status is None:
            return None
        return 128 + self.exit_status if self.killed else self.exit_status

    @property
    def log_file(self) -> str | None:
        """StandardOutput=file:/append:/truncate:PATH: the output goes to that file, not the journal."""
        kind, sep, path = self.stdout.partition(":")
        return path if sep and kind in ("file", "append", "truncate") and path else None


def will_restart(policy: str, status: UnitStatus) -> bool:
    """Would systemd start the unit again after this ending (systemd.service(5), Restart=)."""
    if status.sub == "auto-restart":
        return True  # systemd already says so
    if policy == "always":
        return True
    if policy == "no" or status.exit_status is None:
        return False
    timeout = status.result in ("timeout", "watchdog")
    if status.killed:
        clean = status.exit_status in _CLEAN_SIGNALS
        outcomes = {
            "on-success": clean,
            "on-failure": not clean,
            "on-abnormal": not clean,
            "on-abort": not clean,
            "on-watchdog": status.result == "watchdog",
        }
    else:
        clean = status.exit_status == 0
        outcomes = {
            "on-success": clean,
            "on-failure": not clean,
            "on-abnormal": timeout,
            "on-abort": False,
            "on-watchdog": status.result == "watchdog",
        }
    return outcomes.get(policy, False)


def watcher_policy(status: UnitStatus) -> str:
    """The unit's restart policy in the watcher's (Docker's) words; see the module docstring."""
    if not status.running:
        return "always" if will_restart(status.restart, status) else "no"
    if status.restart == "always":
        return "always"
    return "on-failure" if status.restart in ("on-failure", "on-abnormal", "on-abort") else "no"


# -- the adapter --------------------------------------------------------------------------------


class UnitProblem(Exception):
    """systemctl is missing or did not answer; the message says which and why. `no_systemd`: the
    host has no systemd to ask (not installed, no bus): the machine's lack, not a wrong name."""

    def __init__(self, message: str, *, no_systemd: bool = False):
        super().__init__(message)
        self.no_systemd = no_systemd


# systemctl's words when there is no systemd to talk to (a container, WSL without systemd).
_NO_BUS = ("Failed to connect to bus", "System has not been booted with systemd", "Failed to get D-Bus")


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        raise UnitProblem(f"{argv[0]} is not installed here (no systemd)", no_systemd=True)
    try:
        # errors="replace": systemctl may cut a multibyte character of a unit name in its message
        done = subprocess.run(
            argv, capture_output=True, text=True, errors="replace", timeout=_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise UnitProblem(f"{' '.join(argv[:3])} failed: {type(exc).__name__}") from exc
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        said = why[-1] if why else "no output"
        raise UnitProblem(
            f"{' '.join(argv[:3])} exited {done.returncode}: {said}",
            no_systemd=any(words in (done.stderr or "") for words in _NO_BUS),
        )
    return done.stdout


def unit_name(name: str) -> str:
    """'sglang-qwen' -> 'sglang-qwen.service' (systemctl's own completion of a bare name)."""
    return name if "." in name.rsplit("/", 1)[-1] else f"{name}.service"


class SystemdUnit:
    def __init__(self, name: str):
        if name.startswith("-"):  # systemctl would read it as an option
            raise InputError(
                "--unit", f"'{name}' starts with '-': systemctl would read it as an option", "name a service"
            )
        self.name = unit_name(name)

    def status(self) -> UnitStatus:
        text = _run(["systemctl", "show", self.name, "--property", ",".join(SHOW_PROPERTIES)])
        props = parse_show(text)
        if props.get("LoadState") == "not-found" or not props.get("Id"):
            raise UnitProblem(f"systemd knows no unit {self.name}")
        return UnitStatus.of(props)

    def unit_text(self) -> str:
        """The unit file with its drop-ins, as `systemctl cat` prints them."""
        return _run(["systemctl", "cat", "--no-pager", self.name])
