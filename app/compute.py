"""Cached calls into ssd_sim for the pages. The cache key is the JSON of the profile and the plan
(`key` argument); the objects themselves are passed in underscore arguments, which Streamlit does
not hash. Nothing here computes a model quantity itself.
"""

from __future__ import annotations

import json
import weakref

import numpy as np
import streamlit as st

from ssd_sim.model.profile import Profile
from ssd_sim.plan import whatif
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.planner import PlanResult

HEATMAP_ACCEPTANCES = tuple(float(a) for a in np.round(np.linspace(0.5, 0.95, 10), 2))
HEATMAP_RATIOS = tuple(float(r) for r in np.round(np.geomspace(0.02, 0.64, 6), 3))
CROSSOVER_BATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
PARETO_BATCHES = (1, 2, 4, 8, 16, 32, 64)


_PROFILE_JSON: dict[int, tuple[weakref.ref, str]] = {}  # id -> (the profile, its JSON): profiles are immutable


def profile_json(profile: Profile) -> str:
    """The profile's JSON (sorted keys), computed once per profile object (a calibrated profile with logged
    hit tables is ~100 KB: 20 ms to serialise)."""
    hit = _PROFILE_JSON.get(id(profile))
    if hit is not None and hit[0]() is profile:
        return hit[1]
    text = json.dumps(profile.to_dict(), sort_keys=True, default=str)
    key = id(profile)
    _PROFILE_JSON[key] = (weakref.ref(profile, lambda _, k=key: _PROFILE_JSON.pop(k, None)), text)
    return text


def key_of(profile: Profile, plan: Plan | None = None, **extra) -> str:
    """A cache key: the profile's and the plan's JSON plus any extra arguments."""
    return json.dumps([plan.to_dict() if plan else None, extra], sort_keys=True, default=str) + profile_json(profile)


@st.cache_data(max_entries=128, show_spinner=False)
def evaluate(key: str, _profile: Profile, _plan: Plan, objective: str) -> PlanResult:
    """whatif.evaluate: the plan scored like `ssd-plan --plan` (PlanResult)."""
    return whatif.evaluate(_profile, _plan, objective)


@st.cache_data(max_entries=64, show_spinner=False)
def heatmap(key: str, _profile: Profile, _plan: Plan, baseline: str) -> dict:
    """The speedup heatmap with the profile's own point in it, so that the circled cell is the page's headline.

    Rows: whatif.speedup_heatmap over HEATMAP_ACCEPTANCES (one i.i.d. acceptance rate each, as the acceptance
    override pins it), plus one row for the profile's own (per-position) acceptance, placed by its mean; columns:
    HEATMAP_RATIOS plus the profile's own draft/target latency ratio. The profile row varies the latency ratio
    only (whatif.with_overrides(draft_latency_ratio=...), which at the profile's own ratio is the profile itself),
    so the cell at (profile row, own ratio) is predict_ssd / baseline of the unmodified profile: what the What-if
    metrics show. Returns rows / cols (axis labels), z (rows x cols), marker (row, col) of that cell, acceptance and
    ratio (the profile's values).
    """
    from ssd_sim.plan.predict import predict_ar, predict_sd, predict_ssd

    own = whatif.profile_values(_profile, _plan.temperature, _plan.K)
    alpha, rho = float(own["acceptance"]), float(own["draft_latency_ratio"])
    ratios = sorted({*(r for r in HEATMAP_RATIOS if f"{r:.3g}" != f"{rho:.3g}"), rho})
    grid = whatif.speedup_heatmap(_profile, _plan, HEATMAP_ACCEPTANCES, ratios, baseline).tolist()

    def speedup(prof: Profile) -> float:
        base = (predict_ar(prof, _plan.batch_size) if baseline == "ar"
                else predict_sd(prof, _plan.batch_size, _plan.K, _plan.temperature))
        return predict_ssd(prof, _plan).per_seq_tok_s / base.per_seq_tok_s

    mine = [speedup(_profile if r == rho else whatif.with_overrides(_profile, _plan.temperature, draft_latency_ratio=r))
            for r in ratios]
    at = sum(1 for a in HEATMAP_ACCEPTANCES if a <= alpha)  # rows run bottom (low acceptance) to top
    labels = [f"{a:.2f}" for a in HEATMAP_ACCEPTANCES]
    return {"rows": [*labels[:at], f"profile ({alpha:.3f})", *labels[at:]], "cols": [f"{r:.3g}" for r in ratios],
            "z": [*grid[:at], mine, *grid[at:]], "marker": (at, ratios.index(rho)), "acceptance": alpha, "ratio": rho}


