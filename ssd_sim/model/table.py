"""Measured forward latencies: a table of probed shapes, interpolated inside, anchored extrapolation outside.

`ssd-run probe` (and `calibrate-here`) time one model's forward at every (rows, tokens) shape the planner asks
about; `MeasuredForward` answers with their means (io.probe) instead of a curve fitted to a handful of runs. Between
probed shapes it interpolates linearly (in rows within a tokens column, then across the two neighbouring
tokens columns); outside the probed range it follows its curve (the ForwardLatency fields, fitted to the table)
scaled to the nearest probed value, and `covers` says which shapes those are, so the planner can say that a
prediction leaves the table. A CPU's latency is not smooth in tokens (matrix-vector below 2 tokens, a
compute-bound knee between 8 and 16; a 4-token verify was cheaper than a 3-token one on one host): a table keeps
what a curve smooths away.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np
from numpy.typing import ArrayLike

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.latency import MS_TERMS, FitReport, ForwardLatency, LatencyModel, fit_forward_latency

Shape = tuple[int, int, float]  # (rows, tokens per row, ms)
CURVE_FREE = ("fixed_ms", "token_ms", "token_exponent", "multi_token_ms")  # the extrapolation curve's fitted terms


@dataclass(frozen=True)
class MeasuredForward(ForwardLatency):
    """A ForwardLatency whose values at probed shapes are the probe's (mean ms); the curve fields extrapolate."""

    table: tuple[Shape, ...] = ()  # (rows, tokens, ms) per probed shape, each shape once

    def __post_init__(self):
        super().__post_init__()
        rows = []
        for i, entry in enumerate(self.table):
            if len(entry) != 3:
                raise ConfigError(f"table[{i}]", f"must be [rows, tokens, ms], got {entry!r}")
            r, t, ms = entry
            if not (_count(r) and _count(t) and isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0):
                raise ConfigError(f"table[{i}]", f"must be [rows >= 1, tokens >= 1, ms > 0] (integers, ms finite), "
                                                 f"got {list(entry)!r}")
            rows.append((int(r), int(t), float(ms)))
        if len({(r, t) for r, t, _ in rows}) != len(rows):
            raise ConfigError("table", "lists a (rows, tokens) shape twice; give each probed shape once (its mean ms)")
        object.__setattr__(self, "table", tuple(sorted(rows)))
        # read on every call (the planner and the simulator ask thousands of times): built once, the object is frozen
        cols: dict[int, tuple[list, list]] = {}
        for r, t, ms in self.table:
            cols.setdefault(t, ([], []))[0].append(r)
            cols[t][1].append(ms)
        object.__setattr__(self, "_cols", {t: (np.array(rs, dtype=float), np.array(v, dtype=float))
                                           for t, (rs, v) in cols.items()})
        object.__setattr__(self, "_ts", np.array(sorted(cols), dtype=float))
        object.__setattr__(self, "_curve", ForwardLatency(**{f.name: getattr(self, f.name) for f in fields(ForwardLatency)}))

    @classmethod
    def fit(cls, table: dict[tuple[int, int], float], free=CURVE_FREE) -> MeasuredForward:
        """A MeasuredForward over `table` {(rows, tokens): ms}, its curve least-squares fitted to the table."""
        return cls.fitted(table, free)[0]

    @classmethod
    def fitted(cls, table: dict[tuple[int, int], float], free=CURVE_FREE) -> tuple[MeasuredForward, FitReport]:
        """fit, and the FitReport of its extrapolation curve (parameters at a bound: the table does not pin them)."""
        if len(table) < 3:
            raise ConfigError("probe", f"needs at least 3 probed shapes to fit the extrapolation curve, got {len(table)}")
        shapes = sorted(table)
        curve, rep = fit_forward_latency([[(r, t, 1)] for r, t in shapes], [table[s] for s in shapes], free=free)
        return cls(**{f.name: getattr(curve, f.name) for f in fields(ForwardLatency)},
                   table=tuple((r, t, float(table[(r, t)])) for r, t in shapes)), rep

    @property
    def curve(self) -> ForwardLatency:
        """The extrapolation curve alone (the ForwardLatency fields)."""
        return self._curve

    def __call__(self, rows: ArrayLike, tokens: ArrayLike = 1):
        """Forward latency in ms (broadcasts like ForwardLatency): the probed value, interpolated between probed
        shapes, the curve anchored to the nearest probed value outside them."""
        curve = super().__call__(rows, tokens)
        if not self.table:
            return curve
        r, t = np.broadcast_arrays(np.asarray(rows, dtype=float), np.asarray(tokens, dtype=float))
        out = self._values(r.ravel(), t.ravel(), np.asarray(curve, dtype=float).ravel() * np.ones(r.size))
        return float(out[0]) if np.ndim(curve) == 0 and r.ndim == 0 else out.reshape(r.shape)

    def covers(self, rows: ArrayLike, tokens: ArrayLike = 1) -> np.ndarray:
        """True where (rows, tokens) lies inside the probed shapes (interpolated, not extrapolated)."""
        r, t = np.broadcast_arrays(np.asarray(rows, dtype=float), np.asarray(tokens, dtype=float))
        cols, ts = self._cols, self._ts
        inside = np.zeros(r.shape, dtype=bool)
        for j, tj in enumerate(ts):
            rj = cols[tj][0]
            lo_ok = (r >= rj[0]) & (r <= rj[-1])
            if j + 1 < len(ts):
                rn = cols[ts[j + 1]][0]
                between = (t > tj) & (t < ts[j + 1]) & lo_ok & (r >= rn[0]) & (r <= rn[-1])
                inside |= between
            inside |= (t == tj) & lo_ok
        return inside

    def probed_range(self) -> str:
        """The probed shapes in words, e.g. 'rows 1..4 x tokens 1..9'."""
        rs, ts = [r for r, _, _ in self.table], [t for _, t, _ in self.table]
        return f"rows {min(rs)}..{max(rs)} x tokens {min(ts)}..{max(ts)}"

    def scaled(self, factor: float) -> MeasuredForward:
        """This forward `factor` times slower: the curve's ms terms and every probed value scaled."""
        return replace(self, **{f: getattr(self, f) * factor for f in MS_TERMS},
                       table=tuple((r, t, ms * factor) for r, t, ms in self.table))

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["table"] = [[r, t, round(ms, 4)] for r, t, ms in self.table]
        return d

    # ---- interpolation -------------------------------------------------------------------------
    def _column_at(self, tj: int, r: np.ndarray) -> np.ndarray:
        """Latency at tokens = tj for rows r: interpolated between probed rows, the curve anchored at the ends."""
        rj, mj = self._cols[tj]
        inside = np.interp(r, rj, mj)
        c = _positive(self.curve)
        low = c(r, tj) * mj[0] / c(rj[0], tj)
        high = c(r, tj) * mj[-1] / c(rj[-1], tj)
        return np.where(r < rj[0], low, np.where(r > rj[-1], high, inside))

    def _values(self, r: np.ndarray, t: np.ndarray, curve: np.ndarray) -> np.ndarray:
        ts = self._ts
        c = _positive(self.curve)
        curve = np.maximum(curve, EPS_MS)
        out = np.empty_like(curve)
        j = np.searchsorted(ts, t)  # ts[j - 1] < t <= ts[j]
        for k in np.unique(j):
            sel = j == k
            rk, tk = r[sel], t[sel]
            if k == 0 or k == len(ts):  # below the smallest or above the largest probed tokens: anchor on that column
                edge = int(ts[0] if k == 0 else ts[-1])
                out[sel] = curve[sel] * self._column_at(edge, rk) / c(rk, edge)
                continue
            hi_t = int(ts[k])
            hi = self._column_at(hi_t, rk)
            exact = tk == hi_t
            lo_t = int(ts[k - 1])
            lo = self._column_at(lo_t, rk)
            w = (tk - lo_t) / (hi_t - lo_t)
            out[sel] = np.where(exact, hi, lo + w * (hi - lo))
        return out


