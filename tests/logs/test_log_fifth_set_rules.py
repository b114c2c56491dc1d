"""Causes and phases of issue 37's fifth pass, each from upstream code or behaviour cited where the
rule lives (causes.toml, patterns.toml, wrappers.toml). Lines are real: from the tuned corpora (the
fifth set is tuned on since this pass), or the upstream format strings filled in."""

# ruff: noqa: E501 (real log lines)

from __future__ import annotations

import tomllib
from importlib import resources

from report_views import cause_ids

from kit.logs import Phase, analyze_text
from kit.logs.analyze import replay
from kit.logs.parser import parse_text
from kit.logs.patterns import build_pattern_set
from kit.logs.verdicts import Crashed

# SGLang's detokenizer's loop raised (srt/managers/detokenizer_manager.py run_detokenizer_process:
# 'DetokenizerManager hit an exception: <traceback>', then SIGQUIT to the server) while serving.
DETOKENIZER = """\
[2025-01-25 21:59:48 TP0] Prefill batch. #new-seq: 12, #new-token: 295, #cached-token: 1680, cache hit rate: 73.52%, token usage: 0.21, #running-req: 990, #queue-req: 0
[2025-01-25 21:59:49] DetokenizerManager hit an exception: Traceback (most recent call last):
  File "XXX/python/sglang/srt/managers/detokenizer_manager.py", line 224, in run_detokenizer_process
    manager.event_loop()
  File "XXX/python/sglang/srt/managers/detokenizer_manager.py", line 158, in event_loop
    s = self.decode_status[recv_obj.rids[i]]
KeyError: 'dc49ad867dc144249f59f4e85c7229cd'
"""

# A paste that starts below the event loop, in its handling of a batch's result (scheduler.py
# process_batch_result; event_loop_overlap's pop_and_process closure calls it).
BATCH_RESULT = """\
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1699, in process_batch_result
    self.process_batch_result_decode(batch, result, launch_done)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler_output_processor_mixin.py", line 238, in process_batch_result_decode
    self.tree_cache.cache_finished_req(req)
"""
# Python's fault handler (faulthandler: '  File "<path>", line N in <func>'), one rank's frame.
POP_AND_PROCESS = """\
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1763 in pop_and_process
"""

# The KV pool's construction (memory_pool.py __init__ -> _create_buffers), cut above init_memory_pool.
KV_BUFFERS = """\
  File "/usr/local/python3.11.14/lib/python3.11/site-packages/sglang/srt/hardware_backend/npu/memory_pool_npu.py", line 36, in __init__
    super().__init__(
  File "/usr/local/python3.11.14/lib/python3.11/site-packages/sglang/srt/mem_cache/memory_pool.py", line 736, in __init__
    self._create_buffers()
  File "/usr/local/python3.11.14/lib/python3.11/site-packages/sglang/srt/hardware_backend/npu/memory_pool_npu.py", line 57, in _create_buffers
    self.kv_buffer = torch.zeros(
                     ^^^^^^^^^^^^
RuntimeError: NPU out of memory. Tried to allocate 48.55 GiB (NPU 1; 60.96 GiB total capacity; 36.49 GiB already allocated; 36.49 GiB current active; 24.12 GiB free; 36.49 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.
[2026-03-03 15:08:36] Received sigquit from a child process. It usually means the child failed.
"""

# vLLM's executor calls the step by name (executor/uniproc_executor.py _init_executor), cut in the rpc.
VLLM_RPC_LOAD = """\
(VllmGenerationWorker pid=294858)   File "/opt/ray_venvs/w/lib/python3.12/site-packages/vllm/executor/executor_base.py", line 54, in __init__
(VllmGenerationWorker pid=294858)     self._init_executor()
(VllmGenerationWorker pid=294858)   File "/opt/ray_venvs/w/lib/python3.12/site-packages/vllm/executor/uniproc_executor.py", line 55, in _init_executor
(VllmGenerationWorker pid=294858)     self.collective_rpc("load_model")
(VllmGenerationWorker pid=294858)   File "/opt/ray_venvs/w/lib/python3.12/site-packages/vllm/executor/uniproc_executor.py", line 83, in collective_rpc
(VllmGenerationWorker pid=294858)     return [run_method(self.driver_worker, method, args, kwargs)]
"""

