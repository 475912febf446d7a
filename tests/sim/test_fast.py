"""ssd_sim.sim.fast equals the SimPy event model of ssd_sim.sim.des in distribution.

The fast loop draws other random numbers than the SimPy processes, so a seed gives another run; what must agree is
the distribution of every metric. For each case, SEEDS runs of each loop give a mean and a seed-to-seed standard
deviation per metric, and the means must agree within a Welch t-test: |difference| <= t * sqrt(sd_simpy^2 / SEEDS +
sd_fast^2 / SEEDS), plus 1e-9 relative for the float rounding of sums (metrics that do not vary between seeds must
agree to that). t is Student's quantile at the Welch degrees of freedom for a two-sided level of FAMILY_ALPHA /
CHECKS (Bonferroni over at most CHECKS comparisons in this file), so a correct loop fails any of them with a chance
below FAMILY_ALPHA (for roughly normal run metrics); the seeds are fixed, so the test is deterministic. With 16
seeds t is about 5 and the standard error 0.35 run-to-run standard deviations: a bias of ~2 of those fails.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.presets import get_preset
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.sim import des
from ssd_sim.sim.des import Simulation, outcome_source, plan_for_mode, simulate
from ssd_sim.sim.outcomes import ForcedOutcomes
from ssd_sim.sim.workload import arrivals, fixed_batch, poisson

SEEDS = 16  # runs of each loop per case
FAMILY_ALPHA, CHECKS = 0.01, 500  # chance that a correct loop fails one of at most CHECKS comparisons
PROFILE = get_preset("llama70b-1b-h100")  # bench/des_speed.py's default preset
PLANS = {b: make_plan(PROFILE, PlanRequest(batch_size=b)).plan for b in (1, 16)}  # adaptive backup at b = 16
WORKLOADS = {
    "fixed b=1": (1, fixed_batch(1, 512)),
    "fixed b=16": (16, fixed_batch(16, 256)),
    "poisson b=1": (1, poisson(rate=1.0, num_requests=40, max_batch=1, output_tokens=256)),
    "poisson b=16": (16, poisson(rate=6.0, num_requests=120, max_batch=16, output_tokens=256)),
}
CASES = [(m, w) for m in ("ar", "sd", "ssd") for w in WORKLOADS]
# The small plan of test_direct.py (K = 3, adaptive at b* = 3) for the corners of the model.
PLAN = Plan(num_speculative_tokens=3, fan_out=(2, 1, 1, 1), fan_out_miss=(4, 0, 0, 1), batch_size=4,
            backup="adaptive", backup_threshold=3, temperature=1.0)
VARIANTS = {
    "adaptive switching with 8 rows (b* = 8)": (PLAN.replace(backup_threshold=8), "ssd",
                                                poisson(rate=60.0, num_requests=200, max_batch=16, output_tokens=96)),
    "jit per-row redraft, two draft devices": (PLAN.replace(backup="jit", draft_devices=2), "ssd",
                                               poisson(rate=40.0, num_requests=120, max_batch=4, output_tokens=64,
                                                       output_dist="uniform")),
    "jit whole-batch redraft": (PLAN.replace(backup="jit", jit_redraft="batch"), "ssd",
                                poisson(rate=40.0, num_requests=120, max_batch=4, output_tokens=64)),
    "fast backup": (PLAN, "ssd-fast", poisson(rate=40.0, num_requests=120, max_batch=4, output_tokens=64)),
    "geometric lengths (one-token outputs)": (PLAN, "ssd", poisson(rate=40.0, num_requests=150, max_batch=4,
                                                                   output_tokens=48, output_dist="geometric")),
    "no prompt (first token from round 0)": (PLAN, "ssd", poisson(rate=20.0, num_requests=80, max_batch=3,
                                                                  output_tokens=50, prompt_tokens=0)),
    "sd without prompt": (PLAN, "sd", poisson(rate=20.0, num_requests=80, max_batch=3, output_tokens=50,
                                              prompt_tokens=0)),
    "outputs longer than a block (9,000 tokens)": (PLAN, "ssd", fixed_batch(3, 9000)),
    "arrivals with gaps and one-token outputs": (PLAN, "ssd", arrivals(np.repeat([0, 5, 400, 401, 2_000, 2_500], 5), 3,
                                                                       output_lengths=[1, 40, 1, 7, 90, 2] * 5)),
}


def summary(result) -> dict[str, float]:
    """The compared metrics of one run: latency means and percentiles (ms), rates (tok/s), acceptance, hits."""
    m, rec = result.metrics, result.records
    tpot = (rec.decode_ms / np.maximum(rec.decode_tokens[: rec.n], 1))[rec.decode_tokens[: rec.n] > 0]
    out = {"ttft mean": float(rec.ttft_ms.mean()), "ttft p50": m.ttft_ms_p50, "ttft p90": m.ttft_ms_p90,
           "tpot mean": float(tpot.mean()) if tpot.size else np.nan, "tpot p50": m.tpot_ms_p50,
           "tpot p90": m.tpot_ms_p90, "total tok/s": m.total_tok_s, "per-seq tok/s": m.per_seq_tok_s,
           "rounds": m.rounds, "mean batch": m.mean_batch, "round ms": m.round_ms,
           "accept len": m.mean_accept_len, "acceptance": m.acceptance_rate, "target busy": m.target_busy}
    if m.hit_rate is not None:
        out |= {"hit rate": m.hit_rate, "all-hit rounds": m.all_hit_rounds, "draft busy": m.draft_busy,
                "wait share": m.target_wait_share, "backup ms": m.phase_ms["draft_backup"]}
    return out


def allowed(a: np.ndarray, f: np.ndarray) -> float:
    """The largest difference of the means of two samples of a metric (SimPy, fast) that the t-test accepts."""
    va, vf = a.var(ddof=1) / a.size, f.var(ddof=1) / f.size
    se = np.sqrt(va + vf)
    if se == 0:
        return 1e-9 * abs(a.mean())
    df = (va + vf) ** 2 / (va ** 2 / (a.size - 1) + vf ** 2 / (f.size - 1))
    return float(stats.t.ppf(1 - FAMILY_ALPHA / CHECKS / 2, df)) * se + 1e-9 * abs(a.mean())


def disagreements(plan, mode: str, workload, profile=PROFILE) -> list[str]:
    """Metrics whose SimPy and fast means differ by more than the t-test allows (`allowed`)."""
    runs = {loop: [summary(simulate(profile, plan, mode=mode, seed=s, workload=workload, loop=loop))
                   for s in range(SEEDS)] for loop in ("simpy", "fast")}
    bad = []
    for key in runs["simpy"][0]:
        a, f = (np.array([r[key] for r in runs[loop]], dtype=float) for loop in ("simpy", "fast"))
        if np.isnan(a).all() and np.isnan(f).all():
            continue
        if not abs(a.mean() - f.mean()) <= allowed(a, f):
            bad.append(f"{key}: simpy {a.mean():.6g} +- {a.std(ddof=1):.3g}, fast {f.mean():.6g} +- {f.std(ddof=1):.3g}")
    return bad


@pytest.mark.parametrize("mode,workload", CASES, ids=[f"{m}-{w}" for m, w in CASES])
def test_the_fast_loop_matches_the_simpy_processes_in_distribution(mode, workload):
    b, wl = WORKLOADS[workload]
    assert disagreements(PLANS[b], mode, wl) == []


@pytest.mark.parametrize("name", list(VARIANTS))
def test_the_fast_loop_matches_the_simpy_processes_in_the_corners_of_the_model(name):
    assert disagreements(*VARIANTS[name]) == []


@pytest.mark.parametrize("redraft", ["rows", "batch"])
def test_the_fast_loop_matches_the_simpy_processes_with_the_one_token_glue_after_a_jit_backup(redraft):
    # the CPU pair: ssd-run's glue feeds one token per row after a jit backup of every row (K = 2, b = 1: 148 ms, not 205)
    cpu = get_preset("qwen-coder-1.5b-0.5b-cpu")
    plan = PLAN.replace(backup="jit", jit_redraft=redraft)
    wl = poisson(rate=2.0, num_requests=60, max_batch=4, output_tokens=48, output_dist="uniform")
    assert disagreements(plan, "ssd", wl, cpu) == []


def test_without_randomness_the_fast_loop_equals_simpy_up_to_rounding():
    # AR draws nothing: fixed batches and given arrivals give one run, which both loops must compute.
    for wl in (fixed_batch(16, 300), arrivals([0, 3, 50, 51, 900], 2, output_lengths=[1, 40, 7, 90, 2])):
        a, f = (simulate(PROFILE, PLANS[16], mode="ar", workload=wl, loop=loop) for loop in ("simpy", "fast"))
        for key, v in a.metrics.to_dict().items():
            if isinstance(v, float):
                assert f.metrics.to_dict()[key] == pytest.approx(v, rel=1e-9, nan_ok=True), key
        for col in ("first_token_ms", "finish_ms", "decode_tokens"):
            np.testing.assert_allclose(np.sort(getattr(f.records, col)[: f.records.n]),
                                       np.sort(getattr(a.records, col)[: a.records.n]), rtol=1e-9)


@pytest.mark.parametrize("mode", ["ar", "sd", "ssd", "ssd-adaptive"])
def test_every_decoded_round_of_every_sequence_is_counted_once(mode):
    plan = plan_for_mode(PROFILE, PLAN.replace(backup_threshold=3), mode)
    wl = poisson(rate=40.0, num_requests=300, max_batch=6, output_tokens=64, output_dist="geometric")
    sim = Simulation(PROFILE, plan, mode, wl, outcome_source(PROFILE, plan), seed=3)
    result = sim.run("fast")
    counts, rec = sim.batch.counts, result.records
    assert rec.n == wl.num_requests and counts.seq_rounds == sim.rows
    assert rec.total_output_tokens == int(sim.batch.requests.output_tokens.sum())
    if mode.startswith("ssd"):  # every round but a sequence's first is a lookup
        decoding = int(np.count_nonzero(rec.output_tokens[: rec.n] > (wl.prompt_tokens > 0)))
        assert counts.looked == counts.seq_rounds - decoding
        assert counts.after_hit[0] + counts.after_miss[0] == counts.looked
        assert sum(sim.backup_rounds.values()) + sim.all_hit_rounds == result.metrics.rounds


def test_auto_runs_the_fast_loop_only_for_large_supported_runs(monkeypatch):
    wl = poisson(rate=40.0, num_requests=50, max_batch=4, output_tokens=64)

    def records(loop):
        r = simulate(PROFILE, PLAN, seed=2, workload=wl, loop=loop).records
        return r.finish_ms[: r.n].tolist()

    assert records("auto") == records("direct") != records("fast")
    monkeypatch.setattr(des, "FAST_MIN_TOKENS", 1)
    assert records("auto") == records("fast")
    forced = ForcedOutcomes([[1, 2, 0]], [[True, False]])  # not the acceptance model: auto keeps the direct loop
    assert (simulate(PROFILE, PLAN, seed=2, workload=wl, outcomes=forced).metrics.to_dict()
            == simulate(PROFILE, PLAN, seed=2, workload=wl, outcomes=forced, loop="direct").metrics.to_dict())


def test_the_fast_loop_refuses_what_it_cannot_run():
    with pytest.raises(ConfigError, match="^loop: fast draws from the acceptance model only"):
        simulate(PROFILE, PLAN, tokens=8, outcomes=ForcedOutcomes([[1]]), loop="fast")
    with pytest.raises(ConfigError, match="^loop: must be auto, simpy, direct or fast"):
        simulate(PROFILE, PLAN, tokens=8, timeline=True, loop="fast")


@pytest.mark.parametrize("loop", ["simpy", "direct", "fast"])
def test_every_loop_prices_a_requests_first_sd_round_without_the_two_token_draft_step(loop):
    # One request, no prompt: its first round follows no round, so it never feeds the 2-token first step; every later
    # round pays its expectation. The run lasts rounds x the plain round less what the first one saves, whatever k drew.
    cpu = get_preset("qwen-coder-1.5b-0.5b-cpu")  # a draft whose 2-token step costs more than its 1-token one
    plan = Plan(num_speculative_tokens=2)
    p_all = outcome_source(cpu, plan).p_all_accepted(2)
    lat = des.round_latency(cpu.latency, plan, 1, p_all)
    plain = lat.at(1).sd_draft + lat.at(1).verify
    first = sum(lat.sd_phases(1, 1))
    step_gap = float(cpu.latency.draft(1, 2) - cpu.latency.draft(1, 1))  # ms: the 2-token step over the 1-token one
    assert lat.at(1).sd_draft - lat.sd_phases(1, 1)[0] == pytest.approx(p_all * step_gap, rel=1e-9)
    m = simulate(cpu, plan, mode="sd", seed=3, workload=fixed_batch(1, 40, prompt_tokens=0), loop=loop).metrics
    assert m.sim_ms == pytest.approx(m.rounds * plain - (plain - first), rel=1e-12)
