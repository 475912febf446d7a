"""Tiny deterministic scenarios of the event model: forced outcomes, exact event logs and timelines.

Latencies are constants so every time below can be checked by hand: the target forward takes 10 ms
whatever its size, the draft forward 1 ms (so glue = 1 ms, branch decode and jit backup = K x 1 ms).
"""

from __future__ import annotations

import pytest

from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve
from ssd_sim.model.latency import ForwardLatency, LatencyModel
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan
from ssd_sim.sim import des, outcomes, round_latency
from ssd_sim.sim.des import simulate
from ssd_sim.sim.outcomes import ForcedOutcomes
from ssd_sim.sim.workload import Workload, arrivals, fixed_batch, poisson


def tiny_profile(draft: ForwardLatency | None = None, **overheads) -> Profile:
    lat = LatencyModel(ForwardLatency(fixed_ms=10.0), draft or ForwardLatency(fixed_ms=1.0), **overheads)
    pt = AcceptancePoint(0.0, (0.8,), HitCurve(0.3, 0.7), HitCurve(0.3, 0.7))
    return Profile("tiny", lat, AcceptanceModel((pt,)))


def test_ssd_first_round_misses_then_hits_then_misses_exact_event_log():
    # K = 2, one sequence of 7 tokens after a 16-token prompt: prefill gives token 1, then rounds commit
    # 3 (k=2, served by the jit backup: the first round always misses), 2 (k=1, a hit) and 1 (a miss;
    # capped at the output length). transfer 0.4 ms = 0.2 request + 0.2 reply, lookup 0.1 ms.
    profile = tiny_profile(transfer_ms=0.4, lookup_ms=0.1)
    plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 1))
    forced = ForcedOutcomes(accepted=[[2, 1, 2]], next_hit=[[True, False, True]])
    res = simulate(profile, plan, workload=fixed_batch(1, 7, prompt_tokens=16), timeline=True, outcomes=forced)
    assert res.event_log() == [
        (0.0, "target", "prefill"),  # target forward over the prompt, 10 ms
        (0.0, "draft", "prefill"),  # the draft prefills the same prompt on its own device, 1 ms
        (1.0, "draft", "wait"),
        (10.0, "target", "wait"),  # round 0: request, wait for the reply
        (10.0, "draft", "request"),
        (10.2, "draft", "lookup"),
        (10.3, "draft", "backup"),  # miss: jit redraft, K x 1 ms
        (12.3, "draft", "reply"),
        (12.5, "target", "verify"),
        (12.5, "draft", "glue"),  # speculation for the next round while the target verifies
        (13.5, "draft", "branch"),
        (15.5, "draft", "wait"),
        (22.5, "target", "wait"),  # round 1: a hit, no backup
        (22.5, "draft", "request"),
        (22.7, "draft", "lookup"),
        (22.8, "draft", "reply"),
        (23.0, "target", "verify"),
        (23.0, "draft", "glue"),
        (24.0, "draft", "branch"),
        (26.0, "draft", "wait"),
        (33.0, "target", "wait"),  # round 2: a miss again
        (33.0, "draft", "request"),
        (33.2, "draft", "lookup"),
        (33.3, "draft", "backup"),
        (35.3, "draft", "reply"),
        (35.5, "target", "verify"),
        (35.5, "draft", "glue"),
        (36.5, "draft", "branch"),
    ]
    m = res.metrics
    assert m.sim_ms == pytest.approx(45.5)
    assert m.rounds == 3 and m.output_tokens == 7
    assert m.ttft_ms_p50 == pytest.approx(10.0)
    assert m.tpot_ms_p50 == pytest.approx(35.5 / 6)  # 6 decode tokens in 35.5 ms
    assert m.hit_rate == pytest.approx(0.5)  # rounds 1 and 2 looked up (round 0 cannot hit); one hit
    assert m.tokens_per_round_hit == 2 and m.tokens_per_round_miss == 1
    assert m.backup_rounds == {"jit": 2, "fast": 0}
    assert m.target_wait_ms == pytest.approx(2.5 + 0.5 + 2.5)


