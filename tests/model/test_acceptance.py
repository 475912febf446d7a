"""Acceptance model: interpolation in temperature, exact points, Saguaro response direction, logged grids."""

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model import acceptance as acceptance_mod
from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve, HitTable, saguaro_response


def model():
    cold = AcceptancePoint(0.0, (0.9, 0.8), HitCurve(0.3, 0.8), HitCurve(0.2, 0.8))
    hot = AcceptancePoint(1.0, (0.7,), HitCurve(0.7, 0.6), HitCurve(0.5, 0.6))
    return AcceptanceModel((cold, hot))


def test_exact_point_is_returned_unchanged():
    m = model()
    assert m.at(1.0, 1.0) is m.points[1]


def test_linear_interpolation_in_temperature():
    mid = model().at(0.5, 1.0)
    assert mid.acceptance == pytest.approx((0.8, 0.75))
    assert mid.primary_hit.miss_at_one == pytest.approx(0.5)
    assert mid.primary_hit.r == pytest.approx(0.7)
    assert mid.backup_hit.miss_at_one == pytest.approx(0.35)


def test_temperature_outside_the_table_is_clamped():
    assert model().at(2.0).acceptance == (0.7,)


def test_greedy_ignores_saguaro_c():
    m = model()
    assert m.at(0.0, 0.3).acceptance == m.at(0.0, 1.0).acceptance


def test_lower_c_trades_acceptance_for_hits():
    m = model()
    base, low = m.at(1.0, 1.0), m.at(1.0, 0.3)
    assert low.acceptance[0] < base.acceptance[0]
    assert low.primary_hit.miss_at_one < base.primary_hit.miss_at_one
    assert low.source == "assumed" and low.hit_source == "assumed"  # the synthetic response


def test_saguaro_response_lowers_misses_monotonically_and_costs_acceptance():
    # Theorem 15: hits rise monotonically as C falls; acceptance falls overall but not monotonically.
    prev_miss = 1.0
    for c in (0.9, 0.7, 0.5, 0.3, 0.1):
        _, miss, _ = saguaro_response(0.7, 1.0, 1.0, c)
        assert miss <= prev_miss + 1e-9
        prev_miss = miss
    acc_low, miss_low, _ = saguaro_response(0.7, 1.0, 1.0, 0.1)
    assert acc_low < 0.9 and miss_low < 0.6
    assert saguaro_response(0.7, 1.0, 1.0, 1.0) == pytest.approx((1.0, 1.0, 0.0))


def test_bad_points_name_the_field():
    with pytest.raises(ConfigError, match="acceptance"):
        AcceptancePoint(0.0, (1.2,), HitCurve(0.3, 0.8), HitCurve(0.3, 0.8))
    with pytest.raises(ConfigError, match="miss_at_one"):
        HitCurve(1.5, 0.8)


def test_round_trip_through_dict():
    m = model()
    assert AcceptanceModel.from_dict(m.to_dict()) == m


def test_round_trip_keeps_the_response_and_defaults_to_synthetic():
    d = model().to_dict()
    assert d["response"] == "synthetic"
    del d["response"]
    assert AcceptanceModel.from_dict(d).response == "synthetic"
    again = AcceptanceModel.from_dict(grid().to_dict())  # tables are stored to 5 decimals
    assert again.response == "logged" and again.to_dict() == grid().to_dict()
    with pytest.raises(ConfigError, match="response"):
        AcceptanceModel(model().points, response="measured")


def test_synthetic_interpolation_lerps_hit_tables():
    cold = AcceptancePoint(0.0, (0.9,), HitTable(((0.0, 0.6, 0.7),), ((0.0, 0.9, 0.95),)), HitCurve(0.2, 0.8))
    hot = AcceptancePoint(1.0, (0.7,), HitTable(((0.0, 0.4, 0.5),), ((0.0, 0.7, 0.85),)), HitCurve(0.4, 0.8))
    mid = AcceptanceModel((cold, hot)).at(0.25)
    assert mid.primary_hit.reject[0] == pytest.approx([0.0, 0.55, 0.65])
    assert mid.primary_hit.accepted[0] == pytest.approx([0.0, 0.85, 0.925])
    assert mid.backup_hit.miss_at_one == pytest.approx(0.25)


def test_synthetic_saguaro_moves_a_table_like_the_curve_it_tabulates():
    curve = HitCurve(0.4, 0.8)
    row = tuple(float(v) for v in curve.hit(np.arange(9)))
    as_curve = AcceptanceModel((AcceptancePoint(1.0, (0.7,), curve, curve),)).at(1.0, 0.5)
    as_table = AcceptanceModel((AcceptancePoint(1.0, (0.7,), HitTable((row,), (row,)), curve),)).at(1.0, 0.5)
    assert as_table.acceptance == as_curve.acceptance
    want = as_curve.primary_hit.reject[0][:9]
    assert as_table.primary_hit.reject[0] == pytest.approx(want)
    assert want[1] > row[1]  # C < 1 moves the residual into the cache


