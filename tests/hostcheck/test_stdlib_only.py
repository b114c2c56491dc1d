"""Every module of the GPU host check imports only the standard library (and itself) at module level:
its `wheels` step runs on a bare GPU host before the kit's own dependencies are on the path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_every_step_loads_nothing_beyond_the_standard_library():
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in (ROOT / "kit" / "hostcheck").rglob("*.py")
        if p.name != "__main__.py"
    )
    probe = (
        "import importlib, json, sys\n"
        "before = set(sys.modules)\n"  # what the interpreter's start-up (site, .pth files) loaded
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True
    )
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert len(modules) >= 15
    assert "kit" in loaded
    assert loaded - set(sys.stdlib_module_names) - {"kit"} == set()
