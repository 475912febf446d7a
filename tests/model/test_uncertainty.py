"""model.uncertainty: the spreads a profile's predictions are drawn over, and the drawn acceptance models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.acceptance import HitCurve
from ssd_sim.model.presets import get_preset
from ssd_sim.model.uncertainty import DrawnAcceptance, Uncertainty, drawn_profile, draws, shift_hit


def test_workload_sd_adds_the_run_mean_and_the_calibration_mean():
    u = Uncertainty(acceptance_logit_sd=0.8, sequences=8, run_sequences=2)
    assert u.workload_sd() == pytest.approx(0.8 * math.sqrt(1 / 2 + 1 / 8))
    assert u.workload_sd(32) == pytest.approx(0.8 * math.sqrt(1 / 32 + 1 / 8))


def test_extrapolation_widens_latency_per_doubling_past_the_timed_forwards():
    u = Uncertainty(timed_rows_tokens=(8, 6))
    assert u.extrapolation_sd(8, 6) == (0.0, 0.0)
    assert u.extrapolation_sd(32, 12) == pytest.approx((0.2, 0.1))
    assert Uncertainty().extrapolation_sd(1000, 1000) == (0.0, 0.0)  # no timed range recorded


def test_round_trip_and_bad_fields_name_the_field():
    u = Uncertainty(0.7, 5, 3, 0.05, (), 0.04, True, (10, 4), {"x": "measured"})
    assert Uncertainty.from_dict(u.to_dict()) == u
    with pytest.raises(ConfigError) as e:
        Uncertainty(interference=(0.4, 0.1))
    assert e.value.field == "uncertainty.interference"
    with pytest.raises(ConfigError) as e:
        Uncertainty.from_dict({"acceptance_sd": 1})
    assert e.value.field == "uncertainty.acceptance_sd"


def test_a_session_horizon_takes_the_session_spread_when_one_was_measured():
    u = Uncertainty(latency_run_sd=0.18, latency_session_sd=0.05, timed_at=("2026-12-03T12:00:00Z", "2026-12-03T12:20:00Z"),
                    sources={"latency_run_sd": "later: 18%", "latency_session_sd": "within the hour: 5%"})
    s = u.at_horizon("session")
    assert (s.latency_run_sd, s.horizon, s.sources["latency_run_sd"]) == (0.05, "session", "within the hour: 5%")
    assert u.at_horizon("later") is u and s.at_horizon("session") is s
    assert Uncertainty.from_dict(u.to_dict()) == u and Uncertainty.from_dict(s.to_dict()) == s
    kept = Uncertainty(latency_run_sd=0.08).at_horizon("session")  # nothing measured: the later spread stays
    assert kept.latency_run_sd == 0.08 and "no session spread measured" in kept.sources["latency_run_sd"]
    with pytest.raises(ConfigError) as e:
        s.at_horizon("later")
    assert e.value.field == "horizon"


def test_profiles_without_a_horizon_write_as_before_and_bad_ones_name_the_field():
    assert not {"latency_session_sd", "timed_at", "horizon"} & set(Uncertainty().to_dict())
    for bad, field in (({"horizon": "tomorrow"}, "uncertainty.horizon"),
                       ({"timed_at": ["2026-12-03T12:00:00Z"]}, "uncertainty.timed_at"),
                       ({"timed_at": ["noon", "one"]}, "uncertainty.timed_at"),
                       ({"latency_session_sd": -0.1}, "uncertainty.latency_session_sd")):
        with pytest.raises(ConfigError) as e:
            Uncertainty.from_dict(bad)
        assert e.value.field == field, bad
    with pytest.raises(ConfigError) as e:
        Uncertainty().at_horizon("soon")
    assert e.value.field == "horizon"


def test_a_logit_shift_moves_acceptance_and_hits_together_and_keeps_certainties():
    acc = get_preset("llama70b-1b-h100").acceptance
    base = acc.at(0.0)
    up, down = DrawnAcceptance(acc, 0.5).at(0.0), DrawnAcceptance(acc, -0.5).at(0.0)
    assert all(d < b < u for d, b, u in zip(down.acceptance, base.acceptance, up.acceptance, strict=False))
    fo = [2, 2, 2, 2]
    assert down.primary_hit.hit(fo)[0] < base.primary_hit.hit(fo)[0] < up.primary_hit.hit(fo)[0]
    h = shift_hit(HitCurve(0.5, 0.8), 2.0)
    assert h.hit([0, 1])[0] == 0.0  # no guess never hits
    row = 1.0 - h.miss_matrix(0, 40)[0]
    assert np.all(np.diff(row) >= 0) and row[1] == pytest.approx(1 / (1 + np.exp(-2.0)))  # hit(1) = 0.5 -> logit 2


def test_one_source_at_a_time_leaves_the_others_at_their_centre():
    u = Uncertainty(interference=(0.0, 0.4), hit_assumed=True)
    d = draws(u, 50, only="workload")
    assert np.std(d["delta"]) > 0 and np.all(d["target_scale"] == 1) and np.all(d["interference"] == 0.2)
    ext = draws(Uncertainty(timed_rows_tokens=(2, 2)), 50, only="extrapolation", rows_tokens=(8, 2))
    assert np.std(np.log(ext["target_scale"])) == pytest.approx(0.2, rel=0.3) and np.all(ext["draft_scale"] == 1)
    assert np.all(d["miss_at_one"] == 0.5)
    full = draws(u, 50, seed=3)
    assert np.std(full["interference"]) > 0 and np.std(full["miss_at_one"]) > 0
    assert np.array_equal(draws(u, 50, seed=3)["delta"], full["delta"])  # reproducible


def test_a_drawn_profile_scales_latency_and_sets_the_interference():
    prof = get_preset("qwen-coder-1.5b-0.5b-cpu")
    u = Uncertainty(interference=(0.0, 0.5))
    d = {"delta": np.array([0.0]), "target_scale": np.array([1.2]), "draft_scale": np.array([0.9]),
         "interference": np.array([0.3]), "interference_draft": np.array([0.1]), "miss_at_one": np.array([0.5]),
         "r": np.array([0.9]), "saguaro_w": np.array([1.0])}
    p = drawn_profile(prof, u, d, 0)
    assert p.latency.target(1, 3) == pytest.approx(1.2 * prof.latency.target(1, 3))
    assert p.latency.draft(4, 1) == pytest.approx(0.9 * prof.latency.draft(4, 1))
    assert (p.latency.verify_slowdown_one_row, p.latency.verify_slowdown_rows, p.latency.draft_slowdown) == (0.3, 0.3, 0.1)
