"""rerank: the planner's analytic candidates re-ordered by simulated objective."""

from __future__ import annotations

import pytest

from ssd_sim.model.presets import get_preset
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.sim.rerank import rerank, sim_objective


@pytest.fixture(scope="module")
def ranked():
    profile = get_preset("llama70b-1b-h100")
    result = make_plan(profile, PlanRequest(batch_size=4))
    return profile, result, rerank(profile, result, tokens=5_000, seed=0)


def test_every_candidate_is_simulated_and_ordered_by_simulated_tok_s(ranked):
    _, result, r = ranked
    assert len(r.ranked) == len(result.candidates)
    assert {id(p) for p, _, _ in r.ranked} == {id(p) for p, _ in result.candidates}
    values = [sim_objective(m, "latency") for _, _, m in r.ranked]
    assert values == sorted(values, reverse=True)
    assert r.plan is r.ranked[0][0] and r.metrics is r.ranked[0][2]


def test_simulated_winner_agrees_with_its_analytic_prediction_within_2pct(ranked):
    # 4 sequences x 5,000 tokens (~1,000 rounds of ~5 tokens), seed 0.
    _, _, r = ranked
    plan, pred, m = r.ranked[0]
    assert m.per_seq_tok_s == pytest.approx(pred.per_seq_tok_s, rel=0.02)
    assert m.sequences == 4 and m.rounds == pytest.approx(5_000 / pred.tokens_per_round, rel=0.03)


def test_baselines_are_simulated_and_ssd_beats_sd_beats_ar(ranked):
    _, result, r = ranked
    ar, sd = r.baselines["ar"], r.baselines["sd"]
    assert ar.per_seq_tok_s == pytest.approx(result.ar.per_seq_tok_s, rel=1e-9)
    assert sd.num_speculative_tokens == result.sd.num_speculative_tokens
    assert sd.per_seq_tok_s == pytest.approx(result.sd.per_seq_tok_s, rel=0.02)
    assert r.metrics.per_seq_tok_s > sd.per_seq_tok_s > ar.per_seq_tok_s


def test_rerank_is_reproducible_and_the_throughput_objective_ranks_by_tok_s_per_device(ranked):
    profile, _, r = ranked
    again = rerank(profile, make_plan(profile, PlanRequest(batch_size=4)), tokens=5_000, seed=0, baselines=False)
    assert [m.to_dict() for _, _, m in again.ranked] == [m.to_dict() for _, _, m in r.ranked]
    request = PlanRequest(batch_size=4, objective="throughput-per-device")
    tp = rerank(profile, make_plan(profile, request), tokens=2_000, top=3, baselines=False)
    assert len(tp.ranked) == 3 and tp.objective == "throughput-per-device"
    values = [m.tok_s_per_device for _, _, m in tp.ranked]
    assert values == sorted(values, reverse=True)
