"""What-if transformations and sweeps for the dashboard (pure numpy; never imports streamlit).

Everything the dashboard shows that is a model quantity is computed here (or in the modules this
calls: predict, planner, fanout), so the pages only lay numbers out. Units: tok/s, ms, tokens,
sequences; acceptance and hit rates in [0, 1]; latency ratio = draft(1 row, 1 token) / target(1, 1).

- `with_overrides` pins acceptance / hit curve / draft latency to what-if values;
- `build_plan` turns slider knobs (K, budget, C, backup, uniform toggle) into a Plan with the
  exactly optimal integer fan-out; `evaluate` scores it like `ssd-plan` does (PlanResult);
- sweeps: `speedup_heatmap`, `hit_rate_vs_budget`, `fanout_comparison`, `backup_crossover`, `pareto`, and
  `batch_sweep` (the planner per batch size, as `ssd-plan --batch-sizes` prints it).
A measured trace beside its prediction: ssd_sim.plan.compare.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve
from ssd_sim.model.profile import Profile
from ssd_sim.plan.knobs import Knobs
from ssd_sim.plan.plan import Plan, engine_defaults
from ssd_sim.plan.planner import (
    BStar,
    PlanRequest,
    PlanResult,
    SearchLimits,
    bound_notes,
    budget_fit,
    critical_batch,
    make_plan,
)
from ssd_sim.plan.predict import backup_outcomes, plan_point, predict_ar, predict_sd, predict_ssd
from ssd_sim.theory.fanout import allocation_tables, backtrack, uniform_fanout

# --- profile overrides -----------------------------------------------------------------------------

def latency_ratio(profile: Profile) -> float:
    """draft(1, 1) / target(1, 1): one draft decode step relative to one target decode step."""
    lat = profile.latency
    return float(lat.draft(1, 1)) / float(lat.target(1, 1))


def profile_values(profile: Profile, temperature: float = 0.0, K: int = 8) -> dict[str, float]:
    """The profile's own values of the what-if quantities at this temperature (plain sampling, C = 1).

    acceptance is the mean of the first K per-position acceptance values.
    """
    pt = profile.acceptance.at(temperature, 1.0)
    return {"acceptance": pt.mean_acceptance(K), "r": pt.primary_hit.r,
            "miss_at_one": pt.primary_hit.miss_at_one, "draft_latency_ratio": latency_ratio(profile)}


def with_overrides(
    profile: Profile,
    temperature: float = 0.0,
    acceptance: float | None = None,
    r: float | None = None,
    miss_at_one: float | None = None,
    draft_latency_ratio: float | None = None,
) -> Profile:
    """The profile with what-if values pinned; None keeps the profile's own value.

    - acceptance / r / miss_at_one: the acceptance model becomes one point at `temperature` and C = 1
      (plain sampling), taken from the profile there with these fields replaced; acceptance becomes a
      single i.i.d. rate, r applies to both hit curves, and the backup curve keeps its ratio of
      miss_at_one to the primary's. Other C values follow from it by the profile's Saguaro response.
    - draft_latency_ratio: every ms term of the draft's forward model is scaled so that
      draft(1, 1) / target(1, 1) equals the ratio (batch and token scaling shapes are kept).
    """
    out = profile
    if any(v is not None for v in (acceptance, r, miss_at_one)):
        out = replace(out, acceptance=_pinned_acceptance(profile, temperature, acceptance, r, miss_at_one))
    if draft_latency_ratio is not None:
        if not draft_latency_ratio > 0:
            raise ValueError(f"draft_latency_ratio must be > 0, got {draft_latency_ratio}")
        factor = draft_latency_ratio / latency_ratio(profile)
        out = replace(out, latency=replace(out.latency, draft=out.latency.draft.scaled(factor)))
    return out


def _pinned_acceptance(profile: Profile, temperature: float, acceptance, r, miss_at_one) -> AcceptanceModel:
    base = profile.acceptance.at(temperature, 1.0)
    prim, back = base.primary_hit, base.backup_hit
    ratio = back.miss_at_one / prim.miss_at_one if prim.miss_at_one > 0 else 1.0
    c = prim.miss_at_one if miss_at_one is None else float(miss_at_one)
    rr = prim.r if r is None else float(r)
    point = AcceptancePoint(
        temperature=float(temperature),
        acceptance=base.acceptance if acceptance is None else (float(acceptance),),
        primary_hit=HitCurve(c, rr),
        backup_hit=HitCurve(min(1.0, c * ratio), back.r if r is None else rr),
        saguaro_c=1.0,
        source="assumed",
    )
    return AcceptanceModel((point,), profile.acceptance.downweight)


# --- the current plan from slider knobs -------------------------------------------------------------

def fan_outs(profile: Profile, K: int, budget: int, temperature: float, saguaro_c: float, backup: str,
             uniform: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(fan_out, fan_out_miss) for K and a cache budget (guesses per sequence).

    Optimal: the exactly optimal integer allocation (fanout DP) for the hit case and, for the miss
    case, for the outcome distribution after this backup (jit or fast). Uniform: the reference
    engine's default, F = max(1, round(budget / (K + 1))) at every position in both cases.
    """
    if uniform:
        f = tuple(int(x) for x in uniform_fanout(max(1, round(budget / (K + 1))), K))
        return f, f
    acc = profile.acceptance.at(temperature, saguaro_c)
    hit = backtrack(allocation_tables(budget, acc.pmf(K), acc.primary_hit.miss_matrix(K, budget)), budget)
    pmf_b, curve_b, _ = backup_outcomes(acc, K, backup)
    miss = backtrack(allocation_tables(budget, pmf_b, curve_b.miss_matrix(K, budget)), budget)
    return tuple(int(x) for x in hit), tuple(int(x) for x in miss)


