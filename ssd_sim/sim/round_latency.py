"""The latencies (ms) of one simulated round: per batch size, and per batch size and KV context.

RoundLatency precomputes a configuration's phases for every batch size b = 0..max_batch at the profile's one
context. ContextLatency follows a context that grows over the decode: a GPU profile's forwards read each row's KV
cache (row_ms) and its attention FLOPs grow with the tokens a row holds. Both are affine in that length and summed
over the batch's rows, so a round of b rows whose mean context is c costs what the profile re-derived at context c
says (ssd_sim.cli.growth.profile_at). ContextLatency evaluates the latency model on a geometric grid of contexts from
the workload's shortest prompt to its longest prompt + output and interpolates linearly between grid points
(tests/sim/test_round_latency.py bounds the error against profiles built at each context)."""

from __future__ import annotations

import math
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.latency import MS_TERMS, ForwardLatency, LatencyModel, redrafted_every_row
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan

MAX_CONTEXT = 1 << 20  # the longest context a profile is built at (tokens; longer ones take its latencies)
REFINE_DEPTH = 12  # halvings (in log context) of an anchor interval whose terms are not linear in the context
GRID_RATIO = 1.02  # successive grid contexts differ by this factor at most (below MAX_GRID)
MAX_GRID = 512  # grid contexts at most (tables of max_batch + 1 rows each)


class RoundCost(NamedTuple):
    """One round's phase latencies (ms) at a batch size (and a context)."""

    step: float  # AR step
    verify: float  # T_v (SSD: slowed while the draft speculates)
    sd_draft: float  # SD drafting at its expectation over the last round's outcomes
    glue: float  # SSD glue alone (b x (K + 1))
    primary: float  # SSD primary speculation: glue + branch decode, beside the verify
    primary_glue: float  # the glue's share of `primary` as it runs beside the verify


