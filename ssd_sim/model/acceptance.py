"""Acceptance model: per-position acceptance and bonus-token hit curves, by temperature and Saguaro C.

A model is a small table of points (temperature, C) -> (per-position acceptance, primary hit curve,
backup hit curve), each marked measured / derived / assumed. `AcceptanceModel.at(T, C)` interpolates
linearly in temperature between points and moves C with a Saguaro response computed on synthetic
draft/target distributions (see `saguaro_response`): calibrated traces at the wanted C override it.

Hit curves follow ssd-notes.md: miss(F) = min(1, c F^-r), c = miss rate with one cached guess.
The primary curve applies to rounds whose speculation came from the cache or a neural (jit) backup;
the backup curve to rounds after a fast (random-token) backup, where the bonus token is a plain target
sample at position 1 rather than a residual sample (usually easier to guess).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.theory.analytic import accept_count_pmf, expected_tokens_positional
from ssd_sim.theory.fanout import miss_curve
from ssd_sim.theory.saguaro import DOWNWEIGHT_SETS

SOURCES = ("measured", "derived", "assumed", "calibrated")


@dataclass(frozen=True)
class HitCurve:
    """Bonus-token miss model: miss(F) = min(1, miss_at_one F^-r); F = 0 always misses."""

    miss_at_one: float
    r: float

    def __post_init__(self):
        if not 0.0 <= self.miss_at_one <= 1.0:
            raise ConfigError("miss_at_one", f"must be in [0, 1] (miss rate with one guess), got {self.miss_at_one}")
        if not 0.0 <= self.r <= 20.0:
            raise ConfigError("r", f"power-law exponent must be in [0, 20], got {self.r}")

    def miss(self, fan_out):
        """Miss probability for each fan-out value (array in, array out)."""
        return miss_curve(fan_out, self.r, self.miss_at_one)

    def hit(self, fan_out):
        """Hit probability for each fan-out value."""
        return 1.0 - self.miss(fan_out)


@dataclass(frozen=True)
class AcceptancePoint:
    """What is known at one (temperature, saguaro_c): per-position acceptance and hit curves."""

    temperature: float
    acceptance: tuple[float, ...]  # a_1..a_n, P(accept position i | earlier accepted); a_n repeats
    primary_hit: HitCurve
    backup_hit: HitCurve
    saguaro_c: float = 1.0
    source: str = "assumed"  # measured | derived | assumed | calibrated

    def __post_init__(self):
        if self.temperature < 0:
            raise ConfigError("temperature", f"must be >= 0, got {self.temperature}")
        if not self.acceptance or not all(0.0 <= a <= 1.0 for a in self.acceptance):
            raise ConfigError("acceptance", f"must be a non-empty list of values in [0, 1], got {self.acceptance}")
        if not 0.0 <= self.saguaro_c <= 1.0:
            raise ConfigError("saguaro_c", f"must be in [0, 1], got {self.saguaro_c}")
        if self.source not in SOURCES:
            raise ConfigError("source", f"must be one of {SOURCES}, got {self.source!r}")

    def pmf(self, K: int) -> np.ndarray:
        """P(k accepted), k = 0..K."""
        return accept_count_pmf(self.acceptance, K)

    def expected_tokens(self, K: int) -> float:
        """Expected tokens per round including the bonus (tokens)."""
        return expected_tokens_positional(self.acceptance, K)

    def mean_acceptance(self, K: int = 8) -> float:
        """Average of the first K per-position acceptance values (a scalar summary)."""
        a = np.asarray(self.acceptance, dtype=float)
        return float(np.concatenate([a, np.full(max(K - a.size, 0), a[-1])])[:K].mean())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["acceptance"] = list(self.acceptance)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> AcceptancePoint:
        d = dict(d)
        try:
            d["primary_hit"] = HitCurve(**d["primary_hit"])
            d["backup_hit"] = HitCurve(**d.get("backup_hit", d["primary_hit"].__dict__))
            d["acceptance"] = tuple(float(a) for a in np.atleast_1d(d["acceptance"]))
            return cls(**d)
        except (KeyError, TypeError) as e:
            raise ConfigError("acceptance", f"bad acceptance point ({e}); see ssd_sim/model/acceptance.py") from e


@dataclass(frozen=True)
class AcceptanceModel:
    """Table of acceptance points; `at(T, C)` resolves one point for planning or simulation."""

    points: tuple[AcceptancePoint, ...]
    downweight: str = "top_f"  # Saguaro down-weighted set: "top_f" (paper) or "top_f_plus_1" (engine)

    def __post_init__(self):
        if not self.points:
            raise ConfigError("acceptance.points", "needs at least one point")
        if self.downweight not in DOWNWEIGHT_SETS:
            raise ConfigError("downweight", f"must be one of {DOWNWEIGHT_SETS}, got {self.downweight!r}")

    def at(self, temperature: float, saguaro_c: float = 1.0) -> AcceptancePoint:
        """The acceptance point at (temperature, C): exact match, else interpolate T and apply Saguaro."""
        if temperature < 0:
            raise ConfigError("temperature", f"must be >= 0, got {temperature}")
        if not 0.0 <= saguaro_c <= 1.0:
            raise ConfigError("saguaro_c", f"must be in [0, 1], got {saguaro_c}")
        for p in self.points:
            if math.isclose(p.temperature, temperature, abs_tol=1e-9) and math.isclose(
                p.saguaro_c, saguaro_c, abs_tol=1e-9
            ):
                return p
        # Points at the C nearest the request, interpolated in T, then moved to the requested C.
        c_base = min({p.saguaro_c for p in self.points}, key=lambda c: (abs(c - saguaro_c), -c))
        base = _interpolate_temperature([p for p in self.points if p.saguaro_c == c_base], temperature)
        if temperature <= 0 or math.isclose(c_base, saguaro_c):
            return replace(base, saguaro_c=saguaro_c) if temperature <= 0 else base
        acc_ratio, miss_ratio, r_shift = saguaro_response(
            round(base.mean_acceptance(), 4), round(temperature, 4), c_base, round(saguaro_c, 4), self.downweight
        )
        acceptance = tuple(float(min(1.0, a * acc_ratio)) for a in base.acceptance)
        hit = HitCurve(
            miss_at_one=float(np.clip(base.primary_hit.miss_at_one * miss_ratio, 0.0, 1.0)),
            r=float(np.clip(base.primary_hit.r + r_shift, 0.0, 20.0)),
        )
        return replace(base, acceptance=acceptance, primary_hit=hit, saguaro_c=saguaro_c, source="derived")

    def to_dict(self) -> dict:
        return {"downweight": self.downweight, "points": [p.to_dict() for p in self.points]}

    @classmethod
    def from_dict(cls, d: dict) -> AcceptanceModel:
        if "points" not in d:
            raise ConfigError("acceptance.points", "missing: give a list of acceptance points")
        pts = tuple(AcceptancePoint.from_dict(p) for p in d["points"])
        return cls(points=pts, downweight=d.get("downweight", "top_f"))


def _lerp(a: float, b: float, w: float) -> float:
    return a + (b - a) * w


def _interpolate_temperature(points: list[AcceptancePoint], temperature: float) -> AcceptancePoint:
    """Linear interpolation between the two points bracketing `temperature` (clamped at the ends)."""
    pts = sorted(points, key=lambda p: p.temperature)
    if temperature <= pts[0].temperature:
        lo = hi = pts[0]
    elif temperature >= pts[-1].temperature:
        lo = hi = pts[-1]
    else:
        hi_i = next(i for i, p in enumerate(pts) if p.temperature >= temperature)
        lo, hi = pts[hi_i - 1], pts[hi_i]
    if lo is hi:
        return replace(lo, temperature=temperature) if lo.temperature != temperature else lo
    w = (temperature - lo.temperature) / (hi.temperature - lo.temperature)
    n = max(len(lo.acceptance), len(hi.acceptance))
    a_lo = np.resize(np.asarray(lo.acceptance), n) if len(lo.acceptance) == n else _pad(lo.acceptance, n)
    a_hi = np.resize(np.asarray(hi.acceptance), n) if len(hi.acceptance) == n else _pad(hi.acceptance, n)

    def curve(x: HitCurve, y: HitCurve) -> HitCurve:
        return HitCurve(_lerp(x.miss_at_one, y.miss_at_one, w), _lerp(x.r, y.r, w))

    return AcceptancePoint(
        temperature=temperature,
        acceptance=tuple(float(v) for v in a_lo + (a_hi - a_lo) * w),
        primary_hit=curve(lo.primary_hit, hi.primary_hit),
        backup_hit=curve(lo.backup_hit, hi.backup_hit),
        saguaro_c=lo.saguaro_c,
        source="derived",
    )


def _pad(a: tuple[float, ...], n: int) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype=float), np.full(n - len(a), a[-1])])


# --- Saguaro response on synthetic distributions -------------------------------------------------
# A fixed family of draft/target pairs: the draft's logits fall off as -beta log(rank) (Zipf-like, beta
# varying per context), the target's are the draft's plus Gaussian noise of scale sigma. sigma is solved
# so the pair reproduces the measured acceptance at the given temperature; the family then says how
# acceptance and the hit curve move with C. It is an assumption (stated in every preset), replaced by
# calibrated points where traces at that C exist.
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


def _synthetic_pair(sigma: float, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    draft_logits, noise = _synthetic_base()
    q = _softmax(draft_logits / temperature)
    p = _softmax((draft_logits + sigma * noise) / temperature)
    return p, q


def _saguaro_rows(q: np.ndarray, c: float, downweight: str, fs: np.ndarray) -> np.ndarray:
    """Saguaro-rescaled synthetic drafts for each F in fs: [len(fs), contexts, vocab].

    The draft's tokens are sorted by construction, so every top set is a prefix of the vocabulary.
    """
    n_down = fs[:, None, None] + (1 if downweight == "top_f_plus_1" else 0)
    qs = np.where(np.arange(_VOCAB)[None, None, :] < n_down, c * q, q)
    return qs / qs.sum(axis=-1, keepdims=True)


def _synthetic_acceptance(sigma: float, temperature: float, c: float, downweight: str) -> float:
    """Mean acceptance sum_x min(p, q_C) of the family (down-weighted set of F = 1)."""
    p, q = _synthetic_pair(sigma, temperature)
    return float(np.minimum(p, _saguaro_rows(q, c, downweight, _FANOUTS[:1])[0]).sum(axis=-1).mean())


def _synthetic_stats(sigma: float, temperature: float, c: float, downweight: str) -> tuple[float, np.ndarray]:
    """(mean acceptance, miss rate for F = 1..8) of the synthetic family.

    The same quantities as saguaro.outcome_stats (acceptance with the F = 1 set, the engine's hit
    p_hit_excluding_draft for each F), vectorised over F.
    """
    p, q = _synthetic_pair(sigma, temperature)
    qs = _saguaro_rows(q, c, downweight, _FANOUTS)  # [F, contexts, vocab]
    excess = np.maximum(0.0, p - qs)
    mass = excess.sum(axis=-1, keepdims=True)
    cum = np.cumsum(np.where(mass > 0, excess / np.where(mass > 0, mass, 1.0), 0.0), axis=-1)
    idx = np.broadcast_to((_FANOUTS - 1)[:, None, None], cum.shape[:2] + (1,))
    in_f, in_f1 = np.take_along_axis(cum, idx, -1)[..., 0], np.take_along_axis(cum, idx + 1, -1)[..., 0]
    # Rejecting s has joint probability max(0, q_C(s) - p(s)); the cache is top-F, or top-(F+1) minus s.
    reject_at = np.maximum(0.0, qs - p)
    w_all = reject_at.sum(axis=-1)
    w_in = np.where(np.arange(_VOCAB) < _FANOUTS[:, None, None], reject_at, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        hit = np.where(w_all > 0, ((w_all - w_in) * in_f + w_in * in_f1) / w_all, 0.0)
    acc = float(np.minimum(p, qs[0]).sum(axis=-1).mean())
    return acc, np.clip(1.0 - hit.mean(axis=-1), 1e-6, 1.0)


def _power_law(misses: np.ndarray) -> tuple[float, float]:
    """Least-squares fit of log miss = log c - r log F over F = 1..8."""
    slope, intercept = np.polyfit(np.log(_FANOUTS), np.log(misses), 1)
    return float(math.exp(intercept)), float(-slope)


@lru_cache(maxsize=512)
def saguaro_response(
    acceptance: float, temperature: float, c_from: float, c_to: float, downweight: str = "top_f"
) -> tuple[float, float, float]:
    """How moving Saguaro's C from c_from to c_to changes (acceptance x, miss_at_one x, r +).

    acceptance is the mean per-position acceptance measured at c_from and this temperature (> 0).
    """
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
    acc_to, miss_to = _synthetic_stats(sigma, temperature, c_to, downweight)
    c_f, r_f = _power_law(miss_from)
    c_t, r_t = _power_law(miss_to)
    return acc_to / max(acc_from, 1e-9), c_t / max(c_f, 1e-9), r_t - r_f
