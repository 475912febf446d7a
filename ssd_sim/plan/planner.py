"""Planner: search K, cache budget, fan-out (hit and miss case), Saguaro C and the backup policy.

For every K and C the exact integer fan-outs of all budgets come from one dynamic programme
(fanout.allocation_tables), and the SSD round model (predict.ssd_rates) is evaluated for all budgets
at once, so a full search is a few thousand vectorised evaluations (well under a second).
The budget is bounded by what the draft finishes inside one verification at this batch size.
Anything the user fixes is not searched.

    make_plan(profile, PlanRequest(batch_size=4, temperature=1.0, knobs=Knobs(backup="jit"))) -> PlanResult

A `PlanRequest` is the question (workload, fixed knobs, objective, `SearchLimits`, risk and how to find b*, a
`BStar`); the `PlanResult` is the immutable answer. Units: batch sizes in sequences, K and budgets in draft
tokens (guesses) per sequence, latencies in ms, speeds in tok/s.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.profile import Profile
from ssd_sim.plan.intervals import quantile_tok_s
from ssd_sim.plan.knobs import Knobs  # the fixed knobs (re-exported for the planner's callers)
from ssd_sim.plan.plan import MAX_BUDGET, Plan, check_budget
from ssd_sim.plan.predict import (
    Prediction,
    backup_outcomes,
    plan_point,
    predict_ar,
    predict_sd,
    predict_ssd,
    round_times,
    ssd_rates,
)
from ssd_sim.theory.analytic import critical_batch_size, ssd_gain_bound
from ssd_sim.theory.fanout import allocation_tables, backtrack

OBJECTIVES = ("latency", "throughput-per-device")
C_GRID = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)


@dataclass(frozen=True)
class PlanResult:
    """The chosen SSD plan, its prediction, the AR and best-SD baselines and why the search stopped (immutable:
    a caller that picks another candidate makes a new one with dataclasses.replace)."""

    plan: Plan
    ssd: Prediction
    ar: Prediction
    sd: Prediction
    objective: str
    binding: str  # the constraint that binds the chosen cache budget / K
    b_star: float  # batch size from which the fast backup beats jit (batch-dependent latencies)
    b_star_closed_form: float  # Theorem 17 with latencies frozen at this batch size
    budget_fit: int  # largest budget the draft finishes inside one verification at this K
    candidates: tuple[tuple[Plan, Prediction], ...] = ()  # best first, [0] = plan
    evaluated: int = 0  # configurations scored
    c_per_position_gain_pct: float | None = None  # T > 0: tok/s gain of the best C_k list over the best single C
    crossover: Crossover | None = None  # the jit / fast curves behind b* (None: b* of the fixed plan)
    gain_bound: float = math.nan  # Corollary 9: the most SSD (at this plan's K and E_hit) can gain over the best SD
    budget_cap: int = MAX_BUDGET  # the largest budget the search allowed (--budget-cap and the timed range)
    k_max: int = 10  # the largest K the search allowed (--max-k)
    k_fixed: bool = False  # the SSD plan's K was fixed (-k or a plan file), not searched

    @property
    def gain_captured(self) -> float:
        """Share of the possible gain over SD (Corollary 9) that the plan's prediction captures, (x - 1) / (bound - 1)."""
        x = self.ssd.per_seq_tok_s / self.sd.per_seq_tok_s
        return (x - 1.0) / (self.gain_bound - 1.0) if self.gain_bound > 1.0 else math.nan

    def score(self, p: Prediction) -> float:
        return objective_value(p, self.objective)

    @property
    def recommended_mode(self) -> str:
        """Which of ar / sd / ssd wins under the objective."""
        return max((self.ar, self.sd, self.ssd), key=self.score).mode


def objective_value(p: Prediction, objective: str) -> float:
    """latency: tok/s per sequence; throughput-per-device: total tok/s / devices used."""
    return p.per_seq_tok_s if objective == "latency" else p.tok_s_per_device


def budget_fit(profile: Profile, b: int, K: int, draft_devices: int = 1, cap: int = 256) -> int:
    """Largest per-sequence budget whose primary speculation (glue + branches) fits in one verify (as slowed by
    the draft's interference); 0 if none."""
    budgets = np.arange(1, cap + 1)
    lat = profile.latency
    t_p = lat.primary_ms(b, K, budgets, draft_devices)
    fits = budgets[t_p <= lat.ssd_verify_ms(b, K, budgets, draft_devices)]
    return int(fits.max()) if fits.size else 0


