"""The uncertainty report's hot paths: unchecked copies of drawn profiles, forwards of plain numbers without numpy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ssd_sim.model.derived import unchecked_replace
from ssd_sim.model.latency import ForwardLatency
from ssd_sim.model.presets import get_preset
from ssd_sim.model.uncertainty import drawn_profile, draws
from ssd_sim.plan.intervals import uncertainty_of
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.plan.predict import predict_sd, predict_ssd


def test_the_copy_equals_replace_and_leaves_the_original():
    f = ForwardLatency(fixed_ms=1.0, memory_ms=2.0, token_ms=0.5, token_exponent=0.8)
    assert unchecked_replace(f, fixed_ms=3.0) == dataclasses.replace(f, fixed_ms=3.0)
    assert f.fixed_ms == 1.0 and f.scaled(2.0) == ForwardLatency(2.0, 4.0, 0.0, 1.0, 0.8)


def test_an_unknown_field_is_refused_and_a_bad_scale_still_checked():
    f = ForwardLatency(fixed_ms=1.0)
    with pytest.raises(TypeError, match="no field 'fixed'"):
        unchecked_replace(f, fixed=2.0)
    with pytest.raises(Exception, match=r"fixed_ms: must be a number in 0..1e\+07 \(ms\)"):
        f.scaled(float("nan"))


@pytest.mark.parametrize("preset", ["llama70b-1b-h100", "qwen-coder-1.5b-0.5b-cpu"])
def test_drawn_profiles_predict_what_checked_copies_predict(preset):
    """Every draw's SD and SSD prediction is the same number, bit for bit, as with dataclasses.replace."""
    prof = get_preset(preset)
    plan = make_plan(prof, PlanRequest(batch_size=4)).plan
    u = uncertainty_of(prof)
    d = draws(u, 20, seed=3)
    for i in range(20):
        fast = drawn_profile(prof, u, d, i)
        lat = fast.latency
        slow = dataclasses.replace(prof, acceptance=fast.acceptance, latency=dataclasses.replace(
            lat, target=dataclasses.replace(lat.target), draft=dataclasses.replace(lat.draft)))
        assert predict_ssd(fast, plan).per_seq_tok_s == predict_ssd(slow, plan).per_seq_tok_s
        assert predict_sd(fast, 4, 3).per_seq_tok_s == predict_sd(slow, 4, 3).per_seq_tok_s
    assert np.isfinite(predict_ssd(fast, plan).per_seq_tok_s)


@pytest.mark.parametrize("f", [ForwardLatency(fixed_ms=0.3, memory_ms=7.1, compute_ms_per_token=0.013, token_ms=0.21,
                                              token_exponent=0.7, multi_token_ms=1.9, row_ms=0.04),
                               ForwardLatency(memory_ms=3.0, compute_ms_per_token=0.5, expert_ms=4.0, expert_share=0.1)])
def test_a_forward_of_plain_numbers_is_the_same_number_as_through_numpy(f):
    """ForwardLatency's path for Python numbers against its numpy path for one shape (numpy scalars, as it took
    before), bit for bit, on every shape; arrays (numpy's own vector powers) to the last bit or two."""
    for rows in (1, 2, 3, 7, 64):
        for tokens in (1, 2, 5, 9):
            assert f(rows, tokens) == f(float(rows), tokens) == f(np.float64(rows), np.int64(tokens))
            assert f(rows, tokens) == pytest.approx(float(f(np.array([rows]), np.array([tokens]))[0]), rel=1e-15)
