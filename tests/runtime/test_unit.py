"""systemd units, pure: Restart= as systemd reads a unit file and its drop-ins, `systemctl show`, and
whether systemd starts a service again after a given ending (systemd.service(5)'s table)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.runtime.unit import (
    RESTART_VALUES,
    UnitStatus,
    parse_show,
    restart_of,
    service_settings,
    split_cat,
    unit_name,
    watcher_policy,
    will_restart,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "journal"


def test_the_recorded_unit_with_its_drop_in_restarts_on_failure():
    parts = split_cat((FIXTURES / "sglang-tiny.service").read_text())
    assert len(parts) == 2  # the unit file and its drop-in, as `systemctl cat` prints them
    assert restart_of(parts[0]) == "no"
    assert restart_of(*parts) == "on-failure"  # the drop-in resets, then sets
    settings = service_settings(*parts)
    assert settings["ExecStart"].split()[:3] == ["/srv/sglang/venv/bin/python", "-m", "sglang.launch_server"]
    assert "--port 30000" in " ".join(settings["ExecStart"].split())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[Service]\nRestart=always\n", "always"),
        ("[Unit]\nRestart=always\n[Service]\nType=simple\n", "no"),  # outside [Service]
        ("[Service]\nRestart=always\nRestart=\n", "no"),  # an empty assignment resets
        ("[Service]\n# Restart=always\n;Restart=always\n", "no"),
        ("[Service]\nRestart = on-abnormal \n", "on-abnormal"),
        ("[Service]\nRestart=sometimes\n", "no"),  # systemd ignores an invalid value
        ("[Service]\nExecStart=/bin/x \\\n  Restart=always\n", "no"),  # inside a continuation
    ],
)
def test_restart_is_read_as_systemd_reads_it(text, expected):
    assert restart_of(text) == expected


_values = st.sampled_from([*RESTART_VALUES, ""])
_noise = st.sampled_from(["Type=simple", "# Restart=always", "; x", "", "RestartSec=5", "User=x"])
_section = st.sampled_from(["Service", "Unit", "Install"])


@given(
    st.lists(
        st.lists(
            st.tuples(
                _section,
                st.lists(
                    st.one_of(_values.map(lambda v: ("R", v)), _noise.map(lambda n: ("N", n))), max_size=6
                ),
            ),
            max_size=4,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_restart_is_the_last_non_empty_assignment_in_service_sections(files):
    """A model of systemd's rule over generated unit files and drop-ins: in [Service] sections, in
    file order, a value sets Restart= and an empty assignment resets it to the default."""
    texts, model = [], "no"
    for sections in files:
        lines = []
        for section, entries in sections:
            lines.append(f"[{section}]")
            for kind, value in entries:
                if kind == "R":
                    lines.append(f"Restart={value}")
                    if section == "Service":
                        model = value or "no"
                else:
                    lines.append(value)
        texts.append("\n".join(lines) + "\n")
    assert restart_of(*texts) == model


@given(st.text(max_size=300))
def test_any_text_gives_a_known_restart_value(text):
    assert restart_of(text) in RESTART_VALUES


SHOW = """Id=sglang-qwen.service
LoadState=loaded
MainPID=0
ActiveState=activating
SubState=auto-restart
Result=signal
Restart=on-failure
NRestarts=2
ExecMainStatus=9
ExecMainCode=2
ExecMainStartTimestampMonotonic=123456789
StandardOutput=append:/var/log/sglang.log
"""


def test_systemctl_show_of_a_unit_waiting_to_restart():
    status = UnitStatus.of(parse_show(SHOW))
    assert (status.name, status.main_pid, status.running) == ("sglang-qwen.service", None, False)
    assert (status.killed, status.exit_status, status.exit_code) == (True, 9, 137)
    assert status.restarts == 2 and status.started_mono_s == pytest.approx(123.456789)
    assert status.log_file == "/var/log/sglang.log"
    assert will_restart("no", status)  # systemd said auto-restart: that decides
    assert watcher_policy(status) == "always"


def _ended(code: int, *, killed: bool, result: str = "exit-code") -> UnitStatus:
    props = {"Id": "u.service", "ActiveState": "failed", "SubState": "failed", "Result": result}
    props |= {"ExecMainStatus": str(code), "ExecMainCode": "2" if killed else "1"}
    return UnitStatus.of(props)


@pytest.mark.parametrize(
    ("policy", "ending", "restarts"),
    [
        ("on-failure", _ended(1, killed=False), True),
        ("on-failure", _ended(0, killed=False, result="success"), False),
        ("on-failure", _ended(9, killed=True, result="signal"), True),  # SGLang's self-SIGKILL
        ("on-failure", _ended(15, killed=True, result="signal"), False),  # SIGTERM is clean
        ("on-abnormal", _ended(9, killed=True, result="signal"), True),
        ("on-abnormal", _ended(1, killed=False), False),
        ("on-abort", _ended(6, killed=True, result="core-dump"), True),
        ("on-abort", _ended(1, killed=False), False),
        ("on-success", _ended(0, killed=False, result="success"), True),
        ("on-success", _ended(1, killed=False), False),
        ("always", _ended(0, killed=False, result="success"), True),
        ("no", _ended(9, killed=True, result="signal"), False),
    ],
)
def test_systemd_restart_table(policy, ending, restarts):
    assert will_restart(policy, ending) is restarts
    stopped = UnitStatus.of({**_props(ending), "Restart": policy})
    assert watcher_policy(stopped) == ("always" if restarts else "no")


def _props(status: UnitStatus) -> dict[str, str]:
    return {
        "Id": status.name,
        "ActiveState": status.active,
        "SubState": status.sub,
        "Result": status.result,
        "ExecMainStatus": str(status.exit_status),
        "ExecMainCode": "2" if status.killed else "1",
    }


@pytest.mark.parametrize(
    ("policy", "seen"),
    [("on-failure", "on-failure"), ("on-abnormal", "on-failure"), ("always", "always"), ("no", "no")],
)
def test_a_running_unit_tells_the_watcher_whether_a_crash_may_be_followed(policy, seen):
    running = UnitStatus.of(
        {"Id": "u", "ActiveState": "active", "SubState": "running", "MainPID": "7", "Restart": policy}
    )
    assert running.running and watcher_policy(running) == seen


def test_a_bare_name_is_a_service():
    assert unit_name("sglang-qwen") == "sglang-qwen.service"
    assert unit_name("sglang@1.service") == "sglang@1.service"


@pytest.mark.parametrize(
    ("stderr", "exit_code"),
    [
        ("Failed to connect to bus: Host is down", 3),  # no systemd here: the machine's lack
        ("System has not been booted with systemd as init system (PID 1). Can't operate.", 3),
        ("Unit nope.service could not be found.", 2),  # systemd answered: the name is wrong
    ],
)
def test_watch_unit_without_a_systemd_bus_is_environment(monkeypatch, stderr, exit_code):
    import subprocess

    import kit.runtime.unit as unit
    from kit.errors import KitError
    from kit.runtime.host_source import UnitProcesses

    monkeypatch.setattr(unit.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(
        unit.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 1, "", stderr)
    )
    with pytest.raises(KitError) as info:
        UnitProcesses(unit.SystemdUnit("nope"))
    assert info.value.exit_code == exit_code
