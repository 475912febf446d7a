"""The simulator reproduces the closed forms where they are exact, and is reproducible bit for bit.

Exact setting: every latency a constant (target forward 10 ms whatever its size, draft forward 1 ms), no
overheads, i.i.d. acceptance alpha = 0.8, independent hits with h_b = h_p (jit backup, fan_out_miss =
fan_out). Then SD and SSD tok/s are sd_speedup / ssd_speedup (Theorem 7, Corollary 16) x the AR rate
of 100 tok/s. Runs decode without prefill; run length and seed are stated in each test (about 30k-120k
rounds, statistical error ~0.1-0.3%, well under the 1% tolerance).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve
from ssd_sim.model.latency import ForwardLatency, LatencyModel
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.predict import predict_ar, predict_sd, predict_ssd
from ssd_sim.sim.des import simulate
from ssd_sim.sim.workload import fixed_batch
from ssd_sim.theory import analytic

K = 4
ALPHA = 0.8
FAN_OUT = (2, 2, 1, 1, 2)
AR_TOK_S = 100.0  # 1 token per 10 ms target step


def exact_profile() -> Profile:
    lat = LatencyModel(ForwardLatency(fixed_ms=10.0), ForwardLatency(fixed_ms=1.0))
    pt = AcceptancePoint(0.0, (ALPHA,), HitCurve(0.3, 0.7), HitCurve(0.3, 0.7))
    return Profile("exact", lat, AcceptanceModel((pt,)))


def general_profile() -> Profile:
    """Roofline-shaped latencies, overheads, per-position acceptance, a separate backup hit curve."""
    lat = LatencyModel(ForwardLatency(fixed_ms=8.0, memory_ms=2.0, compute_ms_per_token=0.05),
                       ForwardLatency(fixed_ms=0.8, memory_ms=0.3, compute_ms_per_token=0.01, token_ms=0.002),
                       round_overhead_ms=0.3, transfer_ms=0.2, lookup_ms=0.05, fast_backup_ms=0.1)
    pt = AcceptancePoint(0.0, (0.85, 0.8, 0.75, 0.7), HitCurve(0.4, 0.8), HitCurve(0.25, 0.8))
    return Profile("general", lat, AcceptanceModel((pt,)))


def decode(profile, plan, mode, tokens_per_seq, seed=0):
    return simulate(profile, plan, mode=mode, seed=seed,
                    workload=fixed_batch(plan.batch_size, tokens_per_seq, prompt_tokens=0)).metrics


def hit_probability(profile: Profile) -> float:
    acc = profile.acceptance.at(0.0)
    return float(acc.pmf(K) @ acc.primary_hit.hit(np.asarray(FAN_OUT)))


def test_ar_is_exactly_one_token_per_target_step():
    m = decode(exact_profile(), Plan(batch_size=4), "ar", 1000)
    assert m.per_seq_tok_s == pytest.approx(AR_TOK_S, rel=1e-12)
    assert m.per_seq_tok_s == pytest.approx(predict_ar(exact_profile(), 4).per_seq_tok_s, rel=1e-12)
    assert m.rounds == 1000 and m.mean_batch == 4.0


def test_sd_matches_sd_speedup_within_1pct():
    # seed 0, 300,000 tokens (about 89,000 rounds). Closed form: E = (1 - 0.8^5) / 0.2 = 3.3616 tokens per
    # 10 + 4 x 1 ms round: 240.11 tok/s.
    profile = exact_profile()
    closed = analytic.sd_speedup(ALPHA, K, K * 1.0 / 10.0) * AR_TOK_S
    assert closed == pytest.approx(240.114, rel=1e-5)
    assert predict_sd(profile, 1, K).per_seq_tok_s == pytest.approx(closed, rel=1e-12)
    m = decode(profile, Plan(num_speculative_tokens=K), "sd", 300_000)
    assert m.per_seq_tok_s == pytest.approx(closed, rel=0.01)
    assert m.mean_accept_len == pytest.approx(analytic.expected_tokens(ALPHA, K), rel=0.01)


def ssd_closed_form(b: int):
    """(exact profile, its hit probability, Corollary 16's tok/s per sequence at batch b: T_p 0.5, T_b 0.4)."""
    profile = exact_profile()
    p = hit_probability(profile)
    e = analytic.expected_tokens(ALPHA, K)
    return profile, p, analytic.ssd_speedup(p, e, e, 0.5, 0.4, b) * AR_TOK_S


def test_ssd_single_sequence_matches_theorem_7_within_1pct():
    # seed 0, 400,000 tokens (about 119,000 rounds). T_p = glue 1 + branch 4 = 5 ms <= T_v; T_b = 4 ms.
    profile, p, closed = ssd_closed_form(1)
    assert closed == pytest.approx(309.968, rel=1e-5)
    plan = Plan(num_speculative_tokens=K, fan_out=FAN_OUT)
    assert predict_ssd(profile, plan).per_seq_tok_s == pytest.approx(closed, rel=1e-9)
    m = decode(profile, plan, "ssd", 400_000)
    assert m.per_seq_tok_s == pytest.approx(closed, rel=0.01)
    assert m.hit_rate == pytest.approx(p, abs=0.005)
    assert m.primary_hit_rate == pytest.approx(p, abs=0.005) and m.backup_hit_rate == pytest.approx(p, abs=0.01)


def test_ssd_batch_of_4_matches_corollary_16_within_1pct():
    # seed 0, 4 sequences x 200,000 tokens (about 60,000 rounds). A round stalls on any of the 4 misses.
    profile, p, closed = ssd_closed_form(4)
    assert closed == pytest.approx(269.969, rel=1e-5)
    plan = Plan(num_speculative_tokens=K, fan_out=FAN_OUT, batch_size=4)
    m = decode(profile, plan, "ssd", 200_000)
    assert m.per_seq_tok_s == pytest.approx(closed, rel=0.01)
    assert m.all_hit_rounds == pytest.approx(p**4, abs=0.01)
    assert m.total_tok_s == pytest.approx(4 * closed, rel=0.01)


@pytest.mark.parametrize("backup, redraft, b, fan_out_miss", [
    ("fast", "rows", 4, (8, 2, 1, 1, 0)),  # fast backup: T_b constant, k = 0 and the backup hit curve
    ("jit", "batch", 4, (4, 3, 2, 1, 2)),  # whole-batch redraft: T_b = jit(b rows), exact
    ("jit", "rows", 1, (4, 3, 2, 1, 2)),  # one row: h_b != h_p, overheads, per-position acceptance
])
def test_ssd_matches_predict_ssd_in_the_general_case_within_1pct(backup, redraft, b, fan_out_miss):
    # seed 0, b x 100,000 tokens... 400,000 tokens in all (30,000-120,000 rounds).
    profile = general_profile()
    plan = Plan(num_speculative_tokens=K, fan_out=(3, 2, 2, 1, 4), fan_out_miss=fan_out_miss, backup=backup,
                jit_redraft=redraft, batch_size=b)
    pred = predict_ssd(profile, plan)
    m = decode(profile, plan, "ssd", 400_000 // b)
    assert m.per_seq_tok_s == pytest.approx(pred.per_seq_tok_s, rel=0.01)
    assert m.round_ms == pytest.approx(pred.round_ms, rel=0.01)
    assert m.hit_rate == pytest.approx(pred.p_hit, abs=0.01)


def test_interference_slows_the_simulated_verify_as_predicted():
    prof = general_profile()
    prof = Profile(prof.name, replace(prof.latency, verify_slowdown_one_row=0.4, verify_slowdown_rows=0.1), prof.acceptance)
    for fan_out in ((0, 0, 0, 0, 1), (1, 1, 1, 1, 2)):  # one branch row per step / several
        plan = Plan(num_speculative_tokens=K, fan_out=fan_out)
        pred, m = predict_ssd(prof, plan), decode(prof, plan, "ssd", 100_000)
        assert pred.verify_ms > float(prof.latency.verify_ms(1, K))
        assert m.round_ms == pytest.approx(pred.round_ms, rel=0.01)


def test_two_draft_devices_fit_a_budget_one_device_cannot():
    # Draft forward = 1 ms + 0.05 ms per token. Budget 20 per sequence at b = 2: one device decodes 40
    # branch rows, T_p = glue 1.5 + 4 x (1 + 0.05 x 40) = 13.5 ms > T_v = 10 ms; two devices split them,
    # T_p = 1.5 + 4 x (1 + 0.05 x 20) = 9.5 ms, hidden under verification. seed 0, 2 x 100,000 tokens.
    lat = LatencyModel(ForwardLatency(fixed_ms=10.0), ForwardLatency(fixed_ms=1.0, token_ms=0.05))
    pt = AcceptancePoint(0.0, (ALPHA,), HitCurve(0.3, 0.7), HitCurve(0.3, 0.7))
    profile = Profile("scaling", lat, AcceptanceModel((pt,)))
    rates = {}
    for devices in (1, 2):
        plan = Plan(num_speculative_tokens=K, fan_out=(6, 5, 4, 2, 3), batch_size=2, draft_devices=devices)
        pred = predict_ssd(profile, plan)
        m = decode(profile, plan, "ssd", 100_000)
        assert m.per_seq_tok_s == pytest.approx(pred.per_seq_tok_s, rel=0.01)
        rates[devices] = (m.per_seq_tok_s, pred.draft_ms)
    assert rates[1][1] == pytest.approx(13.5) and rates[2][1] == pytest.approx(9.5)
    assert rates[2][0] > rates[1][0] * 1.15


def test_a_seed_makes_a_run_bit_for_bit_reproducible():
    profile = general_profile()
    plan = Plan(num_speculative_tokens=K, fan_out=(3, 2, 2, 1, 4), backup="adaptive", backup_threshold=3,
                batch_size=4)
    wl = fixed_batch(4, 300, prompt_tokens=32, output_dist="uniform")
    a = simulate(profile, plan, seed=7, workload=wl, timeline=True)
    b = simulate(profile, plan, seed=7, workload=wl, timeline=True)
    c = simulate(profile, plan, seed=8, workload=wl, timeline=True)
    assert a.to_dict() == b.to_dict()
    assert a.timeline == b.timeline
    assert a.chrome_trace() == b.chrome_trace()
    assert a.to_dict()["metrics"] != c.to_dict()["metrics"]


def slow_draft_profile(jit_glue_full: bool = False) -> Profile:
    """A draft of 1 ms + 1 ms per token, so SSD's speculation (at b = 1 a glue of 6 ms + four 6-row steps of 7 ms)
    outlasts the 10 ms verify and the glue's length sets the round; after a jit backup of every row the glue is 2 ms."""
    lat = LatencyModel(ForwardLatency(fixed_ms=8.0, memory_ms=2.0, compute_ms_per_token=0.05),
                       ForwardLatency(fixed_ms=1.0, token_ms=1.0), transfer_ms=0.2, lookup_ms=0.05,
                       jit_glue_full=jit_glue_full)
    pt = AcceptancePoint(0.0, (0.85, 0.8, 0.75, 0.7), HitCurve(0.5, 0.8), HitCurve(0.25, 0.8))
    return Profile("slow draft", lat, AcceptanceModel((pt,)))


@pytest.mark.parametrize("redraft, b", [("rows", 1), ("rows", 2), ("batch", 2)])
def test_the_glue_after_a_jit_backup_of_every_row_feeds_one_token(redraft, b):
    # seed 0, 300,000 tokens in all (about 100,000 rounds). A round after a jit backup of every row (every row
    # missed; any miss with jit_redraft = batch) speculates 4 ms sooner: its glue feeds s_K alone (1 + 1 ms, not
    # 1 + 5 ms). The reference engine's glue re-reads K + 1 tokens (jit_glue_full) and pays the 4 ms.
    plan = Plan(num_speculative_tokens=K, fan_out=(2, 1, 1, 1, 1), backup="jit", jit_redraft=redraft, batch_size=b)
    lat = slow_draft_profile().latency
    assert float(lat.glue_ms(b, K, after_jit=True)) == b + 1.0 and float(lat.glue_ms(b, K)) == 5 * b + 1.0
    cut, full = predict_ssd(slow_draft_profile(), plan), predict_ssd(slow_draft_profile(jit_glue_full=True), plan)
    pi = cut.p_hit
    p_redraft = 1 - pi**b if redraft == "batch" else (1 - pi) ** b
    assert full.round_ms - cut.round_ms == pytest.approx(p_redraft * 4.0 * b, rel=1e-9)
    for profile, pred in ((slow_draft_profile(), cut), (slow_draft_profile(jit_glue_full=True), full)):
        m = decode(profile, plan, "ssd", 300_000 // b)
        assert m.round_ms == pytest.approx(pred.round_ms, rel=0.005)
        assert m.per_seq_tok_s == pytest.approx(pred.per_seq_tok_s, rel=0.01)
