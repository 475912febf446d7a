"""ssd_sim.sim.direct equals the SimPy processes of ssd_sim.sim.des: same seed, same metrics and per-request records,
bit for bit, over every mode, backup, redraft kind, draft-device count and workload shape."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.presets import get_preset
from ssd_sim.plan.plan import Plan
from ssd_sim.sim.des import simulate
from ssd_sim.sim.workload import arrivals, fixed_batch, poisson

PROFILE = get_preset("llama70b-1b-h100")
PLAN = Plan(num_speculative_tokens=3, fan_out=(2, 1, 1, 1), fan_out_miss=(4, 0, 0, 1), batch_size=4,
            backup="adaptive", backup_threshold=3, temperature=1.0)
WORKLOADS = {
    "fixed b=4": fixed_batch(4, 96),
    "poisson refills": poisson(rate=40.0, num_requests=60, max_batch=4, output_tokens=64, output_dist="geometric"),
    "arrivals with gaps and one-token outputs": arrivals([0, 0, 5, 400, 401, 2_000], 3, output_lengths=[1, 40, 1, 7,
                                                                                                      90, 2]),
    "no prefill": poisson(rate=5.0, num_requests=20, max_batch=2, output_tokens=30, prompt_tokens=0),
}
CASES = [(m, w, p) for m in ("ar", "sd", "ssd", "ssd-fast", "ssd-adaptive") for w in WORKLOADS
         for p in ("plain", "batch redraft", "two draft devices")]


def _plan(kind: str) -> Plan:
    if kind == "batch redraft":
        return PLAN.replace(jit_redraft="batch", backup="jit")
    if kind == "two draft devices":
        return PLAN.replace(draft_devices=2)
    return PLAN


def assert_loops_equal(profile, mode: str, workload: str, plan: str):
    """The SimPy and direct runs of one case have the same metrics and per-request records; the SimPy run."""
    runs = [simulate(profile, _plan(plan), mode=mode, seed=5, workload=WORKLOADS[workload], loop=loop)
            for loop in ("simpy", "direct")]
    assert runs[0].metrics.to_dict() == runs[1].metrics.to_dict()
    a, b = (r.records for r in runs)
    for col in ("arrival_ms", "first_token_ms", "finish_ms", "output_tokens", "decode_tokens"):
        assert np.array_equal(getattr(a, col)[: a.n], getattr(b, col)[: b.n]), col
    return runs[0]


@pytest.mark.parametrize("mode,workload,plan", CASES, ids=[f"{m}-{w}-{p}" for m, w, p in CASES])
def test_the_direct_loop_equals_the_simpy_processes(mode, workload, plan):
    assert_loops_equal(PROFILE, mode, workload, plan)


# ssd-run's glue on the CPU pair: one token per row after a jit backup of every row, where a token costs (a GPU
# forward's memory-bound draft costs the same at 1 and K + 1 tokens)
OURS = get_preset("qwen-coder-1.5b-0.5b-cpu")
GLUE_CASES = [(m, w, p) for m in ("ssd", "ssd-adaptive") for w in WORKLOADS for p in ("plain", "batch redraft")]


@pytest.mark.parametrize("mode,workload,plan", GLUE_CASES, ids=[f"{m}-{w}-{p}" for m, w, p in GLUE_CASES])
def test_the_direct_loop_equals_the_simpy_processes_with_the_one_token_glue_after_a_jit_backup(mode, workload, plan):
    ours = assert_loops_equal(OURS, mode, workload, plan)
    plain = simulate(replace(OURS, latency=replace(OURS.latency, jit_glue_full=True)), _plan(plan), mode=mode, seed=5,
                     workload=WORKLOADS[workload], loop="direct")
    glue, full = ours.metrics.phase_ms["draft_glue"], plain.metrics.phase_ms["draft_glue"]
    assert glue < full if plan == "batch redraft" else glue <= full  # plain: a fast backup at b >= 3


def test_auto_records_a_timeline_with_simpy_and_direct_refuses_one():
    assert simulate(PROFILE, PLAN, tokens=8, timeline=True).timeline
    with pytest.raises(ConfigError, match="^loop: must be auto, simpy, direct or fast"):
        simulate(PROFILE, PLAN, tokens=8, timeline=True, loop="direct")
