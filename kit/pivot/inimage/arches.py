"""The CUDA architectures the image's kernels are built for, read inside the image. Standalone: the
standard library, torch, and cuobjdump where the image has it (the CUDA devel bases do).

`kit doctor` runs it in a throwaway container of the image (no GPU, no network) and compares the
host GPUs' compute capability with what it prints, one line `KIT_ARCHES {json}`:

    {"torch": ["sm_80", ..., "sm_120", "compute_120"] | [],   torch._C._cuda_getArchFlags(): the
                                                              arches its CUDA kernels were built for
                                                              (empty for a CPU build), no GPU needed
     "packages": {"sgl_kernel": {"arches": ["sm_120a", ...], "files": 3} | {"why": "..."}, ...}}

A package's arches are the ELF cubins `cuobjdump --list-elf` names in its shared objects
(`*.sm_120a.cubin`); PTX (`--list-ptx`, `compute_120`) is listed too: the driver can compile it
for a newer GPU at first use.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys

PACKAGES = ("sgl_kernel", "flashinfer", "deep_gemm")
_ARCH = re.compile(r"\b((?:sm|compute)_\d+[a-z]?)\b")


def torch_arches() -> list[str]:
    try:
        import torch
    except Exception:  # no torch, or one that fails to load: the report says no arches
        return []
    flags = getattr(torch._C, "_cuda_getArchFlags", lambda: "")() or ""
    return sorted(set(flags.split()))


def package_arches(name: str, cuobjdump: str | None) -> dict:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return {"why": "not installed"}
    files = [
        path
        for folder in spec.submodule_search_locations
        for path in glob.glob(os.path.join(folder, "**", "*.so*"), recursive=True)
    ]
    if not files:
        return {"why": "no shared objects (pure Python, or JIT at run time)", "files": 0}
    if cuobjdump is None:
        return {"why": "cuobjdump is not in this image", "files": len(files)}
    found: set[str] = set()
    for path in files:
        for listing in ("--list-elf", "--list-ptx"):
            done = subprocess.run([cuobjdump, listing, path], capture_output=True, text=True, check=False)
            found.update(_ARCH.findall(done.stdout))
    return {"arches": sorted(found), "files": len(files)}


def main() -> int:
    cuobjdump = shutil.which("cuobjdump") or next(
        (p for p in ("/usr/local/cuda/bin/cuobjdump",) if os.path.exists(p)), None
    )
    report = {
        "torch": torch_arches(),
        "packages": {name: package_arches(name, cuobjdump) for name in PACKAGES},
        "cuobjdump": cuobjdump,
    }
    sys.stdout.write("KIT_ARCHES " + json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
