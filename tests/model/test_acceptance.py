"""Acceptance model: interpolation in temperature, exact points, Saguaro response direction."""

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve, saguaro_response


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
    assert low.source == "derived"


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
