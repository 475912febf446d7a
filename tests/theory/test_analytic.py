"""Closed forms of ssd_sim.theory.analytic against hand-computed values, Monte Carlo and the paper's corollaries."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssd_sim.theory.analytic import (
    accept_count_pmf,
    critical_batch_size,
    expected_tokens,
    expected_tokens_positional,
    sd_speedup,
    ssd_speedup,
)


def test_expected_tokens_matches_hand_values():
    # a = 0.5, K = 3: 1 + .5 + .25 + .125 = 1.875
    assert expected_tokens(0.5, 3) == pytest.approx(1.875)
    assert expected_tokens(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert expected_tokens(0.0, 5) == pytest.approx(1.0)


def test_expected_tokens_is_k_plus_one_at_full_acceptance():
    assert expected_tokens(1.0, 7) == 8.0
    assert expected_tokens(1 - 1e-13, 7) == pytest.approx(8.0)


def test_closed_forms_broadcast_over_arrays():
    a = np.array([0.5, 0.8, 1.0])
    e = expected_tokens(a, np.array([[1], [3]]))
    assert e.shape == (2, 3)
    assert e[1, 0] == pytest.approx(1.875)
    assert e[0, 2] == pytest.approx(2.0)
    s = ssd_speedup(np.array([0.5, 0.9]), 3.0, 1.0, 0.5, 0.5, batch_size=np.array([[1], [4]]))
    assert s.shape == (2, 2)


def test_sd_speedup_hand_value():
    # E = 1.875 tokens per round costing 1 verify + 3 x 0.1
    assert sd_speedup(0.5, 3, 0.3) == pytest.approx(1.875 / 1.3)


def test_ssd_speedup_theorem_7_hand_value():
    # p=0.8, E_hit=4, E_miss=3, T_p=0.5 (hidden), T_b=0.4: (3.2 + 0.6) / (0.8 + 0.2 * 1.4)
    assert ssd_speedup(0.8, 4.0, 3.0, 0.5, 0.4) == pytest.approx(3.8 / 1.08)


def test_ssd_speedup_batch_corollary_uses_all_hit_probability():
    # b = 3: all-hit probability 0.8^3 = 0.512; numerator unchanged
    expected = 3.8 / (0.512 * 1.0 + 0.488 * 1.4)
    assert ssd_speedup(0.8, 4.0, 3.0, 0.5, 0.4, batch_size=3) == pytest.approx(expected)


def test_slow_primary_is_paid_on_hits():
    assert ssd_speedup(1.0, 4.0, 3.0, 2.0, 0.4) == pytest.approx(2.0)


def test_expected_tokens_matches_monte_carlo():
    rng = np.random.default_rng(0)
    a, K, n = 0.7, 5, 200_000
    accepted = rng.random((n, K)) < a
    k = np.where(accepted.all(axis=1), K, np.argmin(accepted, axis=1))
    tokens = k + 1
    se = tokens.std() / math.sqrt(n)
    assert abs(tokens.mean() - expected_tokens(a, K)) < 4 * se


def test_ssd_speedup_matches_monte_carlo_of_rounds():
    """Rounds hit independently with p; a batch of b waits for the backup when any row misses."""
    rng = np.random.default_rng(1)
    p, b, e_hit, t_p, t_b, K, a = 0.75, 2, None, 0.6, 0.5, 4, 0.8
    n = 200_000
    e_hit = expected_tokens(a, K)
    hits = rng.random((n, b)) < p
    acc = rng.random((n, b, K)) < a
    k = np.where(acc.all(axis=2), K, np.argmin(acc, axis=2))
    tokens = (k + 1).mean(axis=1)  # hit and miss rows draft with the same model (E_hit = E_miss)
    time = np.where(hits.all(axis=1), max(1.0, t_p), 1.0 + t_b)
    mc = tokens.sum() / time.sum()
    exact = ssd_speedup(p, e_hit, e_hit, t_p, t_b, batch_size=b)
    assert mc == pytest.approx(exact, rel=0.01)


def test_accept_count_pmf_is_capped_geometric():
    pmf = accept_count_pmf(0.6, 3)
    assert pmf == pytest.approx([0.4, 0.24, 0.144, 0.216])
    assert pmf.sum() == pytest.approx(1.0)


def test_positional_acceptance_pmf_and_expectation():
    pmf = accept_count_pmf([0.9, 0.5], 3)  # a_3 reuses a_2 = 0.5
    assert pmf == pytest.approx([0.1, 0.45, 0.225, 0.225])
    assert expected_tokens_positional([0.9, 0.5], 3) == pytest.approx(1 + 0.9 + 0.45 + 0.225)
    assert expected_tokens_positional(0.7, 4) == pytest.approx(expected_tokens(0.7, 4))


def test_critical_batch_size_hand_value():
    # p=0.9, E_hit=4, E_n=4, E_f=1, T_p<=1, T_n=0.5, T_f=0
    n_n, n_f = 4.0, 0.9 * 4 + 0.1 * 1
    a = n_f * 1.5 - n_n * 1.0
    q_star = a / ((n_n - n_f) * 1.0 + a)
    assert critical_batch_size(0.9, 4, 4, 1, 0.8, 0.5, 0.0) == pytest.approx(math.log(q_star) / math.log(0.9))


def test_critical_batch_size_separates_the_two_backups():
    args = dict(p_hit=0.85, e_hit=5.0, e_miss_neural=5.0, e_miss_fast=1.0, t_primary=0.9,
                t_backup_neural=0.6, t_backup_fast=0.0)
    b_star = critical_batch_size(**args)
    for b in (1, 2, 3, 5, 8, 13, 21):
        neural = ssd_speedup(0.85, 5.0, 5.0, 0.9, 0.6, b)
        fast = ssd_speedup(0.85, 5.0, 1.0, 0.9, 0.0, b)
        assert (neural >= fast) == (b <= b_star), b


def test_critical_batch_size_edges():
    # free neural backup: neural always wins
    assert critical_batch_size(0.8, 4, 4, 1, 0.5, 0.0, 0.0) == math.inf
    # perfect hits: backups never run
    assert critical_batch_size(1.0, 4, 4, 1, 0.5, 0.5, 0.0) == math.inf
    # neural backup as slow as a whole extra verify and barely better: fast wins from b = 1
    assert critical_batch_size(0.5, 2.0, 1.05, 1.0, 0.5, 5.0, 0.0) == 1.0


@settings(max_examples=200, deadline=None)
@given(
    a=st.floats(0.05, 0.99),
    K=st.integers(1, 10),
    t_sd=st.floats(0.0, 1.0),
    p_hit=st.floats(0.0, 1.0),
)
def test_corollary_8_ssd_never_slower_than_sd(a, K, t_sd, p_hit):
    """Primary = backup = the SD draft (T_p = T_b = T_SD <= 1, E_hit = E_miss = E_SD)."""
    e = expected_tokens(a, K)
    ssd = ssd_speedup(p_hit, e, e, t_sd, t_sd)
    assert ssd == pytest.approx(e / (1 + (1 - p_hit) * t_sd))
    assert ssd >= sd_speedup(a, K, t_sd) - 1e-12


def test_corollary_9_bounds_the_gain_over_sd():
    from ssd_sim.theory.analytic import sd_speedup, ssd_gain_bound, ssd_speedup

    a, K, t_sd = 0.8, 5, 0.4
    e = float(expected_tokens(a, K))
    bound = ssd_gain_bound(e, e, t_sd)
    assert bound == pytest.approx(1 + t_sd)  # same draft, E_hit = E_SD: all of SD's drafting hidden at best
    sd = float(sd_speedup(a, K, t_sd))
    for p_hit in (0.0, 0.5, 0.9, 1.0):  # SSD with the SD draft as primary and backup (Corollary 8) stays below
        assert float(ssd_speedup(p_hit, e, e, t_sd, t_sd)) / sd <= bound + 1e-12
    assert float(ssd_speedup(1.0, e, e, t_sd, t_sd)) / sd == pytest.approx(bound)  # and reaches it on all hits
    assert ssd_gain_bound(e, e, t_sd, t_v_ssd=1.1) == pytest.approx((1 + t_sd) / 1.1)
