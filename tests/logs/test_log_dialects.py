"""Each pattern of each dialect in patterns.toml, from a line worded as that release prints it."""

from __future__ import annotations

import pytest

from kit.logs import Milestone, Note, parse_text
from kit.logs.patterns import build_pattern_set, default_patterns
from kit.logs.wrappers import unwrap

P = "[2026-12-02 13:46:15 TP1] "
M = "[2026-12-02 13:46:15] "

# (line, milestone or note, dialect, fields that must be read off it)
CASES: list[tuple[str, Milestone | Note, str, dict]] = [
    (P + "Init nccl begin.", Milestone.INIT_BEGIN, "0.3", {}),
    (P + "Init torch distributed begin.", Milestone.INIT_BEGIN, "0.4", {}),
    (P + "Init torch distributed ends. mem usage=0.13 GB", Milestone.INIT_END, "0.4", {"mem_gb": 0.13}),
    (
        P + "Init torch distributed ends. elapsed=1.52 s, mem usage=0.25 GB",
        Milestone.INIT_END,
        "0.5",
        {"elapsed_s": 1.52, "mem_gb": 0.25},
    ),
    (P + "Init parallel begin.", Milestone.INIT_BEGIN, "0.5.21", {}),
    (P + "Init parallel ends. elapsed=0.59 s", Milestone.INIT_END, "0.5.21", {"elapsed_s": 0.59}),
    (P + "Load weight begin. avail mem=21.63 GB", Milestone.LOAD_BEGIN, "any", {"avail_mem_gb": 21.63}),
    (
        P + "Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=6.09 GB, mem"
        " usage=15.54 GB.",
        Milestone.LOAD_END,
        "any",
        {"avail_mem_gb": 6.09, "mem_gb": 15.54},
    ),
    (
        P + "Load weight end. elapsed=100.59 s, type=BailingMoeV3ForCausalLM, avail mem=97.27 GB,"
        " mem usage=15.47 GB.",
        Milestone.LOAD_END,
        "any",
        {"elapsed_s": 100.59, "avail_mem_gb": 97.27, "mem_gb": 15.47},
    ),
    (
        P + "KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB",
        Milestone.KV_READY,
        "any",
        {"tokens": 46611},
    ),
    (
        P + "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 65536, K size: 0.00 GB, V size: 0.00 GB",
        Milestone.KV_READY,
        "any",
        {"tokens": 65536},
    ),
    (
        P + "SWA KV Cache is allocated. #tokens: 1024, KV size: 1.00 GB",
        Milestone.KV_READY,
        "any",
        {"tokens": 1024},
    ),
    (P + "Memory pool end. avail mem=2.09 GB", Milestone.KV_READY, "any", {"avail_mem_gb": 2.09}),
    # FlashInfer autotune: 0.5.9/0.5.10.post1 model_runner.py; 0.5.14 runner/base_runner.py;
    # 0.5.19-0.5.23 runner/flashinfer_autotune.py (both cache variants); the end line is the same.
    (P + "Running FlashInfer autotune...", Milestone.AUTOTUNE_BEGIN, "autotune", {}),
    (
        P + "Running FlashInfer autotune with cache: /root/.cache/sglang/flashinfer/autotune/0.7.2/sm120/"
        "3f1c/autotune.json",
        Milestone.AUTOTUNE_BEGIN,
        "autotune",
        {"autotune_cache": "/root/.cache/sglang/flashinfer/autotune/0.7.2/sm120/3f1c/autotune.json"},
    ),
    (
        P + "Running FlashInfer autotune (cache reuse DISABLED via SGLANG_FLASHINFER_AUTOTUNE_CACHE=0); "
        "writing fresh result to: /root/.cache/sglang/flashinfer/autotune/runs/a.json",
        Milestone.AUTOTUNE_BEGIN,
        "autotune",
        {},
    ),
    (P + "FlashInfer autotune completed.", Milestone.AUTOTUNE_END, "autotune", {}),
    (
        P + "Mamba Cache is allocated. max_mamba_cache_size: 614, conv_state size: 0.38GB,"
        " ssm_state size: 10.81GB",
        Note.MAMBA_READY,
        "any",
        {},
    ),
    (
        P + "Capture cuda graph begin. This can take up to several minutes. avail mem=1.45 GB",
        Milestone.CAPTURE_BEGIN,
        "any",
        {"avail_mem_gb": 1.45},
    ),
    (
        P + "Capture cuda graph end. Time elapsed: 7.23 s. avail mem=0.53 GB. mem usage=0.93 GB.",
        Milestone.CAPTURE_END,
        "any",
        {"elapsed_s": 7.23, "mem_gb": 0.93},
    ),
    (
        P + "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2],"
        " avail mem=73.10 GB",
        Milestone.CAPTURE_BEGIN,
        "0.5.16",
        {"graph": "decode", "backend": "full"},
    ),
    (
        P + "Capture target verify CUDA graph end. elapsed=4.56 s, mem usage=0.38 GB, avail mem=7.39 GB.",
        Milestone.CAPTURE_END,
        "0.5.16",
        {"graph": "verify", "elapsed_s": 4.56, "mem_gb": 0.38},
    ),
    (
        "[2026-07-21 08:22:00 TP0] Capture draft decode CUDA graph begin. backend=full, bs=[1,"
        " 2], avail mem=7.39 GB",
        Milestone.CAPTURE_BEGIN,
        "0.5.16",
        {"graph": "decode"},
    ),
    (
        "[2026-07-21 08:22:01 TP0] Capture draft extend CUDA graph end. elapsed=1.56 s, mem"
        " usage=0.38 GB, avail mem=7.01 GB.",
        Milestone.CAPTURE_END,
        "0.5.16",
        {"graph": "extend", "elapsed_s": 1.56},
    ),
    # Other devices before 0.5.15: 0.5.3 model_runner.py 'cpu graph', 0.5.9 graph_backend 'npu graph'.
    (
        P + "Capture cpu graph begin. This can take up to several minutes. avail mem=60.12 GB",
        Milestone.CAPTURE_BEGIN,
        "any",
        {},
    ),
    (
        P + "Capture npu graph begin. This can take up to several minutes. avail mem=20.00 GB",
        Milestone.CAPTURE_BEGIN,
        "any",
        {},
    ),
    (
        P + "Capture cpu graph end. Time elapsed: 3.10 s. mem usage=0.20 GB. avail mem=59.92 GB.",
        Milestone.CAPTURE_END,
        "any",
        {"elapsed_s": 3.1, "mem_gb": 0.2},
    ),
    (
        P + "Capture npu graph end. Time elapsed: 2.00 s. mem usage=0.10 GB. avail mem=19.90 GB.",
        Milestone.CAPTURE_END,
        "any",
        {},
    ),
    # The draft model before 0.5.15 (0.4.6-0.5.13 eagle_worker.py; 0.5.9+ multi-layer 'extend ... (step N)').
    (
        "[2025-05-21 07:20:02 TP0] Capture draft cuda graph begin. This can take up to several minutes. avail"
        " mem=8.60 GB",
        Milestone.CAPTURE_BEGIN,
        "0.4.6",
        {"avail_mem_gb": 8.6},
    ),
    (
        "[2025-06-09 18:16:26 TP0] Capture draft cuda graph end. Time elapsed: 13.48 s. avail mem=31.31 GB."
        " mem usage=1.10 GB.",
        Milestone.CAPTURE_END,
        "0.4.6",
        {"elapsed_s": 13.48, "mem_gb": 1.1},
    ),
    (
        "[2026-01-10 10:00:00 TP0] Capture draft extend cuda graph begin (step 2). This can take up to"
        " several minutes. avail mem=40.00 GB",
        Milestone.CAPTURE_BEGIN,
        "0.4.6",
        {"avail_mem_gb": 40.0},
    ),
    (P + "Capture Frozen-KV MTP draft cuda graph begin.", Milestone.CAPTURE_BEGIN, "0.4.6", {}),
    (P + "Capture Frozen-KV MTP draft cuda graph end.", Milestone.CAPTURE_END, "0.4.6", {}),
    (P + "Capture UNO tree draft CUDA graph begin. bs=[1, 2]", Milestone.CAPTURE_BEGIN, "0.5.16", {}),
    (P + "Capture UNO tree draft CUDA graph end. elapsed=1.00 s", Milestone.CAPTURE_END, "0.5.16", {}),
    (
        M + "INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        Milestone.HTTP_UP,
        "server",
        {"url": "http://0.0.0.0:30000"},
    ),
    (M + "The server is fired up and ready to roll!", Milestone.READY, "server", {}),
    (
        M + "SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
        Note.SHUTDOWN,
        "server",
        {},
    ),
    # A server at work (dialect "serving"): 0.4.x 'Decode batch.' and 0.5.4+ 'Decode batch,' wordings.
    (
        P + "Decode batch, #running-req: 2, #full token: 21312, full token usage: 0.01, mamba num: 8,"
        " mamba usage: 0.05, accept len: 3.36, accept rate: 0.79, cuda graph: True, gen throughput"
        " (token/s): 551.63, #queue-req: 0",
        Note.SERVING,
        "serving",
        {"kind": "decode"},
    ),
    (
        P + "Prefill batch. #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0,"
        " #queue-req: 0",
        Note.SERVING,
        "serving",
        {"kind": "prefill"},
    ),
    (
        P + "KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 512",
        Note.SERVING,
        "serving",
        {"kind": "retract"},
    ),
    (  # 0.3-0.4.6 scheduler.py, scanned by the 'new_token_ratio: ' inside it
        "[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio:"
        " 0.1474 -> 0.1845",
        Note.SERVING,
        "serving",
        {"kind": "retract"},
    ),
    (
        P + "ReqTimeStats(rid=ab12, input_len=20, cached_input_len=0, output_len=8, attempts=1,"
        " type=unified): queue=0.10ms",
        Note.SERVING,
        "serving",
        {"kind": "request"},
    ),
    (
        M + "Req Time Stats(rid=b2bb, input len=69, output len=4621, type=unified): queue_duration=0.00ms",
        Note.SERVING,
        "serving",
        {"kind": "request"},
    ),
    (
        M + 'INFO:     127.0.0.1:57052 - "POST /generate HTTP/1.1" 200 OK',
        Note.SERVING,
        "serving",
        {"kind": "answered", "path": "/generate"},
    ),
    # A step's own progress bar (dialect "progress"): 0.5.23 srt/model_loader/weight_utils.py's tqdm
    # descs with its BAR_FORMAT, and the graph runner's 'Capturing batches' (decode_cuda_graph_runner.py).
    (
        "Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:03<00:04,  1.74it/s]",
        Note.PROGRESS,
        "progress",
        {"kind": "load"},
    ),
    (
        "Loading pt checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]",
        Note.PROGRESS,
        "progress",
        {"kind": "load"},
    ),
    (
        "Multi-thread loading pt checkpoint shards:  50% Completed | 1/2 [00:09<00:09,  9.10s/it]",
        Note.PROGRESS,
        "progress",
        {"kind": "load"},
    ),
    (
        "Loading np_cache checkpoint shards: 100% Completed | 4/4 [00:01<00:00,  3.02it/s]",
        Note.PROGRESS,
        "progress",
        {"kind": "load"},
    ),
    (
        "Capturing batches (bs=160 avail_mem=20.12 GB):  35%|███▌      | 8/23 [00:03<00:05,  2.61it/s]",
        Note.PROGRESS,
        "progress",
        {"kind": "capture"},
    ),
    # The server stuck while serving, by its own word (0.5.23 http_server.py; utils/watchdog.py soft).
    (
        M + "Health check failed. Server couldn't get a response from detokenizer for last 20 seconds."
        " tic start time: 13:46:15. last_heartbeat time: 13:45:55",
        Note.SERVING,
        "serving",
        {"kind": "stall"},
    ),
    (
        P + "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=True)",
        Note.SERVING,
        "serving",
        {"kind": "stall"},
    ),
    # SGLang's diffusion server (0.5.23 multimodal_gen).
    (
        "Loading required modules:  80%|████████▏ | 4/5 [00:39<00:10, 10.94s/it]",
        Note.DIFFUSION,
        "diffusion",
        {"kind": "load"},
    ),
    ("[06-17 13:46:57] FastAPI app is shutting down...", Note.DIFFUSION, "diffusion", {}),
    (
        "[06-17 13:46:56] Server warmup failed; aborting startup: HTTP server did not become ready",
        Milestone.ERROR,
        "diffusion",
        {"kind": "warmup_failed", "phase_hint": "warmup", "exception": "HTTP server did not become ready"},
    ),
    (
        M + "Received SIGTERM, exiting",
        Note.SHUTDOWN,
        "server",
        {},
    ),
    (M + "INFO:     Shutting down", Note.SHUTDOWN, "server", {}),
    (
        "[2025-03-08 12:29:12 TP0] sglang is using nccl==2.21.5",
        Note.NCCL_VERSION,
        "nccl",
        {"nccl_version": "2.21.5"},
    ),
    (
        "host:3828976:3828976 [0] NCCL INFO Connected all trees",
        Note.NCCL_CONNECTED,
        "nccl",
        {"topology": "trees"},
    ),
    (
        "host:203219:203219 [5] NCCL INFO ncclCommInitRank comm 0x55de rank 13 nranks 16 cudaDev 5"
        " nvmlDev 5 busId ab000"
        " commId 0xf2 - Init COMPLETE",
        Note.NCCL_INIT_COMPLETE,
        "nccl",
        {"nccl_rank": 13, "nccl_nranks": 16},
    ),
    (
        "host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        Note.NCCL_TRANSPORT,
        "nccl",
        {"transport": "P2P"},
    ),
    (
        "host:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
        Note.NCCL_TRANSPORT,
        "nccl",
        {},
    ),
    (
        "host:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB ens3np0",
        Note.NCCL_NET,
        "nccl",
        {"net": "IB"},
    ),
    (
        "[Gloo] Rank 9 is connected to 15 peer ranks. Expected number of connected peer ranks is : 15",
        Note.GLOO_CONNECTED,
        "nccl",
        {"gloo_rank": 9, "peers_n": 15},
    ),
    (
        M + "host:4001371:4001371 [1] misc/socket.cc:578 NCCL WARN socketPollConnect: connect to"
        " 10.82.101.249<37857>"
        " returned Connection refused",
        Note.NCCL_WARN,
        "nccl",
        {},
    ),
    (
        "[2026-02-25 16:41:56 TP9] Scheduler hit an exception: ValueError: bad",
        Milestone.ERROR,
        "errors",
        {"kind": "scheduler_exception", "exception": "ValueError: bad"},
    ),
    # SGLang's other processes' loops (0.5.23 detokenizer_manager.py, tokenizer_manager.py,
    # data_parallel_controller.py, multi_tokenizer_mixin.py): '<Name> hit an exception: <traceback>'
    (
        "[2025-01-25 21:59:49] DetokenizerManager hit an exception:"
        " KeyError: 'dc49ad867dc144249f59f4e85c7229cd'",
        Milestone.ERROR,
        "errors",
        {"kind": "process_exception", "process": "DetokenizerManager"},
    ),
    (
        M + "TokenizerManager hit an exception: RuntimeError: bad",
        Milestone.ERROR,
        "errors",
        {"kind": "process_exception", "process": "TokenizerManager"},
    ),
    (
        M + "DataParallelController hit an exception: RuntimeError: bad",
        Milestone.ERROR,
        "errors",
        {"kind": "process_exception", "process": "DataParallelController"},
    ),
    (
        M + "MultiTokenizerRouter hit an exception: RuntimeError: bad",
        Milestone.ERROR,
        "errors",
        {"kind": "process_exception", "process": "MultiTokenizerRouter"},
    ),
    # FlashInfer include/flashinfer/exception.h flashinfer::Error, as its Python exception prints it
    (
        "tvm.error.InternalError: Error in function 'TllmGenFmhaRunner' at"
        " /workspace/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:37: Unsupported architecture",
        Milestone.ERROR,
        "errors",
        {"kind": "flashinfer_error", "function": "TllmGenFmhaRunner"},
    ),
    (
        M + "Rank 3 scheduler is dead. Please check if there are relevant logs.",
        Milestone.ERROR,
        "errors",
        {"dead_rank": 3},
    ),
    (
        M + "Initialization failed. Please see the error messages above.",
        Milestone.ERROR,
        "errors",
        {"kind": "init_failed"},
    ),
    (
        M + "Subprocess scheduler_0 (pid=10367) crashed with exit code -9. Triggering SIGQUIT for cleanup...",
        Milestone.ERROR,
        "errors",
        {"exit_code": -9},
    ),
    (
        M + "Received sigquit from a child process. It usually means the child failed.",
        Milestone.ERROR,
        "errors",
        {},
    ),
    (
        M + "SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        Milestone.ERROR,
        "errors",
        {},
    ),
    ("Killed", Milestone.ERROR, "errors", {"kind": "killed"}),
    # The scheduler's watchdog: 0.4.x scheduler.py watchdog_thread; 0.5.x utils/watchdog.py (hard only).
    (
        "[2025-06-26 07:25:31 DP4 TP4] Watchdog timeout (self.watchdog_timeout=300)",
        Milestone.ERROR,
        "errors",
        {"kind": "watchdog", "phase_hint": "serving"},
    ),
    (
        P + "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        Milestone.ERROR,
        "errors",
        {
            "kind": "watchdog",
            "exception": "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        },
    ),
    ("Segmentation fault (core dumped)", Milestone.ERROR, "errors", {"kind": "segfault"}),
    ("Fatal Python error: Aborted", Milestone.ERROR, "errors", {"kind": "fatal_python"}),
    (
        "[rank0]:[E1202 13:46:15.1 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective"
        " operation timeout",
        Milestone.ERROR,
        "errors",
        {"kind": "nccl_timeout"},
    ),
    (
        "[rank1]: CUDA error: an illegal memory access was encountered",
        Milestone.ERROR,
        "errors",
        {"kind": "cuda_error"},
    ),
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        Milestone.ERROR,
        "errors",
        {"kind": "oom"},
    ),
    (
        "ncclSystemError: System call (e.g. socket, malloc) failed",
        Milestone.ERROR,
        "errors",
        {"kind": "nccl_error"},
    ),
    ("ncclInternalError: Internal check failed.", Milestone.ERROR, "errors", {"kind": "nccl_error"}),
    (
        "ncclUnhandledCudaError: Call to CUDA function failed.",
        Milestone.ERROR,
        "errors",
        {"kind": "nccl_error"},
    ),
    (
        "ncclRemoteError: A call failed possibly due to a network error",
        Milestone.ERROR,
        "errors",
        {"kind": "nccl_error"},
    ),
    (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        Milestone.ERROR,
        "errors",
        {"kind": "runtime_error", "phase_hint": "memory"},
    ),
    (  # DeepAuto-AI/hip-attention#59
        "[rank4]:[E421 02:05:38.764490322 ProcessGroupGloo.cpp:143] Gloo connectFullMesh failed with"
        " [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
        Milestone.ERROR,
        "errors",
        {"kind": "gloo_error"},
    ),
    (  # the exception line of a pasted tail (SemiAnalysisAI/InferenceX#2128)
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88.",
        Milestone.ERROR,
        "errors",
        {"kind": "value_error", "phase_hint": "memory"},
    ),
    (  # sglang#2468's warm-up failure, as the line a tail keeps
        "AssertionError: res=<Response [502]>, res.text=''",
        Milestone.ERROR,
        "errors",
        {"kind": "assertion_error"},
    ),
    # Piecewise CUDA graphs (0.5.x): lines from a 2x RTX 3090 0.5.12 run and an issue's log.
    (
        "[2026-06-11 05:11:58 TP1] Capture piecewise CUDA graph begin. avail mem=0.08 GB",
        Milestone.CAPTURE_BEGIN,
        "piecewise",
        {"avail_mem_gb": 0.08},
    ),
    (
        "[2026-06-08 17:25:21] Capture piecewise CUDA graph end. Time elapsed: 22.90 s. mem usage=1.29 GB."
        " avail mem=17.97 GB.",
        Milestone.CAPTURE_END,
        "piecewise",
        {"elapsed_s": 22.9, "mem_gb": 1.29},
    ),
    # vLLM's own start-up lines (real lines from public issues and notes repos).
    (  # QwenLM/Qwen3-VL#1204
        "INFO 05-13 21:09:41 [gpu_model_runner.py:1329] Starting to load model"
        " /data/qwen2.5/Qwen2.5-VL-7B-Instruct...",
        Milestone.LOAD_BEGIN,
        "vllm",
        {},
    ),
    (
        "(EngineCore pid=2207) INFO 05-21 15:45:47 [gpu_model_runner.py:4959] Model loading took 7.75 GiB"
        " memory and 3.151355 seconds",
        Milestone.LOAD_END,
        "vllm",
        {"mem_gb": 7.75},
    ),
    (
        "(EngineCore pid=992724) INFO 10-10 13:44:07 [worker.py:230] # GPU blocks: 268051,"
        " # CPU blocks: 1092",
        Milestone.KV_READY,
        "vllm",
        {},
    ),
    (
        "INFO 04-07 15:59:03 [gpu_worker.py:436] Available KV cache memory: 18.16 GiB",
        Milestone.KV_READY,
        "vllm",
        {},
    ),
    (  # vllm-project/vllm#15598
        "RayWorkerWrapper pid=1861983) INFO 03-27 10:29:03 [model_runner.py:1442] Capturing cudagraphs for"
        " decoding. This may lead to unexpected consequences if the model is not static.",
        Milestone.CAPTURE_BEGIN,
        "vllm",
        {},
    ),
    (  # vllm-project/vllm#17939
        "(VllmWorker rank=0 pid=2445155) INFO 05-10 16:00:15 [gpu_model_runner.py:1686] Graph capturing"
        " finished in 112 secs, took 0.95 GiB",
        Milestone.CAPTURE_END,
        "vllm",
        {"elapsed_s": 112.0},
    ),
    # vLLM's other wordings across releases (V0 and V1), each a real printed line.
    (  # tests/fixtures/sglang-logs-oos2/oosb26 (V0 worker/model_runner.py)
        "(VllmWorkerProcess pid=13105) INFO 08-19 07:51:03 model_runner.py:732] Loading model weights took"
        " 2.3463 GB",
        Milestone.LOAD_END,
        "vllm",
        {"mem_gb": 2.3463},
    ),
    (  # V1 model_executor/model_loader/default_loader.py
        "(EngineCore_0 pid=1234) INFO 08-20 10:01:02 [default_loader.py:262] Loading weights took"
        " 31.27 seconds",
        Milestone.LOAD_END,
        "vllm",
        {"elapsed_s": 31.27},
    ),
    (  # V0 executor/cpu_executor.py
        "INFO 06-11 09:12:44 cpu_executor.py:190] # CPU blocks: 2730",
        Milestone.KV_READY,
        "vllm",
        {},
    ),
    (  # tests/fixtures/sglang-logs-oos2/oosb37 (V1 v1/core/kv_cache_utils.py)
        "(EngineCore pid=4108) INFO 05-28 08:00:26 [kv_cache_utils.py:1710] GPU KV cache size: 46,368 tokens",
        Milestone.KV_READY,
        "vllm",
        {},
    ),
    (  # tests/fixtures/sglang-logs-oos2/oosb26 (V0 worker/model_runner.py)
        "(VllmWorkerProcess pid=13109) INFO 08-19 07:51:12 model_runner.py:1024] Capturing the model for CUDA"
        " graphs. This may lead to unexpected consequences if the model is not static.",
        Milestone.CAPTURE_BEGIN,
        "vllm",
        {},
    ),
    (  # tests/fixtures/sglang-logs-oos2/oosb37 (V1 gpu_model_runner.py, v0.10.2+)
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|          | 0/51 [00:00<?, ?it/s]",
        Milestone.CAPTURE_BEGIN,
        "vllm",
        {"graph": "mixed prefill-decode", "backend": "PIECEWISE"},
    ),
    (  # V1 gpu_model_runner.py, v0.8-v0.10
        "Capturing CUDA graph shapes: 100%|██████████| 67/67 [00:25<00:00,  2.63it/s]",
        Milestone.CAPTURE_BEGIN,
        "vllm",
        {},
    ),
    (  # V1 v1/engine/core.py
        "(EngineCore_DP0 pid=95672) INFO 10-28 13:27:50 [core.py:240] init engine (profile, create kv cache,"
        " warmup model) took 2.67 seconds",
        Milestone.CAPTURE_END,
        "vllm",
        {"elapsed_s": 2.67},
    ),
    (  # entrypoints/openai/api_server.py
        "(APIServer pid=1) INFO 09-01 10:00:00 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000",
        Milestone.HTTP_UP,
        "vllm",
        {"url": "http://0.0.0.0:8000"},
    ),
    (  # V1 v1/metrics/loggers.py
        "INFO 06-11 11:46:37 [loggers.py:118] Engine 001: Avg prompt throughput: 1.5 tokens/s, Avg generation"
        " throughput: 10.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%",
        Note.SERVING,
        "vllm",
        {"kind": "engine_stats"},
    ),
    (  # tests/fixtures/sglang-logs-oos2/oosb13 (V0 engine/async_llm_engine.py)
        "INFO 02-05 01:20:00 engine.py:275] Added request chatcmpl-87294cc938af457f9628dd82be72189c.",
        Note.SERVING,
        "vllm",
        {"kind": "request"},
    ),
    (  # tests/fixtures/sglang-logs-oos2/oosb12 (V1 v1/engine/exceptions.py), outside a traceback
        "(APIServer pid=1) ERROR 02-05 16:55:27 vllm.v1.engine.exceptions.EngineDeadError: EngineCore"
        " encountered an issue. See stack trace (above) for the root cause.",
        Milestone.ERROR,
        "vllm",
        {
            "kind": "engine_dead",
            "phase_hint": "serving",
            "exception": "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."
            " See stack trace (above) for the root cause.",
        },
    ),
    (  # V1 v1/engine/core.py run_engine_core
        "(EngineCore_0 pid=2651) ERROR 06-11 11:46:39 [core.py:517] EngineCore encountered a fatal error.",
        Milestone.ERROR,
        "vllm",
        {"kind": "engine_dead", "phase_hint": "serving"},
    ),
    (  # V1 v1/engine/core.py run_engine_core
        "(EngineCore_0 pid=88) ERROR 06-11 11:40:01 [core.py:519] EngineCore failed to start.",
        Milestone.ERROR,
        "vllm",
        {"kind": "engine_failed"},
    ),
    (  # V1 v1/engine/core_client.py
        "(APIServer pid=215332) ERROR 09-05 01:15:59 [core_client.py:562] Engine core proc EngineCore_0 died"
        " unexpectedly, shutting down client.",
        Milestone.ERROR,
        "vllm",
        {"kind": "engine_dead", "proc": "EngineCore_0"},
    ),
    (  # tests/fixtures/sglang-logs-oos2/oosb13 (V0 engine/multiprocessing/client.py)
        "ERROR 02-05 01:21:05 client.py:300] RuntimeError('Engine process (pid 76) died.')",
        Milestone.ERROR,
        "vllm",
        {"kind": "engine_dead", "exception": "Engine process (pid 76) died"},
    ),
    (  # tests/fixtures/sglang-logs-oos2/oosb13 (V0 entrypoints/launcher.py)
        "CRITICAL 02-05 01:21:10 launcher.py:101] MQLLMEngine is already dead, terminating server process",
        Milestone.ERROR,
        "vllm",
        {"kind": "engine_dead", "phase_hint": "serving"},
    ),
    (  # V0 entrypoints/openai/api_server.py
        "RuntimeError: Engine process failed to start. See stack trace for the root cause.",
        Milestone.ERROR,
        "vllm",
        {
            "kind": "engine_failed",
            "exception": "RuntimeError: Engine process failed to start. See stack trace for the root cause.",
        },
    ),
    (  # V1 v1/executor/multiproc_executor.py
        "(EngineCore_DP0 pid=137324) ERROR 10-29 08:32:36 [multiproc_executor.py:154] Worker proc"
        " VllmWorker-0 died unexpectedly, shutting down executor.",
        Milestone.ERROR,
        "vllm",
        {"kind": "worker_died", "proc": "VllmWorker-0"},
    ),
    (  # Ray's exception (ray/exceptions.py), vLLM's Ray executor
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        Milestone.ERROR,
        "vllm",
        {
            "kind": "worker_died",
            "exception": "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing"
            " this task.",
        },
    ),
    (  # tests/fixtures/sglang-logs-oos2/oosb40 (Ray's raylet)
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. To"
        " troubleshoot the problem, check the logs for the dead worker.",
        Milestone.ERROR,
        "vllm",
        {"kind": "worker_died"},
    ),
    (  # vllm-project/vllm#8204 (uvicorn, which SGLang uses too)
        "[2024-09-05T00:38:34Z] ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0',"
        " 44319): [errno 98] address already in use",
        Milestone.ERROR,
        "errors",
        {"kind": "bind_error", "phase_hint": "warmup"},
    ),
    # Launch lines: one per start; their parallel sizes say which ranks to expect.
    (
        "[2026-02-27 14:32:58] server_args=ServerArgs(model_path='/app/models/Deepseek-R1/', tp_size=16,"
        " pp_size=1, dp_size=1, enable_dp_attention=False, nnodes=2, node_rank=0, moe_dense_tp_size=None)",
        Note.LAUNCH,
        "launch",
        {"kind": "server_args", "tp": 16, "pp": 1, "dp": 1, "nnodes": 2, "node_rank": 0},
    ),
    (  # SGLang 0.5.23 (the kit's CPU rehearsal log): the same arguments as a dict
        "[2026-12-02 13:46:04] server_args={'model_path': '/tmp/tiny', 'nnodes': 1, 'node_rank': 0,"
        " 'tp_size': 2, 'pp_size': 1, 'dp_size': 1, 'enable_dp_attention': False, 'ep_size': 1}",
        Note.LAUNCH,
        "launch",
        {"kind": "server_args", "tp": 2, "dp": 1, "nnodes": 1, "dp_attention": False, "model": "/tmp/tiny"},
    ),
    (
        "INFO 08-06 10:21:03 api_server.py:339] vLLM API server version 0.5.4",
        Note.LAUNCH,
        "launch",
        {"kind": "vllm_version"},
    ),
    (
        "INFO 08-06 10:21:03 api_server.py:340] args: Namespace(host=None, port=8000,"
        " tensor_parallel_size=2, pipeline_parallel_size=1)",
        Note.LAUNCH,
        "launch",
        {"kind": "vllm_args", "tp": 2, "pp": 1},
    ),
    # SGLang 0.5.23 srt/managers/scheduler_components/invariant_checker.py dump_info, printed by
    # srt/utils/watchdog.py when a batch made no progress (only once start-up is done)
    (
        "scheduler.cur_batch_for_debug.batch_size()=1",
        Note.SERVING,
        "serving",
        {"kind": "stuck_batch"},
    ),
    # 0.4.7-0.5.x srt/managers/scheduler.py watchdog_thread, before srt/utils/watchdog.py
    (
        "[2025-06-05 08:28:03 DP3 TP6] self.cur_batch.batch_size()=1, self.cur_batch.reqs=[Req(rid=71380)]",
        Note.SERVING,
        "serving",
        {"kind": "stuck_batch"},
    ),
    # NVIDIA Dynamo's SGLang worker, once its engine is up (dynamo/sglang/register.py)
    (
        "[2026-07-05 19:45:29.924] Model registration succeeded; processing queued requests",
        Note.SERVING,
        "serving",
        {"kind": "registered"},
    ),
    # vLLM csrc/custom_all_reduce.cuh CUDACHECK, relayed by Dynamo's vLLM worker
    (
        "2025-04-23T03:35:43.390Z  INFO dynamo_engine_vllm::worker: VLLM: Failed:"
        " /workspace/csrc/custom_all_reduce.cuh:368 'invalid argument'",
        Milestone.ERROR,
        "vllm",
        {"kind": "cuda_check", "exception": "invalid argument"},
    ),
    # SGLang 0.5.23 srt/utils/watchdog.py, the soft watchdog (its own block in patterns.toml)
    (
        M + "TokenizerManager watchdog timeout (self.watchdog_timeout=60.0, self.soft=True)",
        Note.SOFT_WATCHDOG,
        "soft-watchdog",
        {"watchdog": "TokenizerManager", "timeout_s": 60.0},
    ),
]


