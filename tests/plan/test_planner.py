"""The planner finds the best configuration of its search space and respects fixed knobs and budgets."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.presets import get_preset
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.planner import (
    BStar,
    Knobs,
    PlanRequest,
    SearchLimits,
    budget_fit,
    critical_batch,
    make_plan,
)
from ssd_sim.plan.predict import predict_ssd
from tests.helpers.combinatorics import compositions
from tests.helpers.profiles import flat_profile
from tests.helpers.trace_samples import trace_from


def rowed_profile():
    """A profile whose draft gets slower with rows, so the budget is bounded by draft time."""
    from ssd_sim.model.latency import ForwardLatency, LatencyModel

    base = flat_profile()
    lat = LatencyModel(ForwardLatency(fixed_ms=10.0), ForwardLatency(fixed_ms=0.5, token_ms=0.25))
    return type(base)("rowed", lat, base.acceptance)


def test_planner_matches_brute_force_over_all_fan_outs():
    prof = rowed_profile()
    result = make_plan(prof, PlanRequest(knobs=Knobs(backup="jit"), limits=SearchLimits(k_max=3)))
    best = 0.0
    for K in (1, 2, 3):
        fit = budget_fit(prof, 1, K)
        for budget in range(1, fit + 4):  # past what fits too: the planner prices the wait for the draft
            for fan in compositions(budget, K + 1):
                if sum(fan) == 0:
                    continue
                plan = Plan(num_speculative_tokens=K, fan_out=fan, backup="jit")
                best = max(best, predict_ssd(prof, plan).per_seq_tok_s)
    assert result.ssd.per_seq_tok_s == pytest.approx(best, rel=1e-9)


def test_planner_with_a_per_position_table_matches_brute_force():
    from dataclasses import replace

    from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitTable

    table = HitTable(((0.0, 0.4, 0.55, 0.64), (0.0, 0.3, 0.45, 0.5), (0.0, 0.2, 0.3, 0.35)),
                     ((0.0, 0.95, 0.97, 0.98), (0.0, 0.9, 0.95, 0.97), (0.0, 0.85, 0.92, 0.96)))
    pt = AcceptancePoint(0.0, (0.9, 0.6, 0.4), table, table)
    prof = replace(rowed_profile(), acceptance=AcceptanceModel((pt,)))
    result = make_plan(prof, PlanRequest(knobs=Knobs(backup="jit"), limits=SearchLimits(k_max=3)))
    best, arg = 0.0, None
    for K in (1, 2, 3):
        for budget in range(1, budget_fit(prof, 1, K) + 1):
            for fan in compositions(budget, K + 1):
                plan = Plan(num_speculative_tokens=K, fan_out=fan, backup="jit")
                tok = predict_ssd(prof, plan).per_seq_tok_s
                best, arg = (tok, fan) if tok > best else (best, arg)
    assert result.ssd.per_seq_tok_s == pytest.approx(best, rel=1e-9)
    assert result.plan.fan_out == tuple(arg)


def test_a_cache_whose_rows_cost_more_than_their_hits_stays_inside_the_verify():
    prof = rowed_profile()
    for b in (1, 2, 4):
        r = make_plan(prof, PlanRequest(batch_size=b))
        assert r.plan.budget <= r.budget_fit
        assert r.ssd.draft_ms <= r.ssd.verify_ms + 1e-9
        assert "draft time" in r.binding


@pytest.mark.parametrize("name,K", [("llama70b-1b-h100", 7), ("qwen32b-0.6b-h100", 4)])
def test_with_k_fixed_and_nothing_fitting_the_budget_is_still_searched(name, K):
    # no budget fits inside T_v at this K: the planner used to score budget 1 only (issue 25: [0, ..., 0, 1])
    prof = get_preset(name)
    r = make_plan(prof, PlanRequest(knobs=Knobs(num_speculative_tokens=K), b_star=BStar.SKIP))
    assert r.budget_fit == 0 and r.plan.budget > K + 1
    uniform3 = predict_ssd(prof, r.plan.replace(fan_out=(3,) * (K + 1), fan_out_miss=(3,) * (K + 1)))
    assert r.ssd.per_seq_tok_s >= uniform3.per_seq_tok_s
    assert r.ssd.draft_ms > r.ssd.verify_ms and "the target waits" in r.binding and "extra hits pay" in r.binding


def test_fixed_knobs_are_kept_and_the_rest_searched():
    prof = get_preset("llama70b-1b-h100")
    knobs = Knobs(num_speculative_tokens=7, fan_out=3, saguaro_c=0.5, backup="fast")
    r = make_plan(prof, PlanRequest(temperature=1.0, knobs=knobs))
    assert r.plan.K == 7 and r.plan.fan_out == (3,) * 8 and r.plan.saguaro_c == 0.5
    assert r.plan.backup == "fast"
    assert r.plan.fan_out_miss[0] == 24  # searched: after a fast backup everything goes to k = 0
    assert len(r.candidates) == 1


def test_fan_out_list_fixes_k():
    prof = get_preset("qwen32b-0.6b-h100")
    r = make_plan(prof, PlanRequest(knobs=Knobs(fan_out=(4, 3, 3, 3, 3, 2, 2, 4))))
    assert r.plan.K == 7 and r.plan.fan_out == (4, 3, 3, 3, 3, 2, 2, 4)
    with pytest.raises(ConfigError, match="fan_out"):
        make_plan(prof, PlanRequest(knobs=Knobs(num_speculative_tokens=3, fan_out=(1, 1))))


def test_greedy_plans_leave_saguaro_off_and_sampling_plans_search_it():
    prof = get_preset("llama70b-1b-h100")
    assert make_plan(prof).plan.saguaro_c == 1.0
    hot_request = PlanRequest(temperature=1.0)
    hot = make_plan(prof, hot_request)
    assert hot.plan.saguaro_c < 1.0  # Saguaro pays at T = 1 on this preset
    assert hot.ssd.per_seq_tok_s > make_plan(prof, hot_request.replace(knobs=Knobs(saguaro_c=1.0))).ssd.per_seq_tok_s


def test_ssd_beats_sd_and_ar_on_the_paper_setting():
    r = make_plan(get_preset("llama70b-1b-h100"))
    assert r.ssd.per_seq_tok_s > r.sd.per_seq_tok_s > r.ar.per_seq_tok_s
    assert r.recommended_mode == "ssd"
    assert r.ar.per_seq_tok_s == pytest.approx(54.7)


def test_adaptive_backup_picks_the_faster_backup_at_every_batch_size():
    prof = get_preset("llama70b-1b-h100")
    r = make_plan(prof)
    assert r.plan.backup == "adaptive" and r.plan.backup_threshold == r.b_star
    b_star, _ = critical_batch(prof, r.plan)
    assert math.isfinite(b_star)
    plan = r.plan
    for b in (1, 2, 4, 8, 16):
        jit = predict_ssd(prof, plan.replace(batch_size=b, backup="jit")).per_seq_tok_s
        fast = predict_ssd(prof, plan.replace(batch_size=b, backup="fast",
                                              fan_out_miss=(plan.budget,) + (0,) * plan.K)).per_seq_tok_s
        if b >= b_star:
            assert fast >= jit
    assert r.b_star_closed_form == pytest.approx(b_star, abs=1.0)


def test_more_draft_devices_raise_the_budget():
    prof = get_preset("llama70b-1b-h100")
    one = make_plan(prof, PlanRequest(batch_size=8, knobs=Knobs(num_speculative_tokens=4)))
    two = make_plan(prof, PlanRequest(batch_size=8, draft_devices=2, knobs=Knobs(num_speculative_tokens=4)))
    assert two.budget_fit > one.budget_fit and two.plan.budget > one.plan.budget
    assert two.ssd.per_seq_tok_s > one.ssd.per_seq_tok_s
    assert make_plan(prof, PlanRequest(batch_size=8, draft_devices=2)).ssd.per_seq_tok_s >= two.ssd.per_seq_tok_s


@pytest.mark.parametrize("name", ["llama70b-1b-h100", "qwen32b-0.6b-h100", "llama70b-1b-h200"])
def test_gpu_presets_predict_ssd_between_1x_and_2x_of_sd(name):
    for b, T in itertools.product((1, 4), (0.0, 1.0)):
        r = make_plan(get_preset(name), PlanRequest(batch_size=b, temperature=T))
        assert 1.0 < r.ssd.per_seq_tok_s / r.sd.per_seq_tok_s < 2.0


def logged_profile():
    from dataclasses import replace

    from ssd_sim.model.logged import derived_model, logged_positions
    from tests.helpers.synthetic_traces import dist_pairs, dist_record

    p, q = dist_pairs(600, seed=5)
    seqs = []
    for j in range(0, 600, 3):  # three positions per round, each its own context
        seqs.append({"seq": j, "accepted": 2, "bonus": 0, "committed": 3,
                     "dists": [dist_record(p[j + i], 12) + dist_record(q[j + i], 12) for i in range(3)]})

    trace = trace_from({"mode": "sd", "plan": {}, "batch_size": 1}, [{"round": 0, "K": 3, "seqs": seqs, "timings_ms": {}}])
    model, _ = derived_model(logged_positions([trace]))
    return replace(get_preset("qwen-coder-1.5b-0.5b-cpu"), acceptance=model)


def test_per_position_c_never_loses_to_the_single_c_and_is_reported_at_t_above_0():
    from ssd_sim.plan.planner import per_position_c

    prof = logged_profile()
    res = make_plan(prof, PlanRequest(temperature=1.0, knobs=Knobs(num_speculative_tokens=3)))
    assert res.c_per_position_gain_pct is not None and res.c_per_position_gain_pct >= 0.0
    base = res.plan.replace(saguaro_c_list=()) if res.plan.saguaro_c_list else res.plan
    refined, gain = per_position_c(prof, base)
    assert len(refined.saguaro_c_list) == base.K
    assert predict_ssd(prof, refined).per_seq_tok_s == pytest.approx(
        predict_ssd(prof, base).per_seq_tok_s * (1 + gain / 100))
    assert make_plan(prof, PlanRequest(knobs=Knobs(num_speculative_tokens=3))).c_per_position_gain_pct is None  # greedy


def test_a_per_position_c_list_combines_each_positions_own_response():
    prof = logged_profile()
    acc = prof.acceptance
    pt = acc.at_positions(1.0, [0.3, 1.0])
    lo, hi = acc.at(1.0, 0.3), acc.at(1.0, 1.0)
    assert pt.acceptance == pytest.approx((lo.acceptance[0], hi.acceptance[1]))
    fo = [2, 3, 4]
    assert pt.primary_hit.hit(fo)[0] == pytest.approx(lo.primary_hit.hit(fo)[0])
    assert pt.primary_hit.hit(fo)[1] == pytest.approx(hi.primary_hit.hit(fo)[1])
    assert pt.primary_hit.hit(fo)[2] == pytest.approx(hi.primary_hit.hit(fo)[2])  # all accepted: C-free


def test_a_budget_cap_that_binds_is_named_in_the_binding_line():
    prof = get_preset("llama70b-1b-h100")
    free = make_plan(prof, PlanRequest(batch_size=8))
    capped = make_plan(prof, PlanRequest(batch_size=8, knobs=Knobs(num_speculative_tokens=free.plan.K),
                                         limits=SearchLimits(budget_cap=2)))
    assert capped.plan.budget == 2 and capped.budget_fit > 2
    assert capped.binding.startswith("budget cap: 2 guesses (--budget-cap 2)")
    assert free.binding.startswith("draft time: budget") and free.plan.budget == free.budget_fit


def test_a_draft_bound_fixed_plan_names_draft_time_not_the_user():
    prof = get_preset("llama70b-1b-h100")
    r = make_plan(prof, PlanRequest(knobs=Knobs(num_speculative_tokens=7, fan_out=3)))
    assert r.ssd.draft_ms > r.ssd.verify_ms  # 8 tree steps of 24 rows do not fit in one 18.3 ms verify
    assert r.binding.startswith("draft time: the fan-out fixed by the user (budget 24) takes T_p = ")
    assert r.binding.endswith("even a budget of 1 does not fit at this K") and r.budget_fit == 0
    wide = make_plan(prof, PlanRequest(knobs=Knobs(num_speculative_tokens=5, fan_out=40)))
    assert wide.ssd.draft_ms > wide.ssd.verify_ms and 0 < wide.budget_fit < 240
    assert wide.binding.endswith(f"a budget of at most {wide.budget_fit} fits inside one verify")
    small = make_plan(prof, PlanRequest(knobs=Knobs(num_speculative_tokens=3, fan_out=1)))
    assert small.binding.startswith("fan-out fixed by the user (budget 4; T_p = ")


@pytest.mark.parametrize("T", [0.0, 1.0])
@pytest.mark.parametrize("name", ["llama70b-1b-h100", "qwen32b-0.6b-h100", "qwen-coder-1.5b-0.5b-cpu"])
def test_b_star_is_the_first_batch_where_fast_beats_jit_each_replanned(name, T):
    prof = get_preset(name)
    r = make_plan(prof, PlanRequest(temperature=T))
    cx = r.crossover
    assert r.b_star == cx.b_star and cx.batch_sizes[: int(r.b_star)] == tuple(range(1, int(r.b_star) + 1))
    for b in range(1, int(r.b_star) + 1):  # independent recomputation: the best plan with each backup at b
        at_b = PlanRequest(batch_size=b, temperature=T, b_star=BStar.CHOSEN)
        jit = make_plan(prof, at_b.replace(knobs=Knobs(backup="jit"))).ssd.per_seq_tok_s
        fast = make_plan(prof, at_b.replace(knobs=Knobs(backup="fast"))).ssd.per_seq_tok_s
        assert cx.jit[b - 1] == pytest.approx(jit) and cx.fast[b - 1] == pytest.approx(fast)
        assert (fast > jit) == (b == r.b_star)


def test_b_star_is_not_never_when_fast_wins_only_at_a_large_batch():
    from ssd_sim.plan.planner import crossover

    prof = get_preset("llama70b-1b-h100")
    cx = crossover(prof, 0.0, Knobs(num_speculative_tokens=1))
    assert math.isfinite(cx.b_star)
    i = cx.batch_sizes.index(int(cx.b_star))
    assert cx.fast[i] > cx.jit[i] and all(j >= f for j, f in zip(cx.jit[:i], cx.fast[:i], strict=True))


@pytest.mark.parametrize("T", [0.0, 1.0])
def test_the_plan_stays_under_the_corollary_9_bound(T):
    for name in ("llama70b-1b-h100", "qwen32b-0.6b-h100", "qwen-coder-1.5b-0.5b-cpu"):
        r = make_plan(get_preset(name), PlanRequest(temperature=T, b_star=BStar.CHOSEN))
        x = r.ssd.per_seq_tok_s / r.sd.per_seq_tok_s
        assert 1.0 < r.gain_bound and x <= r.gain_bound + 1e-9
        assert r.gain_captured == pytest.approx((x - 1) / (r.gain_bound - 1))


@pytest.mark.parametrize("T", [5e-324, 1e-12, 1e-6, 4.9e-5])
@pytest.mark.parametrize("C", [1.0, 0.5])
def test_a_vanishing_temperature_plans_the_greedy_limit(T, C):
    """0 < T below the Saguaro response's resolution is the T -> 0 limit (C cannot act), not a solver crash."""
    prof = get_preset("llama70b-1b-h100")
    tiny = make_plan(prof, PlanRequest(temperature=T, knobs=Knobs(saguaro_c=C)))
    greedy = make_plan(prof, PlanRequest(temperature=0.0, knobs=Knobs(saguaro_c=C)))
    assert tiny.ssd.per_seq_tok_s == pytest.approx(greedy.ssd.per_seq_tok_s, rel=1e-3)
    assert tiny.sd.per_seq_tok_s == pytest.approx(greedy.sd.per_seq_tok_s, rel=1e-3)


