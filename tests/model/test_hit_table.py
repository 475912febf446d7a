"""Per-position hit tables: position semantics, F extrapolation, validation, files, lerp, allocation."""

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.acceptance import AcceptancePoint, HitCurve, HitTable, hit_from_dict, lerp_hit
from ssd_sim.theory.analytic import accept_count_pmf
from ssd_sim.theory.fanout import allocation_tables, backtrack

# Rejection positions are hard to guess and get harder down the draft; all-accepted ones are easy.
REJECT = ((0.0, 0.40, 0.55, 0.64), (0.0, 0.30, 0.45, 0.54), (0.0, 0.20, 0.35, 0.44))
ACCEPTED = ((0.0, 0.95, 0.97, 0.98), (0.0, 0.90, 0.95, 0.97), (0.0, 0.85, 0.92, 0.96))


def table() -> HitTable:
    return HitTable(REJECT, ACCEPTED)


def test_k2_uses_reject_rows_0_1_and_accepted_row_2():
    got = table().hit([1, 2, 3])
    assert got.tolist() == pytest.approx([REJECT[0][1], REJECT[1][2], ACCEPTED[2][3]])
    assert table().miss([1, 2, 3]).tolist() == pytest.approx([0.60, 0.55, 0.04])


def test_k5_reuses_the_last_measured_rows():
    got = table().hit([1, 1, 1, 1, 1, 2])
    assert got.tolist() == pytest.approx([0.40, 0.30, 0.20, 0.20, 0.20, ACCEPTED[2][2]])
    assert table().hit([3, 1]).tolist() == pytest.approx([0.64, ACCEPTED[1][1]])  # K = 1: accepted row 1


def test_miss_matrix_rows_follow_positions():
    m = table().miss_matrix(K=4, max_f=3)
    assert m.shape == (5, 4)
    want = [1 - np.asarray(r) for r in (REJECT[0], REJECT[1], REJECT[2], REJECT[2], ACCEPTED[2])]
    np.testing.assert_allclose(m, np.stack(want))
    assert table().miss_matrix(K=0, max_f=1)[0].tolist() == pytest.approx([1.0, 0.05])  # K = 0: accepted row 0


def test_fan_out_past_the_table_follows_the_tail_power_law():
    # miss = 1, .5, .4, .3, .2: r_tail from F = 2 and F = 4 is log(.4/.2) / log 2 = 1.
    row = (0.0, 0.5, 0.6, 0.7, 0.8)
    t = HitTable((row,), (row,))
    assert t.miss_matrix(0, 8)[0].tolist() == pytest.approx([1, .5, .4, .3, .2, .2 / 1.25, .2 / 1.5, .2 / 1.75, .1])
    assert t.hit([8, 6]).tolist() == pytest.approx([0.9, 1 - 0.2 / 1.5])


def test_tail_exponent_is_clipped_and_vanishes_where_undefined():
    steep = HitTable(((0.0, 0.5, 0.99),), ((0.0, 0.5, 1.0),))
    # r_tail = log(.5 / .01) / log 2 = 5.64 -> 5; the accepted row never misses at F_max, so r_tail = 0.
    assert steep.miss_matrix(1, 4)[:, 4].tolist() == pytest.approx([0.01 * 2**-5, 0.0])
    short = HitTable(((0.0, 0.6),), ((0.0, 0.6),))  # F_max = 1: flat past the table
    assert short.hit([3, 5]).tolist() == pytest.approx([0.6, 0.6])


def test_power_law_summary_recovers_an_exact_power_law():
    f = np.arange(9)
    row = tuple(float(v) for v in HitCurve(0.4, 0.5).hit(f))
    t = HitTable((row,), ((0.0, 0.9),))
    assert (t.miss_at_one, t.r) == pytest.approx((0.4, 0.5))
    assert (HitTable(((0.0, 0.7),), ((0.0, 0.9),)).miss_at_one, HitTable(((0.0, 0.7),), ((0.0, 0.9),)).r) == \
        pytest.approx((0.3, 0.0))


@pytest.mark.parametrize("reject, accepted, field, match", [
    ((), ((0.0, 0.5),), "reject", "at least one row"),
    (((0.0,),), ((0.0, 0.5),), "reject", "F_max >= 1"),
    (((0.0, 1.2),), ((0.0, 0.5),), "reject", r"\[0, 1\]"),
    (((0.0, 0.5, 0.4),), ((0.0, 0.5),), "reject", "not decrease"),
    (((0.1, 0.5),), ((0.0, 0.5),), "reject", "F = 0"),
    (((0.0, 0.5),), ((0.0, 0.5), (0.0, 0.5, 0.6)), "accepted", "same length"),
    (((0.0, "x"),), ((0.0, 0.5),), "reject", "rows of hit rates"),
])
def test_bad_tables_name_the_field(reject, accepted, field, match):
    with pytest.raises(ConfigError, match=match) as e:
        HitTable(reject, accepted)
    assert e.value.field == field


def test_tiny_decreases_within_tolerance_are_accepted():
    assert HitTable(((0.0, 0.5, 0.5 - 1e-10),), ((0.0, 0.5),)).reject[0][2] == 0.5 - 1e-10