def test_hit_round_lasts_transfer_lookup_and_verify_miss_round_adds_the_backup():
    profile = tiny_profile(transfer_ms=0.4, lookup_ms=0.1)
    plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 1))
    forced = ForcedOutcomes(accepted=[[0]], next_hit=[[True, True, False]])
    res = simulate(profile, plan, workload=fixed_batch(1, 6, prompt_tokens=0), timeline=True, outcomes=forced)
    verify_starts = [s.start_ms for s in res.timeline if s.name == "verify"]
    rounds = [b - a for a, b in zip(verify_starts, verify_starts[1:], strict=False)]
    # Round j lasts from its reply to the next reply: verify 10 + transfer 0.4 + lookup 0.1 (+ backup 2).
    # Outcomes: miss (first), hit, hit, miss, hit, hit (next_hit cycles True, True, False).
    assert rounds == pytest.approx([10.5, 10.5, 12.5, 10.5, 10.5])


def test_slow_draft_makes_the_target_wait_for_the_speculation():
    # A 3 ms draft forward, K = 4: T_p = glue 3 + branch 4 x 3 = 15 ms > T_v = 10 ms, so after the first
    # round (jit backup 12 ms, then verify) every round lasts T_p and the target waits 5 ms for the draft.
    profile = tiny_profile(draft=ForwardLatency(fixed_ms=3.0))
    plan = Plan(num_speculative_tokens=4, fan_out=(1, 1, 1, 1, 1))
    forced = ForcedOutcomes(accepted=[[4]], next_hit=[[True]])
    res = simulate(profile, plan, workload=fixed_batch(1, 20, prompt_tokens=0), timeline=True, outcomes=forced)
    waits = [(s.start_ms, s.dur_ms) for s in res.timeline if s.device == "target" and s.name == "wait"]
    assert waits == [(0.0, pytest.approx(12.0)), (pytest.approx(22.0), pytest.approx(5.0)),
                     (pytest.approx(37.0), pytest.approx(5.0)), (pytest.approx(52.0), pytest.approx(5.0))]
    assert res.metrics.sim_ms == pytest.approx(67.0)  # backup 12 + verify 10, then 3 rounds of max(T_v, T_p) = 15
    assert res.metrics.target_wait_ms == pytest.approx(12.0 + 3 * 5.0)


def test_whole_batch_jit_redraft_backs_up_every_row_per_row_only_the_missed():
    # Draft latency grows with rows (1 ms per row-token): a jit backup of r rows costs K x r ms.
    profile = tiny_profile(draft=ForwardLatency(token_ms=1.0))
    forced = ForcedOutcomes(accepted=[[1], [1]], next_hit=[[False], [True]])  # seq 0 always misses, seq 1 hits
    backups = {}
    for redraft in ("rows", "batch"):
        plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 1), batch_size=2, jit_redraft=redraft)
        res = simulate(profile, plan, workload=fixed_batch(2, 5, prompt_tokens=0), timeline=True, outcomes=forced)
        backups[redraft] = [(s.rows, s.dur_ms) for s in res.timeline if s.name == "backup"]
    assert backups["rows"] == [(2, 4.0), (1, 2.0), (1, 2.0)]  # round 0: both new rows miss
    assert backups["batch"] == [(2, 4.0), (2, 4.0), (2, 4.0)]


def test_fast_backup_rows_accept_nothing_and_commit_one_token():
    profile = tiny_profile(fast_backup_ms=0.5)
    plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 1), backup="fast")
    forced = ForcedOutcomes(accepted=[[2]], next_hit=[[False]])  # never hits: every round is a fast backup
    res = simulate(profile, plan, workload=fixed_batch(1, 4, prompt_tokens=0), timeline=True, outcomes=forced)
    m = res.metrics
    assert m.rounds == 4 and m.mean_accept_len == 1.0 and m.acceptance_rate == 0.0
    assert [s.dur_ms for s in res.timeline if s.name == "backup"] == [0.5] * 4
    assert m.backup_rounds == {"jit": 0, "fast": 4}


def test_sd_round_is_k_draft_steps_then_verify_on_the_target():
    profile = tiny_profile()
    plan = Plan(num_speculative_tokens=3)
    forced = ForcedOutcomes(accepted=[[3, 0]])
    res = simulate(profile, plan, mode="sd", workload=fixed_batch(1, 6, prompt_tokens=8), timeline=True,
                   outcomes=forced)
    assert res.event_log() == [
        (0.0, "target", "prefill"),  # target 10 ms + colocated draft 1 ms
        (11.0, "target", "draft"),
        (14.0, "target", "verify"),  # round 0: 4 tokens (k = 3 + bonus)
        (24.0, "target", "draft"),
        (27.0, "target", "verify"),  # round 1: k = 0, 1 token: 1 + 4 + 1 = 6
    ]
    assert res.metrics.sim_ms == pytest.approx(37.0)
    assert res.devices == ["target"]


