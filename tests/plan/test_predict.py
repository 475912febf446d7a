"""The analytic round model agrees with the paper's closed forms where those are exact."""

from dataclasses import replace

import pytest

from ssd_sim.model.presets import get_preset
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.predict import predict_ar, predict_sd, predict_ssd
from ssd_sim.theory.analytic import expected_tokens, sd_speedup, ssd_speedup
from ssd_sim.theory.fanout import miss_rate
from tests.helpers.profiles import flat_profile


def test_ar_and_sd_match_closed_forms():
    prof = flat_profile()
    assert predict_ar(prof, 1).per_seq_tok_s == pytest.approx(100.0)
    sd = predict_sd(prof, 1, 4)
    assert sd.per_seq_tok_s / 100.0 == pytest.approx(sd_speedup(0.8, 4, 0.4))


@pytest.mark.parametrize("b", [1, 4])
def test_ssd_matches_theorem_7_and_corollary_16(b):
    prof = flat_profile()
    plan = Plan(num_speculative_tokens=4, fan_out=(3, 2, 2, 1, 2), batch_size=b, backup="jit")
    p_hit = 1 - miss_rate(plan.fan_out, 0.8, 0.8, 0.4)
    e = expected_tokens(0.8, 4)
    # T_p = glue + K branch steps = 5 x 1 ms = 0.5 verify; jit backup = K steps = 0.4 verify
    want = ssd_speedup(p_hit, e, e, 0.5, 0.4, batch_size=b)
    got = predict_ssd(prof, plan)
    assert got.p_hit == pytest.approx(p_hit)
    assert got.per_seq_tok_s / 100.0 == pytest.approx(want)


def test_fast_backup_yields_one_token_on_a_miss():
    prof = flat_profile()
    plan = Plan(num_speculative_tokens=4, fan_out=(3, 2, 2, 1, 2), fan_out_miss=(10, 0, 0, 0, 0), backup="fast")
    got = predict_ssd(prof, plan)
    assert got.e_miss == 1.0 and got.backup == "fast"
    # after a fast backup k = 0 always, so the hit probability is 1 - c 10^-r
    h_b = 1 - 0.4 * 10**-0.8
    h_p = 1 - miss_rate(plan.fan_out, 0.8, 0.8, 0.4)
    assert got.p_hit == pytest.approx(h_b / (1 - h_p + h_b))


def test_slow_primary_makes_the_target_wait():
    prof = flat_profile(draft_ms=4.0)  # T_p = 5 x 4 = 20 ms > T_v = 10 ms
    got = predict_ssd(prof, Plan(num_speculative_tokens=4))
    assert got.draft_ms == pytest.approx(20.0)
    assert got.round_ms >= 20.0


def test_saguaro_c_cannot_act_without_cached_guesses_at_drafted_positions():
    from ssd_sim.plan.predict import effective_saguaro_c

    hot = Plan(num_speculative_tokens=2, fan_out=(0, 0, 3), saguaro_c=0.5, temperature=1.0)
    assert effective_saguaro_c(hot) == 1.0  # drafts at positions 1, 2 down-weight top-0 sets
    assert effective_saguaro_c(hot.replace(fan_out=(1, 0, 2))) == 0.5
    assert effective_saguaro_c(hot.replace(fan_out=(1, 0, 2), temperature=0.0)) == 1.0  # greedy drafting


def test_interference_slows_the_ssd_verify_but_not_sd():
    base = flat_profile(verify_ms=10.0, draft_ms=1.0)
    slowed = with_interference(base, 0.3)
    plan = Plan(num_speculative_tokens=4, fan_out=(1, 1, 1, 1, 2))  # glue + 4 branch steps: 5 ms of the 10 ms verify
    fast, slow = predict_ssd(base, plan), predict_ssd(slowed, plan)
    assert slow.verify_ms == pytest.approx(5 + (10 - 5 / 1.3))
    assert slow.per_seq_tok_s == pytest.approx(fast.per_seq_tok_s * fast.round_ms / slow.round_ms)
    assert predict_sd(slowed, 1, 4).per_seq_tok_s == predict_sd(base, 1, 4).per_seq_tok_s


def with_interference(profile, s: float):
    return replace(profile, latency=replace(profile.latency, verify_slowdown_one_row=s, verify_slowdown_rows=s))


def test_hit_tables_give_per_position_hit_rates():
    from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitTable
    from ssd_sim.theory.analytic import accept_count_pmf

    table = HitTable(((0.0, 0.4, 0.5, 0.6), (0.0, 0.3, 0.4, 0.5)), ((0.0, 0.9, 0.95, 0.97),))
    backup = HitTable(((0.0, 0.7, 0.8, 0.85),), ((0.0, 0.2, 0.3, 0.35),))
    pt = AcceptancePoint(0.0, (0.8,), table, backup)
    prof = replace(flat_profile(), acceptance=AcceptanceModel((pt,)))
    plan = Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), fan_out_miss=(3, 1, 0), backup="fast")
    got = predict_ssd(prof, plan)
    pmf = accept_count_pmf(0.8, 2)  # 0.2, 0.16, 0.64
    h_p = pmf @ [0.5, 0.3, 0.9]
    h_b = 0.85  # after the fast backup k = 0: backup reject row 0 at F = 3 (the rest of the list is unused)
    assert got.p_hit == pytest.approx(h_b / (1 - h_p + h_b))


def test_the_plans_downweight_set_moves_the_prediction_only_below_c_1():
    # the reference engine down-weights its F forked tokens plus the sampled one (top_f_plus_1); the paper, top F
    prof = get_preset("llama70b-1b-h100")
    plan = Plan(num_speculative_tokens=5, fan_out=(3,) * 6, temperature=1.0, saguaro_c=0.5, backup="jit")
    a, b = (predict_ssd(prof, plan.replace(downweight=d)) for d in ("top_f", "top_f_plus_1"))
    assert a.per_seq_tok_s != b.per_seq_tok_s and a.p_hit != b.p_hit
    at_one = [predict_ssd(prof, plan.replace(saguaro_c=1.0, downweight=d)).per_seq_tok_s for d in ("top_f", "top_f_plus_1")]
    assert at_one[0] == at_one[1]
