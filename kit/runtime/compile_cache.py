"""The kit's compile cache: one Docker volume for every JIT cache a server start fills. Data only.

A first start on a GPU host compiles for minutes (Triton's GDN and fused-MoE kernels and their
autotune, flashinfer's JIT modules, torch inductor, deep_gemm). Those caches live under the
container's home by default and die with it, so without a volume every `kit up` is a cold start.
The volume is mounted by `kit up`, `kit preflight` and every render; each library is pointed into it
by its own environment variable (names read from the libraries' code; each ENV entry cites where).

Contract shared by the renderers (mount + env) and the sources (compile activity counts as progress
in capture and warm-up): MOUNT is where the volume sits in the container; COMPILERS are the process
names (by family, `is_compiler`) whose presence under the server means a compiler is running.
"""

from __future__ import annotations

import fnmatch
import os

VOLUME = "kit-compile-cache"
"""The named volume (`kit down --all` keeps it)."""

COMPOSE_PROJECT = "kit"
"""compose.yaml's project name (its top-level `name`), whatever the clone's folder is called."""

COMPOSE_LABELS = ("com.docker.compose.project", "com.docker.compose.volume")
"""The labels Compose puts on a volume it creates, and looks for on one that is there: a volume made
without them draws 'already exists but was not created by Docker Compose' on every `docker compose
up` (compose's ensureVolume, pkg/compose/create.go), so the kit creates it with them."""

VOLUME_ENV = "KIT_COMPILE_CACHE_VOLUME"
"""Another volume name for this process's launches (benchmarks and tests keep the user's cache)."""

MOUNT = "/var/cache/kit-compile"
"""Where the volume is mounted inside every server and preflight container."""

ENV: dict[str, str] = {
    # Triton's kernel cache. triton/knobs.py: cache_knobs.dir = env_str_callable_default(
    # "TRITON_CACHE_DIR", ~/.triton/cache) (triton 3.5 of torch 2.9.1; the 0.5.23 GPU image's
    # lock has 3.8.0, torch 2.14.1's triton~=3.8.0; the CPU rehearsal's 3.9.0);
    # torch/_inductor/runtime/cache_dir_utils.py triton_cache_dir() reads it too.
    "TRITON_CACHE_DIR": f"{MOUNT}/triton",
    # torch inductor's FX-graph and code caches. torch/_inductor/runtime/cache_dir_utils.py
    # cache_dir(): os.environ.get("TORCHINDUCTOR_CACHE_DIR"), else /tmp/torchinductor_<user>
    # (torch 2.9.1; 2.13.0 in the CPU image, where the rehearsal's warm-up compiles with it).
    "TORCHINDUCTOR_CACHE_DIR": f"{MOUNT}/inductor",
    # flashinfer's JIT modules and downloaded cubins: flashinfer/jit/env.py FLASHINFER_BASE_DIR =
    # os.getenv("FLASHINFER_WORKSPACE_BASE", home), cache at <base>/.cache/flashinfer/<version>/<arch>
    # (flashinfer-python 0.6.7.post3 env.py:52 and 0.7.2 env.py:67, the two images' pins).
    "FLASHINFER_WORKSPACE_BASE": f"{MOUNT}/flashinfer",
    # deep_gemm's JIT cache: SGLang copies SGLANG_DG_CACHE_DIR into deep_gemm's DG_JIT_CACHE_DIR
    # (0.5.10.post1 srt/layers/deep_gemm_wrapper/compile_utils.py:33; 0.5.23 srt/environ.py:1373 and
    # compile_utils.py:51).
    "SGLANG_DG_CACHE_DIR": f"{MOUNT}/deep_gemm",
    # tvm-ffi's load_inline builds, which SGLang 0.5.10.post1's sglang/jit_kernel/utils.py calls
    # without a build directory: tvm_ffi/cpp/extension.py reads TVM_FFI_CACHE_DIR (apache-tvm-ffi).
    "TVM_FFI_CACHE_DIR": f"{MOUNT}/tvm-ffi",
    # SGLang 0.5.23's own JIT kernels: sglang/kernels/jit/utils/compile/cache.py cache_root() =
    # SGLANG_JIT_CACHE_DIR or ~/.cache/sglang/jit (srt/environ.py:1397).
    "SGLANG_JIT_CACHE_DIR": f"{MOUNT}/sglang-jit",
    # SGLang's cache root: its torch.compile cache (0.5.10.post1 srt/compilation/backend.py:397;
    # 0.5.23 backend.py, which points inductor and Triton below it while compiling), the FlashInfer
    # autotune results (0.5.23 srt/model_executor/runner/flashinfer_autotune.py), CuTe AOT objects,
    # and in 0.5.23 the default of every cache above (srt/environ.py third_party_cache_defaults).
    "SGLANG_CACHE_DIR": f"{MOUNT}/sglang",
    # The CUDA driver's PTX JIT cache (NVIDIA's CUDA environment variables; default ~/.nv/ComputeCache);
    # SGLang 0.5.23 points it under its cache too (srt/environ.py:2313).
    "CUDA_CACHE_PATH": f"{MOUNT}/cuda",
}
"""Each cache's own variable, pointed into the volume (checked against each image's code, cited above)."""

COMPILERS = (
    # CUDA's toolchain: nvcc and its stages (flashinfer, deep_gemm, tvm-ffi and SGLang's JIT builds).
    "nvcc*",
    "cicc",
    "cudafe++",
    "fatbinary",
    "nvlink",
    # Triton's assembler: `ptxas`, and for arch >= 100 (sm_120 included) its own `ptxas-blackwell`
    # (triton 3.8.0 backends/nvidia/compiler.py get_ptxas: knobs.nvidia.ptxas_blackwell if arch >= 100;
    # the wheel ships bin/ptxas and bin/ptxas-blackwell). A family, so the next arch's name is one too.
    "ptxas*",
    # The host compiler and linker those builds call (gcc's stages, binutils, ninja for flashinfer),
    # and the C compiler Triton and inductor build their launchers and CPU kernels with.
    "cc1",
    "cc1plus",
    "as",
    "ld",
    "ld.*",
    "collect2",
    "ninja",
    "gcc*",
    "g++*",
    "cc",
    "c++",
    "clang*",
)
"""Process names (comm, at most 15 characters) of compilers that JIT builds run as children of the
server, as shell patterns: a family (`ptxas*`, `nvcc*`, `ld.*`) matches every member of it."""


def is_compiler(name: str) -> bool:
    """Is a process named NAME (its comm) one of the COMPILERS?"""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in COMPILERS)


def volume_name() -> str:
    """The volume this process mounts: VOLUME, unless KIT_COMPILE_CACHE_VOLUME names another."""
    return os.environ.get(VOLUME_ENV, "").strip() or VOLUME
