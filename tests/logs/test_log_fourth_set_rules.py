"""Causes and phases of issue 37's fourth pass, each from upstream code or behaviour cited where the
rule lives (causes.toml, patterns.toml, kit/logs/reducer.py). Lines are real: from the tuned corpora
(the fourth set is tuned on since this pass), or the upstream format strings filled in."""

# ruff: noqa: E501 (real log lines)

from __future__ import annotations

from report_views import cause_ids

from kit.logs import Phase, analyze_text

# SGLang's floor (srt/model_executor/model_runner*.py): a capability under 7.5 is refused outright; the
# capability line is past the tail by the time the traceback ends.
SM75_FLOOR = """\
[2025-02-12 02:56:48 TP0] Compute capability below sm80. Use float16 due to lack of bfloat16 support.
[2025-02-12 02:56:48 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1787, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 240, in __init__
    self.tp_worker = TpWorkerClass(
  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 63, in __init__
    self.worker = TpModelWorker(server_args, gpu_id, tp_rank, dp_rank, nccl_port)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 68, in __init__
    self.model_runner = ModelRunner(
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 186, in __init__
    self.load_model()
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 293, in load_model
    raise RuntimeError("SGLang only supports sm75 and above.")
RuntimeError: SGLang only supports sm75 and above.
"""

# A loader narrowing a rank's slice past the tensor's end (torch's narrow check).
NARROW = """\
[2026-05-25 17:26:18 TP0] Load weight begin. avail mem=31.38 GB
  File "/home/u/sglang/python/sglang/srt/layers/moe/fused_moe_triton/layer.py", line 379, in _load_model_weight_or_group_weight_scale
    self._load_w2(
  File "/home/u/sglang/python/sglang/srt/layers/moe/fused_moe_triton/layer.py", line 540, in _load_w2
    loaded_weight = loaded_weight.narrow(
                    ^^^^^^^^^^^^^^^^^^^^^
RuntimeError: start (6) + length (6) exceeds dimension size (6).

[2026-05-25 17:26:25] Received sigquit from a child process. It usually means the child failed.
"""

# An RL framework's Ray actor: the engine's own API (update_weights_from_tensor -> flush_cache) after
# torch's OOM, no milestone.
RL_ENGINE_OOM = """\
(WorkerDict pid=12504) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.34 GiB. GPU 0 has a total capacity of 94.50 GiB of which 5.03 GiB is free. Process 12504 has 14.34 GiB memory in use.
(WorkerDict pid=12504)
(WorkerDict pid=12504) [2025-05-09 20:58:44] Received sigquit from a child process. It usually means the child failed.
(WorkerDict pid=12504) /usr/local/lib/python3.12/dist-packages/sglang/srt/entrypoints/verl_engine.py:160: RuntimeWarning: coroutine 'TokenizerManager.flush_cache' was never awaited
(WorkerDict pid=12504)   self._engine.tokenizer_manager.flush_cache()
"""
# The same OOM with nothing that says the engine was up: the load and capture OOMs stay first.
BARE_OOM = RL_ENGINE_OOM.split("\n(WorkerDict pid=12504) /usr")[0] + "\n"

# SGLang's own KV-slot words while serving (0.5.23 srt/mem_cache/allocation.py), format filled in.
KV_SLOTS = """\
[2026-01-05 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/allocation.py", line 613, in alloc_for_decode
    raise RuntimeError(error_msg)
RuntimeError: Decode out of memory. Try to lower your batch size.
"""

# SGLang 0.1-0.2: the controller's loop and the model server's step (before the scheduler).
OLD_CONTROLLER = """\
Exception in ControllerSingle:
Traceback (most recent call last):
  File "/opt/tiger/sglang_src/python/sglang/srt/managers/controller_single.py", line 166, in start_controller_process
    controller.loop_for_forward()
  File "/opt/tiger/sglang_src/python/sglang/srt/managers/controller_single.py", line 103, in loop_for_forward
    out_pyobjs = self.tp_server.exposed_step(recv_reqs)
  File "/opt/tiger/sglang_src/python/sglang/srt/managers/tp_worker.py", line 251, in forward_step
    self.forward_decode_batch(self.running_batch)
  File "/opt/tiger/sglang_src/python/sglang/srt/managers/tp_worker.py", line 612, in forward_decode_batch
    next_token_ids = batch.sample(output.next_token_logits)
"""

# vLLM V1: a graph's capture ending under its compilation backend (torch/cuda/graphs.py capture_end).
VLLM_CAPTURE_END = """\
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470]   File "/usr/local/lib/python3.10/site-packages/vllm/compilation/backends.py", line 681, in __call__
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470]     with torch.cuda.graph(cudagraph, pool=self.graph_pool):
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470]   File "/usr/local/lib/python3.10/site-packages/torch/cuda/graphs.py", line 186, in __exit__
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470]     self.cuda_graph.capture_end()
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470]   File "/usr/local/lib/python3.10/site-packages/torch/cuda/graphs.py", line 84, in capture_end
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470]     super().capture_end()
(VllmWorker rank=3 pid=1090) ERROR 06-05 06:18:13 [multiproc_executor.py:470] RuntimeError: CUDA error: out of memory
"""