def test_round_trip_through_dict_rounds_to_5_decimals():
    t = HitTable(((0.0, 0.123456789, 0.5),), ((0.0, 0.9, 0.95),))
    d = t.to_dict()
    assert d == {"reject": [[0.0, 0.12346, 0.5]], "accepted": [[0.0, 0.9, 0.95]]}
    assert HitTable.from_dict(d) == HitTable(((0.0, 0.12346, 0.5),), ((0.0, 0.9, 0.95),))
    assert hit_from_dict(table().to_dict()) == table()
    assert hit_from_dict({"miss_at_one": 0.3, "r": 0.7}) == HitCurve(0.3, 0.7)
    with pytest.raises(ConfigError, match="reject"):
        HitTable.from_dict({"reject": [[0.0, 0.5]]})


def test_point_round_trip_keeps_tables_and_hit_source():
    pt = AcceptancePoint(0.5, (0.8, 0.7), table(), HitCurve(0.2, 0.7), 0.6, "derived", hit_source="measured")
    d = pt.to_dict()
    assert d["primary_hit"] == table().to_dict() and d["backup_hit"] == {"miss_at_one": 0.2, "r": 0.7}
    assert d["hit_source"] == "measured"
    assert AcceptancePoint.from_dict(d) == pt
    with pytest.raises(ConfigError, match="hit_source"):
        AcceptancePoint(0.5, (0.8,), table(), table(), hit_source="guessed")


def test_lerp_of_tables_pads_rows_and_fan_outs():
    a = HitTable(((0.0, 0.5, 0.6, 0.7, 0.8),), ((0.0, 0.9),))
    b = HitTable(((0.0, 0.3, 0.4), (0.0, 0.1, 0.2)), ((0.0, 0.7),))
    mid = lerp_hit(a, b, 0.5)
    # b's rows extend past F = 2 by r_tail = log(.7 / .6) / log 2; a's single row repeats at position 1.
    b_tail = [0.6 * (f / 2) ** -(np.log(0.7 / 0.6) / np.log(2)) for f in (3, 4)]
    assert mid.reject[0] == pytest.approx([0.0, 0.4, 0.5, (0.7 + 1 - b_tail[0]) / 2, (0.8 + 1 - b_tail[1]) / 2])
    assert mid.reject[1][:3] == pytest.approx([0.0, 0.3, 0.4])
    assert mid.accepted == ((0.0, pytest.approx(0.8)),)


def test_lerp_of_a_curve_and_a_table_tabulates_the_curve():
    t = HitTable(((0.0, 0.40, 0.55, 0.64, 0.70),), ((0.0, 0.90, 0.95, 0.97, 0.98),))
    mid = lerp_hit(HitCurve(0.4, 1.0), t, 0.5)  # the curve hits 0, .6, .8, .8667, .9
    assert mid.reject[0] == pytest.approx([0.0, 0.5, 0.675, (0.64 + 1 - 0.4 / 3) / 2, 0.8])
    assert mid.accepted[0] == pytest.approx([0.0, 0.75, 0.875, (0.97 + 1 - 0.4 / 3) / 2, 0.94])
    assert lerp_hit(t, HitCurve(0.4, 1.0), 0.5).reject[0] == pytest.approx(mid.reject[0])
    both = lerp_hit(HitCurve(0.3, 0.8), HitCurve(0.5, 0.6), 0.5)
    assert isinstance(both, HitCurve) and (both.miss_at_one, both.r) == pytest.approx((0.4, 0.7))


def test_curve_miss_matrix_repeats_one_row():
    m = HitCurve(0.5, 1.0).miss_matrix(2, 4)
    np.testing.assert_allclose(m, [[1.0, 0.5, 0.25, 0.5 / 3, 0.125]] * 3)


def test_allocation_with_a_high_accepted_row_is_position_aware():
    # P(k) = .6, .24, .16 (alpha = 0.4, K = 2). Guessing the all-accepted bonus is easy (.9 with one
    # guess), so a per-position table spends a guess on k = 2 where a position-independent model does not.
    rej, acc = (0.0, 0.40, 0.55, 0.64, 0.70), (0.0, 0.90, 0.95, 0.97, 0.98)
    per_pos, same = HitTable((rej,), (acc,)), HitTable((rej,), (rej,))
    curve = HitCurve(per_pos.miss_at_one, per_pos.r)
    pmf = accept_count_pmf(0.4, 2)

    def alloc(h, budget):
        return backtrack(allocation_tables(budget, pmf, h.miss_matrix(2, budget)), budget).tolist()

    assert [alloc(per_pos, b) for b in (2, 3, 4)] == [[1, 0, 1], [1, 1, 1], [2, 1, 1]]
    assert [alloc(same, b) for b in (2, 3, 4)] == [[1, 1, 0], [2, 1, 0], [2, 1, 1]]
    assert [alloc(curve, b) for b in (2, 3, 4)] == [[2, 0, 0], [2, 1, 0], [2, 1, 1]]
    best, _ = allocation_tables(3, pmf, per_pos.miss_matrix(2, 3))
    assert 1 - best[-1][3] == pytest.approx(0.6 * 0.4 + 0.24 * 0.4 + 0.16 * 0.9)