@pytest.mark.parametrize(("line", "what", "dialect", "fields"), CASES, ids=[c[0][-60:] for c in CASES])
def test_dialect_line_is_read_as_its_milestone_with_its_fields(line, what, dialect, fields):
    [event] = parse_text(line)
    assert (event.milestone if isinstance(what, Milestone) else event.note) is what
    assert event.dialect == dialect
    for name, value in fields.items():
        assert event.fields[name] == value, name
    assert event.text == unwrap(line).text  # the line less a collector's wrapper (a Ray worker's)


def test_every_pattern_in_the_data_file_is_exercised_here():
    exercised = set()
    for line, *_ in CASES:
        for pattern in (p for ps in default_patterns().by_scan.values() for p in ps):
            if pattern.scan in line and pattern.regex.search(line):
                exercised.add((pattern.dialect, pattern.scan, pattern.regex.pattern))
    every = {(p.dialect, p.scan, p.regex.pattern) for ps in default_patterns().by_scan.values() for p in ps}
    assert every - exercised == set()


@pytest.mark.parametrize(
    "line",
    [
        "[2026-12-02 13:46:15 TP0] Decode batch: a note that names the words but is no batch line",
        M + 'INFO:     127.0.0.1:5 - "GET /health HTTP/1.1" 503 Service Unavailable',  # not answered
        # transformers' bar, not SGLang's weight loader's
        "Loading checkpoint shards:  50%|█████     | 7/14 [00:03<00:04,  1.74it/s]",
        "host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via IPC",
        "The process was Killed by a signal",  # 'Killed' must be the whole line
        M + "Subprocess detokenizer (pid=1) exited with exit code 0.",  # exit code 0 is no error
        "",
    ],
)
def test_uninteresting_lines_give_no_event(line):
    assert parse_text(line) == []