def best_sd(profile: Profile, b: int, temperature: float, k_range) -> Prediction:
    """Best synchronous SD over K by tok/s per sequence (device count is the same for every K)."""
    return max((predict_sd(profile, b, K, temperature) for K in k_range), key=lambda p: p.per_seq_tok_s)


class BStar(StrEnum):
    """How make_plan finds b*, the batch size (sequences) from which the fast backup beats jit, where the plan's
    'adaptive' backup switches. The chosen plan's predictions are the same in every mode; they differ in cost.

    SCAN    re-optimise the plan (K, budget, fan-outs, C) for each backup at every scanned batch size
            (`crossover`): a full search per batch size, the slow part of make_plan at T > 0, where C is
            searched too. With a fan-out fixed by the knobs there is nothing to re-optimise: it does CHOSEN.
    CHOSEN  the chosen plan held fixed, each backup with its own miss-case fan-out (`critical_batch`): one DP
            per backup and a loop of round models over batch sizes, cheap; for sweeps and evaluations.
    SKIP    no b*: b_star and b_star_closed_form are nan and the plan keeps its single backup (no 'adaptive');
            for sweeps that read only the predictions.
    """

    SCAN = "scan"
    CHOSEN = "chosen"
    SKIP = "skip"


@dataclass(frozen=True)
class SearchLimits:
    """How far the search goes (bounds on what is searched; the knobs say what is fixed).

    k_max: the largest K searched (draft tokens per round), for SSD, for the best SD and in the b* scan.
    budget_cap: the largest cache budget searched (guesses per sequence); a calibrated profile's timed range may
    lower it (PlanResult.budget_cap is the one used).
    top_n: distinct plans kept as candidates, best first (risk re-ranks these).
    """

    k_max: int = 10
    budget_cap: int = 128
    top_n: int = 8


@dataclass(frozen=True)
class PlanRequest:
    """What make_plan is asked: the workload, the fixed knobs, the objective, the search limits, the risk and how
    to find b*. Frozen and validated on construction (a ConfigError naming the field); `replace` varies one part,
    e.g. `request.replace(batch_size=b)` in a sweep over batch sizes."""

    batch_size: int = 1  # sequences decoded together, 1..4096
    temperature: float = 0.0  # sampling temperature of target and draft (0 = greedy)
    draft_devices: int = 1  # accelerators the draft runs on
    knobs: Knobs = Knobs()  # what is fixed (not searched); unset engine knobs come from the profile's engine
    objective: str = "latency"  # one of OBJECTIVES: tok/s per sequence, or total tok/s per device used
    limits: SearchLimits = SearchLimits()
    risk: float | None = None  # None: rank by predicted tok/s; q in (0, 0.5]: by its q-quantile (plan.intervals)
    b_star: BStar = BStar.SCAN
    # None: rank by predicted tok/s; else a score per SSD plan (higher is better) that re-ranks the top_n candidates,
    # e.g. tok/s over a context growing over the decode (ssd-plan --prompt-tokens / --tokens: cli.growth)
    rank: Callable[[Plan], float] | None = None

    def __post_init__(self) -> None:
        risk, objective, batch_size = self.risk, self.objective, self.batch_size
        if risk is not None and self.rank is not None:
            raise ConfigError("risk", "ranks by a quantile of tok/s at one context, while a context range ranks by tok/s "
                                      "over it: drop --risk or the prompt / output lengths")
        if risk is not None and not 0.0 < risk <= 0.5:
            raise ConfigError("risk", f"must be a quantile in (0, 0.5] (0.1 = plan for the 10% worst case), got {risk}")
        if objective not in OBJECTIVES:
            raise ConfigError("objective", f"must be one of {OBJECTIVES}, got {objective!r}")
        if not 1 <= batch_size <= 4096:
            raise ConfigError("batch_size", f"must be in 1..4096, got {batch_size}")
        if self.b_star not in tuple(BStar):
            raise ConfigError("b_star", f"must be one of {tuple(str(m) for m in BStar)}, got {self.b_star!r}")
        object.__setattr__(self, "b_star", BStar(self.b_star))  # "chosen" -> BStar.CHOSEN

    def replace(self, **changes) -> PlanRequest:
        """A copy with these fields changed (validated again)."""
        return replace(self, **changes)