def test_sd_drafting_prices_a_two_token_first_step_at_its_share_of_all_accepted_rounds():
    # Draft 1 + 0.5 x tokens ms: a one-token step 1.5 ms, the 2-token first step after an all-accepted round 2 ms.
    # Half the forced rounds accept all K = 3, so a round's drafting is 2 x 1.5 + (0.5 x 1.5 + 0.5 x 2) ms, except the
    # request's first round: it follows the prefill, not a round, so its first step feeds one token (3 x 1.5 ms).
    profile = tiny_profile(draft=ForwardLatency(fixed_ms=1.0, token_ms=0.5))
    forced = ForcedOutcomes(accepted=[[3, 0]])
    runs = {loop: simulate(profile, Plan(num_speculative_tokens=3), mode="sd", workload=fixed_batch(1, 5, prompt_tokens=0),
                           timeline=loop == "simpy", outcomes=forced, loop=loop) for loop in ("simpy", "direct")}
    assert [s.dur_ms for s in runs["simpy"].timeline if s.name == "draft"] == pytest.approx([4.5, 4.75])
    for res in runs.values():  # rounds commit 4 then 1 tokens
        assert res.metrics.sim_ms == pytest.approx(4.5 + 4.75 + 2 * 10.0)


def test_sd_first_rounds_of_a_batch_price_the_two_token_step_for_the_other_rows_only():
    # b = 2, P(all K accepted) = 0.5 per row: a round with one fresh row takes the 2-token first step with probability
    # 0.5 (the other row), a round with none 1 - 0.5^2 = 0.75; a step over both rows costs 1 + 0.5 x 2 = 2 ms (one
    # token each) or 1 + 0.5 x 4 = 3 ms (two each).
    lat = round_latency.round_latency(tiny_profile(draft=ForwardLatency(fixed_ms=1.0, token_ms=0.5)).latency,
                                      Plan(num_speculative_tokens=3, batch_size=2), 2, p_all=0.5)
    assert lat.sd_phases(2, 0)[0] == pytest.approx(lat.at(2).sd_draft) == pytest.approx(2 * 2 + 0.25 * 2 + 0.75 * 3)
    assert lat.sd_phases(2, 1)[0] == pytest.approx(2 * 2 + 0.5 * 2 + 0.5 * 3)
    assert lat.sd_phases(2, 2)[0] == pytest.approx(3 * 2)
    assert lat.sd_phases(2, 2)[1] == pytest.approx(lat.at(2).verify)  # no wake measured: the verify is the same


def test_ar_continuous_batching_admits_an_arrival_at_the_next_step_boundary():
    # Requests at 0 and 4 ms, 3 tokens each, no prompt: the second joins when the first step ends (10 ms).
    res = simulate(tiny_profile(), Plan(), mode="ar", timeline=True,
                   workload=arrivals([0.0, 4.0], max_batch=2, output_tokens=3, prompt_tokens=0))
    steps = [(s.start_ms, s.rows) for s in res.timeline if s.name == "step"]
    assert steps == [(0.0, 1), (10.0, 2), (20.0, 2), (30.0, 1)]
    assert res.metrics.ttft_ms_p50 == pytest.approx((10.0 + 16.0) / 2)  # first tokens at 10 and 20 ms
    assert res.metrics.sim_ms == pytest.approx(40.0)


def test_a_full_batch_queues_the_next_request_until_a_sequence_finishes():
    res = simulate(tiny_profile(), Plan(), mode="ar", timeline=True,
                   workload=arrivals([0.0, 0.0, 0.0], max_batch=2, output_tokens=2, prompt_tokens=0))
    assert [(s.start_ms, s.rows) for s in res.timeline] == [(0.0, 2), (10.0, 2), (20.0, 1), (30.0, 1)]
    assert res.metrics.ttft_ms_p99 == pytest.approx(29.6)  # TTFTs 10, 10, 30 ms


def test_poisson_workload_needs_a_rate():
    from ssd_sim.io.errors import ConfigError

    with pytest.raises(ConfigError, match="rate"):
        poisson(rate=0.0, num_requests=3, max_batch=2)