@pytest.mark.parametrize("T", [5e-5, 7e-5, 1.4e-4])
def test_temperatures_just_above_the_greedy_floor_plan_without_a_crash(T):
    res = make_plan(get_preset("llama70b-1b-h100"), PlanRequest(temperature=T, knobs=Knobs(saguaro_c=0.5)))
    assert res.ssd.per_seq_tok_s > res.sd.per_seq_tok_s > 0


EXTREME_T = st.one_of(st.floats(0.0, 1e-3), st.floats(0.0, 10.0),
                      st.sampled_from([5e-324, 2.2250738585072014e-308, 1e-300, math.nextafter(5e-5, 0), 5e-5, 10.0]))


@pytest.mark.filterwarnings("error")  # a NaN on the way (0 / 0) is a failure, not a warning
@settings(max_examples=80, deadline=None)
@given(T=EXTREME_T, C=st.sampled_from([1.0, 0.5, 0.0]), b=st.sampled_from([1, 3, 64]))
def test_any_temperature_in_range_predicts_a_finite_positive_speed(T, C, b):
    """Numeric extremes (subnormal T, the greedy floor and its neighbour, T = 10, C = 0) never crash or divide 0 / 0."""
    plan = Plan(num_speculative_tokens=3, fan_out=(2, 2, 1, 1), batch_size=b, temperature=T, saguaro_c=C)
    tok_s = predict_ssd(get_preset("llama70b-1b-h100"), plan).per_seq_tok_s
    assert math.isfinite(tok_s) and tok_s > 0


