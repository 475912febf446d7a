"""A synthetic family of draft/target distribution pairs, for what traces cannot say about a model pair.

The draft's logits fall off as -beta log(rank) (Zipf-like, beta varying per context), the target's are the
draft's plus Gaussian noise of scale sigma; sigma is solved so the pair reproduces a measured acceptance at the
given temperature. The family then answers two questions no trace of the pair answers:
- how acceptance and the rejection hit curve move with Saguaro's C (`saguaro_response`), and
- the per-position bonus-token hit rates (`hit_rows`): after a rejection (the bonus is a residual sample, the
  cache the draft's top-F without the rejected token) and after all K were accepted (the bonus is a plain target
  sample, the cache the draft's top-F), derived from the same fitted pair.
It is an assumption (stated in every preset that uses it), replaced by calibrated points where traces exist.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

_VOCAB, _CONTEXTS, _FANOUTS = 256, 128, np.arange(1, 9)


@lru_cache(maxsize=1)
def _synthetic_base() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(20260303)
    beta = rng.uniform(1.0, 2.5, size=(_CONTEXTS, 1))
    draft_logits = -beta * np.log(np.arange(1, _VOCAB + 1))[None, :]
    noise = rng.standard_normal((_CONTEXTS, _VOCAB))
    return draft_logits, noise


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _synthetic_target(sigma: float, temperature: float) -> np.ndarray:
    """The family's target distribution p [contexts, vocab] for noise scale sigma."""
    draft_logits, noise = _synthetic_base()
    return _softmax((draft_logits + sigma * noise) / temperature)


@lru_cache(maxsize=64)
def _synthetic_draft(temperature: float) -> np.ndarray:
    """The family's draft distribution q [contexts, vocab] (independent of sigma, so computed once per T)."""
    draft_logits, _ = _synthetic_base()
    return _softmax(draft_logits / temperature)