def test_draft_devices_split_branch_rows_and_each_runs_the_glue():
    profile = tiny_profile(draft=ForwardLatency(token_ms=0.1))
    plan = Plan(num_speculative_tokens=2, fan_out=(2, 2, 1), draft_devices=2, batch_size=1)
    forced = ForcedOutcomes(accepted=[[2]], next_hit=[[True]])
    res = simulate(profile, plan, workload=fixed_batch(1, 3, prompt_tokens=0), timeline=True, outcomes=forced)
    branch = [(s.device, s.rows) for s in res.timeline if s.name == "branch"]
    assert branch == [("draft0", 3), ("draft1", 2)]  # budget 5 rows split 3 + 2
    assert [s.device for s in res.timeline if s.name == "glue"] == ["draft0", "draft1"]
    assert res.devices == ["target", "draft0", "draft1"]
    assert res.metrics.devices == 3


def test_one_token_outputs_leave_at_their_prefill_and_the_queued_request_is_admitted_at_once():
    # One slot, three requests at t = 0 of 1, 1 and 2 tokens: prefills 0-10, 10-20, 20-30 ms (each prefill
    # samples a first token), then one step 30-40 ms for the last token. Used to crash: "Negative delay".
    res = simulate(tiny_profile(), Plan(), mode="ar", timeline=True,
                   workload=Workload("arrivals", 3, 1, 0.0, 1, "fixed", 4, (0.0, 0.0, 0.0), (1, 1, 2)))
    assert [(s.start_ms, s.name) for s in res.timeline] == [(0.0, "prefill"), (10.0, "prefill"), (20.0, "prefill"),
                                                             (30.0, "step")]
    m = res.metrics
    assert m.sim_ms == pytest.approx(40.0) and m.rounds == 1 and m.output_tokens == 4
    assert (m.ttft_ms_p50, m.ttft_ms_p99) == (pytest.approx(20.0), pytest.approx(29.8))  # TTFTs 10, 20, 30 ms


def test_ssd_one_token_request_between_longer_ones_keeps_the_draft_in_step():
    # SSD, one slot: a 1-token request between two 3-token ones. Each 3-token request decodes two rounds after
    # its prefill; the 1-token request only prefills.
    forced = ForcedOutcomes(accepted=[[1]], next_hit=[[True]])
    plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 1))
    wl = Workload("arrivals", 3, 1, 0.0, 1, "fixed", 4, (0.0, 0.0, 0.0), (3, 1, 3))
    m = simulate(tiny_profile(), plan, workload=wl, outcomes=forced).metrics
    assert m.sequences == 3 and m.output_tokens == 7 and m.rounds == 2


def test_the_timeline_keeps_its_first_max_spans_and_says_where_it_was_cut(monkeypatch):
    monkeypatch.setattr(des, "MAX_SPANS", 5)
    res = simulate(tiny_profile(), Plan(), mode="ar", timeline=True,
                   workload=fixed_batch(1, 20, prompt_tokens=0))
    assert [s.start_ms for s in res.timeline] == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert res.timeline_cut_ms == 50.0 and res.metrics.sim_ms == pytest.approx(200.0)
    meta = res.chrome_trace()["otherData"]
    assert meta["timeline_cut_ms"] == 50.0 and "first 5 spans" in meta["note"]


def test_drawing_in_blocks_changes_nothing_but_memory(monkeypatch):
    # Forced outcomes do not depend on the random stream, so a run drawn 3 rounds at a time must equal one drawn
    # whole: same event log, same counts across block boundaries (hits after a hit / a miss), adaptive backup
    # redraws included (b* = 2: jit while one sequence runs, fast with two or three).
    forced = ForcedOutcomes(accepted=[[2, 0, 1, 2, 2], [1, 2], [0, 1, 2]],
                            next_hit=[[True, False, True, True], [False, True], [True, True, False]])
    plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 1), backup="adaptive", backup_threshold=2.0, batch_size=3)
    wl = arrivals([0.0, 15.0, 60.0], max_batch=3, output_tokens=40, prompt_tokens=4)

    def run():
        return simulate(tiny_profile(fast_backup_ms=0.5), plan, workload=wl, outcomes=forced, timeline=True)

    whole = run()
    monkeypatch.setattr(outcomes, "BLOCK_ROUNDS", 3)
    blocks = run()
    assert blocks.metrics.to_dict() == whole.metrics.to_dict()
    assert blocks.event_log() == whole.event_log()
    assert whole.metrics.backup_rounds["jit"] > 0 and whole.metrics.backup_rounds["fast"] > 0
    assert whole.metrics.rounds > 3 * 3  # many blocks per sequence