def build_plan(
    profile: Profile,
    K: int,
    budget: int,
    temperature: float = 0.0,
    saguaro_c: float = 1.0,
    backup: str = "jit",
    batch_size: int = 1,
    draft_devices: int = 1,
    uniform: bool = False,
) -> Plan:
    """An SSD plan from what-if knobs. backup = jit | fast | adaptive (switch at b* of critical_batch)."""
    c = 1.0 if temperature == 0 else float(saguaro_c)  # greedy drafting ignores C (as the planner does)
    plan = Plan(num_speculative_tokens=K, fan_out=(1,) * (K + 1), saguaro_c=c, backup="jit",
                temperature=float(temperature), batch_size=batch_size, draft_devices=draft_devices,
                **engine_defaults(profile.engine))
    threshold = math.inf
    used = backup
    if backup == "adaptive":
        hit, _ = fan_outs(profile, K, budget, temperature, c, "jit", uniform)
        threshold, _ = critical_batch(profile, plan.replace(fan_out=hit, fan_out_miss=hit))
        used = "jit" if batch_size < threshold else "fast"
    hit, miss = fan_outs(profile, K, budget, temperature, c, used, uniform)
    return plan.replace(fan_out=hit, fan_out_miss=miss, backup=backup, backup_threshold=threshold)


def evaluate(profile: Profile, plan: Plan, objective: str = "latency", k_max: int = 10) -> PlanResult:
    """Score one plan like `ssd-plan --plan`: its SSD prediction, AR, best SD (K <= k_max), b*, binding."""
    return make_plan(profile, PlanRequest(batch_size=plan.batch_size, temperature=plan.temperature,
                                          draft_devices=plan.draft_devices, knobs=Knobs.of(plan), objective=objective,
                                          limits=SearchLimits(k_max=k_max), b_star=BStar.CHOSEN))


# --- sweeps -------------------------------------------------------------------------------------------

