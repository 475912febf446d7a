"""The simulator with a KV context that grows over the decode (simulate(..., profile_at=...)).

Each round costs what the profile at its batch's mean context says: prompt plus the tokens committed before it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ssd_sim.cli.growth import growth, profile_at
from ssd_sim.model.presets import get_preset
from ssd_sim.plan.plan import Plan
from ssd_sim.sim import round_latency
from ssd_sim.sim.des import simulate
from ssd_sim.sim.outcomes import ForcedOutcomes
from ssd_sim.sim.workload import Workload, arrivals, fixed_batch, poisson
from tests.sim.test_fast import allowed, summary

SOURCE = {"preset": "llama70b-1b-h200"}
PROFILE = profile_at(SOURCE, 2_304)  # the mean decode context of 256 + 4096 tokens


def at(c: int):
    return profile_at(SOURCE, c)


PLAN = Plan(num_speculative_tokens=3, fan_out=(2, 1, 1, 1), fan_out_miss=(4, 0, 0, 1), batch_size=4,
            backup="adaptive", backup_threshold=3, temperature=1.0)
WORKLOADS = {
    "fixed b=4, long prompts": Workload("fixed", 4, 4, 0.0, 300, "fixed", 3_000),
    "poisson refills, mixed prompts": Workload("poisson", 40, 4, 40.0, 64, "geometric", 0,
                                               prompt_lengths=tuple(range(0, 4_000, 100))),
    "arrivals with gaps and one-token outputs": arrivals([0, 0, 5, 400, 401, 2_000], 3,
                                                         output_lengths=[1, 40, 1, 7, 90, 2]),
}
CASES = [(m, w) for m in ("ar", "sd", "ssd", "ssd-fast", "ssd-adaptive") for w in WORKLOADS]


def assert_metrics_close(got, want, case) -> None:
    """Equal metrics up to the float rounding of sums (the fast loop sums per epoch)."""
    g = got.to_dict()
    for key, v in want.to_dict().items():
        if isinstance(v, (float, dict)):
            assert g[key] == pytest.approx(v, rel=1e-9, nan_ok=True), (case, key)
        else:
            assert g[key] == v, (case, key)


@pytest.mark.parametrize("mode,workload", CASES, ids=[f"{m}-{w}" for m, w in CASES])
def test_the_direct_loop_equals_the_simpy_processes_with_a_growing_context(mode, workload):
    runs = [simulate(PROFILE, PLAN, mode=mode, seed=5, workload=WORKLOADS[workload], loop=loop, profile_at=at)
            for loop in ("simpy", "direct")]
    assert runs[0].metrics.to_dict() == runs[1].metrics.to_dict()
    np.testing.assert_array_equal(runs[0].records.finish_ms, runs[1].records.finish_ms)


def test_a_context_that_changes_nothing_leaves_every_loop_as_it_was():
    profile = get_preset("llama70b-1b-h100")
    wl = poisson(rate=40.0, num_requests=60, max_batch=4, output_tokens=64)
    for mode in ("ar", "sd", "ssd", "ssd-fast"):
        for loop in ("simpy", "direct", "fast"):
            plain = simulate(profile, PLAN, mode=mode, seed=2, workload=wl, loop=loop).metrics
            flat = simulate(profile, PLAN, mode=mode, seed=2, workload=wl, loop=loop, profile_at=lambda c: profile)
            assert_metrics_close(flat.metrics, plain, (mode, loop))


def test_each_round_costs_its_batch_mean_context(monkeypatch):
    # Two requests, prompts 10 and 30 tokens; each round commits accepted + 1 tokens per row (K = 2: 3, 1, 2, ...).
    seen = []
    real = round_latency.ContextLatency.at

    def spy(self, b, context):
        seen.append((b, context))
        return real(self, b, context)

    monkeypatch.setattr(round_latency.ContextLatency, "at", spy)
    plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 1), fan_out_miss=(1, 1, 1), batch_size=2, temperature=0.0)
    wl = Workload("fixed", 2, 2, 0.0, 9, "fixed", 0, output_lengths=(7, 9), prompt_lengths=(10, 30))
    simulate(PROFILE, plan, mode="sd", workload=wl, outcomes=ForcedOutcomes([[2, 0, 1]]), loop="direct",
             profile_at=at)
    # each row holds its prompt and the prefill's token; both commit 3, 1, 2 and the first needs 6 after its prefill
    assert seen == [(2, (11 + 31) / 2), (2, (14 + 34) / 2), (2, (15 + 35) / 2), (1, 37.0)]


@pytest.mark.parametrize("mode", ["ar", "sd", "ssd", "ssd-fast"])
def test_the_fast_loop_matches_the_simpy_processes_with_a_growing_context(mode):
    wl = poisson(rate=30.0, num_requests=60, max_batch=4, output_tokens=200, output_dist="uniform",
                 prompt_tokens=2_000)
    runs = {loop: [summary(simulate(PROFILE, PLAN, mode=mode, seed=s, workload=wl, loop=loop, profile_at=at))
                   for s in range(12)] for loop in ("simpy", "fast")}
    for key in runs["simpy"][0]:
        a, f = (np.array([r[key] for r in runs[loop]], dtype=float) for loop in ("simpy", "fast"))
        if not (np.isnan(a).all() and np.isnan(f).all()):
            assert abs(a.mean() - f.mean()) <= allowed(a, f), key


@pytest.mark.parametrize("mode", ["ar", "sd", "ssd"])
def test_a_fixed_batch_decodes_as_fast_as_the_analytic_average_over_the_growing_context(mode):
    # cli.growth integrates the analytic round over c uniform on [P, P + N]; a fixed batch of equal outputs grows
    # its mean context exactly so. AR and SD are linear in c (the mean context is exact); SSD's max(T_v, T_p) bends.
    plan = Plan(num_speculative_tokens=5, fan_out=(2, 1, 1, 1, 1, 1), fan_out_miss=(6, 0, 0, 0, 0, 1), batch_size=32,
                backup="jit", temperature=0.0)
    wl = fixed_batch(32, 4_096)
    wl = Workload(**{**wl.to_dict(), "prompt_tokens": 256})
    g = growth(SOURCE, 256, 4_096, plan.K, plan, modes=(mode,))[mode]
    grown = simulate(PROFILE, plan, mode=mode, seed=1, workload=wl, profile_at=at).metrics.per_seq_tok_s
    flat = simulate(PROFILE, plan, mode=mode, seed=1, workload=wl).metrics.per_seq_tok_s
    assert 100 * (flat / grown - 1) == pytest.approx(g["mean_context_err_pct"], abs=0.5)
    if mode == "ssd":
        assert g["mean_context_err_pct"] > 3.0  # the case is one where growth matters


def test_without_randomness_the_fast_loop_equals_simpy_with_a_growing_context():
    # AR draws nothing: each round's context, and so its step, is fixed by the workload alone.
    for wl in (Workload("fixed", 8, 8, 0.0, 300, "uniform", 1_500),
               arrivals([0, 3, 50, 51, 900], 2, output_lengths=[1, 40, 7, 90, 2], prompt_lengths=[5, 900, 0, 20, 7])):
        a, f = (simulate(PROFILE, PLAN, mode="ar", workload=wl, loop=loop, profile_at=at) for loop in ("simpy", "fast"))
        assert_metrics_close(f.metrics, a.metrics, wl.kind)
        np.testing.assert_allclose(np.sort(f.records.finish_ms[: f.records.n]),
                                   np.sort(a.records.finish_ms[: a.records.n]), rtol=1e-9)


def ours(c: int, full: bool = False):
    """The H200 pair at context c with ssd-run's glue (one token per row after a jit backup of every row, unless
    `full`) and a draft that pays 0.5 ms per token fed, so the shorter glue shows."""
    p = at(c)
    draft = replace(p.latency.draft, token_ms=0.5, token_exponent=1.0)
    return replace(p, latency=replace(p.latency, draft=draft, jit_glue_full=full))


@pytest.mark.parametrize("redraft", ["rows", "batch"])
def test_every_loop_prices_the_one_token_glue_after_a_jit_backup_with_a_growing_context(redraft):
    plan = PLAN.replace(backup="jit", jit_redraft=redraft)
    wl = poisson(rate=30.0, num_requests=60, max_batch=4, output_tokens=200, output_dist="uniform",
                 prompt_tokens=2_000)
    base = ours(2_304)
    exact = [simulate(base, plan, mode="ssd", seed=5, workload=wl, loop=loop, profile_at=ours).metrics
             for loop in ("simpy", "direct")]
    assert_metrics_close(exact[1], exact[0], redraft)
    full = simulate(ours(2_304, True), plan, mode="ssd", seed=5, workload=wl, loop="direct",
                    profile_at=lambda c: ours(c, True)).metrics
    assert exact[0].phase_ms["draft_glue"] < full.phase_ms["draft_glue"]
    runs = {loop: [summary(simulate(base, plan, mode="ssd", seed=s, workload=wl, loop=loop, profile_at=ours))
                   for s in range(12)] for loop in ("simpy", "fast")}
    for key in runs["simpy"][0]:
        a, f = (np.array([r[key] for r in runs[loop]], dtype=float) for loop in ("simpy", "fast"))
        if not (np.isnan(a).all() and np.isnan(f).all()):
            assert abs(a.mean() - f.mean()) <= allowed(a, f), key