# journalctl -o short under a French locale (strftime %b: 'déc.'), over vLLM's EngineCore busy loop.
JOURNAL_FR = """\
déc. 19 02:07:16 s-a60003 bash[2211352]: (EngineCore_DP0 pid=2211352)   File "/root/miniconda3/envs/vllm/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 836, in run_engine_core
déc. 19 02:07:16 s-a60003 bash[2211352]: (EngineCore_DP0 pid=2211352)     engine_core.run_busy_loop()
déc. 19 02:07:16 s-a60003 bash[2211352]: (EngineCore_DP0 pid=2211352)   File "/root/miniconda3/envs/vllm/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 863, in run_busy_loop
déc. 19 02:07:16 s-a60003 bash[2211352]: (EngineCore_DP0 pid=2211352)     self._process_engine_step()
"""

# FlashInfer's TRT-LLM-gen runner refusing the GPU (fmhaRunner.cuh: sm_100/sm_103 only), the first
# exception of a chain whose second traceback is the scheduler's capture (cut).
TLLM_GEN_REFUSED = """\
tvm.error.InternalError: Error in function 'TllmGenFmhaRunner' at /workspace/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:37: Unsupported architecture

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4285, in run_scheduler_process
    scheduler = Scheduler(
                ^^^^^^^^^^
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 439, in __init__
    self.init_model_worker()
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 876, in init_model_worker
    self.init_all_cuda_graphs()
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 859, in init_all_cuda_graphs
    self.tp_worker.init_cuda_graphs()
  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 351, in init_cuda_graphs
    self.model_runner.init_cuda_graphs(
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 918, in init_cuda_graphs
    self.init_prefill_cuda_graph()
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 2767, in init_prefill_cuda_graph
    self.prefill_cuda_graph_runner = PrefillCudaGraphRunner(self)
                                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/sgl-w
"""

# The scheduler raised on the PD warm-up's request (http_server.py _execute_server_warmup), after ready.
WARMUP_SCHEDULER = """\
[2025-11-20 16:20:09] INFO:     Uvicorn running on http://10.194.129.138:30026 (Press CTRL+C to quit)
[2025-11-20 16:20:10] Start of pd disaggregation warmup ...
[2025-11-20 16:20:25 TP2] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py", line 2331, in forward_absorb_fused_mla_rope_prepare
    num_kv_split = forward_batch.attn_backend.num_kv_splits
AttributeError: 'TritonAttnBackend' object has no attribute 'num_kv_splits'. Did you mean: 'max_kv_splits'?

[2025-11-20 16:20:25] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
"""

# A prefill's KV-slot allocation failing, cut in the allocator before its class line (0.5.x
# mem_cache/common.py alloc_paged_token_slots_extend: 'Prefill out of memory. ...').
KV_SLOTS_CUT = """\
[TP0] Scheduler hit an exception: Traceback (most recent call last):
  File ".../sglang/srt/managers/scheduler.py", line 1702, in event_loop_overlap
    batch = self.get_next_batch_to_run()
  File ".../sglang/srt/managers/schedule_batch.py", line 1849, in prepare_for_extend
    out_cache_loc, req_pool_indices_tensor, _ = alloc_for_extend(self)
  File ".../sglang/srt/mem_cache/common.py", line 486, in alloc_for_extend
    out_cache_loc = alloc_paged_token_slots_extend(...)
  File ".../sglang/srt/mem_cache/common.py", line 412, in alloc_paged_token_slots_extend
"""