EPS_MS = 1e-9  # a curve term that vanishes still anchors (the ratio of two EPS_MS is 1)


def _positive(curve: ForwardLatency):
    return lambda r, t: np.maximum(curve(r, t), EPS_MS)


def _count(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer() and x >= 1


def forward_from_dict(d: dict, role: str) -> ForwardLatency:
    """A ForwardLatency from a profile's latency.<role> object: a MeasuredForward when it carries a probed table."""
    d = dict(d)
    table = d.pop("table", None)
    try:
        if table is None:
            return ForwardLatency(**d)
        if not isinstance(table, list):
            raise ConfigError(f"latency.{role}.table", "must be a list of [rows, tokens, ms] (ssd-run probe writes it)")
        return MeasuredForward(**d, table=tuple(tuple(e) if isinstance(e, list) else (e,) for e in table))
    except ConfigError as e:
        raise ConfigError(f"latency.{role}.{e.field}", str(e).split(": ", 1)[-1]) from e


def latency_from_dict(d: dict) -> LatencyModel:
    """A profile's latency object -> LatencyModel (each forward a ForwardLatency, or a MeasuredForward with a table)."""
    if not isinstance(d, dict) or not all(isinstance(d.get(r), dict) for r in ("target", "draft")):
        raise ConfigError("latency", "must be an object with 'target' and 'draft' forward latencies "
                                     "(see ssd_sim/model/latency.py)")
    d = dict(d)
    # written before jit_glue_full existed: the engine that runs K + 1 SD draft forwards (the reference engine) is the
    # one whose glue re-reads K + 1 tokens after a jit backup too
    d.setdefault("jit_glue_full", bool(d.get("sd_extra_forward", False)))
    try:
        target = forward_from_dict(d.pop("target"), "target")
        draft = forward_from_dict(d.pop("draft"), "draft")
        return LatencyModel(target=target, draft=draft, **d)
    except TypeError as e:
        raise ConfigError("latency", f"unknown or missing field ({e}); see ssd_sim/model/latency.py") from e
