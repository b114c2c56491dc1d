"""Bad input to preflight, doctor and bisect: one line naming the field and the fix, exit 2, no traceback,
before any container or engine is touched."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pivot_helpers import run_cli


@pytest.mark.parametrize(
    ("argv", "starts"),
    [
        (["preflight", "nope"], "kit: error: target: unknown target 'nope'"),
        (["preflight", "--image", "nope"], "kit: error: image: unknown image 'nope'"),
        (["preflight", "tiny", "--tp", "0"], "kit: error: Invalid value for '--tp'"),
        (["preflight", "tiny", "--deadline", "init"], "kit: error: --deadline: 'init' is not STEP=SECONDS"),
        (
            ["preflight", "tiny", "--deadline", "init=-1"],
            "kit: error: --deadline: -1 is out of range (more than 0 and at most 604800, e.g. init=600)",
        ),
        (
            ["preflight", "tiny", "--deadline", "p2p=nan"],
            "kit: error: --deadline: 'nan' is not a number of seconds (a finite number, e.g. p2p=600)",
        ),
        (
            ["preflight", "tiny", "--deadline", "load=30"],  # a stage of kit up, not a preflight step
            "kit: error: --deadline: 'load=30' is not STEP=SECONDS (steps: launch, setup, init,",
        ),
        (["preflight", "tiny", "--until", "later"], "kit: error: Invalid value for '--until'"),
        (
            ["preflight", "qwen-base", "--fault", "hang-p2p"],
            "kit: error: --fault: faults exist only in the CPU",
        ),
        (["preflight", "qwen-base", "--tp", "8"], "kit: error: --tp: 8 ranks but the target has 4 GPUs"),
        (["doctor", "nope"], "kit: error: target: unknown target 'nope'"),
        (["doctor", "tiny", "--set", "tp=zero"], "kit: error: --set tp: 'zero' is not a whole number"),
        (["bisect", "tiny", "--from", "middle"], "kit: error: Invalid value for '--from'"),
        (["bisect", "tiny", "--budget", "0"], "kit: error: --budget: 0 is out of range (more than 0"),
        (["bisect", "tiny", "--budget", "nan", "--plan"], "kit: error: --budget: 'nan' is not a number"),
        (["bisect", "tiny", "--budget", "-5", "--plan"], "kit: error: --budget: -5 is out of range"),
        (["bisect", "tiny", "--budget", "inf", "--plan"], "kit: error: --budget: 'inf' is not a number"),
        (["bisect", "qwen-base", "--fault", "hang-p2p"], "kit: error: --fault: faults exist only in the CPU"),
        (["bisect"], "kit: error: Missing argument 'TARGET'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, starts):
    code, out, err = run_cli(argv)
    assert code == 2, (out, err)
    assert err.startswith(starts), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.=-0123456789[]\"', ", max_size=30))
def test_any_set_value_to_doctor_is_a_report_or_one_line_exit_2(value):
    import kit.pivot.doctor as doctor
    from kit.scenarios.fake_nvml import FakeNvml

    original = doctor.read_host
    doctor.read_host = lambda **kw: original(**{**kw, "nvml_lib": FakeNvml(available=False)})
    try:
        code, out, err = run_cli(["doctor", "tiny", "--json", "--set", value])
    finally:
        doctor.read_host = original
    assert code in (0, 1, 2), (code, out, err)
    if code == 2:
        assert err.startswith("kit: error: ") and len(err.strip().splitlines()) == 1
    else:
        assert out.startswith('{"format":"kit-doctor/1"')