def fanout_comparison(profile: Profile, plan: Plan) -> dict:
    """The plan's fan-out beside the uniform one of (about) the same budget, with their hit rates.

    Returns k (positions 0..K), P(k), fan_out, uniform, and p_hit of each (one round after a hit).
    """
    acc = plan_point(profile, plan)
    pmf = acc.pmf(plan.K)
    uni = uniform_fanout(max(1, round(plan.budget / (plan.K + 1))), plan.K)
    return {"k": list(range(plan.K + 1)), "pmf": pmf.tolist(), "fan_out": list(plan.fan_out),
            "uniform": uni.tolist(), "p_hit": float(pmf @ acc.primary_hit.hit(np.asarray(plan.fan_out))),
            "p_hit_uniform": float(pmf @ acc.primary_hit.hit(uni)), "uniform_budget": int(uni.sum())}


def hit_rate_vs_budget(profile: Profile, K: int, temperature: float = 0.0, saguaro_c: float = 1.0,
                       max_budget: int = 64, batch_size: int = 1, draft_devices: int = 1) -> dict:
    """Hit probability after a cache-served round vs cache budget, optimal and uniform fan-out.

    Returns budgets 1..max_budget with the optimal hit rate, uniform budgets (multiples of K + 1)
    with the uniform hit rate, and `fits`: the largest budget the draft finishes inside one verify.
    """
    acc = profile.acceptance.at(temperature, saguaro_c)
    pmf = acc.pmf(K)
    best, _ = allocation_tables(max_budget, pmf, acc.primary_hit.miss_matrix(K, max_budget))
    budgets = np.arange(1, max_budget + 1)
    per_pos = np.arange(1, max_budget // (K + 1) + 1)
    uniform = [float(pmf @ acc.primary_hit.hit(uniform_fanout(f, K))) for f in per_pos]
    return {"budgets": budgets.tolist(), "optimal": (1.0 - best[-1][budgets]).tolist(),
            "uniform_budgets": (per_pos * (K + 1)).tolist(), "uniform": uniform,
            "fits": budget_fit(profile, batch_size, K, draft_devices, max_budget)}


def speedup_heatmap(profile: Profile, plan: Plan, acceptances, ratios, baseline: str = "ar") -> np.ndarray:
    """SSD speedup of the plan (K, fan-out, C, backup fixed) per (acceptance, draft/target latency ratio).

    Cell [i, j] = predict_ssd / baseline tok/s per sequence on with_overrides(acceptance=acceptances[i],
    draft_latency_ratio=ratios[j]); baseline "ar" (autoregressive) or "sd" (SD at the plan's K).
    """
    out = np.empty((len(acceptances), len(ratios)))
    for i, a in enumerate(acceptances):
        pinned = with_overrides(profile, plan.temperature, acceptance=float(a))
        for j, rho in enumerate(ratios):
            prof = with_overrides(pinned, plan.temperature, draft_latency_ratio=float(rho))
            ssd = predict_ssd(prof, plan).per_seq_tok_s
            if baseline == "ar":
                base = predict_ar(prof, plan.batch_size).per_seq_tok_s
            else:
                base = predict_sd(prof, plan.batch_size, plan.K, plan.temperature).per_seq_tok_s
            out[i, j] = ssd / base
    return out


def backup_crossover(profile: Profile, plan: Plan, batch_sizes) -> dict:
    """SSD tok/s per sequence with the jit and the fast backup across batch sizes, and b*.

    Each backup uses its own optimal miss-case fan-out (as planner.critical_batch does), so the curves
    cross at b* = critical_batch(profile, plan)[0]; b_star_closed_form is Theorem 17 at b = 1 latencies.
    """
    curves: dict[str, list[float]] = {"jit": [], "fast": []}
    for backup in curves:
        _, miss = fan_outs(profile, plan.K, plan.budget, plan.temperature, plan.saguaro_c, backup)
        p = plan.replace(fan_out=plan.fan_out, fan_out_miss=miss, backup=backup, backup_threshold=math.inf)
        curves[backup] = [predict_ssd(profile, p.replace(batch_size=int(b))).per_seq_tok_s for b in batch_sizes]
    b_star, closed = critical_batch(profile, plan)
    return {"batch_sizes": [int(b) for b in batch_sizes], **curves, "b_star": b_star,
            "b_star_closed_form": closed}


PARETO_FIELDS = ("per_seq_tok_s", "tok_s_per_device", "total_tok_s", "K")


def _mode_point(pred) -> dict[str, float]:
    """One mode's PARETO_FIELDS from its Prediction."""
    return {"per_seq_tok_s": pred.per_seq_tok_s, "tok_s_per_device": pred.tok_s_per_device,
            "total_tok_s": pred.total_tok_s, "K": pred.num_speculative_tokens}


def pareto_point(profile: Profile, batch_size: int, temperature: float = 0.0, draft_devices: int = 1,
                 k_max: int = 10) -> dict[str, dict[str, float]]:
    """Best AR / SD / SSD at one batch size (make_plan, latency objective): {mode: {per_seq_tok_s, tok_s_per_device,
    total_tok_s, K}}. Only the best plan's prediction is read, so neither b* nor the runner-up plans are computed."""
    request = PlanRequest(batch_size=int(batch_size), temperature=temperature, draft_devices=draft_devices,
                          limits=SearchLimits(k_max=k_max, top_n=1), b_star=BStar.SKIP)
    res = make_plan(profile, request)
    return {pred.mode: _mode_point(pred) for pred in (res.ar, res.sd, res.ssd)}


def batch_sweep(profile: Profile, request: PlanRequest, batch_sizes) -> list[dict]:
    """`ssd-plan --batch-sizes`: the planner (make_plan) at every batch size with the rest of the request kept
    (temperature, draft devices, fixed knobs, objective, search limits, risk), b* of each chosen plan found with
    the plan held fixed (BStar.CHOSEN), one memo of fan-out tables for all. One row per batch size (JSON-ready):
    ar / sd / ssd as pareto_point's fields (SSD adds its fan-out lists, C, the backup it runs at this b and b*),
    and the decision under uncertainty for the request's objective, as ssd-plan takes it (plan.intervals)."""
    from ssd_sim.plan.intervals import uncertainty_report

    memo: dict = {}
    rows = []
    for b in batch_sizes:
        res = make_plan(profile, request.replace(batch_size=int(b), b_star=BStar.CHOSEN), memo=memo)
        plan = res.plan
        u = uncertainty_report(profile, plan, res.sd.num_speculative_tokens, res.objective)
        ssd = _mode_point(res.ssd) | {
            "fan_out": list(plan.fan_out), "fan_out_miss": list(plan.fan_out_miss), "saguaro_c": plan.saguaro_c,
            "saguaro_c_list": list(plan.saguaro_c_list), "c_label": plan.c_label,
            "backup": plan.backup_for(plan.batch_size),
            "b_star": None if not math.isfinite(res.b_star) else res.b_star}
        rows.append({"batch_size": int(b), "ar": _mode_point(res.ar), "sd": _mode_point(res.sd), "ssd": ssd,
                     "recommended_mode": u["recommended_mode"], "p_ssd_beats_sd": u["p_objective"],
                     "decided_on": u["decided_on"], "search_bounds": bound_notes(res)})
    return rows


def pareto_rows(points) -> dict[str, dict[str, list[float]]]:
    """pareto's layout from (batch size, pareto_point result) pairs, in the order given."""
    out = {m: {"batch_sizes": [], **{f: [] for f in PARETO_FIELDS}} for m in ("ar", "sd", "ssd")}
    for b, point in points:
        for mode, row in out.items():
            row["batch_sizes"].append(int(b))
            for f in PARETO_FIELDS:
                row[f].append(point[mode][f])
    return out


def pareto(profile: Profile, batch_sizes, temperature: float = 0.0, draft_devices: int = 1,
           k_max: int = 10) -> dict[str, dict[str, list[float]]]:
    """Best AR / SD / SSD per batch size (make_plan, latency objective): tok/s per sequence and per device.

    Returns {mode: {"batch_sizes", "per_seq_tok_s", "tok_s_per_device", "total_tok_s", "K"}}.
    """
    return pareto_rows((int(b), pareto_point(profile, int(b), temperature, draft_devices, k_max)) for b in batch_sizes)