def make_plan(profile: Profile, request: PlanRequest = PlanRequest(), *,
              memo: dict | None = None) -> PlanResult:
    """Search the SSD configuration space for the request's batch size and temperature; see module docstring.

    request.b_star says how b* is found and what that costs (BStar). request.risk None ranks plans by the
    predicted tok/s; a quantile q in (0, 0.5] re-ranks the top_n candidates by the q-quantile of their tok/s over
    the profile's uncertainty (plan.intervals), e.g. 0.1 = the 10% worst case.

    memo: where the fan-out DP tables are kept (a dict), None = dp_tables' shared LRU cache; the tables
    depend only on K, the outcome distribution and the hit curve, so sweeps over batch sizes reuse them.
    An execution detail, not part of the question: it never changes the result.
    """
    batch_size, temperature, draft_devices = request.batch_size, request.temperature, request.draft_devices
    k_max, budget_cap, top_n = request.limits.k_max, request.limits.budget_cap, request.limits.top_n
    knobs = request.knobs.for_profile(profile)
    user_cap, timed_cap = budget_cap, timed_budget_cap(profile, batch_size)
    scored, fits = _search(profile, batch_size, temperature, knobs, _k_range(knobs, k_max),
                           _backups(knobs, batch_size), draft_devices, min(user_cap, timed_cap), memo=memo)
    # Within SSD at one batch size both objectives rank alike (same devices), so rank by tok/s per sequence;
    # only the configurations read (the top_n distinct plans) are turned into fan-out lists.
    plans: list[Plan] = []
    for i in scored.ranked():
        plan = _to_plan(scored.config(i), knobs, temperature, batch_size, draft_devices)
        if all(plan != p for p in plans):
            plans.append(plan)
        if len(plans) >= top_n:
            break
    if request.risk is not None and len(plans) > 1:
        q = quantile_tok_s(profile, plans, request.risk)
        plans = [p for _, p in sorted(zip(q, plans, strict=True), key=lambda x: -x[0])]
    elif request.rank is not None and len(plans) > 1:
        plans = sorted(plans, key=request.rank, reverse=True)  # stable: ties keep the predicted order
    mode = request.b_star
    scan = mode is BStar.SCAN and knobs.fan_out is None  # a fixed fan-out: b* of that plan, each backup its own miss fan-out
    curve = crossover(profile, temperature, knobs, draft_devices, k_max, budget_cap, memo=memo) if scan else None
    if mode is BStar.SKIP:
        b_star = b_closed = math.nan
    else:
        b_star = curve.b_star if curve is not None else critical_batch(profile, plans[0])[0]
        b_closed = closed_form_b_star(profile, plans[0])
    if mode is not BStar.SKIP and knobs.backup in (None, "adaptive"):
        thr = knobs.backup_threshold if knobs.backup_threshold is not None else b_star
        adaptive = plans[0].replace(backup="adaptive", backup_threshold=thr)
        if adaptive.backup_for(batch_size) == plans[0].backup:
            plans[0] = adaptive
    gain = None
    if knobs.saguaro_c_list is not None:  # a fixed per-position C list (a plan file's) replaces the single C
        plans[0] = plans[0].replace(saguaro_c_list=tuple(knobs.saguaro_c_list))
    elif temperature > 0 and knobs.saguaro_c is None and plans[0].K >= 2:
        refined, gain = per_position_c(profile, plans[0])
        if gain >= MIN_C_GAIN_PCT:
            plans[0] = refined
    preds = [(p, predict_ssd(profile, p)) for p in plans]
    best, ssd = preds[0]
    sd = best_sd(profile, batch_size, temperature, range(1, k_max + 1))
    ar = predict_ar(profile, batch_size)
    fit = fits[best.K]
    binding = _binding(best, ssd, fit, knobs, user_cap, timed_cap)
    bound = gain_bound(profile, ssd, sd)
    return PlanResult(plan=best, ssd=ssd, ar=ar, sd=sd, objective=request.objective, binding=binding, b_star=b_star,
                      b_star_closed_form=b_closed, budget_fit=fit, candidates=tuple(preds),
                      evaluated=len(scored.per_seq), c_per_position_gain_pct=gain, crossover=curve, gain_bound=bound,
                      budget_cap=min(user_cap, timed_cap), k_max=k_max,
                      k_fixed=knobs.num_speculative_tokens is not None)


