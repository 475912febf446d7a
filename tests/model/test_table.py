"""MeasuredForward: probed values exactly, linear between probed shapes, the curve anchored outside them."""

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.latency import ForwardLatency, LatencyModel
from ssd_sim.model.table import MeasuredForward, forward_from_dict, latency_from_dict

# A CPU-like table: 2 tokens cost much more than 1, and 3 tokens are cheaper than 2 (as one host measured)
TABLE = {(1, 1): 10.0, (1, 2): 20.0, (1, 3): 19.0, (2, 1): 12.0, (2, 2): 24.0, (2, 3): 25.0,
         (4, 1): 15.0, (4, 2): 30.0, (4, 3): 32.0}
CURVE = ForwardLatency(fixed_ms=5.0, token_ms=5.0)  # 5 + 5 N ms


def table(curve: ForwardLatency = CURVE) -> MeasuredForward:
    return MeasuredForward(**curve.__dict__, table=tuple((r, t, ms) for (r, t), ms in TABLE.items()))


def test_probed_shapes_return_the_probed_medians_even_where_the_curve_disagrees():
    m = table()
    for (r, t), ms in TABLE.items():
        assert m(r, t) == ms
    assert m(1, 3) < m(1, 2)  # the table keeps what a smooth curve cannot


def test_between_probed_rows_and_tokens_it_interpolates_linearly():
    m = table()
    assert m(3, 2) == pytest.approx((24.0 + 30.0) / 2)
    assert m(1, 2.5) == pytest.approx((20.0 + 19.0) / 2)
    assert m(3, 2.5) == pytest.approx(((24 + 30) / 2 + (25 + 32) / 2) / 2)
    assert np.allclose(m(np.array([1, 2, 3, 4]), 1), [10.0, 12.0, 13.5, 15.0])


def test_outside_the_table_the_curve_is_scaled_to_the_nearest_probed_value():
    m = table()
    # rows 8 at 2 tokens: curve(8, 2) = 5 + 80 = 85 ms, anchored at (4, 2): 30 / curve(4, 2) = 30 / 45
    assert m(8, 2) == pytest.approx(85.0 * 30.0 / 45.0)
    # tokens 5 at rows 1: curve(1, 5) = 30, anchored at (1, 3): 19 / curve(1, 3) = 19 / 20
    assert m(1, 5) == pytest.approx(30.0 * 19.0 / 20.0)
    assert list(m.covers(np.array([1, 3, 4, 8]), 2)) == [True, True, True, False]
    assert not m.covers(1, 5) and m.covers(2, 2.5)
    assert m.probed_range() == "rows 1..4 x tokens 1..3"


def test_scaled_scales_the_table_and_the_curve():
    m = table().scaled(2.0)
    assert m(1, 2) == 40.0 and m(3, 2) == pytest.approx(54.0) and m(8, 2) == pytest.approx(2 * 85.0 * 30.0 / 45.0)


def test_fit_gives_a_curve_through_the_table_and_round_trips_through_a_profile_dict():
    m = MeasuredForward.fit(TABLE)
    assert m(2, 2) == 24.0 and m.curve(2, 2) == pytest.approx(24.0, rel=0.25)
    lat = LatencyModel(m, ForwardLatency(fixed_ms=3.0))
    back = latency_from_dict(lat.to_dict())
    assert isinstance(back.target, MeasuredForward) and back.target.table == m.table
    assert back.target(3, 2.5) == pytest.approx(m(3, 2.5))
    assert not isinstance(back.draft, MeasuredForward)


@pytest.mark.parametrize("bad,needle", [
    ([[1, 1, 0.0]], "table[0]"),
    ([[1, 1]], "table[0]"),
    ([[0, 1, 3.0]], "table[0]"),
    ([[1, 1, 3.0], [1, 1, 4.0]], "twice"),
    ("oops", "latency.target.table"),
])
def test_bad_tables_are_one_line_errors_naming_the_field(bad, needle):
    with pytest.raises(ConfigError) as e:
        forward_from_dict({"fixed_ms": 1.0, "table": bad}, "target")
    assert needle in str(e.value) and "\n" not in str(e.value)
