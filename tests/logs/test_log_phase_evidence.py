"""Where start-up was when a pasted tail printed no milestone: a step's own progress bar, torch's
words about a graph being captured, the graph runners' frames.

The lines are as their code writes them: SGLang 0.5.23 srt/model_loader/weight_utils.py (the tqdm
descs and BAR_FORMAT '{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [...]'),
model_executor/runner/decode_cuda_graph_runner.py ('Capturing batches (bs=.. avail_mem=.. GB)',
capture_one_shape), managers/scheduler.py (run_scheduler_process, the 'Scheduler hit an
exception: ' line), and torch's aten/src/ATen/cuda/CUDAGraphsUtils.cuh assertNotCapturing.
"""

from __future__ import annotations

import pytest

from kit.logs.analyze import analyze_text
from kit.logs.schema import validate

SITE = "/usr/local/lib/python3.10/dist-packages"
RUNNER = f"{SITE}/sglang/srt/model_executor/runner"
# SGLang's scheduler raising in its constructor, the paste cut before the step's own frame.
SCHEDULER_CUT = [
    "[2025-03-22 01:05:30 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 1748, in run_scheduler_process',
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
    f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 218, in __init__',
    "    self.tp_worker = TpWorkerClass(",
]
LOAD_BARS = [
    "Loading safetensors checkpoint shards:   0% Completed | 0/5 [00:00<?, ?it/s]",
    "Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:03<00:04,  1.74it/s]",
]
TORCH_IN_CAPTURE = (
    "torch._dynamo.exc.InternalTorchDynamoError: RuntimeError: Cannot call CUDAGeneratorImpl::current_seed"
    " during CUDA graph capture. If you need this call to be captured, please file an issue. Current"
    " cudaStreamCaptureStatus: cudaStreamCaptureStatusActive"
)


def _report(lines: list[str]):
    report = analyze_text("\n".join(lines) + "\n")
    validate(report.model_dump(mode="json"), "analyze")
    return report.outcome, report.phase and report.phase.value, report.phase_from


@pytest.mark.parametrize(
    "bar",
    [
        LOAD_BARS,
        ["Loading pt checkpoint shards:   0% Completed | 0/1 [00:12<?, ?it/s]"],
        ["Multi-thread loading pt checkpoint shards:  50% Completed | 1/2 [00:09<00:09,  9.10s/it]"],
    ],
    ids=["safetensors", "pt", "multi-thread-pt"],
)
def test_a_crash_after_the_weight_loaders_bar_is_in_load(bar):
    assert _report(bar + SCHEDULER_CUT) == ("crashed", "load", "progress")


def test_under_ray_the_bar_and_the_worker_lines_read_the_same():
    # Ray prefixes its actor's lines, not the bar tqdm draws on the driver's stderr.
    lines = LOAD_BARS + ["(WorkerDict pid=29239) " + line for line in SCHEDULER_CUT]
    head = ["(WorkerDict pid=29239) Actor use_remove_padding=True"]
    assert _report(head + lines) == ("crashed", "load", "progress")


def test_the_graph_runners_bar_is_capture_and_a_later_bar_wins():
    capture_bar = (
        "Capturing batches (bs=160 avail_mem=20.12 GB):  35%|███▌      | 8/23 [00:03<00:05,  2.61it/s]"
    )
    assert _report([*LOAD_BARS, capture_bar, *SCHEDULER_CUT]) == ("crashed", "capture", "progress")


def test_the_traceback_and_the_milestones_speak_before_the_bar():
    memory = [
        *SCHEDULER_CUT[:-1],
        "    self.tp_worker = TpWorkerClass(",
        f'  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 301, in initialize',
        "    self.init_memory_pool(",
    ]
    assert _report(LOAD_BARS + memory) == ("crashed", "memory", "exception")
    with_milestone = ["[2025-03-22 01:05:10 TP0] Load weight begin. avail mem=78.50 GB", *LOAD_BARS]
    assert _report(with_milestone + SCHEDULER_CUT) == ("crashed", "load", "milestones")


def test_a_bar_alone_is_no_crash():
    assert _report(LOAD_BARS)[0] == "hung"


def test_torchs_capture_words_are_capture_where_no_frame_names_the_step():
    # The end of the first exception (torch.compile under the capture), then the chained traceback
    # cut before the step's own frame.
    lines = [TORCH_IN_CAPTURE, "", "During handling of the above exception, another exception occurred:", ""]
    assert _report(lines + SCHEDULER_CUT[1:]) == ("crashed", "capture", "exception")
    cuda = "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    assert _report([cuda]) == ("crashed", "capture", "exception")


def test_torchs_capture_words_under_the_schedulers_loop_are_serving():
    # A graph captured lazily while serving (0.5.23 srt/multimodal/vit_cuda_graph_runner.py): the
    # frames name the step, torch's words do not.
    lines = [
        "[2026-01-02 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 2950, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
        f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 1001, in event_loop_normal',
        "    result = self.run_batch(batch)",
        TORCH_IN_CAPTURE.split(": ", 1)[1],
    ]
    assert _report(lines) == ("crashed", "serving", "exception")


def test_a_paste_that_starts_inside_the_graph_runners_capture_is_capture():
    # torch.compile's frames under SGLang's graph runner name no step of their own.
    lines = [
        f'  File "{RUNNER}/decode_cuda_graph_runner.py", line 1402, in capture_one_shape',
        "    out = run_once()",
        f'  File "{SITE}/torch/_dynamo/eval_frame.py", line 655, in _fn',
        "    return fn(*args, **kwargs)",
        f'  File "{SITE}/torch/_inductor/compile_fx.py", line 1520, in compile_fx',
        "    return compile_fx_inner(",
        "torch._inductor.exc.InductorError: RuntimeError: Triton Error [CUDA]: out of memory",
    ]
    assert _report(lines) == ("crashed", "capture", "exception")
    older = [
        f'  File "{SITE}/sglang/srt/model_executor/cpu_graph_runner.py", line 830, in capture_one_batch_size'
    ]
    assert _report(older + lines[1:]) == ("crashed", "capture", "exception")
