"""The test-only fault switch: its spec format (pure), and that it is inert without KIT_FAULT."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

FAULTS = Path(__file__).parents[2] / "kit" / "rehearsal" / "kit_faults.py"


def load_faults():
    spec = importlib.util.spec_from_file_location("kit_faults_under_test", FAULTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fault_specs_parse_kind_and_parameters():
    faults = load_faults()
    assert faults.parse_fault("hang-init:rank=1") == ("hang-init", {"rank": "1"})
    assert faults.parse_fault("slow-load:seconds=90") == ("slow-load", {"seconds": "90"})
    assert faults.parse_fault("crash-load") == ("crash-load", {})
    assert faults.parse_fault("hang-collective:rank=0,x=y") == ("hang-collective", {"rank": "0", "x": "y"})


# Loads the switch in a fresh interpreter (it arms itself at import) and prints what it armed.
ARMED = (
    "import importlib.util, sys\n"
    f"spec = importlib.util.spec_from_file_location('kit_faults', {str(FAULTS)!r})\n"
    "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
    "print([f.module_name for f in sys.meta_path if type(f).__name__ == '_PatchOnImport'])\n"
)


def load_in_fresh_interpreter(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ARMED], capture_output=True, text=True, env=env, check=True)


def test_without_kit_fault_nothing_is_patched():
    assert load_in_fresh_interpreter({}).stdout.strip() == "[]"


def test_an_armed_fault_waits_for_its_module_and_an_unknown_one_says_so():
    armed = load_in_fresh_interpreter({"KIT_FAULT": "crash-load:rank=1"})
    assert armed.stdout.strip() == "['safetensors']"
    unknown = load_in_fresh_interpreter({"KIT_FAULT": "melt-gpu"})
    assert "unknown KIT_FAULT 'melt-gpu'" in unknown.stderr


def test_slow_load_can_sleep_and_redraw_a_bar_with_carriage_returns(tmp_path, capsys):
    faults = load_faults()
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"0" * 16)
    faults.kit_fault_slow_load(str(weights), 0.5, busy=False, progress=0.1)
    err = capsys.readouterr().err
    assert err.count("\r") >= 3 and err.endswith("done\n")
    assert err.count("\n") == 1  # one newline, at the end: the bar itself is only redrawn


def test_the_traceback_fault_arms_on_the_launcher_or_the_loader():
    at_launch = load_in_fresh_interpreter({"KIT_FAULT": "traceback:at=launch"})
    assert at_launch.stdout.strip() == "['sglang.srt.entrypoints.http_server']"
    at_load = load_in_fresh_interpreter({"KIT_FAULT": "traceback:at=load,rank=0,hold=5"})
    assert at_load.stdout.strip() == "['safetensors']"
    both = load_in_fresh_interpreter({"KIT_FAULT": "traceback:at=launch+load"})
    assert sorted(eval(both.stdout)) == ["safetensors", "sglang.srt.entrypoints.http_server"]
    nowhere = load_in_fresh_interpreter({"KIT_FAULT": "traceback:at=capture"})
    assert "at=launch or at=load" in nowhere.stderr and nowhere.stdout.strip() == "[]"


def test_the_traceback_it_prints_is_sglangs_shape_and_the_process_goes_on():
    """Run for real: a bare traceback (retry()'s print_exc) at launch; a logger warning with the
    traceback under it at load. Either way the process carries on and exits 0."""
    code = (
        "import importlib.util, logging\n"
        f"spec = importlib.util.spec_from_file_location('f', {str(FAULTS)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "logging.basicConfig(format='[2026-12-02 10:00:00 TP1] %(message)s')\n"
        "m.kit_fault_traceback('launch', 0.2)\n"
        "m.kit_fault_traceback('load', 0.2)\n"
        "print('went on')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "went on"
    from kit.logs import parse_text

    errors = [e for e in parse_text(done.stderr) if e.is_error]
    assert [e.fields["exception"] for e in errors] == [
        "ModuleNotFoundError: No module named 'kit_fault_optional_kernel'"
    ] * 2
    assert [e.rank_label for e in errors] == ["main", "TP1"]  # the logged one is its rank's
    assert not any(e.fatal for e in errors)
