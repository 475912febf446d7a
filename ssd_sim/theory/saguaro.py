"""Saguaro sampling (paper Sec. 4.2, Def. 14) on explicit distributions.

The draft samples from sigma_{F,C}: probabilities of the draft's top tokens are multiplied by C in
[0, 1] and the rest left alone, then renormalised. Down-weighting the tokens the cache will guess moves
residual mass max(0, p - q) onto them, so the bonus token lands in the cache more often (Theorem 15);
the verifier uses the same rescaled q in its ratio test, so output stays exact.

Which set is down-weighted is explicit: "top_f" (the paper: the F cached guesses) or "top_f_plus_1"
(the reference engine: its F forked tokens plus the sampled one).
All functions work on the last axis, so a batch of distributions [..., V] is one call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

DownweightSet = Literal["top_f", "top_f_plus_1"]
DOWNWEIGHT_SETS: tuple[str, ...] = ("top_f", "top_f_plus_1")


def top_mask(q: np.ndarray, n: int) -> np.ndarray:
    """Boolean mask of the n most probable tokens of q along the last axis (ties: lower index first)."""
    mask = np.zeros(q.shape, dtype=bool)
    n = int(min(max(n, 0), q.shape[-1]))
    if n == 0:
        return mask
    idx = np.argsort(-q, axis=-1, kind="stable")[..., :n]
    np.put_along_axis(mask, idx, True, axis=-1)
    return mask


def downweighted_count(F: int, downweight: DownweightSet) -> int:
    """How many top tokens are multiplied by C: F (paper) or F + 1 (reference engine)."""
    if downweight not in DOWNWEIGHT_SETS:
        raise ValueError(f"downweight must be one of {DOWNWEIGHT_SETS}, got {downweight!r}")
    return F + 1 if downweight == "top_f_plus_1" else F


def saguaro_probs(q: ArrayLike, F: int, C: float, downweight: DownweightSet = "top_f") -> np.ndarray:
    """The Saguaro-rescaled draft distribution sigma_{F,C}(q): C q on the top set, q elsewhere, normalised."""
    q = np.asarray(q, dtype=float)
    if not 0.0 <= C <= 1.0:
        raise ValueError(f"saguaro C must be in [0, 1], got {C}")
    mask = top_mask(q, downweighted_count(F, downweight))
    w = np.where(mask, C * q, q)
    total = w.sum(axis=-1, keepdims=True)
    # C = 0 with all mass on the top set leaves nothing: fall back to q (nothing to push anywhere).
    return np.where(total > 0, w / np.where(total > 0, total, 1.0), q)


@dataclass(frozen=True)
class OutcomeStats:
    """One verification position under Saguaro sampling (arrays over any leading batch axes)."""

    q_saguaro: np.ndarray  # the proposal distribution actually sampled and ratio-tested
    acceptance: np.ndarray  # sum_x min(p, q_C): P(draft token accepted)
    residual: np.ndarray  # max(0, p - q_C) normalised: the bonus-token distribution on rejection
    p_bonus_in_cache: np.ndarray  # P(bonus in the draft's top-F | rejection) (paper's cache)
    p_hit_excluding_draft: np.ndarray  # same, cache = top-F of q excluding the rejected token (engine)


def outcome_stats(
    p: ArrayLike, q: ArrayLike, F: int, C: float, downweight: DownweightSet = "top_f"
) -> OutcomeStats:
    """Acceptance rate, residual and P(bonus token cached | rejection) for target p, draft q, fan-out F."""
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    qs = saguaro_probs(q, F, C, downweight)
    acceptance = np.minimum(p, qs).sum(axis=-1)
    excess = np.maximum(0.0, p - qs)
    mass = excess.sum(axis=-1, keepdims=True)
    residual = np.where(mass > 0, excess / np.where(mass > 0, mass, 1.0), 0.0)
    top_f = top_mask(q, F)
    top_f1 = top_mask(q, F + 1)
    in_cache = (residual * top_f).sum(axis=-1)
    # Rejecting s happens with joint probability max(0, q_C(s) - p(s)); then the residual is 0 at s, and
    # the engine's cache is top-F of q without s: top-F if s is outside it, top-(F+1) minus s otherwise.
    reject_at = np.maximum(0.0, qs - p)
    in_cache_f1 = (residual * top_f1).sum(axis=-1)
    w_in = (reject_at * top_f).sum(axis=-1)
    w_all = reject_at.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        excl = np.where(w_all > 0, ((w_all - w_in) * in_cache + w_in * in_cache_f1) / w_all, 0.0)
    return OutcomeStats(qs, acceptance, residual, in_cache, excl)
