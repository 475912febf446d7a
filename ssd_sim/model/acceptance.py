"""Acceptance model: per-position acceptance and bonus-token hit curves, by temperature and Saguaro C.

A model is a small table of points (temperature, C) -> (per-position acceptance, primary hit curve,
backup hit curve), each marked measured / derived / assumed. `AcceptanceModel.at(T, C)` interpolates
linearly in temperature between points and moves C with a Saguaro response computed on synthetic
draft/target distributions (see `saguaro_response`): calibrated traces at the wanted C override it.

Hit curves follow ssd-notes.md: miss(F) = min(1, c F^-r), c = miss rate with one cached guess, the same
at every stopping position (`HitCurve`). A `HitTable` instead holds hit rates measured per stopping position
from logged token distributions: at a rejection position k < K the bonus token is a residual sample
max(0, p - q) and the cache is the draft's top-F without the rejected token; at k = K the bonus is a plain
target sample. Both answer `hit(fan_out)` for a fan-out list of K + 1 values (position k = list index) and
`miss_matrix(K, max_f)` for the allocation DP.
The primary curve applies to rounds whose speculation came from the cache or a neural (jit) backup;
the backup curve to rounds after a fast (random-token) backup, where the bonus token is a plain target
sample at position 1 rather than a residual sample (usually easier to guess).

`response` says how C moves: "synthetic" (the Saguaro response above, from points at one C) or "logged"
(the points form a grid over temperatures x C values derived from logged distributions; `at` interpolates
bilinearly between grid points and clamps outside the grid, marking the result "extrapolated").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.limits import effective_temperature
from ssd_sim.model.synthetic import saguaro_response
from ssd_sim.theory.analytic import accept_count_pmf, expected_tokens_positional
from ssd_sim.theory.fanout import miss_curve, power_law_matrix
from ssd_sim.theory.saguaro import DOWNWEIGHT_SETS

SOURCES = ("measured", "derived", "assumed", "calibrated", "extrapolated")
RESPONSES = ("synthetic", "logged")
_R_MAX = 20.0  # HitCurve's bound on the power-law exponent
_R_TAIL_MAX = 5.0  # bound on the tail exponent that extrapolates a HitTable row past its last F
_SHIFT_F = 64  # guesses per position a curve moved by C is tabulated for (past it: the tail power law)
_RESOLVED_MAX = 4096  # points an AcceptanceModel keeps from at / at_positions before it starts over


@dataclass(frozen=True)
class HitCurve:
    """Bonus-token miss model: miss(F) = min(1, miss_at_one F^-r); F = 0 always misses."""

    miss_at_one: float
    r: float

    def __post_init__(self):
        if not 0.0 <= self.miss_at_one <= 1.0:
            raise ConfigError("miss_at_one", f"must be in [0, 1] (miss rate with one guess), got {self.miss_at_one}")
        if not 0.0 <= self.r <= _R_MAX:
            raise ConfigError("r", f"power-law exponent must be in [0, {_R_MAX:g}], got {self.r}")

    def miss(self, fan_out):
        """Miss probability for each fan-out value (array in, array out)."""
        return miss_curve(fan_out, self.r, self.miss_at_one)

    def hit(self, fan_out):
        """Hit probability for each fan-out value."""
        return 1.0 - self.miss(fan_out)

    def miss_matrix(self, K: int, max_f: int) -> np.ndarray:
        """miss[k, F] for positions k = 0..K and F = 0..max_f guesses: [K + 1, max_f + 1], equal rows."""
        return power_law_matrix(K, max_f, self.r, self.miss_at_one)

    def to_dict(self) -> dict:
        return {"miss_at_one": self.miss_at_one, "r": self.r}


@dataclass(frozen=True)
class HitTable:
    """Bonus-token hit rates measured per stopping position, for F = 0..F_max cached guesses.

    reject[i][F]: P(bonus among the F guesses | the round stopped by a rejection at position i < K).
    accepted[i][F]: the same when all K = i draft tokens were accepted (bonus drawn from the target).
    A plan with K draft tokens uses reject row min(k, len(reject) - 1) at positions k < K and accepted
    row min(K, len(accepted) - 1) at position K. Past F_max the miss follows a power law through the
    row's tail (`_row_miss`).
    """

    reject: tuple[tuple[float, ...], ...]
    accepted: tuple[tuple[float, ...], ...]

    def __post_init__(self):
        for name in ("reject", "accepted"):
            rows = _as_rows(getattr(self, name), name)
            object.__setattr__(self, name, rows)
        object.__setattr__(self, "_matrices", {})  # (K, max_f) -> read-only miss_matrix (the table is immutable)

    @property
    def miss_at_one(self) -> float:
        """Power-law summary c of reject row 0 (see `_summary`)."""
        return _summary(self.reject[0])[0]

    @property
    def r(self) -> float:
        """Power-law summary r of reject row 0 (see `_summary`)."""
        return _summary(self.reject[0])[1]

    def miss_matrix(self, K: int, max_f: int) -> np.ndarray:
        """miss[k, F] for positions k = 0..K and F = 0..max_f guesses: [K + 1, max_f + 1]."""
        if K < 0 or max_f < 0:
            raise ValueError(f"K and max_f must be >= 0, got K={K}, max_f={max_f}")
        key = (int(K), int(max_f))
        memo = self.__dict__["_matrices"]
        out = memo.get(key)
        if out is None:
            rows = [self.reject[min(k, len(self.reject) - 1)] for k in range(K)]
            rows.append(self.accepted[min(K, len(self.accepted) - 1)])
            out = np.stack([_row_miss(row, max_f) for row in rows])
            out.flags.writeable = False
            if len(memo) >= _RESOLVED_MAX:
                memo.clear()
            memo[key] = out
        return out

    def miss(self, fan_out) -> np.ndarray:
        """Miss probability per position of a fan-out list of K + 1 guess counts (K = len - 1)."""
        f = _fan_out_ints(fan_out)
        K = len(f) - 1
        if f.max() < min(len(self.reject[0]), len(self.accepted[0])):  # inside the table: read entries, no matrix
            rows = [self.reject[min(k, len(self.reject) - 1)] for k in range(K)]
            rows.append(self.accepted[min(K, len(self.accepted) - 1)])
            return 1.0 - np.array([row[F] for row, F in zip(rows, f.tolist(), strict=True)])
        return self.miss_matrix(K, int(f.max()))[np.arange(len(f)), f]

    def hit(self, fan_out) -> np.ndarray:
        """Hit probability per position of a fan-out list of K + 1 guess counts (K = len - 1)."""
        return 1.0 - self.miss(fan_out)

    def to_dict(self) -> dict:
        return {"reject": [[round(v, 5) for v in row] for row in self.reject],
                "accepted": [[round(v, 5) for v in row] for row in self.accepted]}

    @classmethod
    def from_dict(cls, d: dict) -> HitTable:
        try:
            return cls(reject=d["reject"], accepted=d["accepted"])
        except (KeyError, TypeError) as e:
            raise ConfigError("hit_table", f"needs 'reject' and 'accepted' lists of rows ({e})") from e


def _as_rows(rows, name: str) -> tuple[tuple[float, ...], ...]:
    """Validate one side of a HitTable: hit rates in [0, 1], 0 at F = 0, non-decreasing, equal lengths."""
    try:
        out = tuple(tuple(map(float, row)) for row in rows)
    except (TypeError, ValueError) as e:
        raise ConfigError(name, f"must be a list of rows of hit rates ({e})") from e
    if not out or any(len(row) < 2 for row in out):
        raise ConfigError(name, "needs at least one row, each with hit rates for F = 0..F_max, F_max >= 1")
    if len({len(row) for row in out}) != 1:
        raise ConfigError(name, f"rows must all have the same length, got {[len(row) for row in out]}")
    a = np.array(out)
    in_range = ((a >= 0.0) & (a <= 1.0)).all(axis=1)
    decreasing = (np.diff(a, axis=1) < -1e-9).any(axis=1)
    bad = ~in_range | (a[:, 0] != 0.0) | decreasing
    if bad.any():  # the first bad row's first problem, in the order the checks are listed above
        i = int(np.argmax(bad))
        row = out[i]
        if not in_range[i]:
            raise ConfigError(name, f"row {i}: hit rates must be in [0, 1], got {row}")
        if row[0] != 0.0:
            raise ConfigError(name, f"row {i}: the hit rate with F = 0 guesses must be 0, got {row[0]}")
        raise ConfigError(name, f"row {i}: hit rates must not decrease with F, got {row}")
    return out


def _fan_out_ints(fan_out) -> np.ndarray:
    f = np.atleast_1d(np.asarray(fan_out))
    if f.size == 0 or np.any(f < 0) or np.any(f != np.round(f)):
        raise ValueError(f"fan-out must be a non-empty list of ints >= 0, got {fan_out}")
    return f.astype(int)


def _tail_exponent(miss: np.ndarray) -> float:
    """r of the power law through miss(F_max // 2) and miss(F_max), clipped to [0, 5]; 0 if undefined."""
    f_max = len(miss) - 1
    lo, hi = miss[f_max // 2], miss[f_max]
    if f_max < 2 or lo <= 0 or hi <= 0:
        return 0.0
    r = (math.log(lo) - math.log(hi)) / (math.log(f_max) - math.log(f_max // 2))
    return float(np.clip(r, 0.0, _R_TAIL_MAX))


def _row_miss(row: tuple[float, ...], max_f: int) -> np.ndarray:
    """Miss rates of one row for F = 0..max_f: the row itself, then miss(F_max) (F / F_max)^-r_tail."""
    miss = 1.0 - np.asarray(row, dtype=float)
    f_max = len(row) - 1
    if max_f <= f_max:
        return miss[: max_f + 1]
    f = np.arange(f_max + 1, max_f + 1, dtype=float)
    tail = miss[f_max] * (f / f_max) ** (-_tail_exponent(miss))
    return np.concatenate([miss, tail])


def _row_hit(row: tuple[float, ...], max_f: int) -> np.ndarray:
    """Hit rates of one row for F = 0..max_f (the stored values exactly, then 1 - the tail miss)."""
    if max_f < len(row):
        return np.asarray(row[: max_f + 1], dtype=float)
    return np.concatenate([np.asarray(row, dtype=float), 1.0 - _row_miss(row, max_f)[len(row):]])


def _summary(row: tuple[float, ...]) -> tuple[float, float]:
    """(miss_at_one, r): least-squares fit of log miss = log c - r log F over F = 1..min(8, F_max), clipped
    to HitCurve's bounds (misses floored at 1e-6 for the log; r = 0 with a single point)."""
    miss = np.clip(1.0 - np.asarray(row[1 : min(8, len(row) - 1) + 1], dtype=float), 1e-6, 1.0)
    if miss.size < 2:
        return float(miss[0]), 0.0
    slope, intercept = np.polyfit(np.log(np.arange(1, miss.size + 1)), np.log(miss), 1)
    return float(np.clip(math.exp(intercept), 0.0, 1.0)), float(np.clip(-slope, 0.0, _R_MAX))


Hit = HitCurve | HitTable


def hit_from_dict(d: dict) -> Hit:
    """A HitTable when the dict has 'reject', else a HitCurve."""
    return HitTable.from_dict(d) if "reject" in d else HitCurve(**d)


def lerp_hit(a: Hit, b: Hit, w: float) -> Hit:
    """(1 - w) a + w b. Curves lerp their parameters; tables lerp hit rates element-wise after padding
    to a common shape (rows repeated, F extended by the tail power law); a curve beside a table becomes a
    table of the table's shape first."""
    if isinstance(a, HitCurve) and isinstance(b, HitCurve):
        return HitCurve(_lerp(a.miss_at_one, b.miss_at_one, w), _lerp(a.r, b.r, w))
    a_t, b_t = _as_table(a, b), _as_table(b, a)
    return HitTable(
        reject=_lerp_rows(a_t.reject, b_t.reject, w),
        accepted=_lerp_rows(a_t.accepted, b_t.accepted, w),
    )


def _as_table(h: Hit, like: Hit) -> HitTable:
    """h itself if it is a table, else the curve tabulated in the shape of `like` (a table)."""
    if isinstance(h, HitTable):
        return h

    def rows(template: tuple[tuple[float, ...], ...]) -> tuple[tuple[float, ...], ...]:
        row = tuple(float(v) for v in h.hit(np.arange(len(template[0]))))
        return (row,) * len(template)

    return HitTable(reject=rows(like.reject), accepted=rows(like.accepted))


def _lerp_rows(a, b, w: float) -> tuple[tuple[float, ...], ...]:
    """Row-wise lerp of two sides of tables; the shorter side repeats its last row (as positions do)."""
    n_rows, n_f = max(len(a), len(b)), max(len(a[0]), len(b[0]))
    ha = np.stack([_row_hit(a[min(i, len(a) - 1)], n_f - 1) for i in range(n_rows)])
    hb = np.stack([_row_hit(b[min(i, len(b) - 1)], n_f - 1) for i in range(n_rows)])
    return tuple(map(tuple, np.clip(ha + (hb - ha) * w, 0.0, 1.0).tolist()))


def _shift_hit(h: Hit, miss_ratio: float, r_shift: float) -> Hit:
    """Move a hit model by a Saguaro response: miss(F) x miss_ratio x F^-r_shift (c x ratio, r + shift) after a
    rejection only. C changes how the draft samples, so the all-accepted rows, whose bonus is a plain target sample
    at a position the draft never sampled, stay: a curve becomes a table (shifted reject row, its own accepted row)."""
    if isinstance(h, HitCurve):
        moved = HitCurve(float(np.clip(h.miss_at_one * miss_ratio, 0.0, 1.0)), float(np.clip(h.r + r_shift, 0.0, _R_MAX)))
        f = np.arange(_SHIFT_F + 1)
        return HitTable(reject=(tuple(map(float, moved.hit(f))),), accepted=(tuple(map(float, h.hit(f))),))

    def rows(side: tuple[tuple[float, ...], ...]) -> tuple[tuple[float, ...], ...]:
        out = []
        for row in side:
            f = np.arange(1, len(row), dtype=float)
            miss = np.clip((1.0 - np.asarray(row[1:])) * miss_ratio * f ** (-r_shift), 0.0, 1.0)
            out.append((0.0, *(float(v) for v in 1.0 - np.minimum.accumulate(miss))))
        return tuple(out)

    return HitTable(reject=rows(h.reject), accepted=h.accepted)


@dataclass(frozen=True)
class AcceptancePoint:
    """What is known at one (temperature, saguaro_c): per-position acceptance and hit curves."""

    temperature: float
    acceptance: tuple[float, ...]  # a_1..a_n, P(accept position i | earlier accepted); a_n repeats
    primary_hit: HitCurve | HitTable
    backup_hit: HitCurve | HitTable
    saguaro_c: float = 1.0
    source: str = "assumed"  # measured | derived | assumed | calibrated | extrapolated
    hit_source: str = ""  # where the hit models come from; "" = same as source

    def __post_init__(self):
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError("temperature", f"must be a finite number >= 0, got {self.temperature}")
        if not self.acceptance or not all(0.0 <= a <= 1.0 for a in self.acceptance):
            raise ConfigError("acceptance", f"must be a non-empty list of values in [0, 1], got {self.acceptance}")
        if not 0.0 <= self.saguaro_c <= 1.0:
            raise ConfigError("saguaro_c", f"must be in [0, 1], got {self.saguaro_c}")
        if self.source not in SOURCES:
            raise ConfigError("source", f"must be one of {SOURCES}, got {self.source!r}")
        if self.hit_source and self.hit_source not in SOURCES:
            raise ConfigError("hit_source", f"must be empty or one of {SOURCES}, got {self.hit_source!r}")
        object.__setattr__(self, "_per_k", {})  # pmf / expected_tokens by K (the point is immutable)

    def pmf(self, K: int) -> np.ndarray:
        """P(k accepted), k = 0..K (read-only; kept per K)."""
        key = ("pmf", int(K))
        out = self._per_k.get(key)
        if out is None:
            out = accept_count_pmf(self.acceptance, K)
            out.flags.writeable = False
            self._per_k[key] = out
        return out

    def expected_tokens(self, K: int) -> float:
        """Expected tokens per round including the bonus (tokens; kept per K)."""
        key = ("tokens", int(K))
        out = self._per_k.get(key)
        if out is None:
            out = self._per_k[key] = expected_tokens_positional(self.acceptance, K)
        return out

    def mean_acceptance(self, K: int = 8) -> float:
        """Average of the first K per-position acceptance values (a scalar summary)."""
        a = np.asarray(self.acceptance, dtype=float)
        return float(np.concatenate([a, np.full(max(K - a.size, 0), a[-1])])[:K].mean())

    def to_dict(self) -> dict:
        d = asdict(self)
        d["acceptance"] = list(self.acceptance)
        d["primary_hit"], d["backup_hit"] = self.primary_hit.to_dict(), self.backup_hit.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> AcceptancePoint:
        d = dict(d)
        try:
            primary = d["primary_hit"]
            d["primary_hit"] = hit_from_dict(primary)
            d["backup_hit"] = hit_from_dict(d.get("backup_hit", primary))
            d["acceptance"] = tuple(float(a) for a in np.atleast_1d(d["acceptance"]))
            return cls(**d)
        except (KeyError, TypeError) as e:
            raise ConfigError("acceptance", f"bad acceptance point ({e}); see ssd_sim/model/acceptance.py") from e


@dataclass(frozen=True)
class AcceptanceModel:
    """Table of acceptance points; `at(T, C)` resolves one point for planning or simulation."""

    points: tuple[AcceptancePoint, ...]
    downweight: str = "top_f"  # Saguaro down-weighted set: "top_f" (paper) or "top_f_plus_1" (engine)
    response: str = "synthetic"  # how C moves: synthetic (Saguaro response) | logged (grid over T x C)

    def __post_init__(self):
        if not self.points:
            raise ConfigError("acceptance.points", "needs at least one point")
        if self.downweight not in DOWNWEIGHT_SETS:
            raise ConfigError("downweight", f"must be one of {DOWNWEIGHT_SETS}, got {self.downweight!r}")
        if self.response not in RESPONSES:
            raise ConfigError("response", f"must be one of {RESPONSES}, got {self.response!r}")
        if self.response == "logged":
            _check_grid(self.points)
        object.__setattr__(self, "_resolved", {})  # at / at_positions results (the model is immutable)

    def _remember(self, key: tuple, make):
        """The cached result for key, else make() (kept; the cache is cleared past _RESOLVED_MAX entries)."""
        memo = self.__dict__["_resolved"]
        try:
            return memo[key]
        except KeyError:
            pass
        out = make()
        if len(memo) >= _RESOLVED_MAX:
            memo.clear()
        memo[key] = out
        return out

    def at(self, temperature: float, saguaro_c: float = 1.0, downweight: str | None = None) -> AcceptancePoint:
        """The acceptance point at (temperature, C): exact match, else interpolate (see module docstring).
        `downweight` is the plan's down-weighted set (None: the model's), which the synthetic C response depends on.
        Results are kept per model (by value and type of the arguments), so repeated calls are free."""
        downweight = downweight or self.downweight
        if downweight not in DOWNWEIGHT_SETS:
            raise ConfigError("downweight", f"must be one of {DOWNWEIGHT_SETS}, got {downweight!r}")
        key = ("at", type(temperature), temperature, type(saguaro_c), saguaro_c, downweight)
        return self._remember(key, lambda: self._at(temperature, saguaro_c, downweight))

    def _at(self, temperature: float, saguaro_c: float, downweight: str) -> AcceptancePoint:
        if not (math.isfinite(temperature) and temperature >= 0):
            raise ConfigError("temperature", f"must be a finite number >= 0, got {temperature}")
        if not 0.0 <= saguaro_c <= 1.0:
            raise ConfigError("saguaro_c", f"must be in [0, 1], got {saguaro_c}")
        exact = _find(self.points, temperature, saguaro_c)
        if exact is not None:
            return exact
        if self.response == "logged":
            return _interpolate_grid(self.points, temperature, saguaro_c)
        # Points at the C nearest the request, interpolated in T, then moved to the requested C.
        c_base = min({p.saguaro_c for p in self.points}, key=lambda c: (abs(c - saguaro_c), -c))
        base = _interpolate_temperature([p for p in self.points if p.saguaro_c == c_base], temperature)
        # As T -> 0 the draft's q concentrates on its argmax and C's rescaling of probabilities stops mattering:
        # below GREEDY_BELOW_T (under the response's 1e-4 resolution) decoding is greedy, where C has no effect.
        greedy_limit = effective_temperature(temperature) == 0
        if greedy_limit or math.isclose(c_base, saguaro_c):
            return replace(base, saguaro_c=saguaro_c) if greedy_limit else base
        acc_ratio, miss_ratio, r_shift = saguaro_response(
            round(base.mean_acceptance(), 4), max(round(temperature, 4), 1e-4), c_base, round(saguaro_c, 4), downweight
        )
        acceptance = tuple(float(min(1.0, a * acc_ratio)) for a in base.acceptance)
        hit = _shift_hit(base.primary_hit, miss_ratio, r_shift)
        # the synthetic response is an assumption about how C acts (no distributions were logged)
        return replace(base, acceptance=acceptance, primary_hit=hit, saguaro_c=saguaro_c, source="assumed",
                       hit_source="assumed")

    def at_positions(self, temperature: float, cs, downweight: str | None = None) -> AcceptancePoint:
        """The point of a plan drafting position k with its own C_k (k = 0..K-1, K = len(cs)).

        Position k's acceptance and rejection-hit row come from at(T, C_k): both depend only on how the
        token at k was drafted. The all-accepted rows (the bonus drawn from the target) and the backup curve
        do not depend on C and come from at(T, 1).
        """
        cs, downweight = tuple(cs), downweight or self.downweight
        key = ("positions", type(temperature), temperature, tuple((type(c), c) for c in cs), downweight)
        return self._remember(key, lambda: self._at_positions(temperature, cs, downweight))

    def _at_positions(self, temperature: float, cs: tuple, downweight: str) -> AcceptancePoint:
        plain = self.at(temperature, 1.0)
        per = [self.at(temperature, float(c), downweight) for c in cs]
        acc = tuple(p.acceptance[min(k, len(p.acceptance) - 1)] for k, p in enumerate(per))
        f_max = 64
        reject = tuple(tuple(1.0 - p.primary_hit.miss_matrix(k + 1, f_max)[k]) for k, p in enumerate(per))
        accepted = tuple(tuple(1.0 - plain.primary_hit.miss_matrix(k, f_max)[k]) for k in range(len(cs) + 1))
        worst = next((s for s in ("assumed", "extrapolated") if any(s in (p.source, p.hit_source) for p in per)), "derived")
        return AcceptancePoint(temperature, acc, HitTable(reject, accepted), plain.backup_hit, min(cs), worst,
                               hit_source=worst)

    def to_dict(self) -> dict:
        return {"downweight": self.downweight, "response": self.response,
                "points": [p.to_dict() for p in self.points]}

    @classmethod
    def from_dict(cls, d: dict) -> AcceptanceModel:
        if "points" not in d:
            raise ConfigError("acceptance.points", "missing: give a list of acceptance points")
        pts = tuple(AcceptancePoint.from_dict(p) for p in d["points"])
        return cls(points=pts, downweight=d.get("downweight", "top_f"),
                   response=d.get("response", "synthetic"))


def _find(points, temperature: float, saguaro_c: float) -> AcceptancePoint | None:
    """The point stored at exactly (temperature, C), if any."""
    for p in points:
        same_t = math.isclose(p.temperature, temperature, abs_tol=1e-9)
        if same_t and math.isclose(p.saguaro_c, saguaro_c, abs_tol=1e-9):
            return p
    return None


def _check_grid(points) -> None:
    """A logged model needs one point at every (temperature, C) of its grid."""
    temps, cs = sorted({p.temperature for p in points}), sorted({p.saguaro_c for p in points})
    missing = [(t, c) for t in temps for c in cs if _find(points, t, c) is None]
    if missing or len(points) != len(temps) * len(cs):
        raise ConfigError("acceptance.points", f"a logged response needs exactly one point per (T, C) of "
                                               f"the grid {temps} x {cs}; missing {missing}")


def _bracket(grid: list[float], x: float) -> tuple[float, float, float, bool]:
    """(lo, hi, w, outside): grid values around x and x's weight toward hi; outside = clamped to an edge."""
    if x <= grid[0] or x >= grid[-1]:
        edge = grid[0] if x <= grid[0] else grid[-1]
        return edge, edge, 0.0, not math.isclose(x, edge, abs_tol=1e-9)
    hi = next(g for g in grid if g >= x)
    lo = grid[grid.index(hi) - 1]
    return lo, hi, (x - lo) / (hi - lo), False


def _interpolate_grid(points, temperature: float, saguaro_c: float) -> AcceptancePoint:
    """Bilinear interpolation on the logged (T, C) grid; clamped (source "extrapolated") outside it."""
    t_lo, t_hi, w_t, out_t = _bracket(sorted({p.temperature for p in points}), temperature)
    c_lo, c_hi, w_c, out_c = _bracket(sorted({p.saguaro_c for p in points}), saguaro_c)

    def along_c(t: float) -> AcceptancePoint:
        return lerp_point(_find(points, t, c_lo), _find(points, t, c_hi), w_c, t, saguaro_c)

    source = "extrapolated" if out_t or out_c else "derived"
    lo = along_c(t_lo)
    point = lerp_point(lo, lo if t_hi == t_lo else along_c(t_hi), w_t, temperature, saguaro_c)
    return replace(point, source=source, hit_source="")


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
    if lo is hi:  # outside the measured temperatures: the nearest point, clamped, says so
        return replace(lo, temperature=temperature, source="extrapolated",
                       hit_source="extrapolated") if lo.temperature != temperature else lo
    w = (temperature - lo.temperature) / (hi.temperature - lo.temperature)
    return lerp_point(lo, hi, w, temperature, lo.saguaro_c)


def lerp_point(lo: AcceptancePoint, hi: AcceptancePoint, w: float, temperature: float,
                saguaro_c: float) -> AcceptancePoint:
    """(1 - w) lo + w hi: acceptance per position (the shorter list padded with its last value), hit models
    by lerp_hit; placed at (temperature, saguaro_c) and marked derived."""
    if lo is hi or w == 0.0:
        return replace(lo, temperature=temperature, saguaro_c=saguaro_c, source="derived", hit_source="")
    n = max(len(lo.acceptance), len(hi.acceptance))
    a_lo = np.resize(np.asarray(lo.acceptance), n) if len(lo.acceptance) == n else _pad(lo.acceptance, n)
    a_hi = np.resize(np.asarray(hi.acceptance), n) if len(hi.acceptance) == n else _pad(hi.acceptance, n)
    return AcceptancePoint(
        temperature=temperature,
        acceptance=tuple(float(v) for v in a_lo + (a_hi - a_lo) * w),
        primary_hit=lerp_hit(lo.primary_hit, hi.primary_hit, w),
        backup_hit=lerp_hit(lo.backup_hit, hi.backup_hit, w),
        saguaro_c=saguaro_c,
        source="derived",
    )


def _pad(a: tuple[float, ...], n: int) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype=float), np.full(n - len(a), a[-1])])