def bound_notes(result: PlanResult) -> list[str]:
    """One line for each optimum that sits on a search bound (the search may have stopped short of it)."""
    notes = []
    if result.sd.num_speculative_tokens == result.k_max:
        notes.append(f"SD's best K = {result.k_max} is the largest K searched (--max-k {result.k_max}): its optimum "
                     "may lie beyond; raise --max-k to search further")
    if result.plan.K == result.k_max and not result.k_fixed:
        notes.append(f"SSD's best K = {result.k_max} is the largest K searched (--max-k {result.k_max}): its "
                     "optimum may lie beyond; raise --max-k to search further")
    return notes


def gain_bound(profile: Profile, ssd: Prediction, sd: Prediction) -> float:
    """Corollary 9 for an SSD prediction against an SD one: (1 + T_SD) E_hit / E_SD with both K's verify times
    (SSD's verify as it runs idle, before interference and per-round transfers)."""
    t_v_sd = sd.verify_ms
    t_v_ssd = float(profile.latency.verify_ms(ssd.batch_size, ssd.num_speculative_tokens))
    return float(ssd_gain_bound(ssd.e_hit, sd.tokens_per_round, sd.draft_ms / t_v_sd, t_v_ssd / t_v_sd))


MIN_C_GAIN_PCT = 1.0  # a per-position C list replaces the single C only if predicted >= 1% faster


def per_position_c(profile: Profile, plan: Plan, grid=C_GRID, passes: int = 2) -> tuple[Plan, float]:
    """Coordinate ascent over C_k (k = 0..K-1, each from `grid`) with the plan's fan-outs fixed.

    C_k acts only on the token drafted at position k (its acceptance and the hit after a rejection there), so
    positions trade off separately; a few passes settle. Returns (plan with the best list, gain in % of
    tok/s per sequence over the plan's single C).
    """
    base = predict_ssd(profile, plan).per_seq_tok_s
    cs, best = [plan.saguaro_c] * plan.K, base
    seen: dict[tuple, float] = {}  # a later pass meets lists an earlier one scored (same plan, same value)
    for _ in range(passes):
        for k in range(plan.K):
            for c in grid:
                trial = cs[:k] + [c] + cs[k + 1:]
                key = tuple(trial)
                if key not in seen:
                    seen[key] = predict_ssd(profile, plan.replace(saguaro_c_list=key)).per_seq_tok_s
                v = seen[key]
                if v > best * (1 + 1e-9):
                    best, cs = v, trial
    return plan.replace(saguaro_c_list=tuple(cs)), 100.0 * (best / base - 1.0)


def _search(profile: Profile, b: int, temperature: float, knobs: Knobs, k_range, backups, draft_devices: int,
            budget_cap: int, best_only: bool = False, memo: dict | None = None) -> tuple[_Scored, dict[int, int]]:
    """Score every (K, C, backup, budget) the knobs leave open: (_Scored, {K: budget_fit}).
    What fits inside one verify is computed up to the largest plannable budget, so the binding line can tell a
    cap from draft time. best_only keeps the best budget of each (K, C, backup)."""
    fits = {K: budget_fit(profile, b, K, draft_devices, MAX_BUDGET) for K in k_range}
    scored = _Scored()
    times: dict = {}  # round_times per (K, budgets): the same for every C and backup
    for K, fit in fits.items():
        for C in _c_range(knobs, temperature):
            acc = profile.acceptance.at(temperature, C, knobs.downweight)
            for backup in backups:
                scored.add(*_evaluate(profile, acc, b, K, C, backup, fit, knobs, draft_devices, budget_cap,
                                      best_only, memo, times))
    return scored, fits


@dataclass(frozen=True, eq=False)
class _Group:
    """One (K, C, backup) of a search: the DP tables its budgets' fan-outs are read from (or the fixed lists)."""

    K: int
    C: float
    backup: str
    tab_p: tuple
    tab_b: tuple
    fan_out: tuple[int, ...] | None  # fixed by the knobs
    fan_out_miss: tuple[int, ...] | None  # fixed by the knobs


