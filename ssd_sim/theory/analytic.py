"""Closed forms of the SSD paper (ssd-notes.md sections 1-2).

Latencies are in units of one target verification forward (T_v = 1) unless a name ends in `_ms`.
Every function broadcasts over numpy arrays and returns a float for scalar input.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def _out(x: np.ndarray):
    return float(x) if np.ndim(x) == 0 else x


def expected_tokens(acceptance: ArrayLike, K: ArrayLike):
    """Expected tokens per round, bonus included: (1 - a^(K+1)) / (1 - a), K + 1 at a = 1 (tokens)."""
    a = np.asarray(acceptance, dtype=float)
    k = np.asarray(K, dtype=float)
    near_one = np.isclose(a, 1.0, rtol=0.0, atol=1e-12)
    safe = np.where(near_one, 0.5, a)
    e = (1.0 - safe ** (k + 1.0)) / (1.0 - safe)
    return _out(np.where(near_one, k + 1.0, e))


def sd_speedup(acceptance: ArrayLike, K: ArrayLike, t_draft: ArrayLike):
    """Speedup of synchronous SD over autoregressive: E_SD / (1 + t_draft).

    t_draft is the drafting time per round in units of one verify (K draft steps of cost c give K c).
    """
    return _out(np.asarray(expected_tokens(acceptance, K)) / (1.0 + np.asarray(t_draft, dtype=float)))


def ssd_speedup(
    p_hit: ArrayLike,
    e_hit: ArrayLike,
    e_miss: ArrayLike,
    t_primary: ArrayLike,
    t_backup: ArrayLike,
    batch_size: ArrayLike = 1,
):
    """Speedup of SSD over autoregressive (Theorem 7; Corollary 16 for batch_size > 1).

        [p E_hit + (1 - p) E_miss] / [p^b max(1, T_p) + (1 - p^b)(1 + T_b)]

    p_hit is the per-sequence cache-hit probability; a batch of b sequences stalls on any miss, so
    the all-hit probability is p^b (independent hits). t_primary / t_backup in units of one verify.
    """
    p = np.asarray(p_hit, dtype=float)
    b = np.asarray(batch_size, dtype=float)
    tokens = p * np.asarray(e_hit, dtype=float) + (1.0 - p) * np.asarray(e_miss, dtype=float)
    all_hit = p**b
    time = all_hit * np.maximum(1.0, np.asarray(t_primary, dtype=float)) + (1.0 - all_hit) * (
        1.0 + np.asarray(t_backup, dtype=float)
    )
    return _out(tokens / time)


def ssd_gain_bound(e_hit: ArrayLike, e_sd: ArrayLike, t_sd: ArrayLike, t_v_ssd: ArrayLike = 1.0):
    """Corollary 9: the most SSD can gain over SD, speedup_SSD / speedup_SD <= (1 + T_SD) E_hit / E_SD.

    SSD's round is never shorter than one verification and never yields more than E_hit tokens; SD's takes
    1 + T_SD for E_SD. Times in units of SD's verify; t_v_ssd is SSD's verify in those units (1 at the same K).
    """
    e_hit, e_sd = np.asarray(e_hit, dtype=float), np.asarray(e_sd, dtype=float)
    return _out((1.0 + np.asarray(t_sd, dtype=float)) * e_hit / (e_sd * np.asarray(t_v_ssd, dtype=float)))


def critical_batch_size(
    p_hit: ArrayLike,
    e_hit: ArrayLike,
    e_miss_neural: ArrayLike,
    e_miss_fast: ArrayLike,
    t_primary: ArrayLike,
    t_backup_neural: ArrayLike,
    t_backup_fast: ArrayLike = 0.0,
):
    """Critical batch size b* of Theorem 17: neural backup for b < b*, fast backup for b >= b* (sequences).

    Derivation from Corollary 16 with latencies that do not depend on b. Write N_X = p E_hit + (1-p) E_X,
    M = max(1, T_p), q = p^b. Neural beats fast iff N_n [q M + (1-q)(1+T_f)] >= N_f [q M + (1-q)(1+T_n)],
    i.e. q ((N_n - N_f) M + A) >= A with A = N_f (1 + T_n) - N_n (1 + T_f). So neural wins iff
    p^b >= q* = A / ((N_n - N_f) M + A), and b* = ln(q*) / ln(p), a continuous threshold.
    Returns inf when the neural backup always wins (A <= 0, or p = 1) and 1 when fast always wins.
    """
    p = np.asarray(p_hit, dtype=float)
    n_neural = p * np.asarray(e_hit, dtype=float) + (1.0 - p) * np.asarray(e_miss_neural, dtype=float)
    n_fast = p * np.asarray(e_hit, dtype=float) + (1.0 - p) * np.asarray(e_miss_fast, dtype=float)
    m = np.maximum(1.0, np.asarray(t_primary, dtype=float))
    a = n_fast * (1.0 + np.asarray(t_backup_neural, dtype=float)) - n_neural * (
        1.0 + np.asarray(t_backup_fast, dtype=float)
    )
    den = (n_neural - n_fast) * m + a
    with np.errstate(divide="ignore", invalid="ignore"):
        q_star = np.where(den > 0, a / np.where(den > 0, den, 1.0), np.inf)
        safe_p = np.clip(p, 1e-300, 1.0 - 1e-16)
        b_star = np.log(np.clip(q_star, 1e-300, None)) / np.log(safe_p)
    b_star = np.where(q_star >= 1.0, 1.0, np.maximum(b_star, 1.0))
    b_star = np.where((a <= 0) | (p >= 1.0), np.inf, b_star)
    return _out(b_star)


def accept_count_pmf(acceptance: ArrayLike, K: int) -> np.ndarray:
    """P(k accepted draft tokens), k = 0..K, for i.i.d. or per-position acceptance.

    `acceptance` is a scalar alpha or a sequence a_1..a_n of per-position acceptance (a_i = P(accept
    position i | positions < i accepted)); positions past n reuse a_n. Returns K + 1 probabilities.
    """
    a = position_acceptance(acceptance, K)
    survive = np.concatenate([[1.0], np.cumprod(a)])  # P(first k accepted), k = 0..K
    pmf = survive.copy()
    pmf[:-1] *= 1.0 - a
    return pmf


def position_acceptance(acceptance: ArrayLike, K: int) -> np.ndarray:
    """Per-position acceptance a_1..a_K from a scalar or a (possibly shorter) per-position list."""
    a = np.atleast_1d(np.asarray(acceptance, dtype=float))
    if a.size == 0:
        raise ValueError("acceptance must have at least one value")
    if a.size >= K:
        return a[:K].copy()
    return np.concatenate([a, np.full(K - a.size, a[-1])])


def expected_tokens_positional(acceptance: ArrayLike, K: int) -> float:
    """Expected tokens per round (bonus included) for per-position acceptance: 1 + sum_i prod_{j<=i} a_j."""
    return float(1.0 + np.cumprod(position_acceptance(acceptance, K)).sum())
