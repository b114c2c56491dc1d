"""How a rank that exited but is not yet reaped ended, read from /proc/PID/stat's exit_code field."""

from kit.runtime.docker_source import zombie_exit


def _stat(tmp_path, pid: int, exit_code: int) -> None:
    (tmp_path / str(pid)).mkdir()
    fields = ["Z", *["0"] * 48, str(exit_code)]  # state, ..., exit_code is the last (field 52)
    (tmp_path / str(pid) / "stat").write_text(f"{pid} (sglang::sched (x)) {' '.join(fields)}\n")


def test_zombie_exit_names_the_signal_or_the_code(tmp_path):
    _stat(tmp_path, 7, 9)  # killed by SIGKILL: waitpid's status is the signal number
    _stat(tmp_path, 8, 1 << 8)  # exit(1)
    assert zombie_exit(7, tmp_path) == "killed by SIGKILL"
    assert zombie_exit(8, tmp_path) == "exit code 1"
    assert zombie_exit(9, tmp_path) == "exited"  # gone already: nothing to read
