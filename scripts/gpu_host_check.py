"""One step of the GPU host check, by path: `python3 scripts/gpu_host_check.py STEP --out OUT --work WORK`
is `python -m kit.hostcheck STEP ...` from the repository root (kit/hostcheck/runner.py has the
steps; scripts/gpu-host-check runs them all; docs/gpu-host-check.md says what each proves)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's kit, wherever run from

from kit.hostcheck.runner import main

if __name__ == "__main__":
    sys.exit(main())
