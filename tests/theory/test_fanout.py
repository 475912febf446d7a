"""Fan-out allocation: Theorem 12's geometric form and the exactly optimal integer allocation."""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssd_sim.theory.analytic import accept_count_pmf
from ssd_sim.theory.fanout import (
    allocation_tables,
    backtrack,
    geometric_fanout,
    integer_fanout,
    miss_curve,
    miss_rate,
    power_law_matrix,
    uniform_fanout,
)
from tests.helpers.combinatorics import compositions


def test_miss_curve_power_law_with_scale():
    m = miss_curve([0, 1, 2, 4], r=1.0, miss_at_one=0.5)
    assert m == pytest.approx([1.0, 0.5, 0.25, 0.125])
    assert miss_curve([1, 3], r=0.5) == pytest.approx([1.0, 3**-0.5])


def test_geometric_fanout_is_theorem_12():
    a, K, r, B = 0.8, 4, 1.0, 30.0
    f = geometric_fanout(B, a, K, r)
    assert f.sum() == pytest.approx(B)
    ratio = a ** (1 / (1 + r))
    for k in range(K - 1):
        assert f[k + 1] / f[k] == pytest.approx(ratio)
    assert f[K] / f[0] == pytest.approx(a ** (K / (1 + r)) * (1 - a) ** (-1 / (1 + r)))


def test_geometric_fanout_attains_the_theorem_12_miss():
    a, K, r, B = 0.7, 5, 0.8, 40.0
    f = geometric_fanout(B, a, K, r)
    pmf = accept_count_pmf(a, K)
    expected = (pmf ** (1 / (1 + r))).sum() ** (1 + r) / B**r
    assert float(pmf @ f ** (-r)) == pytest.approx(expected)


@pytest.mark.parametrize("a,r,c", [(0.8, 1.0, 1.0), (0.5, 0.5, 1.0), (0.9, 2.0, 0.4), (0.3, 0.8, 0.7)])
def test_integer_fanout_is_optimal_by_brute_force(a, r, c):
    for K in range(1, 5):
        for budget in range(0, 13):
            best = min(miss_rate(f, a, r, c) for f in compositions(budget, K + 1))
            got = integer_fanout(budget, a, K, r, c)
            assert got.sum() == budget and (got >= 0).all()
            assert miss_rate(got, a, r, c) == pytest.approx(best, abs=1e-12), (K, budget)


def test_integer_fanout_with_per_position_acceptance_is_optimal():
    acc = [0.95, 0.6, 0.3]
    for budget in range(0, 11):
        best = min(miss_rate(f, acc, 0.7, 0.6) for f in compositions(budget, 4))
        assert miss_rate(integer_fanout(budget, acc, 3, 0.7, 0.6), acc, 0.7, 0.6) == pytest.approx(best)


def test_literal_power_law_never_spends_a_single_guess():
    # miss(1) = 1 when c = 1, so a lone guess is wasted: budget 3 at K = 1 goes (0, 3) or (3, 0).
    f = integer_fanout(3, 0.5, 1, 1.0)
    assert sorted(f.tolist()) == [0, 3]


def test_geometric_beats_uniform():
    a, K, r = 0.8, 7, 0.6
    uni = uniform_fanout(3, K)
    opt = integer_fanout(int(uni.sum()), a, K, r, 0.5)
    assert miss_rate(opt, a, r, 0.5) < miss_rate(uni, a, r, 0.5)


@settings(max_examples=100, deadline=None)
@given(budget=st.integers(0, 40), a=st.floats(0.05, 0.99), K=st.integers(1, 8), r=st.floats(0.1, 3.0))
def test_integer_fanout_sums_to_budget_and_beats_rounded_geometric(budget, a, K, r):
    f = integer_fanout(budget, a, K, r)
    assert f.sum() == budget
    g = np.floor(geometric_fanout(budget, a, K, r)).astype(int)
    g[0] += budget - g.sum()
    assert miss_rate(f, a, r) <= miss_rate(g, a, r) + 1e-12


def test_allocation_tables_take_a_miss_matrix_per_position():
    pmf = accept_count_pmf(0.5, 1)  # P(0) = P(1) = 0.5
    miss = np.array([[1.0, 0.6, 0.5, 0.45], [1.0, 0.1, 0.05, 0.04]])  # position 1 is far easier to guess
    tables = allocation_tables(3, pmf, miss)
    assert [backtrack(tables, b).tolist() for b in range(4)] == [[0, 0], [0, 1], [1, 1], [2, 1]]
    assert tables[0][-1][2] == pytest.approx(0.5 * 0.6 + 0.5 * 0.1)
    with pytest.raises(ValueError, match="shape"):
        allocation_tables(3, pmf, miss[:, :3])


def test_power_law_matrix_repeats_the_miss_curve():
    m = power_law_matrix(2, 4, r=1.0, miss_at_one=0.5)
    np.testing.assert_allclose(m, np.tile(miss_curve(np.arange(5), 1.0, 0.5), (3, 1)))
