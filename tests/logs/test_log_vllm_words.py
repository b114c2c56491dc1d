"""vLLM passages built from vLLM's own printed strings (V0 and V1 engines) read right: milestones,
serving, crashes and the phase a traceback names. Each string is quoted from the vLLM file that
prints it (kit/logs/patterns.toml's vllm section and its vLLM exception_phase rules cite them)."""

# ruff: noqa: E501
from __future__ import annotations

from kit.logs import analyze_text


def _report(lines: list[str]):
    return analyze_text("\n".join(lines) + "\n")


V0_STARTUP = [
    "INFO 08-19 07:50:40 api_server.py:339] vLLM API server version 0.5.4",
    "INFO 08-19 07:50:55 model_runner.py:720] Starting to load model google/gemma-2-9b-it...",
    "INFO 08-19 07:51:03 model_runner.py:732] Loading model weights took 2.3463 GB",
    "INFO 08-19 07:51:08 distributed_gpu_executor.py:56] # GPU blocks: 22982, # CPU blocks: 6241",
    "INFO 08-19 07:51:12 model_runner.py:1024] Capturing the model for CUDA graphs. This may lead to unexpected"
    " consequences if the model is not static. To run the model in eager mode, set 'enforce_eager=True' or use"
    " '--enforce-eager' in the CLI.",
    "INFO 08-19 07:51:30 model_runner.py:1221] Graph capturing finished in 18 secs.",
    "INFO 08-19 07:51:31 api_server.py:292] Starting vLLM API server on http://0.0.0.0:8000",
    "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
]


def test_v0_startup_words_walk_every_phase_and_end_in_warmup():
    report = _report(V0_STARTUP)
    assert (report.outcome, report.last_milestone, report.phase) == ("hung", "http.up", "warmup")
    for cut, milestone, phase in (
        (3, "load.end", "memory"),
        (4, "kv.ready", "capture"),
        (5, "capture.begin", "capture"),
        (6, "capture.end", "warmup"),
    ):
        report = _report(V0_STARTUP[:cut])
        assert (report.last_milestone, report.phase) == (milestone, phase), cut


def test_v0_engine_stats_after_startup_are_serving_and_its_death_is_a_crash_in_serving():
    serving = [
        *V0_STARTUP,
        "INFO 08-19 07:52:01 metrics.py:406] Avg prompt throughput: 12.3 tokens/s, Avg generation throughput:"
        " 45.6 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, CPU KV"
        " cache usage: 0.0%.",
    ]
    report = _report(serving)
    assert (report.outcome, report.phase) == ("ready", "serving")
    report = _report(
        [
            *serving,
            "ERROR 08-19 07:53:05 client.py:300] RuntimeError('Engine process (pid 76) died.')",
            "CRITICAL 08-19 07:53:10 launcher.py:101] MQLLMEngine is already dead, terminating server process",
            'INFO:     10.0.0.1:28304 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
        ]
    )
    assert (report.outcome, report.phase) == ("crashed", "serving")


def test_v1_startup_words_and_a_capture_bar_cut_short_is_hung_in_capture():
    lines = [
        "(EngineCore_0 pid=4108) INFO 05-28 07:59:50 [gpu_model_runner.py:1329] Starting to load model Qwen/Qwen3-8B...",
        "(EngineCore_0 pid=4108) INFO 05-28 08:00:10 [default_loader.py:262] Loading weights took 3.12 seconds",
        "(EngineCore_0 pid=4108) INFO 05-28 08:00:11 [gpu_model_runner.py:1353] Model loading took 15.27 GiB and"
        " 4.01 seconds",
        "(EngineCore_0 pid=4108) INFO 05-28 08:00:26 [gpu_worker.py:462] Available KV cache memory: 6.37 GiB",
        "(EngineCore_0 pid=4108) INFO 05-28 08:00:26 [kv_cache_utils.py:1710] GPU KV cache size: 46,368 tokens",
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|          | 0/51 [00:00<?, ?it/s]",
    ]
    report = _report(lines)
    assert (report.outcome, report.last_milestone, report.phase) == ("hung", "capture.begin", "capture")
    report = _report(
        [
            *lines,
            "(EngineCore_0 pid=4108) INFO 05-28 08:00:40 [gpu_model_runner.py:2290] Graph capturing finished in 14"
            " secs, took 0.52 GiB",
            "(EngineCore_0 pid=4108) INFO 05-28 08:00:41 [core.py:193] init engine (profile, create kv cache, warmup"
            " model) took 30.11 seconds",
            "(APIServer pid=1) INFO 05-28 08:00:45 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000",
        ]
    )
    assert (report.last_milestone, report.phase) == ("http.up", "warmup")