class _Scored:
    """Every configuration a search scored, as parallel arrays in search order (K, C, backup, budget ascending):
    tok/s per sequence, its (K, C, backup) group and its budget. Configurations are built on demand (`config`)."""

    def __init__(self) -> None:
        self.groups: list[_Group] = []
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def add(self, group: _Group, per_seq: np.ndarray, budgets: np.ndarray) -> None:
        self._parts.append((per_seq, np.full(len(budgets), len(self.groups)), budgets))
        self.groups.append(group)
        self._arrays = None

    def _cat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._arrays is None:
            self._arrays = tuple(np.concatenate([p[i] for p in self._parts]) if self._parts else np.empty(0)
                                 for i in range(3))
        return self._arrays

    @property
    def per_seq(self) -> np.ndarray:
        return self._cat()[0]

    def ranked(self) -> np.ndarray:
        """Indices best first (a stable sort on -tok/s: ties keep search order)."""
        return np.argsort(-self.per_seq, kind="stable")

    def best(self, backup: str) -> float:
        """The best tok/s per sequence with this backup (0 if none was scored)."""
        per_seq, group, _ = self._cat()
        mine = np.array([g.backup == backup for g in self.groups], dtype=bool)
        sel = per_seq[mine[group]] if len(group) else per_seq
        return float(sel.max()) if sel.size else 0.0

    def config(self, i: int) -> dict:
        """The configuration of entry i: K, C, backup and both fan-out lists."""
        _, group, budgets = self._cat()
        g, B = self.groups[int(group[i])], int(budgets[i])
        return {"K": g.K, "C": g.C, "backup": g.backup,
                "fan_out": g.fan_out or tuple(int(x) for x in backtrack(g.tab_p, B)),
                "fan_out_miss": g.fan_out_miss or tuple(int(x) for x in backtrack(g.tab_b, B))}


@dataclass(frozen=True)
class Crossover:
    """SSD tok/s per sequence with each backup, the plan (K, budget, fan-outs, C) re-optimised at every batch size.

    b_star is the first batch size at which the fast backup beats jit (inf if jit wins at every scanned size).
    """

    batch_sizes: tuple[int, ...]
    jit: tuple[float, ...]
    fast: tuple[float, ...]
    b_star: float

    def to_dict(self) -> dict:
        return {"batch_sizes": list(self.batch_sizes), "jit_tok_s": list(self.jit), "fast_tok_s": list(self.fast),
                "b_star": None if math.isinf(self.b_star) else self.b_star}


def crossover(profile: Profile, temperature: float, knobs: Knobs | None = None, draft_devices: int = 1,
              k_max: int = 10, budget_cap: int = 128, b_max: int | None = None, memo: dict | None = None) -> Crossover:
    """b*: the first batch size from which the fast backup beats jit, each with its own best plan at that size.

    Scans b = 1..16 and then a coarser grid up to b_max (default max(2 x the profile's max batch, 64)), stopping
    two sizes after the first grid point fast wins, then every size between it and the grid point before, so
    the first crossover is exact (the curve shows what lies behind it).
    """
    knobs = (knobs or Knobs()).for_profile(profile)
    b_max = b_max or max(2 * profile.max_batch_size, 64)
    k_range = _k_range(knobs, k_max)

    def best(b: int) -> tuple[float, float]:
        """(best jit, best fast) tok/s per sequence at batch b: one search scores both backups."""
        timed = min(budget_cap, timed_budget_cap(profile, b))
        scored, _ = _search(profile, b, temperature, knobs, k_range, ("jit", "fast"), draft_devices, timed, True, memo)
        return scored.best("jit"), scored.best("fast")

    grid = sorted({*range(1, min(16, b_max) + 1), *(g for g in (24, 32, 48, 64, 96, 128, 192, 256) if g <= b_max),
                   b_max})
    rates: dict[int, tuple[float, float]] = {}
    first = None
    for i, b in enumerate(grid):  # the curve up to the first crossover and two sizes beyond it
        rates[b] = best(b)
        if first is None and rates[b][1] > rates[b][0]:
            first = b
        if first is not None and i >= grid.index(first) + 2:
            break
    if first is not None:
        prev = max((b for b in grid if b < first), default=0)
        for b in range(prev + 1, first):
            rates[b] = best(b)
        first = next(b for b in sorted(rates) if rates[b][1] > rates[b][0])
    sizes = tuple(sorted(rates))
    return Crossover(sizes, tuple(rates[b][0] for b in sizes), tuple(rates[b][1] for b in sizes),
                     math.inf if first is None else float(first))