def phase_table(lat: LatencyModel, plan: Plan, max_batch: int, p_all: float = 0.0,
                after_jit: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The RoundCost fields for every batch size b = 0..max_batch (rows b, columns the fields; ms) and the jit
    backup by rows redrafted (ms). after_jit: of a round whose reply was a jit backup of every row (the glue after it
    feeds one token per row: LatencyModel.glue_ms)."""
    b, K = np.arange(max_batch + 1), plan.K
    if plan.mode == "ssd":  # the verify and primary speculation with their wakes, and the draft's before its glue
        verify, primary, draft_wake = lat.ssd_phases_ms(b, K, plan.budget, plan.draft_devices, after_jit)
    else:
        verify = lat.sd_verify_ms(b, K, p_all) if plan.mode == "sd" else lat.verify_ms(b, K)
        primary, draft_wake = lat.primary_ms(b, K, plan.budget, plan.draft_devices, after_jit), 0.0
    glue = np.asarray(lat.glue_ms(b, K, after_jit), dtype=float)
    columns = [lat.ar_step_ms(b), verify,
               # SD drafting at its expectation over the last round's outcomes (LatencyModel.sd_draft_ms); a round
               # with rows in their request's first round is priced by RoundLatency.sd_phases instead
               lat.sd_draft_ms(b, K, p_all), glue, primary,
               # the glue's share of the primary speculation as it runs beside the verify (the rest: the branch phase)
               glue * (1.0 + lat.draft_slowdown) + draft_wake]
    table = np.column_stack([np.broadcast_to(np.asarray(c, dtype=float), b.shape) for c in columns])
    return table, np.asarray(lat.jit_backup_ms(b, K), dtype=float)


class RoundLatency:
    """Phase latencies (ms) of one configuration, precomputed for every batch size b = 0..max_batch."""

    def __init__(self, latency: LatencyModel, plan: Plan, max_batch: int, p_all: float = 0.0):
        """latency: the profile's; p_all: P(an SD round accepts all K draft tokens), per sequence (prices SD's first
        draft step)."""
        lat = self.model = latency
        table, jit = phase_table(lat, plan, max_batch, p_all)
        self.ar_step, self.verify, self.sd_draft, self.glue, self.primary, self.primary_glue = table.T.tolist()
        self.jit = jit.tolist()  # by rows redrafted
        # the same after a round whose reply was a jit backup of every row (`redrafted`)
        self.glue_cached = plan.mode == "ssd" and plan.backup != "fast" and not lat.jit_glue_full
        after = phase_table(lat, plan, max_batch, p_all, after_jit=True)[0] if self.glue_cached else table
        cols = dict(zip(RoundCost._fields, after.T.tolist(), strict=True))
        self.verify_jit, self.primary_jit, self.primary_glue_jit = cols["verify"], cols["primary"], cols["primary_glue"]
        self.costs_jit = [RoundCost(*c) for c in after.tolist()]
        self.fast = float(lat.fast_backup_ms)
        self.transfer = float(lat.transfer_ms)  # request + reply
        self.lookup = float(lat.lookup_ms)
        self.K, self.budget, self.draft_devices = plan.K, plan.budget, plan.draft_devices
        self.costs = [RoundCost(*c) for c in table.tolist()]
        self.varies = False  # the latencies do not depend on the context
        self.p_all = p_all
        self._first: dict[tuple[int, int], tuple[float, float]] = {}

    def at(self, b: int, context: float = 0.0, after_jit: bool = False) -> RoundCost:
        """The phases of a round of b rows (the context does not matter here); after_jit: its reply was a jit
        backup of every row (redrafted)."""
        return self.costs_jit[b] if after_jit else self.costs[b]

    def sd_phases(self, b: int, fresh: int = 0, context: float = 0.0) -> tuple[float, float]:
        """(draft, verify) of an SD round of b rows of which `fresh` are in their request's first round (ms): those
        follow a prefill, never an all-accepted round, so they never need the 2-token first draft step
        (LatencyModel.sd_draft_ms); fresh = 0 is `at(b)`'s sd_draft and verify."""
        if not fresh:
            cost = self.costs[b]
            return cost.sd_draft, cost.verify
        key = (b, fresh)
        if key not in self._first:
            lat, K = self.model, self.K
            self._first[key] = (float(lat.sd_draft_ms(b, K, self.p_all, fresh)),
                                float(lat.sd_verify_ms(b, K, self.p_all, fresh)))
        return self._first[key]

    def redrafted(self, b: int, n_miss: int, backup: str, per_row: bool) -> bool:
        """Whether a round of b rows with n_miss missed rows replies with a jit backup of every row, whose cached
        tokens shorten the glue after it (LatencyModel.glue_ms); False where the glue is the same either way."""
        return self.glue_cached and backup == "jit" and redrafted_every_row(n_miss, b, per_row)

    def jit_ms(self, rows: int, context: float = 0.0) -> float:
        """A jit backup redrafting `rows` rows (ms)."""
        return self.jit[rows]

    def branch_rows(self, b: int) -> list[int]:
        """Branch rows of each draft device: b x budget split as evenly as possible."""
        total, d = b * self.budget, self.draft_devices
        return [total // d + (i < total % d) for i in range(d)]

    def branch_ms(self, rows: int, context: float = 0.0) -> float:
        """One draft device's branch decode over `rows` rows alone (ms)."""
        return float(self.model.branch_ms(rows, self.K)) if rows > 0 else 0.0


_BUILT: OrderedDict = OrderedDict()  # (id(latency), plan, max_batch, p_all) -> (latency, RoundLatency)
_BUILT_LOCK = threading.Lock()
BUILT_KEPT = 64  # RoundLatency tables kept (the most recently used)


def round_latency(latency: LatencyModel, plan: Plan, max_batch: int, p_all: float = 0.0) -> RoundLatency:
    """RoundLatency(latency, plan, max_batch, p_all), built once for a latency model (by identity; frozen) and
    reused: a prediction simulates one configuration thousands of times (bench/fidelity: 4,824 simulations per
    draw, whose tables took 60% of its time). A RoundLatency is never changed after it is built."""
    key = (id(latency), plan, max_batch, p_all)
    with _BUILT_LOCK:
        kept = _BUILT.get(key)
        if kept is not None and kept[0] is latency:
            _BUILT.move_to_end(key)
            return kept[1]
    built = RoundLatency(latency, plan, max_batch, p_all)
    with _BUILT_LOCK:
        _BUILT[key] = (latency, built)  # the latency is held, so its id is not reused while the entry lives
        while len(_BUILT) > BUILT_KEPT:
            _BUILT.popitem(last=False)
    return built


class ContextLatency:
    """RoundLatency at the batch's mean context (tokens per row): tables on a fine grid of contexts, interpolated.

    The forwards' terms (row_ms, compute_ms_per_token) are affine in the context where every layer attends to all of
    it, so they are taken from profiles (profile_at) at anchor contexts and interpolated between them (`anchors`: the
    powers of two around the range, each interval split where a profile at its middle is off the line, e.g. at a
    sliding window); every grid context then gets its RoundLatency from those terms, with the roofline's max()
    evaluated there. The grid is geometric (ratio GRID_RATIO,
    at most MAX_GRID contexts), so a phase's kink (a forward turning memory-bound) is at most a few percent of its
    context from a grid point. Prefill, transfer, lookup and the fast backup stay those of `base` (the profile at the
    workload's mean context): they do not read the decode's KV cache.
    """

    def __init__(self, base: RoundLatency, profile_at: Callable[[int], Profile], plan: Plan, max_batch: int,
                 lo: int, hi: int, p_all: float = 0.0):
        """Tables for contexts lo..hi tokens (profile_at(c): the profile at context c)."""
        if not 1 <= lo <= hi:
            raise ConfigError("context", f"needs 1 <= shortest <= longest context (tokens), got {lo}..{hi}")
        hi = min(hi, MAX_CONTEXT)
        lo = min(lo, hi)
        anchors, models = _anchors(profile_at, lo, hi)
        grid = _geometric(lo, hi, min(MAX_GRID, math.ceil(math.log(hi / lo) / math.log(GRID_RATIO)) + 1))
        self.nodes = sorted(set(grid) | {c for c in anchors if lo <= c <= hi})  # kinks found there are nodes too
        self._models = [_between(anchors, models, c) for c in self.nodes]
        tables = [phase_table(m, plan, max_batch, p_all) for m in self._models]
        self._costs = np.stack([t for t, _ in tables], axis=1)  # batch size x node x field
        self._jit = np.stack([j for _, j in tables], axis=1)  # rows x node
        self.glue_cached = base.glue_cached
        self._costs_jit = (np.stack([phase_table(m, plan, max_batch, p_all, after_jit=True)[0] for m in self._models],
                                    axis=1) if self.glue_cached else self._costs)
        self.model, self.fast, self.transfer, self.lookup = base.model, base.fast, base.transfer, base.lookup
        self.K, self.budget, self.draft_devices = base.K, base.budget, base.draft_devices
        self.branch_rows = base.branch_rows
        self.redrafted = base.redrafted
        self.varies = True
        self.p_all = p_all
        self._saving: dict[tuple[int, int, int], tuple[float, float]] = {}

    def _where(self, context: float) -> tuple[int, float]:
        """The node below `context` and the weight of the one above (clamped to the nodes' range)."""
        nodes = self.nodes
        i = bisect_right(nodes, context) - 1
        if i < 0:
            return 0, 0.0
        if i >= len(nodes) - 1:
            return len(nodes) - 1, 0.0
        return i, (context - nodes[i]) / (nodes[i + 1] - nodes[i])

    def at(self, b: int, context: float, after_jit: bool = False) -> RoundCost:
        """The phases of a round of b rows whose mean context is `context` tokens (ms); after_jit: as RoundLatency.at."""
        i, w = self._where(context)
        t = (self._costs_jit if after_jit else self._costs)[b]
        return RoundCost(*(t[i] if w == 0.0 else t[i] + w * (t[i + 1] - t[i])).tolist())

    def sd_phases(self, b: int, fresh: int, context: float) -> tuple[float, float]:
        """RoundLatency.sd_phases at mean context `context`: at(b, context)'s sd_draft and verify less what the fresh
        rows save, interpolated between the nodes as `at` is (ms)."""
        cost = self.at(b, context)
        if not fresh:
            return cost.sd_draft, cost.verify
        i, w = self._where(context)
        saved = self._first_saving(i, b, fresh)
        if w:
            saved = tuple(x + w * (y - x) for x, y in zip(saved, self._first_saving(i + 1, b, fresh), strict=True))
        return cost.sd_draft - saved[0], cost.verify - saved[1]

    def _first_saving(self, node: int, b: int, fresh: int) -> tuple[float, float]:
        """(draft, verify) ms that `fresh` first-round rows of b save at a node's latencies (each computed once)."""
        key = (node, b, fresh)
        if key not in self._saving:
            m, K, p = self._models[node], self.K, self.p_all
            self._saving[key] = (float(m.sd_draft_ms(b, K, p) - m.sd_draft_ms(b, K, p, fresh)),
                                 float(m.sd_verify_ms(b, K, p) - m.sd_verify_ms(b, K, p, fresh)))
        return self._saving[key]

    def jit_ms(self, rows: int, context: float) -> float:
        """A jit backup redrafting `rows` rows at mean context `context` (ms)."""
        i, w = self._where(context)
        t = self._jit[rows]
        return float(t[i] if w == 0.0 else t[i] + w * (t[i + 1] - t[i]))

    def jit_ms_each(self, rows: np.ndarray, context: np.ndarray) -> np.ndarray:
        """jit_ms vectorised over rounds: `rows` redrafted at mean context `context` in each (ms)."""
        nodes = np.asarray(self.nodes, dtype=float)
        c = np.clip(context, nodes[0], nodes[-1])
        i = np.clip(np.searchsorted(nodes, c, side="right") - 1, 0, max(nodes.size - 2, 0))
        j = np.minimum(i + 1, nodes.size - 1)
        w = np.where(j > i, (c - nodes[i]) / np.maximum(nodes[j] - nodes[i], 1.0), 0.0)
        t = self._jit[rows]  # rounds x nodes
        at = np.arange(t.shape[0])
        return t[at, i] + w * (t[at, j] - t[at, i])

    def branch_ms(self, rows: int, context: float) -> float:
        """One draft device's branch decode over `rows` rows alone at mean context `context` (ms)."""
        if rows <= 0:
            return 0.0
        i, w = self._where(context)
        lo = float(self._models[i].branch_ms(rows, self.K))
        return lo if w == 0.0 else lo + w * (float(self._models[i + 1].branch_ms(rows, self.K)) - lo)

    def at_nodes(self, b: int, field: str, after_jit: bool = False) -> np.ndarray:
        """One phase at b rows at every node (ms), for vectorised interpolation (np.interp over self.nodes)."""
        return (self._costs_jit if after_jit else self._costs)[b][:, RoundCost._fields.index(field)]


def _geometric(lo: int, hi: int, n: int) -> list[int]:
    """n contexts (tokens) from lo to hi in a geometric progression, rounded, without repeats."""
    return sorted({int(round(c)) for c in np.geomspace(lo, hi, max(n, 2))} | {lo, hi})


def _anchors(profile_at: Callable[[int], Profile], lo: int, hi: int) -> tuple[list[int], list[LatencyModel]]:
    """Contexts (tokens) and latency models between which the forwards' terms are linear in the context: the powers
    of two around lo..hi (the same for every range, so a cached profile_at builds each once), each interval halved in
    log context, down to neighbouring integers or REFINE_DEPTH halvings, while the profile at its middle is off the
    line through its ends (a kink, e.g. where the context passes a sliding window)."""
    first = 1 << max(0, math.floor(math.log2(max(lo, 1))))
    last = 1 << min(20, math.ceil(math.log2(max(min(hi, MAX_CONTEXT), 1))))
    points = {c: profile_at(c).latency for c in _powers(first, max(last, first))}

    def refine(a: int, b: int, depth: int) -> None:
        mid = int(round(math.sqrt(a * b)))
        if depth >= REFINE_DEPTH or not a < mid < b:
            return
        points[mid] = profile_at(mid).latency
        if not _on_line(points[a], points[b], points[mid], (mid - a) / (b - a)):
            refine(a, mid, depth + 1)
            refine(mid, b, depth + 1)

    ends = sorted(points)
    for a, b in zip(ends, ends[1:], strict=False):
        refine(a, b, 0)
    ordered = sorted(points)
    return ordered, [points[c] for c in ordered]


def _powers(first: int, last: int) -> list[int]:
    out = [first]
    while out[-1] < last:
        out.append(out[-1] * 2)
    return out


def _on_line(a: LatencyModel, b: LatencyModel, mid: LatencyModel, w: float) -> bool:
    """The forwards of `mid` equal the interpolation a share w of the way from a's to b's (to 1e-9)."""
    for role in ("target", "draft"):
        fa, fb, fm = getattr(a, role), getattr(b, role), getattr(mid, role)
        for f in MS_TERMS:
            want = getattr(fa, f) + w * (getattr(fb, f) - getattr(fa, f))
            if abs(getattr(fm, f) - want) > 1e-9 * max(abs(want), 1e-9):
                return False
    return True


def _between(anchors: list[int], models: list[LatencyModel], c: int) -> LatencyModel:
    """The latency model at context c: the forwards' terms interpolated linearly between the anchors around c."""
    k = min(max(bisect_right(anchors, c) - 1, 0), max(len(anchors) - 2, 0))
    if len(anchors) == 1 or c == anchors[k]:
        return models[k]
    a, b = models[k], models[k + 1]
    w = (c - anchors[k]) / (anchors[k + 1] - anchors[k])
    return replace(a, target=_lerp(a.target, b.target, w), draft=_lerp(a.draft, b.draft, w))


def _lerp(a: ForwardLatency, b: ForwardLatency, w: float) -> ForwardLatency:
    """The forward whose ms terms lie a share w of the way from a's to b's (the others are a's)."""
    return replace(a, **{f: getattr(a, f) + w * (getattr(b, f) - getattr(a, f)) for f in MS_TERMS
                         if getattr(a, f) != getattr(b, f)})
