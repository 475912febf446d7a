"""Fan-out: how many bonus-token guesses to cache at each stopping position k = 0..K (paper Sec. 4.1).

Hit model (Def. 11, with the scale of ssd-notes.md): miss(F) = min(1, c F^(-r)) for F >= 1 and
miss(0) = 1, where c is the miss rate at F = 1 (c = 1 is the paper's literal power law).
The allocation DP itself takes any miss matrix miss[k, F] (stopping position k = 0..K, fan-out
F = 0..budget), so per-position hit tables measured from logged distributions plug in unchanged.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from ssd_sim.theory.analytic import accept_count_pmf


def miss_curve(fan_out: ArrayLike, r: float, miss_at_one: float = 1.0) -> np.ndarray:
    """Miss probability of each fan-out value: min(1, c F^-r), and 1 where F = 0 (a certain miss)."""
    f = np.asarray(fan_out, dtype=float)
    with np.errstate(divide="ignore"):
        m = np.minimum(1.0, miss_at_one * np.where(f > 0, f, 1.0) ** (-r))
    return np.where(f > 0, m, 1.0)


def miss_rate(fan_out: ArrayLike, acceptance: ArrayLike, r: float, miss_at_one: float = 1.0) -> float:
    """Expected miss probability sum_k P(k) miss(F_k) of a fan-out list of length K + 1.

    `acceptance` is a scalar alpha or per-position acceptance (see analytic.accept_count_pmf).
    """
    f = np.asarray(fan_out)
    pmf = accept_count_pmf(acceptance, len(f) - 1)
    return float(pmf @ miss_curve(f, r, miss_at_one))


def geometric_fanout(budget: float, acceptance: ArrayLike, K: int, r: float) -> np.ndarray:
    """Theorem 12 continuous allocation: F_k proportional to P(k)^(1/(1+r)), K + 1 floats summing to budget.

    For i.i.d. acceptance this is F_k = F_0 a^(k/(1+r)) for k < K and F_K = F_0 a^(K/(1+r)) (1-a)^(-1/(1+r)).
    """
    weights = accept_count_pmf(acceptance, K) ** (1.0 / (1.0 + r))
    return budget * weights / weights.sum()


def integer_fanout(
    budget: int, acceptance: ArrayLike, K: int, r: float, miss_at_one: float = 1.0
) -> np.ndarray:
    """Exactly optimal integer allocation: K + 1 ints >= 0 summing to budget minimising sum_k P(k) miss(F_k).

    Greedy marginal gain is not exact here (miss(0) = miss(1) = 1 when c = 1, so the objective is not
    convex), so this is a dynamic programme over positions: O(K budget^2), microseconds for real budgets.
    """
    pmf = accept_count_pmf(acceptance, K)
    tables = allocation_tables(int(budget), pmf, power_law_matrix(K, int(budget), r, miss_at_one))
    return backtrack(tables, int(budget))


@lru_cache(maxsize=2048)
def power_law_matrix(K: int, max_f: int, r: float, miss_at_one: float = 1.0) -> np.ndarray:
    """miss_curve as a miss matrix [K + 1, max_f + 1]: the same row at every stopping position (read-only: kept
    per arguments, since planners and sweeps ask for the same ones again and again)."""
    out = np.tile(miss_curve(np.arange(max_f + 1), r, miss_at_one), (K + 1, 1))
    out.flags.writeable = False
    return out


def allocation_tables(max_budget: int, pmf: np.ndarray, miss: np.ndarray):
    """DP tables for every budget 0..max_budget at once (lets the planner sweep budgets for free).

    miss[k, F] = miss probability at stopping position k with F cached guesses, shape
    [len(pmf), max_budget + 1] (e.g. HitCurve.miss_matrix / HitTable.miss_matrix(K, max_budget)).
    best[k, b] = min expected miss using positions 0..k with exactly b guesses; choice[k, b] = F_k there.
    """
    if max_budget < 0:
        raise ValueError("budget must be >= 0")
    n = len(pmf)
    miss = np.asarray(miss, dtype=float)
    if miss.shape != (n, max_budget + 1):
        raise ValueError(f"miss matrix must have shape {(n, max_budget + 1)}, got {miss.shape}")
    cost = pmf[:, None] * miss  # [pos, F]
    best = np.empty((n, max_budget + 1))
    choice = np.empty((n, max_budget + 1), dtype=int)
    best[0] = cost[0]
    choice[0] = np.arange(max_budget + 1)
    for k in range(1, n):
        # total[b, f] = cost[k, f] + best[k-1, b-f] for f <= b
        b_idx = np.arange(max_budget + 1)[:, None]
        f_idx = np.arange(max_budget + 1)[None, :]
        prev = np.where(f_idx <= b_idx, best[k - 1][np.clip(b_idx - f_idx, 0, None)], np.inf)
        total = prev + cost[k][None, :]
        choice[k] = np.argmin(total, axis=1)
        best[k] = total[np.arange(max_budget + 1), choice[k]]
    return best, choice


def backtrack(tables, budget: int) -> np.ndarray:
    """Recover the allocation for `budget` from allocation_tables' output."""
    _, choice = tables
    fan_out = np.zeros(choice.shape[0], dtype=int)
    remaining = budget
    for k in range(choice.shape[0] - 1, -1, -1):
        fan_out[k] = choice[k, remaining]
        remaining -= fan_out[k]
    return fan_out


def uniform_fanout(per_position: int, K: int) -> np.ndarray:
    """The reference engine's default: the same fan-out at every position (K + 1 ints)."""
    return np.full(K + 1, int(per_position), dtype=int)