def test_v1_engine_dead_in_a_request_is_a_crash_in_serving():
    prefix = "(APIServer pid=175) ERROR 02-06 15:01:49 [serving_chat.py:1333] "
    report = _report(
        [
            prefix + line
            for line in (
                "Error in chat completion stream generator.",
                "Traceback (most recent call last):",
                '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/async_llm.py", line 439, in generate',
                "    out = q.get_nowait() or await q.get()",
                '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/output_processor.py", line 70, in get',
                "    raise output",
                "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for"
                " the root cause.",
            )
        ]
    )
    assert (report.outcome, report.phase, report.phase_from) == ("crashed", "serving", "exception")


def test_v1_engine_core_busy_loop_traceback_is_serving_and_engine_core_death_is_fatal():
    prefix = "(EngineCore_0 pid=2651) ERROR 06-11 11:46:39 [core.py:517] "
    report = _report(
        [
            prefix + line
            for line in (
                "Traceback (most recent call last):",
                '  File "/vllm/vllm/v1/engine/core.py", line 508, in run_engine_core',
                "    engine_core.run_busy_loop()",
                '  File "/vllm/vllm/v1/engine/core.py", line 535, in run_busy_loop',
                "    self._process_engine_step()",
                '  File "/vllm/vllm/v1/worker/gpu_model_runner.py", line 1203, in execute_model',
                "    hidden_states = self.model(",
                "RuntimeError: CUDA error: an illegal memory access was encountered",
            )
        ]
        + [
            "(APIServer pid=2600) ERROR 06-11 11:46:40 [core_client.py:562] Engine core proc EngineCore_0 died"
            " unexpectedly, shutting down client.",
        ]
    )
    assert (report.outcome, report.phase) == ("crashed", "serving")


def test_a_worker_method_error_names_the_step_its_cut_traceback_does_not():
    prefix = "(RayWorkerWrapper pid=4139, ip=10.0.0.2) ERROR 07-03 14:43:50 worker_base.py:148] "
    for method, phase in (
        ("init_device", "init"),
        ("load_model", "load"),
        ("determine_num_available_blocks", "memory"),
    ):
        report = _report(
            [
                prefix + line
                for line in (
                    f"Error executing method {method}. This might cause deadlock in distributed execution.",
                    "Traceback (most recent call last):",
                    '  File "/opt/vllm/worker/worker_base.py", line 140, in execute_method',
                    "    return executor(*args, **kwargs)",
                )
            ]
        )
        assert (report.outcome, report.phase) == ("crashed", phase), method


def test_v1_capture_under_initialize_kv_caches_is_capture_not_memory():
    report = _report(
        [
            "Traceback (most recent call last):",
            '  File "/vllm/vllm/v1/engine/core.py", line 75, in __init__',
            "    self._initialize_kv_caches(vllm_config)",
            '  File "/vllm/vllm/v1/engine/core.py", line 150, in _initialize_kv_caches',
            "    self.model_executor.initialize_from_config(kv_cache_configs)",
            '  File "/vllm/vllm/v1/worker/gpu_worker.py", line 240, in compile_or_warm_up_model',
            "    self.model_runner.capture_model()",
            '  File "/vllm/vllm/v1/worker/gpu_model_runner.py", line 1900, in capture_model',
            "    self._dummy_run(num_tokens)",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
    )
    assert (report.outcome, report.phase) == ("crashed", "capture")


def test_ray_worker_death_is_a_fatal_crash():
    report = _report(
        [
            "(raylet) A worker died or was killed while executing a task by an unexpected system error. To"
            " troubleshoot the problem, check the logs for the dead worker.",
        ]
    )
    assert report.outcome == "crashed"


def test_engine_dead_traceback_after_serving_is_fatal():
    prefix = "(APIServer pid=1) ERROR 02-05 16:55:27 [async_llm.py:551] "
    report = _report(
        [
            "(APIServer pid=1) INFO 02-05 16:55:00 [loggers.py:118] Engine 000: Avg prompt throughput: 1.5 tokens/s,"
            " Avg generation throughput: 10.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.1%",
        ]
        + [
            prefix + line
            for line in (
                "AsyncLLM output_handler failed.",
                "Traceback (most recent call last):",
                '  File "/vllm/vllm/v1/engine/async_llm.py", line 521, in output_handler',
                "    outputs = await engine_core.get_output_async()",
                "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for"
                " the root cause.",
            )
        ]
    )
    assert (report.outcome, report.phase) == ("crashed", "serving")