def _backups(knobs: Knobs, batch_size: int) -> tuple[str, ...]:
    if knobs.backup is None or (knobs.backup == "adaptive" and knobs.backup_threshold is None):
        return ("jit", "fast")
    if knobs.backup == "adaptive":
        return ("jit",) if batch_size < knobs.backup_threshold else ("fast",)
    return (knobs.backup,)


def _k_range(knobs: Knobs, k_max: int) -> list[int]:
    lists = [(n, v) for n, v in (("fan_out", knobs.fan_out), ("fan_out_miss", knobs.fan_out_miss))
             if isinstance(v, tuple)]
    if lists:  # a fan-out list fixes K (one entry per stopping position 0..K)
        name, fo = lists[0]
        K = len(fo) - 1
        for other, lst in lists[1:]:
            if len(lst) != K + 1:
                raise ConfigError(other, f"has {len(lst)} entries but {name} has {K + 1}: give both K+1 entries")
        if K < 1 or knobs.num_speculative_tokens not in (None, K):
            raise ConfigError(name, f"has {K + 1} entries but num_speculative_tokens is "
                              f"{knobs.num_speculative_tokens or 'searched'}: give K+1 entries (K >= 1)")
        return [K]
    if knobs.num_speculative_tokens is not None:
        return [knobs.num_speculative_tokens]
    return list(range(1, k_max + 1))


def _c_range(knobs: Knobs, temperature: float) -> tuple[float, ...]:
    if knobs.saguaro_c_list is not None and knobs.saguaro_c is None:  # a fixed per-position list: search on its mean
        return (float(np.mean(knobs.saguaro_c_list)),)
    if knobs.saguaro_c is not None:
        return (knobs.saguaro_c,)
    return (1.0,) if temperature == 0 else C_GRID  # greedy drafting ignores C


def _evaluate(profile, acc, b, K, C, backup, fit, knobs, draft_devices, budget_cap,
              best_only: bool = False, memo: dict | None = None, times: dict | None = None
              ) -> tuple[_Group, np.ndarray, np.ndarray]:
    """Score every admissible budget for one (K, C, backup): (group, tok/s per sequence, budgets), budgets in
    ascending order (best_only: the best one). The DP tables come from `memo` (see `dp_tables`), the round
    times from `times` (a dict shared by one search, filled here)."""
    pmf_p = acc.pmf(K)
    pmf_b, curve_b, e_miss = backup_outcomes(acc, K, backup)
    if knobs.fan_out is not None:
        fixed = knobs.fan_out if isinstance(knobs.fan_out, tuple) else (int(knobs.fan_out),) * (K + 1)
        check_budget(fixed)  # before the allocation tables, whose size grows with the budget squared
        budgets = np.array([sum(fixed)])
    elif knobs.fan_out_miss is not None:  # the hit-case fan-out shares the miss list's budget
        fixed = None
        budgets = np.array([sum(knobs.fan_out_miss)])
    else:
        fixed = None
        # every budget up to the cap: one that does not fit inside T_v makes the target wait T_p - T_v, which can
        # still pay when its extra hits are worth more (ssd_rates prices the wait)
        budgets = np.arange(1, budget_cap + 1)
    top = int(budgets.max())
    tab_p = dp_tables(K, pmf_p, acc.primary_hit, top, memo)
    tab_b = dp_tables(K, pmf_b, curve_b, top, memo)
    if fixed is not None:
        h_p = np.array([float(pmf_p @ acc.primary_hit.hit(np.asarray(fixed)))])
    else:
        h_p = 1.0 - tab_p[0][-1][budgets]
    if knobs.fan_out_miss is not None:
        h_b = np.array([float(pmf_b @ curve_b.hit(np.asarray(knobs.fan_out_miss)))])
    else:
        h_b = 1.0 - tab_b[0][-1][budgets]
    tkey = (K, budgets.tobytes())
    if times is None or tkey not in times:
        rt = round_times(profile, b, K, budgets, draft_devices)
        if times is not None:
            times[tkey] = rt
    rt = times[tkey] if times is not None else rt
    r = ssd_rates(profile, b, K, budgets, h_p, h_b, acc.expected_tokens(K), e_miss, backup,
                  knobs.jit_redraft, draft_devices, rt)
    per_seq = np.asarray(r["per_seq"], dtype=float) * np.ones(len(budgets))
    group = _Group(K, C, backup, tab_p, tab_b, fixed, knobs.fan_out_miss)
    keep = np.ones(len(budgets), dtype=bool)
    if C < 1.0:  # C cannot act without cached guesses at drafted positions: the C = 1 entry covers it
        # Backtracking puts the whole budget on position K exactly when choice[K, B] = B (then every earlier
        # position gets choice[k, 0] = 0); a fixed list says so itself.
        idle_p = (np.full(len(budgets), not any(fixed[:-1])) if fixed is not None
                  else tab_p[1][-1][budgets] == budgets)
        idle_b = (np.full(len(budgets), not any(knobs.fan_out_miss[:-1])) if knobs.fan_out_miss is not None
                  else tab_b[1][-1][budgets] == budgets)
        keep = ~(idle_p & idle_b)
    if best_only:
        order = np.argsort(-per_seq, kind="stable")
        first = order[keep[order]][:1]
        return group, per_seq[first], budgets[first]
    return group, per_seq[keep], budgets[keep]


