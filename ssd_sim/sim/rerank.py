"""Re-rank the planner's best analytic candidates with the simulator (ssd-plan --simulate).

The closed forms assume i.i.d. acceptance, independent hits and latencies frozen per round; the
simulator drops those assumptions, so the planner's top candidates (PlanResult.candidates) are
simulated with one seed (common random numbers) and ordered by the simulated objective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.planner import PlanResult
from ssd_sim.plan.predict import Prediction
from ssd_sim.sim.des import simulate
from ssd_sim.sim.metrics import SimMetrics
from ssd_sim.sim.workload import Workload, fixed_batch


@dataclass
class Reranked:
    """Candidates ordered by simulated objective (best first), with their analytic predictions."""

    objective: str  # latency | throughput-per-device
    ranked: list[tuple[Plan, Prediction, SimMetrics]]  # (plan, analytic prediction, simulated metrics)
    baselines: dict[str, SimMetrics] = field(default_factory=dict)  # simulated "ar" and "sd" (best SD K)
    analytic_best: Plan | None = None  # the planner's pick before re-ranking

    @property
    def plan(self) -> Plan:
        """The plan the simulation picks."""
        return self.ranked[0][0]

    @property
    def metrics(self) -> SimMetrics:
        """Simulated metrics of the picked plan."""
        return self.ranked[0][2]

    @property
    def changed(self) -> bool:
        """The simulation picks a different plan than the analytic ranking did."""
        return self.analytic_best is not None and self.plan != self.analytic_best


def sim_objective(m: SimMetrics, objective: str) -> float:
    """The simulated counterpart of planner.objective_value: tok/s per sequence, or total tok/s per device."""
    return m.per_seq_tok_s if objective == "latency" else m.tok_s_per_device


def rerank(profile: Profile, plan_result: PlanResult, tokens: int = 20_000, seed: int = 0,
           top: int | None = None, workload: Workload | None = None, baselines: bool = True,
           profile_at: Callable[[int], Profile] | None = None) -> Reranked:
    """Simulate the top candidates of `plan_result` and order them by simulated objective.

    tokens: output tokens per sequence (default 20,000: a few thousand rounds, ~1% statistical error per
    candidate at b = 1, less at larger b). workload: default a fixed batch of the plan's batch size
    without prefill (steady-state decoding, what the analytic model predicts). Every candidate uses the
    same seed. baselines: also simulate AR and SD (the planner's best SD K). profile_at: the profile at a KV context,
    to charge each round at its batch's context (des.simulate).
    """
    cands = plan_result.candidates[:top] if top else plan_result.candidates
    b = plan_result.plan.batch_size
    wl = workload or fixed_batch(b, tokens, prompt_tokens=0)
    scored = []
    for plan, pred in cands:
        m = simulate(profile, plan, mode="ssd", seed=seed, workload=wl, profile_at=profile_at).metrics
        scored.append((plan, pred, m))
    scored.sort(key=lambda x: -sim_objective(x[2], plan_result.objective))
    out = Reranked(plan_result.objective, scored, analytic_best=cands[0][0])
    if baselines:
        K = plan_result.sd.num_speculative_tokens
        sd_plan = plan_result.plan.replace(num_speculative_tokens=K, fan_out=(1,) * (K + 1),
                                           fan_out_miss=(1,) * (K + 1))
        out.baselines = {mode: simulate(profile, p, mode=mode, seed=seed, workload=wl, profile_at=profile_at).metrics
                         for mode, p in (("ar", plan_result.plan), ("sd", sd_plan))}
    return out
