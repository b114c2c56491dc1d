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
    # -S: no site-packages, as on the bare GPU host (an unguarded third-party import fails here; the
    # rehearsal's optional `import triton`, for a torch Python, falls back as it does there).
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT, check=True
    )
    loaded = {name.split(".")[0] for name in json.loads(done.stdout)}
    assert len(modules) >= 15
    assert "kit" in loaded
    assert loaded - set(sys.stdlib_module_names) - {"kit"} == set()


def test_the_rehearsals_run_by_path_where_no_kit_can_be_imported(tmp_path):
    """On the GPU host they run on a torch Python that need not see the kit: -S -I leaves no
    site-packages and no PYTHONPATH, so `kit` is not importable and shapes.py finds hang.py beside it."""
    rehearsal = ROOT / "kit" / "hostcheck" / "rehearsal"
    for name in ("hang.py", "shapes.py"):
        done = subprocess.run(
            [sys.executable, "-S", "-I", str(rehearsal / name), "--help"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "--log" in done.stdout and "REHEARSAL" in done.stdout
    probe = (
        "import sys; sys.path[:0] = [sys.argv[1]]; import shapes; print(shapes.TITLE, 'kit' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-I", "-c", probe, str(rehearsal)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["sglang::scheduler_TP0", "False"], done.stderr
