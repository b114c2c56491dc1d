"""Phases and causes read from a log's own lines where no milestone says them (issue 37, third
pass): each rule is SGLang's, vLLM's, NCCL's or torch's own behaviour, cited where the rule lives
(patterns.toml, causes.toml, kit/logs/tracker.py Tracker.unmarked_phase). Lines are real: from the
tuned corpora, or the upstream format strings filled in."""

# ruff: noqa: E501 (real log lines)

from __future__ import annotations

from report_views import cause_ids

from kit.logs import Phase, analyze_text

# vLLM V1: the worker's 'Available KV cache memory' (kv.ready), then the KV check raising
# (v1/core/kv_cache_utils.py check_enough_kv_cache_memory) before any capture.
VLLM_KV_CHECK = """\
(EngineCore pid=6890) INFO 08-03 21:02:58 [gpu_model_runner.py:5209] Starting to load model poolside/Laguna-S-2.1-INT4...
(EngineCore pid=6890) INFO 08-03 21:48:37 [gpu_model_runner.py:5306] Model loading took 95.46 GiB memory and 2736.589904 s
(EngineCore pid=6890) INFO 08-03 21:49:23 [gpu_worker.py:538] Available KV cache memory: 8.72 GiB
(EngineCore pid=6890) ERROR 08-03 21:49:23 [core.py:1231] EngineCore failed to start.
(EngineCore pid=6890) ERROR 08-03 21:49:23 [core.py:1231] Traceback (most recent call last):
(EngineCore pid=6890) ERROR 08-03 21:49:23 [core.py:1231]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 262, in _initialize_kv_caches
(EngineCore pid=6890) ERROR 08-03 21:49:23 [core.py:1231]     kv_cache_configs = get_kv_cache_configs(
(EngineCore pid=6890) ERROR 08-03 21:49:23 [core.py:1231]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", line 704, in check_enough_kv_cache_memory
(EngineCore pid=6890) ERROR 08-03 21:49:23 [core.py:1231]     raise ValueError(
(EngineCore pid=6890) ERROR 08-03 21:49:23 [core.py:1231] ValueError: To serve at least one request with the model's max seq len (262144), 20.25 GiB KV cache is needed, which is larger than the available KV cache memory (8.72 GiB). Based on the available memory, the estimated maximum model length is 112768. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""

# SGLang 0.5.23 srt/utils/watchdog.py: the dump of the stuck batch, then (cut here) its timeout line.
WATCHDOG_DUMP = """\
[2026-08-04 11:58:42 TP1] Scheduler debug info:
scheduler.cur_batch_for_debug.batch_size()=1
scheduler.cur_batch_for_debug.reqs=[Req(rid=3e64727659014c729d0ee75279c38a28, input_ids=array('q', [0, 90, 27791]))]
[full] total=4974080, available=1024, evictable=4947200, protected=24832, session_held=0, uncached=0
"""

# SGLang 0.3-0.4.6 scheduler.py: retracting requests from a running decode batch, and going on.
RETRACTIONS = """\
[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845
[2025-03-07 21:49:33 TP12] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845
[2025-03-07 21:49:45 TP9] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919
"""

# Serving frames: the overlap worker's thread, the batch's model-worker view, the worker's forward.
OVERLAP_WORKER = """\
[2025-03-19 11:39:39 DP4 TP4] TpModelWorkerClient hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 112, in forward_thread_func
    self.forward_thread_func_()
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/_contextlib.py", line 116, in decorate_context
    return func(*args, **kwargs)
"""
MODEL_WORKER_BATCH = """\
    model_worker_batch = batch.get_model_worker_batch()
                         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/opt/ac2/lib/python3.12/site-packages/sglang/srt/managers/schedule_batch.py", line 1602, in get_model_worker_batch
    seq_lens_cpu = self.seq_lens.cpu()
                   ^^^^^^^^^^^^^^^^^^^
RuntimeError: CUDA error: an illegal memory access was encountered
"""
FORWARD_BATCH = """\
Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 236, in forward_batch_generation
    logits_output, can_run_cuda_graph = self.model_runner.forward(
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1104, in forward
    return self.forward_decode(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
RuntimeError: CUDA error: an illegal memory access was encountered
"""

# vLLM's weight loader's shard bar (model_executor/model_loader/weight_utils.py), the last sign.
SHARD_BAR = """\
(EngineCore pid=1378531) INFO 09-10 21:36:25 [weight_utils.py:904] Filesystem type for checkpoints: EXT4. Checkpoint size: 58.16 GiB. Available RAM: 50.26 GiB.
Loading safetensors checkpoint shards:   0% Completed | 0/48 [00:00<?, ?it/s]
Loading safetensors checkpoint shards:   2% Completed | 1/48 [00:00<00:15,  3.10it/s]
Loading safetensors checkpoint shards:   4% Completed | 2/48 [00:01<00:28,  1.64it/s]
"""

# NCCL's own INFO lines while a communicator is built (src/transport/net_ib.cc, src/init.cc).
NCCL_SETUP = """\
deepseek-v2-5-0-1:639:639 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.244.1.196<0>
deepseek-v2-5-0-1:639:639 [5] NCCL INFO Using network IB
deepseek-v2-5-0-1:639:639 [5] NCCL INFO ncclCommInitRank comm 0x3d38e820 rank 13 nranks 16 cudaDev 5 nvmlDev 5 busId c00000 commId 0x5da5fd16f0faf43a - Init START
"""

# torch's ProcessGroupNCCL watchdog (ProcessGroupNCCL.cpp) after the scheduler's batches.
SERVING_THEN_NCCL_WATCHDOG = """\
[2025-02-23 11:04:30 TP0] Decode batch. #running-req: 12, #token: 20480, token usage: 0.10, gen throughput (token/s): 410.22, #queue-req: 0
[2025-02-23 11:04:31 TP0] Decode batch. #running-req: 12, #token: 20960, token usage: 0.10, gen throughput (token/s): 409.87, #queue-req: 0
[rank4]:[E223 11:14:34.991762039 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=91885, OpType=ALLREDUCE, NumelIn=1290240, NumelOut=1290240, Timeout(ms)=600000) ran for 600014 milliseconds before timing out.
[rank4]:[E223 11:14:34.991866729 ProcessGroupNCCL.cpp:1834] [PG ID 2 PG GUID 3 Rank 4] Timeout at NCCL work: 91885, last enqueued NCCL work: 91885, last completed NCCL work: 91884.
"""


def test_vllms_kv_check_is_the_memory_step_and_the_kv_pool_whatever_the_kv_milestone_said():
    report = analyze_text(VLLM_KV_CHECK)
    assert (report.outcome, report.phase) == ("crashed", Phase.MEMORY)
    assert cause_ids(report)[0] == "kv-pool-oom" and not report.likely_causes[0].generic


def test_the_scheduler_watchdogs_dump_of_its_batch_is_a_hang_while_serving_a_stuck_collective():
    report = analyze_text(WATCHDOG_DUMP)
    assert (report.outcome, report.phase) == ("hung", Phase.SERVING)
    assert cause_ids(report)[0] == "serving-collective-stuck" and not report.likely_causes[0].generic


def test_a_stretch_of_only_old_retraction_lines_is_a_server_serving():
    report = analyze_text(RETRACTIONS)
    assert (report.outcome, report.phase, report.last_milestone) == ("ready", Phase.SERVING, None)
    assert report.mid_life


def test_the_overlap_workers_thread_is_serving():
    report = analyze_text(OVERLAP_WORKER)
    assert (report.outcome, report.phase) == ("crashed", Phase.SERVING)


def test_a_batchs_model_worker_view_is_serving():
    report = analyze_text(MODEL_WORKER_BATCH)
    assert (report.outcome, report.phase) == ("crashed", Phase.SERVING)
    assert cause_ids(report)[0] == "cuda-illegal-access"


def test_the_workers_forward_of_a_batch_is_serving():
    report = analyze_text(FORWARD_BATCH)
    assert (report.outcome, report.phase) == ("crashed", Phase.SERVING)


def test_a_hang_whose_last_sign_is_the_shard_bar_is_in_load():
    report = analyze_text(SHARD_BAR)
    assert (report.outcome, report.phase, report.phase_from) == ("hung", Phase.LOAD, "progress")


def test_nccls_own_set_up_lines_with_no_milestone_are_init():
    report = analyze_text(NCCL_SETUP)
    assert (report.outcome, report.phase, report.phase_from) == ("hung", Phase.INIT, "nccl")


def test_the_frameworks_nccl_version_line_alone_names_no_phase():
    report = analyze_text("[2025-02-06 21:35:22 TP8] sglang is using nccl==2.21.5\n")
    assert report.phase is None


def test_torchs_nccl_watchdog_after_the_schedulers_batches_is_serving():
    report = analyze_text(SERVING_THEN_NCCL_WATCHDOG)
    assert (report.outcome, report.phase) == ("crashed", Phase.SERVING)
    assert cause_ids(report)[0] == "serving-collective-stuck"