# Milestones up to capture, then an error whose message names an earlier step.
OVER_MILESTONES = """\
[2026-01-04 03:36:55 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=29.60 GB, mem usage=31.01 GB.
[2026-01-04 03:36:55 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=11.80 GB
[2026-01-04 03:36:56 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2593, in run_scheduler_process
    raise RuntimeError("the loader's own words")
RuntimeError: the loader's own words
"""


def test_the_detokenizers_exception_ends_the_server_while_serving():
    report = analyze_text(DETOKENIZER)
    assert (report.outcome, report.phase) == ("crashed", Phase.SERVING)
    # Not the scheduler's: its exception is shown, if at all, as the shape's base rate (generic).
    assert all(c.generic for c in report.likely_causes if c.id == "serving-scheduler-exception")


def test_the_loops_handling_of_a_batchs_result_is_serving():
    for text in (BATCH_RESULT, POP_AND_PROCESS):
        report = analyze_text(text)
        assert (report.phase, report.phase_from) == (Phase.SERVING, "exception"), text


def test_the_kv_pools_own_buffers_are_the_memory_step():
    report = analyze_text(KV_BUFFERS)
    assert (report.outcome, report.phase) == ("crashed", Phase.MEMORY)
    assert cause_ids(report)[0] == "kv-pool-oom"


def test_vllms_executor_naming_the_step_it_called_gives_the_phase():
    report = analyze_text(VLLM_RPC_LOAD)
    assert (report.outcome, report.phase) == ("crashed", Phase.LOAD)


def test_journalctls_short_format_in_another_locale_is_taken_off():
    report = analyze_text(JOURNAL_FR)
    assert [w.kind for w in report.wrappers][:1] == ["journalctl-short"]
    assert (report.outcome, report.phase) == ("crashed", Phase.SERVING)


def test_flashinfers_trtllm_gen_runner_refusing_the_gpu_is_the_attention_backend():
    report = analyze_text(TLLM_GEN_REFUSED)
    assert (report.outcome, report.phase) == ("crashed", Phase.CAPTURE)
    assert cause_ids(report)[0] == "sm120-backend" and not report.likely_causes[0].generic


def test_the_schedulers_exception_on_the_warmup_request_is_that_cause():
    report = analyze_text(WARMUP_SCHEDULER)
    assert (report.outcome, report.phase) == ("crashed", Phase.WARMUP)
    assert cause_ids(report)[0] == "serving-scheduler-exception"


def test_a_traceback_cut_in_a_kv_slot_allocator_names_the_serving_oom():
    report = analyze_text(KV_SLOTS_CUT)
    assert (report.outcome, report.phase) == ("crashed", Phase.SERVING)
    assert "serving-oom" in cause_ids(report)[:3]
    assert not next(c for c in report.likely_causes if c.id == "serving-oom").generic


def test_a_step_named_over_later_milestones_is_read_with_the_parsers_own_patterns():
    # A pattern set whose over-milestones rule the shipped one lacks: the verdict must use the
    # patterns the log was parsed with (the tracker once looked the message up in the defaults).
    document = tomllib.loads(
        resources.files("kit.logs").joinpath("patterns.toml").read_text(encoding="utf-8")
    )
    document["exception_phase"].insert(
        0,
        {"dialect": "test", "phase": "load", "messages": ["the loader's own words"], "over_milestones": True},
    )
    events = parse_text(OVER_MILESTONES, build_pattern_set(document))
    attempts, t = replay(events, None)
    verdict = attempts.current.verdict(t, ended=True)
    assert isinstance(verdict, Crashed)
    assert (verdict.phase, verdict.phase_from) == (Phase.LOAD, "exception")
    # With the shipped patterns the milestones' phase stands.
    attempts, t = replay(parse_text(OVER_MILESTONES), None)
    assert attempts.current.verdict(t, ended=True).phase is Phase.CAPTURE