# SGLang's diffusion server: its load bar, then the scheduler's death.
DIFFUSION_LOAD = """\
[02-16 17:19:19] Loading pipeline modules...
Loading required modules:  50%|█████     | 3/6 [00:33<00:23,  7.86s/it][02-16 17:19:53] Loading transformer
[02-16 17:21:38] Rank 0 scheduler is dead. Please check if there are relevant logs.
"""

# vLLM's custom all-reduce CUDACHECK (exit(EXIT_FAILURE)) as Dynamo's vLLM worker relays it.
VLLM_CUDACHECK = """\
2025-04-23T03:34:25.120Z  INFO dynamo_engine_vllm::worker: VLLM: INFO 04-23 03:34:25 model_runner.py:1450] Capturing cudagraphs for decoding. This may lead to unexpected consequences if the model is not static.
2025-04-23T03:35:43.390Z  INFO dynamo_engine_vllm::worker: VLLM: Failed: /workspace/csrc/custom_all_reduce.cuh:368 'invalid argument'
Capturing CUDA graph shapes: 100%|██████████| 35/35 [01:17<00:00,  2.20s/it]
"""

# SGLang 0.4.7-0.5.x scheduler.py watchdog_thread: the stuck batch, then py-spy (cut).
OLD_WATCHDOG_DUMP = """\
[2025-06-05 08:28:03 DP3 TP6] self.cur_batch.batch_size()=1, self.cur_batch.reqs=[Req(rid=713801f41753480fa5facb1fdc6e54d1, input_ids=[0, 671, 6102])]
[2025-06-05 08:28:03 DP2 TP5] self.cur_batch.batch_size()=1, self.cur_batch.reqs=[Req(rid=0f3314296cc1467ca9879741820d7e58, input_ids=[0, 671, 6102])]
Thread 231813 (active): "MainThread"
"""

# NVIDIA Dynamo's SGLang worker registered its model (the engine is up), then a scheduler raised (cut).
DYNAMO_REGISTERED = """\
2026-07-06T02:45:29.923854Z  INFO _core: Registered base model 'deepseek-ai/DeepSeek-V4-Pro' MDC
[2026-07-05 19:45:29.924] Successfully registered LLM with runtime config
[2026-07-05 19:45:29.924] Model registration succeeded; processing queued requests
[2026-07-05 19:49:44.257 DP1 TP1 EP1] Scheduler hit an exception: Traceback (most recent call last):
"""


def test_a_gpu_under_sglangs_sm75_floor_is_the_wrong_architecture():
    report = analyze_text(SM75_FLOOR)
    assert cause_ids(report)[0] == "wrong-arch" and not report.likely_causes[0].generic


def test_a_loaders_narrow_past_the_tensor_is_a_checkpoint_that_does_not_split_over_tp():
    report = analyze_text(NARROW)
    assert (report.outcome, report.phase) == ("crashed", Phase.LOAD)
    assert cause_ids(report)[0] == "quant-tp-split" and not report.likely_causes[0].generic


def test_an_oom_after_the_running_engines_own_api_is_a_serving_oom():
    assert cause_ids(analyze_text(RL_ENGINE_OOM))[0] == "serving-oom"
    assert cause_ids(analyze_text(BARE_OOM))[0] == "gpu-oom-load"


def test_sglangs_kv_slot_words_while_serving_are_a_serving_oom():
    report = analyze_text(KV_SLOTS)
    assert "serving-oom" in cause_ids(report)[:2]
    assert not next(c for c in report.likely_causes if c.id == "serving-oom").generic


def test_the_old_controllers_loop_and_decode_step_are_serving():
    report = analyze_text(OLD_CONTROLLER)
    assert (report.outcome, report.phase, report.phase_from) == ("crashed", Phase.SERVING, "exception")


def test_a_vllm_graphs_capture_end_is_capture():
    report = analyze_text(VLLM_CAPTURE_END)
    assert (report.outcome, report.phase) == ("crashed", Phase.CAPTURE)
    assert cause_ids(report)[0] == "capture-oom"


def test_a_diffusion_crash_after_its_module_load_bar_is_in_load_and_its_hang_names_no_phase():
    report = analyze_text(DIFFUSION_LOAD)
    assert (report.outcome, report.phase, report.phase_from) == ("crashed", Phase.LOAD, "progress")
    hang = analyze_text(DIFFUSION_LOAD.splitlines(keepends=True)[1])
    assert (hang.outcome, hang.phase) == ("hung", None)


def test_vllms_cudacheck_failure_relayed_by_dynamo_is_a_crash():
    report = analyze_text(VLLM_CUDACHECK)
    assert (report.outcome, report.phase) == ("crashed", Phase.CAPTURE)
    assert cause_ids(report)[0] == "custom-allreduce"


def test_the_old_watchdogs_dump_of_its_batch_is_a_hang_while_serving():
    report = analyze_text(OLD_WATCHDOG_DUMP)
    assert (report.outcome, report.phase) == ("hung", Phase.SERVING)


def test_dynamos_model_registration_is_the_engine_serving():
    report = analyze_text(DYNAMO_REGISTERED)
    assert (report.outcome, report.phase) == ("crashed", Phase.SERVING)
