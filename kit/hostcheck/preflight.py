"""The preflight step (the in-image rank script on this host's Python, read back through the kit's own
PreflightRun, and the image probe's all-reduce) and the pytest step (the gpu tests of
tests/runtime/test_gpu_host.py: their log and JUnit XML beside the summary, docs/evidence/)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from kit.hostcheck.record import ROOT, Status, dump_json, jsonable, sh


def ranks_run(
    work: Path, world: int, timeout: float, *, gpus: bool = True, python: str = sys.executable
) -> dict:
    """The in-image rank script (kit/pivot/inimage/ranks.py) on this host's PYTHON, with the request
    `kit preflight` sends (rank_request over the default target of a host with or without GPUs: NCCL
    on cuda, else gloo), read back through the kit's own PreflightRun. Only torch's timeouts are
    this check's own, so a rank that never comes costs TIMEOUT, not the plan's minutes.
    tests/runtime/test_gpu_host.py runs it too."""
    from kit.pivot.preflight import preflight_spec, rank_request
    from kit.pivot.preflight_container import RANKS_SCRIPT, SGLANG_GROUPS
    from kit.pivot.steps import STEPS, PreflightRun, device_plan, nccl_version, step_rows, transports

    folder = work / f"preflight-{world}"
    folder.mkdir(parents=True, exist_ok=True)
    for script in (RANKS_SCRIPT, SGLANG_GROUPS):
        shutil.copyfile(script, folder / script.name)
    spec = preflight_spec(None, overrides=(f"tp={world}",), host_has_gpus=gpus)
    plan = device_plan(spec.device)
    request = {
        **rank_request(spec, world, plan, None, {"NCCL_DEBUG": "INFO"}),
        "collective_timeout_s": timeout,
        "run_timeout_s": timeout,
    }
    (folder / "request.json").write_text(json.dumps(request))
    t0 = time.monotonic()
    code, stdout, stderr = sh(
        [python, "-u", str(folder / RANKS_SCRIPT.name), str(folder / "request.json")],
        timeout=timeout + 15,
        cwd=folder,
        env={**os.environ, "NCCL_DEBUG": "INFO"},
    )
    seconds = round(time.monotonic() - t0, 1)
    run = PreflightRun(world, STEPS, plan, 0.0)
    for line in (stdout + "\n" + stderr).splitlines():
        run.feed_line(line, 1.0)
    verdict = run.verdict(1.0) or run.verdict(1e9)
    return {
        "world_size": world,
        "device": spec.device,
        "exit_code": code,
        "seconds": seconds,
        "verdict": None if verdict is None else jsonable(verdict),
        "steps": [jsonable(row) for row in step_rows(run, verdict)],
        "sweep": list(run.sweep),
        "nccl": nccl_version(run.nccl_lines),
        "transports": list(transports(run.nccl_lines)),
        "setup": jsonable(run.setup),
        "errors": [jsonable(e) for e in run.errors + run.failures],
        "nccl_lines": run.nccl_lines[:60],
        "stdout_tail": stdout[-4000:],
        "stderr_tail": stderr[-4000:],
    }


def step_preflight(args, status: Status) -> None:
    work, data = Path(args.work), {}
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:  # recorded, the step goes on
        status.error(f"torch: {type(exc).__name__}: {exc}")
        gpus = 0
    device = "cuda" if gpus else "cpu"
    if gpus == 0:  # the same code on gloo: a rehearsal of this step, not a GPU result
        status.finding("no CUDA device: the rank run is rehearsed on gloo (cpu), the probe not tried")
    for world in sorted({1, min(gpus, 2) or 1, gpus + 1}) if gpus else [2]:
        name = f"ranks-{world}-{device}"
        try:
            result = data[name] = ranks_run(work, world, timeout=40, gpus=bool(gpus))
        except Exception as exc:
            status.error(f"{name}: {type(exc).__name__}: {exc}")
            continue
        verdict = result["verdict"] or {}
        said = (
            f"{name}: {verdict.get('verdict')} (exit {result['exit_code']}, {result['seconds']} s); "
            f"NCCL {result['nccl']}; transports {result['transports']}; "
            f"steps {[(r.get('step'), r.get('status')) for r in result['steps']]}"
        )
        if world == 1:  # a world of one has no peer pairs: nothing crossed between GPUs
            said += "; one rank: no peer traffic tested"
        # more ranks than GPUs: the kit must name the failure, not hang or pass
        if device == "cuda" and world > gpus:
            failed = verdict.get("verdict") not in (None, "ok")
            (status.ok if failed else status.finding)(
                f"{said}; errors {[str(e)[:160] for e in result['errors'][:2]]}"
            )
        else:
            (status.ok if verdict.get("verdict") == "ok" else status.finding)(said)
    if gpus:
        probe = ROOT / "kit" / "images" / "inimage" / "verify.py"
        code, stdout, stderr = sh(
            [sys.executable, str(probe), "--all-reduce", "nccl", "--collective-timeout", "40"], timeout=90
        )
        marked = [line for line in stdout.splitlines() if line.startswith("KIT-VERIFY-JSON ")]
        try:
            answer = json.loads(marked[-1].split(" ", 1)[1]) if marked else None
        except ValueError:
            answer = None
        data["image-probe"] = {
            "exit_code": code,
            "answer": answer,
            "stdout_tail": stdout[-3000:],
            "stderr_tail": stderr[-3000:],
        }
        if answer is None:
            status.error(f"image probe: no KIT-VERIFY-JSON line (exit {code}): {stderr.strip()[-200:]}")
        else:
            keys = ("all_reduce", "collective", "kernels", "gpus", "cuda")
            status.ok("image probe: " + "; ".join(f"{k}={str(answer[k])[:160]}" for k in keys if k in answer))
    dump_json(Path(args.out) / "preflight.json", data)


# -- pytest: the same results as gpu tests, their log and JUnit XML beside the summary ------------

GPU_HOST_TESTS = "tests/runtime/test_gpu_host.py"


def step_pytest(args, status: Status) -> None:
    """tests/runtime/test_gpu_host.py under pytest on this host: pytest.txt and pytest-junit.xml in OUT,
    so a GPU run's summary and its test report are committed side by side (docs/evidence/)."""
    from kit.testing.junit import counts

    out = Path(args.out)
    junit = out / "pytest-junit.xml"
    code, smi, _ = sh(["nvidia-smi", "-L"], timeout=20)
    gpus = code == 0 and "GPU " in smi
    # The kit's pytest plugin: by its entry point where the kit is installed, else named (a bare copy).
    from importlib.metadata import entry_points

    installed = any(e.value.startswith("kit.testing.plugin") for e in entry_points(group="pytest11"))
    argv = [sys.executable, "-m", "pytest", *([] if installed else ["-p", "kit.testing.plugin"])]
    argv += ["-m", "gpu", GPU_HOST_TESTS]
    argv += ["-v", "-rs", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    argv += ["--kit-require-gpu"] if gpus else []
    env = {**os.environ, "KIT_TORCH_PYTHON": os.environ.get("KIT_TORCH_PYTHON", sys.executable)}
    code, stdout, stderr = sh(argv, timeout=args.pytest_limit, cwd=ROOT, env=env)
    (out / "pytest.txt").write_text(f"$ {' '.join(argv)}\n{stdout}{stderr}\nexit {code}\n", encoding="utf-8")
    tail = (stdout.strip().splitlines() or ["(no output)"])[-1]
    if not junit.exists():
        status.error(f"pytest wrote no JUnit XML (exit {code}): {tail}")
        return
    tally = counts(junit.read_text(encoding="utf-8"))
    said = f"{tally.line()} (exit {code}{'' if gpus else ', no GPU: gpu tests skip'}): {tail.strip('= ')}"
    # A run that skipped everything showed nothing: a finding, as a failed test is.
    (status.ok if code == 0 and tally.ran else status.finding)(said)