def _synthetic_pair(sigma: float, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    return _synthetic_target(sigma, temperature), _synthetic_draft(temperature)


def _saguaro_rows(q: np.ndarray, c: float, downweight: str, fs: np.ndarray) -> np.ndarray:
    """Saguaro-rescaled synthetic drafts for each F in fs: [len(fs), contexts, vocab].

    The draft's tokens are sorted by construction, so every top set is a prefix of the vocabulary.
    """
    n_down = fs[:, None, None] + (1 if downweight == "top_f_plus_1" else 0)
    qs = np.where(np.arange(_VOCAB)[None, None, :] < n_down, c * q, q)
    total = qs.sum(axis=-1, keepdims=True)
    # C = 0 with all mass on the top set leaves nothing: fall back to q, as theory.saguaro and the runtime do
    return np.where(total > 0, qs / np.where(total > 0, total, 1.0), q)


@lru_cache(maxsize=8)
def _saguaro_table(temperature: float, c: float, downweight: str) -> np.ndarray:
    """_saguaro_rows of the family's draft for F = 1..8, read-only: [8, contexts, vocab], or [1, contexts, vocab]
    at C = 1, where every F gives the same row (C q = q), so one row stands for all of them."""
    fs = _FANOUTS[:1] if c == 1.0 else _FANOUTS
    qs = _saguaro_rows(_synthetic_draft(temperature), c, downweight, fs)
    qs.flags.writeable = False
    return qs


def _synthetic_acceptance(sigma: float, temperature: float, c: float, downweight: str) -> float:
    """Mean acceptance sum_x min(p, q_C) of the family (down-weighted set of F = 1)."""
    p = _synthetic_target(sigma, temperature)
    return float(np.minimum(p, _saguaro_table(temperature, c, downweight)[0]).sum(axis=-1).mean())


def _synthetic_stats(sigma: float, temperature: float, c: float, downweight: str) -> tuple[float, np.ndarray]:
    """(mean acceptance, miss rate for F = 1..8) of the synthetic family.

    The same quantities as saguaro.outcome_stats (acceptance with the F = 1 set, the engine's hit
    p_hit_excluding_draft for each F), vectorised over F. Only sums run over the whole vocabulary: the
    cache of F <= 8 guesses reads the first 9 tokens (the draft's top ones) of the residual and of the
    rejection weights.
    """
    p = _synthetic_target(sigma, temperature)
    qs = _saguaro_table(temperature, c, downweight)  # [F or 1, contexts, vocab]
    hit, _ = _reject_hits(p, qs, _FANOUTS)
    acc = float(np.minimum(p, qs[0]).sum(axis=-1).mean())
    return acc, np.clip(1.0 - hit.mean(axis=-1), 1e-6, 1.0)


def _reject_hits(p: np.ndarray, qs: np.ndarray, fs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P(bonus in the engine's cache of F | a rejection), P(rejection)) per F in fs and context: [len(fs), contexts].

    p [contexts, vocab]; qs [len(fs) or 1, contexts, vocab], the draft as it sampled for each F, its tokens rank-sorted
    so every top set is a prefix. The bonus is a residual sample of max(0, p - q); rejecting s has joint probability
    max(0, q(s) - p(s)) and the cache is top-F, or top-(F+1) minus s when s is in the top F. Only sums run over the
    whole vocabulary: the caches read the first max(fs) + 1 tokens of the residual and of the rejection weights.
    """
    n_f, head = len(fs), int(fs.max()) + 1
    excess = np.maximum(0.0, p - qs)
    mass = excess.sum(axis=-1, keepdims=True)
    cum = np.cumsum(np.where(mass > 0, excess[..., :head] / np.where(mass > 0, mass, 1.0), 0.0), axis=-1)
    cum = np.broadcast_to(cum, (n_f, *cum.shape[1:]))
    idx = np.broadcast_to((fs - 1)[:, None, None], cum.shape[:2] + (1,))
    in_f, in_f1 = np.take_along_axis(cum, idx, -1)[..., 0], np.take_along_axis(cum, idx + 1, -1)[..., 0]
    reject_at = np.maximum(0.0, qs - p)
    w_all = np.broadcast_to(reject_at.sum(axis=-1), in_f.shape)
    # Summing the first max(fs) tokens (zeros past F) gives the whole-vocabulary masked sum bit for bit: numpy's
    # pairwise sum keeps 8 partial sums, and past token F every one of them only adds zeros.
    w_in = np.where(np.arange(head - 1) < fs[:, None, None], reject_at[..., : head - 1], 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        hit = np.where(w_all > 0, ((w_all - w_in) * in_f + w_in * in_f1) / w_all, 0.0)
    return hit, w_all


def _power_law(misses: np.ndarray) -> tuple[float, float]:
    """Least-squares fit of log miss = log c - r log F over F = 1..8."""
    slope, intercept = np.polyfit(np.log(_FANOUTS), np.log(misses), 1)
    return float(math.exp(intercept)), float(-slope)


@lru_cache(maxsize=512)
def _fitted_family(acceptance: float, temperature: float, c_from: float, downweight: str) -> tuple[float, float, float, float]:
    """(sigma, acceptance, miss_at_one, r) of the synthetic pair that reproduces `acceptance` at c_from: the solve
    does not depend on the C moved to, so every target C of one measured point shares it."""
    from scipy.optimize import brentq

    def gap(sigma: float) -> float:
        return _synthetic_acceptance(sigma, temperature, c_from, downweight) - acceptance

    lo_gap, hi_gap = gap(1e-3), gap(30.0)
    if lo_gap < 0:
        sigma = 1e-3
    elif hi_gap > 0:
        sigma = 30.0
    else:
        sigma = brentq(gap, 1e-3, 30.0, xtol=1e-3)
    acc_from, miss_from = _synthetic_stats(sigma, temperature, c_from, downweight)
    return (float(sigma), acc_from, *_power_law(miss_from))


@lru_cache(maxsize=512)
def saguaro_response(
    acceptance: float, temperature: float, c_from: float, c_to: float, downweight: str = "top_f"
) -> tuple[float, float, float]:
    """How moving Saguaro's C from c_from to c_to changes (acceptance x, miss_at_one x, r +).

    acceptance is the mean per-position acceptance measured at c_from and this temperature (> 0).
    """
    sigma, acc_from, c_f, r_f = _fitted_family(acceptance, temperature, c_from, downweight)
    acc_to, miss_to = _synthetic_stats(sigma, temperature, c_to, downweight)
    c_t, r_t = _power_law(miss_to)
    return acc_to / max(acc_from, 1e-9), c_t / max(c_f, 1e-9), r_t - r_f


# --- per-position hit rates (bonus token in the cache) -------------------------------------------
_GREEDY_DRAWS = 32  # noise draws per context for greedy decoding: 32 x 128 = 4096 (context, draw) samples


@lru_cache(maxsize=1)
def _greedy_noise() -> np.ndarray:
    """Noise draws [draws, contexts, vocab] for the greedy family (its own seed, fixed)."""
    return np.random.default_rng(20260305).standard_normal((_GREEDY_DRAWS, _CONTEXTS, _VOCAB), dtype=np.float32)


def _greedy_ranks(sigma: float) -> np.ndarray:
    """The draft rank of the target's argmax in every (draw, context) sample (the draft's tokens are sorted, so
    token index = draft rank): greedy acceptance is the share of rank 0."""
    draft_logits, _ = _synthetic_base()
    return np.argmax(draft_logits[None].astype(np.float32) + np.float32(sigma) * _greedy_noise(), axis=-1).ravel()


@lru_cache(maxsize=1)
def _greedy_critical_sigma() -> np.ndarray:
    """For every sample, the largest sigma at which the target's argmax is still the draft's top token: token 0
    wins while sigma (n_i - n_0) <= l_0 - l_i for every i, so sigma_crit = min over i with n_i > n_0 of
    (l_0 - l_i) / (n_i - n_0) (inf when no token's noise beats token 0's)."""
    draft_logits, _ = _synthetic_base()
    noise = _greedy_noise().astype(float)
    gain = noise - noise[..., :1]  # n_i - n_0
    gap = (draft_logits[:, :1] - draft_logits)[None]  # l_0 - l_i >= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(gain > 0, gap / np.where(gain > 0, gain, 1.0), np.inf)
    return ratio.min(axis=-1).ravel()


def _greedy_sigma(acceptance: float) -> float:
    """sigma of the greedy family whose argmax agreement P(target argmax = draft argmax) is `acceptance`: the
    (1 - acceptance) quantile of the samples' critical sigmas (exact on the fixed draws, no root finding)."""
    return float(np.clip(np.quantile(np.minimum(_greedy_critical_sigma(), 30.0), 1.0 - acceptance), 1e-3, 30.0))


def _greedy_rows(acceptance: float, max_f: int) -> tuple[np.ndarray, np.ndarray]:
    """(reject, accepted) hit rates for F = 0..max_f at T = 0, where the bonus is the target's argmax.

    accepted[F] = P(argmax in the draft's top F); reject[F] = P(argmax in draft ranks 1..F | argmax is not the
    draft's top-1), the engine's cache after rejecting the draft's (argmax) token.
    """
    ranks = _greedy_ranks(_greedy_sigma(acceptance))
    f = np.arange(max_f + 1)
    accepted = (ranks[None, :] < f[:, None]).mean(axis=1)
    missed = ranks[ranks > 0]
    reject = (missed[None, :] <= f[:, None]).mean(axis=1) if missed.size else (f > 0).astype(float)
    return reject, accepted


def _sampled_rows(acceptance: float, temperature: float, max_f: int) -> tuple[np.ndarray, np.ndarray]:
    """(reject, accepted) hit rates for F = 0..max_f at temperature T > 0 and C = 1.

    accepted[F] = E[sum of p over the draft's top F] (a plain target sample); reject[F] = P(bonus in the engine's cache
    | a rejection) (`_reject_hits`), contexts weighted by their rejection probability, as the rounds that stop there.
    """
    sigma = _fitted_family(acceptance, temperature, 1.0, "top_f")[0]
    p, q = _synthetic_pair(sigma, temperature)
    zero = np.zeros((p.shape[0], 1))
    accepted = np.concatenate([zero, np.cumsum(p[:, :max_f], axis=-1)], axis=-1).mean(axis=0)
    hit, w = _reject_hits(p, q[None], np.arange(1, max_f + 1))
    reject = np.concatenate([[0.0], (hit * w).sum(axis=1) / np.maximum(w.sum(axis=1), 1e-12)])
    return reject, accepted


@lru_cache(maxsize=256)
def hit_rows(acceptance: float, temperature: float, max_f: int = 16) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(reject, accepted) bonus-token hit rates for F = 0..max_f cached guesses, from the family fitted to the mean
    per-position `acceptance` at `temperature` (C = 1): after a rejection and after all K draft tokens were accepted.

    At T = 0 accepted[1] equals `acceptance` by definition (the bonus is the target's argmax, the guess the draft's);
    the rest of both rows is the family's shape, an assumption. Rows are non-decreasing in F.
    """
    if not 0.0 < acceptance < 1.0:
        raise ValueError(f"acceptance must be in (0, 1), got {acceptance}")
    greedy = temperature <= 0.0
    reject, accepted = _greedy_rows(acceptance, max_f) if greedy else _sampled_rows(acceptance, temperature, max_f)
    tidy = [tuple(float(v) for v in np.clip(np.maximum.accumulate(row), 0.0, 1.0)) for row in (reject, accepted)]
    return tidy[0], tidy[1]