@st.cache_data(max_entries=64, show_spinner=False)
def crossover(key: str, _profile: Profile, _plan: Plan) -> dict:
    """whatif.backup_crossover over CROSSOVER_BATCHES."""
    return whatif.backup_crossover(_profile, _plan, CROSSOVER_BATCHES)


@st.cache_data(max_entries=64, show_spinner=False)
def hit_vs_budget(key: str, _profile: Profile, _plan: Plan, max_budget: int) -> dict:
    """whatif.hit_rate_vs_budget for the plan's K, temperature, C, batch and draft devices."""
    p = _plan
    return whatif.hit_rate_vs_budget(_profile, p.K, p.temperature, p.saguaro_c, max_budget, p.batch_size,
                                     p.draft_devices)


@st.cache_data(max_entries=256, show_spinner=False)
def pareto_point(key: str, _profile: Profile, batch_size: int, temperature: float, draft_devices: int) -> dict:
    """whatif.pareto_point: best AR / SD / SSD at one batch size (cached per batch size)."""
    return whatif.pareto_point(_profile, batch_size, temperature, draft_devices)


def pareto(key: str, profile: Profile, batch_sizes: tuple[int, ...], temperature: float,
           draft_devices: int) -> dict:
    """whatif.pareto, one cached make_plan per batch size: a batch size added to the chart costs one plan."""
    return whatif.pareto_rows((b, pareto_point(key, profile, b, temperature, draft_devices)) for b in batch_sizes)


@st.cache_data(max_entries=16, show_spinner=False)
def optimised(key: str, _profile: Profile, batch_size: int, temperature: float, draft_devices: int,
              objective: str) -> PlanResult:
    """make_plan for the workload, exactly as `ssd-plan -b B -t T --draft-devices D --objective O` runs it (b* from
    the re-optimised crossover, so the report has its b_star_curve; the binding is the search's)."""
    from ssd_sim.plan.planner import PlanRequest, make_plan

    return make_plan(_profile, PlanRequest(batch_size=batch_size, temperature=temperature,
                                           draft_devices=draft_devices, objective=objective))


@st.cache_data(max_entries=64, show_spinner=False)
def uncertainty(key: str, _profile: Profile, _plan: Plan, sd_k: int, horizon: str = "later") -> dict:
    """plan.intervals.uncertainty_report: 90% intervals of every mode, P(SSD beats SD), the decision, for a run at
    `horizon` (model.drift)."""
    from ssd_sim.plan.intervals import at_horizon, uncertainty_report

    return uncertainty_report(at_horizon(_profile, horizon), _plan, sd_k)


@st.cache_data(max_entries=16, show_spinner="simulating the load across replicas...")
def capacity(key: str, _profile: Profile, rate: float, requests: int, tokens: int, ttft_ms: float, tpot_ms: float,
             pct: float, price: float | None, temperature: float) -> dict:
    """ssd_sim.sim.capacity.search on a Poisson load: SearchResult.to_dict (every simulated outcome, the cheapest
    per mode and overall) and the offered tok/s."""
    from ssd_sim.sim.capacity import Capacity, Load, Targets, search
    from ssd_sim.sim.workload import poisson

    load = Load.of(poisson(rate=rate, num_requests=requests, max_batch=1, output_tokens=tokens), seed=0)
    cap = Capacity(_profile, load, Targets(ttft_ms, tpot_ms, pct, pct), temperature, price)
    return {**search(cap).to_dict(), "offered_tok_s": load.offered_tok_s}