def test_saguaro_c_leaves_the_all_accepted_hit_alone():
    # after all K are accepted the bonus is a plain target sample at a position the draft never sampled
    curve = HitCurve(0.4, 0.8)
    moved = AcceptanceModel((AcceptancePoint(1.0, (0.7,), curve, curve),)).at(1.0, 0.3).primary_hit
    assert moved.accepted[0][:4] == pytest.approx([0.0, 0.6, 1 - 0.4 * 2**-0.8, 1 - 0.4 * 3**-0.8])
    assert moved.reject[0][1] > 0.6
    assert moved.hit([1, 1])[1] == pytest.approx(0.6)  # K = 1: position 1 is the all-accepted one


# A logged grid: T in {0.5, 1.0} x C in {0.5, 1.0}; acceptance and hit rates move linearly with both.
def grid_point(T: float, C: float) -> AcceptancePoint:
    d = (T - 0.5) * 0.2 + (1.0 - C) * 0.1  # 0 at (0.5, 1.0), up to 0.15 at (1.0, 0.5)
    table = HitTable(((0.0, 0.5 + d, 0.6 + d), (0.0, 0.4 + d, 0.5 + d)), ((0.0, 0.9 - d, 0.95 - d),))
    return AcceptancePoint(T, (0.9 - d, 0.8 - d), table, HitCurve(0.3 + d, 0.8), C, "derived", "measured")


def grid() -> AcceptanceModel:
    pts = tuple(grid_point(T, C) for T in (0.5, 1.0) for C in (0.5, 1.0))
    return AcceptanceModel(pts, response="logged")


@pytest.fixture
def no_synthetic_response(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("a logged model must not call saguaro_response")

    monkeypatch.setattr(acceptance_mod, "saguaro_response", fail)


def test_logged_grid_returns_stored_points_exactly(no_synthetic_response):
    m = grid()
    assert m.at(1.0, 0.5) is m.points[2]


def test_logged_grid_interpolates_bilinearly(no_synthetic_response):
    mid = grid().at(0.75, 0.75)  # d = 0.05 + 0.025 = 0.075 (the mean of the four corners' 0, .05, .1, .15)
    assert (mid.temperature, mid.saguaro_c, mid.source, mid.hit_source) == (0.75, 0.75, "derived", "")
    assert mid.acceptance == pytest.approx((0.825, 0.725))
    assert mid.primary_hit.reject[0] == pytest.approx([0.0, 0.575, 0.675])
    assert mid.primary_hit.reject[1] == pytest.approx([0.0, 0.475, 0.575])
    assert mid.primary_hit.accepted[0] == pytest.approx([0.0, 0.825, 0.875])
    assert (mid.backup_hit.miss_at_one, mid.backup_hit.r) == pytest.approx((0.375, 0.8))
    edge = grid().at(0.5, 0.8)  # on the T = 0.5 edge: along C only, d = 0.02
    assert edge.acceptance == pytest.approx((0.88, 0.78)) and edge.source == "derived"
    assert edge.primary_hit.hit([2, 1]).tolist() == pytest.approx([0.62, 0.88])


def test_logged_grid_clamps_outside_and_says_extrapolated(no_synthetic_response):
    hot = grid().at(1.5, 0.75)  # T clamped to 1.0: d = 0.1 + 0.025
    assert (hot.temperature, hot.saguaro_c, hot.source) == (1.5, 0.75, "extrapolated")
    assert hot.acceptance == pytest.approx((0.775, 0.675))
    assert hot.primary_hit.reject[0] == pytest.approx([0.0, 0.625, 0.725])
    corner = grid().at(0.2, 0.1)  # both clamped: the (0.5, 0.5) point, d = 0.05
    assert corner.source == "extrapolated" and corner.acceptance == pytest.approx((0.85, 0.75))
    assert corner.primary_hit == grid_point(0.5, 0.5).primary_hit
    assert grid().at(0.0, 1.0).source == "extrapolated"


def test_logged_grid_must_be_complete():
    pts = tuple(grid_point(T, C) for T, C in ((0.5, 0.5), (0.5, 1.0), (1.0, 1.0)))
    with pytest.raises(ConfigError, match=r"missing \[\(1.0, 0.5\)\]"):
        AcceptanceModel(pts, response="logged")
    AcceptanceModel(pts)  # a synthetic model takes any set of points
