"""ssd_sim.plan.whatif: overrides, plans from knobs and the dashboard's sweeps, against the modules they wrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ssd_sim.model.presets import get_preset
from ssd_sim.plan import whatif
from ssd_sim.plan.planner import PlanRequest, critical_batch, make_plan
from ssd_sim.plan.predict import predict_ar, predict_sd, predict_ssd
from ssd_sim.theory.fanout import allocation_tables, backtrack, uniform_fanout

LLAMA = "llama70b-1b-h100"


@pytest.fixture(scope="module")
def prof():
    return get_preset(LLAMA)


def test_ratio_override_yields_the_ratio_and_keeps_the_shape(prof):
    out = whatif.with_overrides(prof, draft_latency_ratio=0.05)
    assert whatif.latency_ratio(out) == pytest.approx(0.05, rel=1e-12)
    factor = 0.05 / whatif.latency_ratio(prof)
    for rows, tokens in ((1, 1), (8, 1), (4, 8), (96, 1)):
        assert out.latency.draft(rows, tokens) == pytest.approx(factor * prof.latency.draft(rows, tokens), rel=1e-12)
    assert out.latency.target == prof.latency.target
    assert out.acceptance is prof.acceptance


def test_no_override_returns_the_profile(prof):
    assert whatif.with_overrides(prof, 1.0) is prof


def test_acceptance_override_pins_one_point(prof):
    base = prof.acceptance.at(1.0, 1.0)
    out = whatif.with_overrides(prof, 1.0, acceptance=0.8, r=1.2)
    pt = out.acceptance.at(1.0, 1.0)
    assert pt.acceptance == (0.8,)
    assert (pt.primary_hit.r, pt.backup_hit.r) == (1.2, 1.2)
    assert pt.primary_hit.miss_at_one == base.primary_hit.miss_at_one
    ratio = base.backup_hit.miss_at_one / base.primary_hit.miss_at_one
    assert pt.backup_hit.miss_at_one == pytest.approx(ratio * base.primary_hit.miss_at_one)
    assert out.latency == prof.latency
    # Saguaro C still moves the pinned point (hit rate up as C falls).
    assert out.acceptance.at(1.0, 0.5).primary_hit.miss_at_one < pt.primary_hit.miss_at_one


def test_profile_values_are_the_profiles(prof):
    v = whatif.profile_values(prof, 0.0)
    pt = prof.acceptance.at(0.0, 1.0)
    assert v["acceptance"] == pytest.approx(pt.acceptance[0])
    assert (v["r"], v["miss_at_one"]) == (pt.primary_hit.r, pt.primary_hit.miss_at_one)
    assert v["draft_latency_ratio"] == pytest.approx(prof.latency.draft(1, 1) / prof.latency.target(1, 1))


def test_build_plan_uses_the_exact_integer_fanout(prof):
    plan = whatif.build_plan(prof, K=5, budget=24, temperature=0.0, backup="jit")
    pt = prof.acceptance.at(0.0, 1.0)
    want = backtrack(allocation_tables(24, pt.pmf(5), pt.primary_hit.miss_matrix(5, 24)), 24)  # per-position hits
    assert plan.fan_out == tuple(int(x) for x in want) == plan.fan_out_miss
    assert plan.budget == 24 and plan.saguaro_c == 1.0  # greedy ignores C


def test_build_plan_uniform_and_fast(prof):
    uni = whatif.build_plan(prof, K=7, budget=24, uniform=True)
    assert uni.fan_out == uni.fan_out_miss == (3,) * 8
    fast = whatif.build_plan(prof, K=3, budget=10, backup="fast")
    assert fast.fan_out_miss == (10, 0, 0, 0)  # after random tokens only k = 0 can happen


def test_adaptive_threshold_is_the_planners_b_star(prof):
    plan = whatif.build_plan(prof, K=5, budget=24, temperature=1.0, saguaro_c=0.7, backup="adaptive", batch_size=4)
    assert plan.backup_threshold == critical_batch(prof, plan)[0]
    assert plan.backup == "adaptive"


@pytest.mark.parametrize("b,T", [(1, 0.0), (8, 0.0), (4, 1.0)])
def test_knobs_of_make_plan_rebuild_its_plan(prof, b, T):
    res = make_plan(prof, PlanRequest(batch_size=b, temperature=T))
    p = res.plan
    rebuilt = whatif.build_plan(prof, p.K, p.budget, T, p.saguaro_c, p.backup, b)
    # the adaptive threshold: make_plan's b* re-plans every batch size, build_plan's is this plan's own (critical_batch);
    # both put this batch on the same side
    assert rebuilt == p.replace(backup_threshold=rebuilt.backup_threshold)
    assert (b >= rebuilt.backup_threshold) == (b >= p.backup_threshold)
    assert predict_ssd(prof, rebuilt).per_seq_tok_s == res.ssd.per_seq_tok_s


def test_evaluate_scores_exactly_this_plan(prof):
    plan = whatif.build_plan(prof, K=4, budget=20, temperature=1.0, saguaro_c=0.6, backup="jit", batch_size=2)
    res = whatif.evaluate(prof, plan)
    assert res.plan == plan
    assert res.ssd == predict_ssd(prof, plan)
    assert res.ar == predict_ar(prof, 2)
    assert res.sd.per_seq_tok_s == max(predict_sd(prof, 2, k, 1.0).per_seq_tok_s for k in range(1, 11))


def test_heatmap_cell_equals_predict(prof):
    plan = whatif.build_plan(prof, K=5, budget=24, temperature=0.0)
    accs, ratios = [0.6, 0.8, 0.9], [0.05, 0.2]
    z = whatif.speedup_heatmap(prof, plan, accs, ratios)
    zs = whatif.speedup_heatmap(prof, plan, accs, ratios, baseline="sd")
    assert z.shape == (3, 2)
    p = whatif.with_overrides(prof, 0.0, acceptance=0.8, draft_latency_ratio=0.2)
    ssd = predict_ssd(p, plan).per_seq_tok_s
    assert z[1, 1] == pytest.approx(ssd / predict_ar(p, 1).per_seq_tok_s, rel=1e-12)
    assert zs[1, 1] == pytest.approx(ssd / predict_sd(p, 1, 5, 0.0).per_seq_tok_s, rel=1e-12)
    assert np.all(np.diff(z[:, 0]) > 0)  # better acceptance, faster SSD


def test_hit_rate_vs_budget_matches_the_fanout_module(prof):
    pt = prof.acceptance.at(0.0, 1.0)
    hv = whatif.hit_rate_vs_budget(prof, K=5, max_budget=30)
    assert hv["budgets"][23] == 24
    best = backtrack(allocation_tables(24, pt.pmf(5), pt.primary_hit.miss_matrix(5, 24)), 24)
    assert hv["optimal"][23] == pytest.approx(float(pt.pmf(5) @ pt.primary_hit.hit(best)))
    assert hv["uniform_budgets"][:2] == [6, 12]
    assert hv["uniform"][3] == pytest.approx(float(pt.pmf(5) @ pt.primary_hit.hit(uniform_fanout(4, 5))))
    assert all(o >= u - 1e-12 for o, u in zip([hv["optimal"][b - 1] for b in hv["uniform_budgets"]],
                                             hv["uniform"], strict=True))
    assert hv["fits"] >= 1


def test_fanout_comparison(prof):
    plan = whatif.build_plan(prof, K=7, budget=24)
    fo = whatif.fanout_comparison(prof, plan)
    assert fo["uniform"] == [3] * 8 and sum(fo["fan_out"]) == 24
    assert fo["p_hit"] >= fo["p_hit_uniform"]


def test_backup_crossover_crosses_at_b_star(prof):
    plan = whatif.build_plan(prof, K=5, budget=24, temperature=0.0, backup="jit")
    bs = list(range(1, 33))
    cx = whatif.backup_crossover(prof, plan, bs)
    b_star = cx["b_star"]
    assert b_star == critical_batch(prof, plan)[0] and math.isfinite(b_star)
    for b, j, f in zip(bs, cx["jit"], cx["fast"], strict=True):
        assert (j > f) if b < b_star else (f >= j)
    assert cx["jit"][0] == pytest.approx(predict_ssd(prof, plan).per_seq_tok_s)


def test_pareto_rows_are_make_plan(prof):
    data = whatif.pareto(prof, [1, 8], 0.0)
    for i, b in enumerate((1, 8)):
        res = make_plan(prof, PlanRequest(batch_size=b))
        assert data["ssd"]["per_seq_tok_s"][i] == res.ssd.per_seq_tok_s
        assert data["sd"]["tok_s_per_device"][i] == res.sd.tok_s_per_device
        assert data["ar"]["total_tok_s"][i] == pytest.approx(res.ar.per_seq_tok_s * b)
        assert data["ssd"]["tok_s_per_device"][i] == pytest.approx(res.ssd.total_tok_s / 5)  # 4 target + 1 draft


def test_fan_outs_follow_a_per_position_table(prof):
    from dataclasses import replace

    from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitTable

    rej, acc = (0.0, 0.40, 0.55, 0.64, 0.70), (0.0, 0.90, 0.95, 0.97, 0.98)
    pt = AcceptancePoint(0.0, (0.4,), HitTable((rej,), (acc,)), HitTable((rej,), (rej,)))
    tab = replace(prof, acceptance=AcceptanceModel((pt,)))
    # P(k) = .6, .24, .16: the easy all-accepted position gets a guess; after a fast backup only k = 0 counts.
    assert whatif.fan_outs(tab, 2, 3, 0.0, 1.0, "jit") == ((1, 1, 1), (1, 1, 1))  # jit: the same table
    assert whatif.fan_outs(tab, 2, 3, 0.0, 1.0, "fast") == ((1, 1, 1), (3, 0, 0))
    fo = whatif.fanout_comparison(tab, whatif.build_plan(tab, 2, 3))
    assert fo["p_hit"] == pytest.approx(0.6 * 0.4 + 0.24 * 0.4 + 0.16 * 0.9)
    assert fo["p_hit_uniform"] == pytest.approx(fo["p_hit"])  # uniform (1, 1, 1) is the optimum here