def test_an_optimum_on_the_k_bound_is_said_and_disappears_when_the_bound_is_raised():
    from ssd_sim.plan.planner import bound_notes

    prof = get_preset("llama70b-1b-h100")
    at10 = make_plan(prof, PlanRequest())
    assert at10.sd.num_speculative_tokens == 10
    assert bound_notes(at10) == ["SD's best K = 10 is the largest K searched (--max-k 10): its optimum may lie beyond; "
                                 "raise --max-k to search further"]
    wider = make_plan(prof, PlanRequest(limits=SearchLimits(k_max=24)))
    assert wider.sd.num_speculative_tokens < 24 and bound_notes(wider) == []


def test_a_rank_reorders_the_top_candidates_and_excludes_risk():
    prof = get_preset("llama70b-1b-h100")
    plain = make_plan(prof, PlanRequest(batch_size=8))
    ranked = make_plan(prof, PlanRequest(batch_size=8, rank=lambda p: -p.budget))  # the smallest cache wins
    budgets = [p.budget for p, _ in plain.candidates]
    assert ranked.plan.budget == min(budgets) < plain.plan.budget
    assert [p.budget for p, _ in ranked.candidates] == sorted(budgets)
    assert ranked.ssd.per_seq_tok_s == pytest.approx(predict_ssd(prof, ranked.plan).per_seq_tok_s)
    with pytest.raises(ConfigError, match="risk"):
        PlanRequest(risk=0.1, rank=lambda p: 0.0)