def test_rank0_only_marks_draft_capture_but_not_target_capture():
    target, draft = parse_text(
        "[t TP0] x\n"
        "[2026-07-21 08:21:55 TP1] Capture target verify CUDA graph begin. backend=full\n"
        "[2026-07-21 08:22:00 TP0] Capture draft decode CUDA graph begin. backend=full\n"
    )
    assert (target.rank0_only, draft.rank0_only) == (False, True)


def test_fatal_marks_definitive_errors_only():
    fatal, survivable = parse_text(M + "Rank 0 scheduler is dead.\n[rank0]: CUDA error: out of resources\n")
    assert fatal.fatal and not survivable.fatal


def _document(**pattern) -> dict:
    return {"dialect": [{"name": "9.9", "pattern": [pattern]}]}


def test_a_new_dialect_is_data_only():
    patterns = build_pattern_set(
        _document(milestone="init.begin", scan="Start distributed", regex=r"Start distributed\.")
    )
    [event] = parse_text("[2030-01-01 00:00:00 TP3] Start distributed.", patterns)
    assert (event.milestone, event.dialect, event.rank.tp) == (Milestone.INIT_BEGIN, "9.9", 3)


@pytest.mark.parametrize(
    "pattern",
    [
        {"milestone": "init.begin"},  # no scan
        {"milestone": "init.begin", "note": "shutdown", "scan": "x"},  # both
        {"scan": "x"},  # neither
        {"milestone": "init.begin", "scan": "x", "colour": "red"},  # unknown key
        {"milestone": "no.such", "scan": "x"},
        {"note": "shutdown", "scan": " starts with a space"},
    ],
)
def test_bad_pattern_data_is_rejected(pattern):
    with pytest.raises(ValueError):
        build_pattern_set(_document(**pattern))


def test_versioned_dialects_rank_by_release_and_others_never_win():
    from kit.logs.patterns import PatternSet

    names = ["0.5.21", "any", "0.3", "0.5.16", "errors", "0.5", "0.4"]
    assert sorted(names, key=PatternSet.dialect_rank) == [
        "any",
        "errors",
        "0.3",
        "0.4",
        "0.5",
        "0.5.16",
        "0.5.21",
    ]
    assert set(default_patterns().dialects) >= {"0.3", "0.4", "0.5", "0.5.16", "0.5.21"}


def test_report_dialect_is_the_newest_wording_seen():
    from kit.logs import analyze_text

    text = (
        P + "Init torch distributed begin.\n" + P + "Capture target decode CUDA graph begin. backend=full\n"
    )
    assert analyze_text(text).dialect == "0.5.16"


def test_once_patterns_give_one_event_for_many_channel_lines():
    text = "\n".join(f"h:1:1 [0] NCCL INFO Channel {c:02d}/0 : 0[0] -> 1[1] via P2P/IPC" for c in range(32))
    [event] = parse_text(text)
    assert (event.note, event.line_no) == (Note.NCCL_TRANSPORT, 1)