TABLE_CACHE_SIZE = 1024  # DP tables kept by dp_tables' shared cache (each at most ~25 KB)
_TABLES: OrderedDict = OrderedDict()
_TABLES_LOCK = threading.Lock()


def dp_tables(K: int, pmf: np.ndarray, curve, top: int, memo: dict | None = None):
    """fanout.allocation_tables for budgets 0..(at least) top, outcome distribution pmf and hit model `curve`.

    Kept by content (K, pmf, curve), so the hit- and miss-case tables of a jit backup are one, and sweeps over
    batch sizes or C values that meet the same inputs reuse them. A table for a larger budget holds the smaller
    one's entries exactly (the DP over budget b reads only fan-outs <= b). memo: a dict to keep them in; None =
    the module's LRU cache of TABLE_CACHE_SIZE entries (shared by every caller, thread-safe).
    """
    key = (K, np.asarray(pmf, dtype=float).tobytes(), curve)
    store = _TABLES if memo is None else memo
    with _TABLES_LOCK:
        hit = store.get(key)
        if hit is not None and hit[0] >= top:
            if memo is None:
                _TABLES.move_to_end(key)
            return hit[1]
    tabs = allocation_tables(top, pmf, curve.miss_matrix(K, top))
    with _TABLES_LOCK:
        store[key] = (top, tabs)
        if memo is None:
            _TABLES.move_to_end(key)
            while len(_TABLES) > TABLE_CACHE_SIZE:
                _TABLES.popitem(last=False)
    return tabs


def _to_plan(cfg: dict, knobs: Knobs, temperature: float, b: int, draft_devices: int) -> Plan:
    return Plan(
        num_speculative_tokens=cfg["K"], fan_out=cfg["fan_out"], fan_out_miss=cfg["fan_out_miss"],
        saguaro_c=cfg["C"], downweight=knobs.downweight, backup=cfg["backup"],
        backup_threshold=math.inf, jit_redraft=knobs.jit_redraft, temperature=temperature,
        batch_size=b, draft_devices=draft_devices,
    )


def critical_batch(profile: Profile, plan: Plan, b_max: int | None = None) -> tuple[float, float]:
    """b* of a fixed plan: the first batch size at which the fast backup beats jit with this plan's K, budget,
    hit-case fan-out and C (each backup with its own optimal miss-case fan-out), inf if jit wins up to b_max;
    and the closed form of Theorem 17 (closed_form_b_star). `crossover` re-optimises the plan per batch size.
    """
    b_max = b_max or max(2 * profile.max_batch_size, 64)
    acc, h_p, e_hit = _primary_stats(profile, plan)
    K, B = plan.K, plan.budget
    per_backup = {}
    for backup in ("jit", "fast"):
        pmf_b, curve_b, e_miss = backup_outcomes(acc, K, backup)
        tab = allocation_tables(B, pmf_b, curve_b.miss_matrix(K, B))
        per_backup[backup] = (1.0 - tab[0][-1][B], e_miss)
    b_star = math.inf
    for b in range(1, b_max + 1):
        rt = round_times(profile, b, K, B, plan.draft_devices)  # shared by both backups
        tok = {bk: float(ssd_rates(profile, b, K, B, h_p, h_b, e_hit, e_miss, bk, plan.jit_redraft,
                                   plan.draft_devices, rt)["per_seq"]) for bk, (h_b, e_miss) in per_backup.items()}
        if tok["fast"] > tok["jit"]:
            b_star = float(b)
            break
    return b_star, closed_form_b_star(profile, plan, (acc, h_p, e_hit))


