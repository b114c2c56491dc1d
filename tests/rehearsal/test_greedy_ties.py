"""kit/rehearsal/greedy_ties.py: the tie figures (pure), and the measurement where transformers is."""

from __future__ import annotations

import importlib.util
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kit.rehearsal.greedy_ties import EPSILONS, measure, tie_figures


def test_the_rates_count_gaps_below_each_epsilon_and_the_flips():
    fig = tie_figures([0.0, 0.03, 0.2, 0.5], [0.005, 0.06, 0.2, 0.5], [True, False, False, True])
    assert fig["positions"] == 4 and fig["flips"] == 2 and fig["flip_rate"] == 0.5
    assert fig["below"]["0.01"] == {"step_below": 0.25, "verify_below": 0.25, "flips_within": 1}
    assert fig["below"]["0.05"]["step_below"] == 0.5 and fig["below"]["0.05"]["verify_below"] == 0.25
    # A flip at a gap of 0.5 nats is no tie at any epsilon: it is what the epsilon must not hide.
    assert fig["largest_flip_gap"] == 0.5 and fig["below"]["0.1"]["flips_within"] == 1
    assert fig["smallest_covering_epsilon"] is None
    # The one-token-per-step gap decides, as the smoke's reference run's does.
    assert tie_figures([0.03], [0.0], [True])["smallest_covering_epsilon"] == 0.05
    assert tie_figures([0.2], [0.04], [True])["smallest_covering_epsilon"] is None
    assert tie_figures([0.004], [0.3], [True])["smallest_covering_epsilon"] == 0.01
    assert tie_figures([0.2], [0.2], [False])["smallest_covering_epsilon"] == 0.01


def test_a_flip_at_a_gap_equal_to_an_epsilon_is_within_it_and_covered_by_it():
    # Inclusive at the boundary, as the smoke judges (gap <= epsilon): a flip at exactly 0.05 is one
    # 0.05 calls a tie; "below" counts gaps strictly under each epsilon.
    fig = tie_figures([0.05], [0.05], [True])
    assert fig["below"]["0.05"] == {"step_below": 0.0, "verify_below": 0.0, "flips_within": 1}
    assert fig["below"]["0.01"]["flips_within"] == 0
    assert fig["smallest_covering_epsilon"] == 0.05
    above = tie_figures([math.nextafter(0.05, 1.0)], [0.0], [True])
    assert above["below"]["0.05"]["flips_within"] == 0 and above["smallest_covering_epsilon"] == 0.1


def test_no_positions_no_rates_and_mismatched_lengths_are_refused():
    assert tie_figures([], [], [])["flip_rate"] is None
    with pytest.raises(ValueError, match="one entry per position"):
        tie_figures([0.1], [], [False])


@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0, 5), st.booleans()), max_size=50))
def test_rates_are_fractions_and_grow_with_epsilon(rows):
    fig = tie_figures([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    if not rows:
        return
    below = [fig["below"][f"{e:g}"]["step_below"] for e in EPSILONS]
    assert all(0 <= b <= 1 for b in below) and below == sorted(below)
    assert fig["flips"] == sum(r[2] for r in rows)


@pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None,
    reason="needs torch and transformers (the images' pins; not the kit's own deps)",
)
def test_the_tiny_model_measures_on_cpu():
    fig = measure("cpu", "float32", prompts=1, new_tokens=4)
    assert fig["positions"] == 4 and fig["dtype"] == "float32"
    # In float32 the two shapes differ by rounding only: any flip is at a near-exact tie.
    assert fig["largest_flip_gap"] is None or fig["largest_flip_gap"] < 0.01
