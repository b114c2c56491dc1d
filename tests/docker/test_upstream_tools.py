"""The upstream tools against the real CPU rehearsal image (torch 2.13.0+cpu).

1. PyTorch's flight recorder: whether torch 2.13's gloo collectives are recorded (they are) and can
   be analysed (they cannot: fr_trace stops on a gloo dump's unnamed group) or dumped from outside
   (they cannot: the pipe and the dump on timeout are ProcessGroupNCCL's, not in the CPU build), and
   fr_trace's report on dumps in ProcessGroupNCCL's format (tests/fixtures/flight-recorder), read by
   kit/logs/flight_recorder.py.
2. `kit up tiny` with SGLang's own injector for a scheduler stuck in init
   (`--set env.SGLANG_TEST_STUCK_SCHEDULER_INIT=300`: sglang 0.5.23 srt/environ.py; the scheduler
   sleeps in Scheduler.__init__ after the model worker is built), watched at the same time by a
   non-root user in the docker group (`kit watch`: no ptrace on root's processes, so /proc/PID/io is
   unreadable and the writes come from the container's cgroup): both HUNG in the stage the schedulers
   sleep in, both with the sleeping ranks' stacks, both with the upstream tools asked or skipped with
   the reason (no NCCL on the rehearsal).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from kit.logs.flight_recorder import parse_report

pytestmark = [pytest.mark.docker, pytest.mark.slow]
KIT = [sys.executable, "-m", "kit"]
FIXTURES = Path(__file__).parents[1] / "fixtures" / "flight-recorder"
STUCK = "env.SGLANG_TEST_STUCK_SCHEDULER_INIT=300"

# Two gloo ranks that both join two all_reduces, with the recorder on, each dumping its buffer; then
# fr_trace reads the NCCL-format fixtures (pickled here from their JSON, as torch writes them).
_IN_IMAGE = r"""
import json, os, pickle, subprocess, sys, tempfile
import torch, torch.distributed as dist, multiprocessing as mp

def rank(r, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29613", TORCH_FR_BUFFER_SIZE="100")
    dist.init_process_group("gloo", rank=r, world_size=2)
    t = torch.ones(4)
    dist.all_reduce(t); dist.all_reduce(t)
    open(f"{out}/fr_rank_{r}", "wb").write(torch._C._distributed_c10d._dump_fr_trace())
    dist.destroy_process_group()

def fr_trace(folder):
    done = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", folder,
                           "-p", "fr_rank_", "-v"], capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr

gloo = tempfile.mkdtemp()
procs = [mp.Process(target=rank, args=(r, gloo)) for r in range(2)]
[p.start() for p in procs]; [p.join(60) for p in procs]
recorded = pickle.load(open(gloo + "/fr_rank_0", "rb"))
gloo_rc, gloo_report = fr_trace(gloo)
reports = {}
for case in ("missing-rank", "all-entered"):
    folder = tempfile.mkdtemp()
    for r in (0, 1):
        dump = json.load(open(f"/fixtures/{case}/fr_rank_{r}.json"))
        pickle.dump(dump, open(f"{folder}/fr_rank_{r}", "wb"))
    reports[case] = fr_trace(folder)
lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
names = open(lib, "rb").read()
print(json.dumps({
    "torch": torch.__version__,
    "gloo_entries": [e["profiling_name"] for e in recorded["entries"]],
    "gloo_pg_config": recorded["pg_config"],
    "gloo_rc": gloo_rc, "gloo_last": gloo_report.strip().splitlines()[-1],
    "pipe_in_cpu_build": b"TORCH_NCCL_DEBUG_INFO_PIPE_FILE" in names,
    "dump_on_timeout_in_cpu_build": b"TORCH_NCCL_DUMP_ON_TIMEOUT" in names,
    "reports": reports,
}))
"""


def test_the_flight_recorder_on_the_rehearsals_torch(built_image):
    from kit.launch import resolve

    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)
    done = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--label",
            "io.kit.test=upstream-tools",
            "-v",
            f"{FIXTURES}:/fixtures:ro",
            spec.image_ref,
            "python",
            "-c",
            _IN_IMAGE,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["torch"].startswith("2.13.0")
    # gloo collectives are recorded ...
    assert seen["gloo_entries"] == ["gloo:all_reduce", "gloo:all_reduce"]
    # ... under a group config fr_trace cannot pair, so a gloo dump is not analysable,
    assert list(seen["gloo_pg_config"]) == [""] and seen["gloo_rc"] != 0 and "KeyError" in seen["gloo_last"]
    # and nothing outside a rank can ask for one in this build.
    assert not seen["pipe_in_cpu_build"] and not seen["dump_on_timeout_in_cpu_build"]
    # fr_trace on dumps in ProcessGroupNCCL's format, read by the kit:
    code, text = seen["reports"]["missing-rank"]
    assert code == 0
    assert (
        parse_report(text)
        .lines()[0]
        .startswith("flight recorder: nccl:all_reduce #3 (group 0:default_pg): rank 1 never joined")
    )
    code, text = seen["reports"]["all-entered"]
    assert code == 0
    assert (
        parse_report(text)
        .lines()[0]
        .startswith("flight recorder: every rank (0, 1) entered nccl:all_reduce #3")
    )


WATCHER = "kit-upstream-test"
PING = "import docker, kit; docker.from_env().ping()"


def _closed_dirs(path: Path) -> list[Path]:
    """The folders above PATH that other users may not pass (pyenv under /root, mode 700)."""
    return [p for p in reversed(path.parents) if not p.stat().st_mode & 0o001]


@pytest.fixture
def docker_user():
    """A user in the docker group, not root: what a colleague without sudo runs the kit as. This
    checkout's interpreter may sit under /root (pyenv): its folders get the traverse bit (o+x, not
    read) for the test, and their modes back afterwards."""
    if os.geteuid() != 0:
        pytest.skip("creating a user needs root (CI runs as root)")
    made = False
    try:
        pwd.getpwnam(WATCHER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--groups", "docker", WATCHER], check=True)
        made = True
    home = Path(tempfile.mkdtemp(prefix="kit-upstream-user-"))
    shutil.chown(home, WATCHER)
    opened = {p: p.stat().st_mode & 0o7777 for p in _closed_dirs(Path(os.path.realpath(sys.executable)))}
    try:
        for folder, mode in opened.items():
            folder.chmod(mode | 0o001)
        check = subprocess.run(
            ["runuser", "-u", WATCHER, "--", sys.executable, "-c", PING],
            capture_output=True,
            text=True,
            env={**os.environ, "HOME": str(home)},
        )
        assert check.returncode == 0, (
            f"{WATCHER} cannot run this checkout's kit or reach the engine (the checkout must be "
            f"readable by other users): {check.stderr[-500:]}"
        )
        yield WATCHER, home
    finally:
        for folder, mode in opened.items():
            folder.chmod(mode)
        shutil.rmtree(home, ignore_errors=True)
        if made:
            subprocess.run(["userdel", WATCHER], check=False)


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_scheduler_stuck_in_init_is_hung_where_it_sleeps_for_root_and_for_a_docker_group_user(
    built_image, new_servers, docker_user
):
    from kit.launch import resolve

    spec = resolve("tiny")
    built_image(spec.image_ref, spec.image)
    user, home = docker_user
    up = subprocess.Popen(
        [*KIT, "up", "tiny", "--set", STUCK, "--stall", "capture=15", "--keep", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = up.stdout.readline()
    name = json.loads(first)["container"]
    watched: dict = {}

    def watch() -> None:
        env = {**os.environ, "HOME": str(home), "KIT_CACHE_DIR": str(home / "cache")}
        done = subprocess.run(
            ["runuser", "-u", user, "--", *KIT, "watch", name, "--stall", "capture=15", "--json"],
            capture_output=True,
            text=True,
            timeout=400,
            env=env,
        )
        watched.update(code=done.returncode, lines=_json_lines(done.stdout), err=done.stderr)

    watcher = threading.Thread(target=watch)
    watcher.start()
    out, err = up.communicate(timeout=400)
    watcher.join(400)
    lines = [json.loads(first), *_json_lines(out)]
    result = lines[-1]
    assert (up.returncode, result["verdict"]) == (4, "hung"), (result.get("verdict"), err[-1500:])
    assert watched.get("lines"), watched.get("err", "")[-1500:]
    seen = watched["lines"][-1]
    assert (watched["code"], seen["verdict"]) == (4, "hung"), seen

    for who, got in (("kit up", result), ("kit watch as a docker-group user", seen)):
        # The stage after the memory pool, where 0.5.23 sleeps (scheduler.py:571 on this image).
        assert got["phase"] == "capture", (who, got["phase"])
        stacks = {s["rank"]: s for s in got["stacks"]}
        assert set(stacks) == {"TP0", "TP1"}, (who, got["stacks"])
        assert all("__init__" in s["where"] for s in stacks.values()), (who, got["stacks"])
        # The stuck ranks named from their stacks: both *sleeping* (py-spy: an idle thread in
        # Scheduler.__init__), in two samples that confirm the hang.
        assert {s["state"] for s in stacks.values()} == {"sleeping"}, (who, got["stacks"])
        samples = got["stack_samples"]
        assert [sorted((r["rank"], r["state"]) for r in s["ranks"]) for s in samples] == [
            [("TP0", "sleeping"), ("TP1", "sleeping")]
        ] * 2, (who, samples)
        assert got["rests_on"].startswith("stacks and counters"), (who, got["rests_on"])
        said = "\n".join(got["upstream"])
        assert "NCCL RAS: not asked (NCCL is not loaded in any process of the server" in said, who
        assert "flight recorder: no dump (no rank made a dump pipe" in said, who
    # Root reads the processes' own write counters; the docker-group user cannot (no ptrace on root's
    # processes) and falls back on the container's cgroup, where the engine reports block I/O. A host
    # whose block layer counts nothing for the cgroup (this rehearsal's sandbox: blkio "Total 0", the
    # engine's list empty) leaves the writes unknown, never zero: the verdict then rests on the stacks.
    assert "writes (/proc/PID/io)" in result["counters"]["read"]
    hidden = seen["counters"]
    assert not any(c.startswith("writes (/proc/PID/io)") for c in hidden["read"]), hidden
    via_cgroup = any(c.startswith("writes (the container's cgroup") for c in hidden["read"])
    assert via_cgroup or "writes" in hidden["unread"], hidden
    bundle = Path(result["bundle"])
    assert bundle.is_file()
    listed = subprocess.run(["tar", "-tzf", str(bundle)], capture_output=True, text=True, check=True).stdout
    assert "/stacks/TP0.txt" in listed and "/stacks/TP1.txt" in listed
    for sample in ("TP0.sample1", "TP0.sample2", "TP1.sample1", "TP1.sample2"):
        assert f"/stacks/{sample}.txt" in listed, listed
    shown = subprocess.run([*KIT, "bundle", "show", str(bundle)], capture_output=True, text=True, check=True)
    assert "Stack samples the verdict rests on" in shown.stdout and "- sample 2 at " in shown.stdout
    # py-spy names the method with its class from the host ("Scheduler.__init__"), bare inside.
    assert re.search(r"TP1 sleeping: `(Scheduler\.)?__init__", shown.stdout), shown.stdout[-3000:]
    assert [c.name for c in new_servers()] == [name]  # --keep: the test's cleanup removes it
