"""Saguaro sampling on explicit distributions (Def. 14, Theorem 15)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssd_sim.theory.saguaro import outcome_stats, saguaro_probs


def test_saguaro_probs_downweights_top_f_by_c():
    q = np.array([0.5, 0.3, 0.2])
    s = saguaro_probs(q, F=1, C=0.5)
    # weights 0.25, 0.3, 0.2 -> normalised by 0.75
    assert s == pytest.approx([0.25 / 0.75, 0.3 / 0.75, 0.2 / 0.75])


def test_reference_engine_downweights_top_f_plus_one():
    q = np.array([0.5, 0.3, 0.2])
    s = saguaro_probs(q, F=1, C=0.5, downweight="top_f_plus_1")
    assert s == pytest.approx(np.array([0.25, 0.15, 0.2]) / 0.6)


def test_c_equal_one_is_plain_sampling():
    q = np.array([0.1, 0.6, 0.3])
    assert saguaro_probs(q, 2, 1.0) == pytest.approx(q)


def test_outcome_stats_hand_example():
    p = np.array([0.2, 0.5, 0.3])
    q = np.array([0.6, 0.3, 0.1])
    s = outcome_stats(p, q, F=1, C=1.0)
    # acceptance = sum min = 0.2 + 0.3 + 0.1
    assert float(s.acceptance) == pytest.approx(0.6)
    # residual = max(0, p - q) = (0, 0.2, 0.2) / 0.4
    assert s.residual == pytest.approx([0.0, 0.5, 0.5])
    # the draft's top-1 is token 0, which has no residual mass
    assert float(s.p_bonus_in_cache) == pytest.approx(0.0)
    # rejection only happens at token 0 (q > p there); the engine's cache is then top-2 minus 0 = {1}
    assert float(s.p_hit_excluding_draft) == pytest.approx(0.5)


def test_down_weighting_moves_residual_into_the_cache():
    p = np.array([0.2, 0.5, 0.3])
    q = np.array([0.6, 0.3, 0.1])
    s = outcome_stats(p, q, F=2, C=0.2)
    # q_C = (0.12, 0.06, 0.1)/0.28; residual lands on tokens 0 and 1 (the cache) only
    qs = np.array([0.12, 0.06, 0.1]) / 0.28
    excess = np.maximum(0, p - qs)
    assert s.residual == pytest.approx(excess / excess.sum())
    assert float(s.p_bonus_in_cache) == pytest.approx(excess[:2].sum() / excess.sum())
    assert float(s.acceptance) == pytest.approx(np.minimum(p, qs).sum())


def test_engine_hit_matches_monte_carlo_of_speculate_verify():
    rng = np.random.default_rng(3)
    V, F, C = 12, 2, 0.5
    p = rng.dirichlet(np.ones(V))
    q = rng.dirichlet(np.ones(V))
    stats = outcome_stats(p, q, F, C)
    qs = stats.q_saguaro
    order = np.argsort(-q, kind="stable")
    n, hits, rejects = 100_000, 0, 0
    draws = rng.choice(V, size=n, p=qs)
    u = rng.random(n)
    bonus = rng.choice(V, size=n, p=stats.residual)
    for s, uu, t in zip(draws, u, bonus, strict=True):
        if uu < min(1.0, p[s] / qs[s]):
            continue
        rejects += 1
        cache = [x for x in order if x != s][:F]
        hits += t in cache
    assert rejects / n == pytest.approx(1 - float(stats.acceptance), abs=0.01)
    assert hits / rejects == pytest.approx(float(stats.p_hit_excluding_draft), abs=0.01)


def test_batched_distributions_in_one_call():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(8), size=5)
    q = rng.dirichlet(np.ones(8), size=5)
    s = outcome_stats(p, q, 3, 0.4)
    assert s.acceptance.shape == (5,)
    for i in range(5):
        assert float(s.acceptance[i]) == pytest.approx(float(outcome_stats(p[i], q[i], 3, 0.4).acceptance))


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    V=st.integers(3, 24),
    F=st.integers(1, 4),
    c1=st.floats(0.0, 1.0),
    c2=st.floats(0.0, 1.0),
)
def test_theorem_15_hit_probability_non_increasing_in_c(seed, V, F, c1, c2):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(V, 0.5))
    q = rng.dirichlet(np.full(V, 0.5))
    lo, hi = sorted((c1, c2))
    h_lo = float(outcome_stats(p, q, F, lo).p_bonus_in_cache)
    h_hi = float(outcome_stats(p, q, F, hi).p_bonus_in_cache)
    assert h_lo >= h_hi - 1e-9