def _primary_stats(profile: Profile, plan: Plan):
    """(acceptance point, hit probability after a cache round, tokens per cache round) of the plan."""
    acc = plan_point(profile, plan)
    h_p = float(acc.pmf(plan.K) @ acc.primary_hit.hit(np.asarray(plan.fan_out)))
    return acc, h_p, acc.expected_tokens(plan.K)


def closed_form_b_star(profile: Profile, plan: Plan, stats=None) -> float:
    """Theorem 17 (analytic.critical_batch_size) for the plan with latencies frozen at b = 1
    (stats: _primary_stats of the plan, when the caller has them)."""
    _, h_p, e_hit = stats or _primary_stats(profile, plan)
    K, B = plan.K, plan.budget
    lat = profile.latency
    t_v = float(lat.verify_ms(1, K))
    return float(critical_batch_size(
        h_p, e_hit, e_hit, 1.0, float(lat.primary_ms(1, K, B, plan.draft_devices)) / t_v,
        float(lat.jit_backup_ms(1, K)) / t_v, lat.fast_backup_ms / t_v))


TIMED_FACTOR = 2  # caches up to this many times the largest timed draft forward are planned (latency extrapolated)


def timed_budget_cap(profile: Profile, batch_size: int) -> int:
    """The largest per-sequence budget whose branch decode (b x budget rows) stays within TIMED_FACTOR x the largest
    draft forward the calibration timed; unbounded for profiles without a timed range (presets)."""
    u = profile.uncertainty
    if u is None or not u.timed_rows_tokens:
        return 10**9
    return max(1, TIMED_FACTOR * u.timed_rows_tokens[1] // batch_size)


def _binding(plan: Plan, ssd: Prediction, fit: int, knobs: Knobs, user_cap: int, timed_cap: int) -> str:
    """A one-line explanation of the constraint that binds the chosen budget."""
    if knobs.fan_out is not None:
        if ssd.draft_ms > ssd.verify_ms:
            return (f"draft time: the fan-out fixed by the user (budget {plan.budget}) takes T_p = {ssd.draft_ms:.1f} ms "
                    f"> T_v = {ssd.verify_ms:.1f} ms, so the target waits {ssd.draft_ms - ssd.verify_ms:.1f} ms for the "
                    f"draft every round; " + (f"a budget of at most {fit} fits inside one verify" if fit else
                                              "even a budget of 1 does not fit at this K"))
        return f"fan-out fixed by the user (budget {plan.budget}; T_p = {ssd.draft_ms:.1f} ms <= T_v = {ssd.verify_ms:.1f} ms)"
    cap = min(user_cap, timed_cap)
    if plan.budget >= cap and cap < fit:
        why = (f"--budget-cap {user_cap}" if user_cap <= timed_cap else
               f"the timed range: the calibration timed draft forwards of up to {timed_cap // TIMED_FACTOR * plan.batch_size} "
               "rows, larger caches would be extrapolated (an SSD trace of a larger cache measures them)")
        return f"budget cap: {plan.budget} guesses ({why}); up to {fit} would fit inside one verify"
    if fit == 0 and plan.budget == 1:
        return (f"draft time: even a budget of 1 takes T_p = {ssd.draft_ms:.1f} ms > T_v = {ssd.verify_ms:.1f} ms, "
                f"so the target waits for the draft every round")
    if plan.budget > fit:
        fits = f"a budget of at most {fit} fits inside one verify" if fit else "even a budget of 1 does not fit at this K"
        return (f"draft time: budget {plan.budget} takes T_p = {ssd.draft_ms:.1f} ms > T_v = {ssd.verify_ms:.1f} ms, so "
                f"the target waits {ssd.draft_ms - ssd.verify_ms:.1f} ms for the draft every round, which the extra "
                f"hits pay for ({fits})")
    if plan.budget >= min(fit, cap):
        which = "budget cap" if cap < fit else "draft time"
        return (f"{which}: budget {plan.budget} is the most the draft finishes inside one verify "
                f"(T_p = {ssd.draft_ms:.1f} ms <= T_v = {ssd.verify_ms:.1f} ms at b = {plan.batch_size})")
    return f"hit-rate saturation: budgets above {plan.budget} (up to {fit} fit) do not raise tok/s"
