"""Latency models: roofline + overhead forms and the least-squares fit."""

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.latency import (
    ForwardLatency,
    LatencyModel,
    fit_forward_latency,
    overlapped_ms,
    workload_ms,
)


def test_roofline_from_specs():
    # 70B bf16 over 4 GPUs at 3.35 TB/s: 35.3 GB per GPU -> 10.54 ms
    m = ForwardLatency.roofline(70.6, 2, 4, 3.35, 989.0, mfu=0.6)
    assert m.memory_ms == pytest.approx(70.6e9 * 2 / 4 / 3.35e12 * 1e3)
    assert m.compute_ms_per_token == pytest.approx(2 * 70.6e9 / 4 / (989e12 * 0.6) * 1e3)
    # memory-bound at one token, compute-bound at 1,000 tokens
    assert m(1, 1) == pytest.approx(m.memory_ms)
    assert m(1000, 1) == pytest.approx(1000 * m.compute_ms_per_token)


def test_forward_latency_formula_and_broadcast():
    m = ForwardLatency(fixed_ms=2.0, memory_ms=5.0, compute_ms_per_token=0.1, token_ms=0.5, token_exponent=0.5)
    assert m(4, 1) == pytest.approx(2.0 + 5.0 + 0.5 * 2.0)
    assert m(10, 10) == pytest.approx(2.0 + 10.0 + 0.5 * 10.0)
    assert m(np.array([1, 4]), 1).shape == (2,)


def test_negative_parameters_are_rejected_with_the_field_name():
    with pytest.raises(ConfigError, match="fixed_ms"):
        ForwardLatency(fixed_ms=-1.0)


def test_sd_first_draft_step_feeds_two_tokens_after_an_all_accepted_round():
    d = ForwardLatency(fixed_ms=0.5, token_ms=0.1)  # (1, 1) 0.6 ms, (1, 2) 0.7 ms; (2, 1) 0.7, (2, 2) 0.9
    lat = LatencyModel(ForwardLatency(fixed_ms=1.0), d)
    assert lat.sd_draft_ms(1, 3, 1.0) == pytest.approx(0.7 + 2 * 0.6)  # every round: first step 2 tokens
    assert lat.sd_draft_ms(1, 3, 0.25) == pytest.approx(0.75 * 0.6 + 0.25 * 0.7 + 2 * 0.6)
    # b = 2: the batch's first step is 2 tokens wide when either row accepted all: 1 - 0.75^2 = 0.4375
    assert lat.sd_draft_ms(2, 3, 0.25) == pytest.approx(0.5625 * 0.7 + 0.4375 * 0.9 + 2 * 0.7)
    assert list(lat.sd_draft_ms(np.array([0, 1]), 3, 0.25)) == pytest.approx([3 * 0.5, 1.825])  # vectorised over b
    # the reference engine feeds the K-th token with a (K + 1)-th one-token step instead
    ref = LatencyModel(ForwardLatency(fixed_ms=1.0), d, sd_extra_forward=True)
    assert ref.sd_draft_ms(1, 3, 1.0) == pytest.approx(4 * 0.6)


def test_latency_model_round_pieces():
    t = ForwardLatency(fixed_ms=1.0, token_ms=1.0)  # 1 + N ms
    d = ForwardLatency(fixed_ms=0.5, token_ms=0.1)  # 0.5 + 0.1 N ms
    lat = LatencyModel(t, d, round_overhead_ms=0.2)
    assert lat.ar_step_ms(2) == pytest.approx(1 + 2 + 0.2)
    assert lat.verify_ms(1, 3) == pytest.approx(1 + 4 + 0.2)
    assert lat.sd_draft_ms(1, 3, 0.0) == pytest.approx(3 * 0.6)
    assert lat.glue_ms(2, 3) == pytest.approx(0.5 + 0.8)
    # primary: glue + K steps over b x budget rows, split across draft devices
    assert lat.primary_ms(2, 3, 4) == pytest.approx(1.3 + 3 * (0.5 + 0.8))
    assert lat.primary_ms(2, 3, 4, draft_devices=2) == pytest.approx(1.3 + 3 * (0.5 + 0.4))
    assert lat.jit_backup_ms(0, 3) == 0.0


def test_after_a_jit_backup_of_every_row_the_glue_feeds_one_token_unless_the_engine_rereads_all():
    t = ForwardLatency(fixed_ms=100.0, token_ms=10.0)  # a verify of 1 x 3 tokens: 130 ms
    d = ForwardLatency(fixed_ms=20.0, token_ms=10.0)  # glue of 1 x 3 tokens 50 ms, of 1 x 1 token 30 ms
    lat = LatencyModel(t, d, draft_slowdown=0.1, verify_slowdown_one_row=0.5, verify_slowdown_rows=0.2)
    assert lat.glue_ms(1, 2) == 50.0 and lat.glue_ms(1, 2, after_jit=True) == 30.0
    assert lat.glue_ms(2, 2, after_jit=True) == 40.0  # two rows of one token each
    # primary: (glue + 2 steps of 4 branch rows at 60 ms) x 1.1
    assert lat.primary_ms(1, 2, 4) == pytest.approx(1.1 * 170.0)
    assert lat.primary_ms(1, 2, 4, after_jit=True) == pytest.approx(1.1 * 150.0)
    # the verify progresses at 1 / 1.2 during the glue (55 or 33 ms) and the multi-row branch (132 ms) alike
    assert float(lat.ssd_verify_ms(1, 2, 4)) == pytest.approx(130.0 * 1.2)
    assert float(lat.ssd_verify_ms(1, 2, 4, after_jit=True)) == pytest.approx(130.0 * 1.2)
    # with the glue alone the shorter glue leaves more of the verify at full speed: 33 + (130 - 33 / 1.2)
    assert float(lat.ssd_verify_ms(1, 2, 0, after_jit=True)) == pytest.approx(33.0 + 130.0 - 33.0 / 1.2)
    ref = LatencyModel(t, d, jit_glue_full=True)  # the reference engine re-reads K + 1 tokens every round
    assert ref.glue_ms(1, 2, after_jit=True) == 50.0
    assert ref.primary_ms(1, 2, 4, after_jit=True) == ref.primary_ms(1, 2, 4) == 170.0


def test_fit_recovers_known_parameters():
    truth = ForwardLatency(fixed_ms=3.0, token_ms=0.8, token_exponent=0.7)
    work = [[(r, t, 1)] for r, t in [(1, 1), (1, 4), (4, 1), (8, 1), (16, 1), (2, 8)]]
    y = [workload_ms(truth, w) for w in work]
    model, rep = fit_forward_latency(work, y)
    assert model.fixed_ms == pytest.approx(3.0, rel=1e-3)
    assert model.token_ms == pytest.approx(0.8, rel=1e-3)
    assert model.token_exponent == pytest.approx(0.7, rel=1e-3)
    assert rep.r2 == pytest.approx(1.0)
    assert rep.max_abs_rel_err < 1e-6


def test_multi_token_cost_is_paid_once_beyond_one_token():
    # CPU kernels: 1 token uses matrix-vector products, 2+ tokens matrix-matrix ones
    m = ForwardLatency(fixed_ms=350.0, token_ms=10.0, multi_token_ms=120.0)
    assert m(1, 1) == pytest.approx(360.0)
    assert m(1, 2) == pytest.approx(350.0 + 20.0 + 120.0)
    assert m(2, 1) == pytest.approx(m(1, 2))
    assert m(np.array([1, 5]), 1) == pytest.approx([360.0, 520.0])


def test_fit_recovers_a_multi_token_step():
    truth = ForwardLatency(fixed_ms=300.0, token_ms=20.0, token_exponent=1.0, multi_token_ms=90.0)
    work = [[(r, t, 1)] for r, t in [(1, 1), (1, 2), (1, 3), (1, 5), (2, 1), (4, 1), (1, 8)]]
    free = ("fixed_ms", "token_ms", "token_exponent", "multi_token_ms")
    model, rep = fit_forward_latency(work, [workload_ms(truth, w) for w in work], free=free)
    assert model.multi_token_ms == pytest.approx(90.0, rel=1e-2)
    assert rep.max_abs_rel_err < 1e-3


def test_overlapped_work_runs_slower_only_while_the_other_device_works():
    assert overlapped_ms(300.0, []) == 300.0
    assert overlapped_ms(300.0, [(1000.0, 0.5)]) == pytest.approx(450.0)  # overlapped throughout
    # 100 ms at 1/1.05, 250 ms at 1/1.4, then alone
    assert overlapped_ms(300.0, [(100.0, 0.05), (250.0, 0.4)]) == pytest.approx(350 + 300 - 100 / 1.05 - 250 / 1.4)
    np.testing.assert_allclose(overlapped_ms(np.array([50.0, 300.0]), [(100.0, 1.0)]), [100.0, 350.0])


def test_ssd_verify_is_slowed_by_the_kind_of_branch_step():
    lat = LatencyModel(ForwardLatency(fixed_ms=300.0), ForwardLatency(fixed_ms=100.0),
                       verify_slowdown_one_row=0.5, verify_slowdown_rows=0.1)
    # b = 1, K = 2: glue 100 ms (+10%), branch 2 x 100 ms (one row: +50%), then the verify runs alone
    assert float(lat.ssd_verify_ms(1, 2, 1)) == pytest.approx(300 + (300 - 100 / 1.1 - 200 / 1.5))
    assert float(lat.ssd_verify_ms(1, 2, 3)) == pytest.approx(300 + (300 - 300 / 1.1))  # three rows per step
    assert float(lat.ssd_verify_ms(1, 2, 0)) == pytest.approx(100 + (300 - 100 / 1.1))  # glue only
    assert float(LatencyModel(lat.target, lat.draft).ssd_verify_ms(1, 2, 1)) == float(lat.verify_ms(1, 2))
    with pytest.raises(ConfigError, match="verify_slowdown_rows"):
        LatencyModel(lat.target, lat.draft, verify_slowdown_rows=-0.1)


def test_a_fit_that_ends_on_a_bound_says_so():
    # times that grow faster than any allowed exponent (bound 1.5): the curve is not identified by these shapes
    work = [[(1, n, 1)] for n in (1, 2, 4, 8)]
    steep, rep = fit_forward_latency(work, [10.0, 30.0, 120.0, 700.0])
    assert steep.token_exponent == pytest.approx(1.5) and rep.at_bound == ("token_exponent",)
    # a curve inside the bounds: nothing flagged (a 0 ms term is a value, not a bound hit)
    _, ok = fit_forward_latency(work, [ForwardLatency(fixed_ms=5.0, token_ms=2.0)(1, n) for n in (1, 2, 4, 8)])
    assert ok.at_bound == ()


FOUR = ("fixed_ms", "token_ms", "token_exponent", "multi_token_ms")


def test_two_timed_sizes_fit_a_line_and_hold_the_curvature_and_the_step():
    """Verifies at 1 and 3 tokens pin two parameters: fitting four left a valley of equal cost (exponent 1.34 on one
    CPU kind, 0.40 on another); now the exponent is held at 1 and the step at 0, and the line goes through both."""
    work = [[(1, 1, 1)], [(1, 3, 1)], [(1, 1, 1)], [(1, 3, 1)]]
    model, rep = fit_forward_latency(work, [365.0, 510.0, 364.0, 511.0], free=FOUR)
    assert rep.pinned == ("token_exponent", "multi_token_ms") and rep.sizes == (1.0, 3.0)
    assert (model.token_exponent, model.multi_token_ms) == (1.0, 0.0)
    assert model(1, 1) == pytest.approx(364.5, rel=1e-3) and model(1, 3) == pytest.approx(510.5, rel=1e-3)
    assert model(1, 5) == pytest.approx(656.5, rel=2e-3)  # the line, extrapolated


def test_three_sizes_hold_only_the_step_and_four_free_everything():
    truth = ForwardLatency(fixed_ms=300.0, token_ms=20.0, token_exponent=1.2, multi_token_ms=50.0)
    three = [[(1, n, 1)] for n in (1, 3, 5)]
    _, rep3 = fit_forward_latency(three, [workload_ms(truth, w) for w in three], free=FOUR)
    four = [[(1, n, 1)] for n in (1, 2, 3, 5)]
    _, rep4 = fit_forward_latency(four, [workload_ms(truth, w) for w in four], free=FOUR)
    assert rep3.pinned == ("multi_token_ms",) and rep4.pinned == ()


def test_sizes_are_rows_times_tokens_so_a_batch_of_single_tokens_counts_as_its_product():
    from ssd_sim.model.latency import FlatWorkloads, identifiable

    flat = FlatWorkloads([[(2, 1, 1)], [(1, 2, 1)], [(1, 1, 3)]])
    assert flat.sizes() == (1.0, 2.0)
    assert identifiable(FOUR, flat) == (["fixed_ms", "token_ms"], {"token_exponent": 1.0, "multi_token_ms": 0.0})


def test_many_workloads_cost_what_each_costs_alone_bit_for_bit():
    """FlatWorkloads.ms sums each workload's forwards in order, so a fit sees exactly workload_ms (a fit at a bound
    or a tie must not move with how the sums are vectorised)."""
    from ssd_sim.model.latency import FlatWorkloads

    rng = np.random.default_rng(7)
    model = ForwardLatency(fixed_ms=12.3, token_ms=1.7, token_exponent=0.83, multi_token_ms=0.9)
    for n in (0, 1, 5, 40):
        workloads = [[(int(rng.integers(1, 5)), int(rng.integers(1, 9)), float(rng.random() * 7))
                      for _ in range(int(rng.integers(0, 6)))] for _ in range(n)]
        got = FlatWorkloads(workloads).ms(model)
        assert got.shape == (n,) and got.tolist() == [workload_ms(model, w) for w in workloads]
    assert FlatWorkloads([[], [(1, 1, 2.0)], []]).ms(model).tolist() == [0.0, 2 * model(1, 1), 0.0]


WAKES = {"target_after_idle": ((5.0, 10.0), (50.0, 40.0), (500.0, 40.0)),
         "draft_after_idle": ((5.0, 5.0), (50.0, 30.0), (500.0, 30.0))}


def test_a_forward_after_an_idle_gap_pays_the_wake_interpolated_from_0_ms_at_no_gap_and_flat_beyond():
    lat = LatencyModel(ForwardLatency(fixed_ms=300.0), ForwardLatency(fixed_ms=100.0), **WAKES)
    assert lat.wake_ms("target", 0.0) == 0.0 and lat.wake_ms("target", 2.5) == pytest.approx(5.0)
    assert lat.wake_ms("target", 27.5) == pytest.approx(25.0) and lat.wake_ms("target", 5000.0) == 40.0
    np.testing.assert_allclose(lat.wake_ms("draft", np.array([5.0, 100.0])), [5.0, 30.0])
    assert LatencyModel(lat.target, lat.draft).wake_ms("draft", 100.0) == 0.0  # unmeasured: no wake


def test_sd_pays_the_targets_wake_after_the_drafting_and_the_drafts_after_the_verify():
    t, d = ForwardLatency(fixed_ms=300.0), ForwardLatency(fixed_ms=100.0)
    lat = LatencyModel(t, d, **WAKES)
    # the target sleeps through 3 x 100 ms of drafting (+40 ms), the draft through the 300 ms verify (+30 ms)
    assert lat.sd_verify_ms(1, 3, 0.0) == pytest.approx(340.0) and lat.sd_draft_ms(1, 3, 0.0) == pytest.approx(330.0)
    plain = LatencyModel(t, d)
    assert plain.sd_verify_ms(1, 3, 0.0) == plain.verify_ms(1, 3) == 300.0 and plain.sd_draft_ms(1, 3, 0.0) == 300.0


def test_ssd_pays_the_wake_of_whichever_side_waits():
    t, d = ForwardLatency(fixed_ms=300.0), ForwardLatency(fixed_ms=100.0)
    lat = LatencyModel(t, d, transfer_ms=4.0, lookup_ms=1.0, **WAKES)
    # budget 1: glue 100 + 2 x 100 branch = 300 ms = the verify: the target waits transfer + lookup = 5 ms, the draft 2
    target, draft = lat.ssd_wakes_ms(1, 2, 1)
    assert float(target) == pytest.approx(10.0) and float(draft) == pytest.approx(2.0)
    assert float(lat.ssd_verify_ms(1, 2, 1)) == pytest.approx(310.0) and float(lat.primary_ms(1, 2, 1)) == 302.0
    # budget 0: the glue alone (100 ms): the draft sleeps 200 + 2 ms before the next request; the target 5 ms
    assert float(lat.ssd_wakes_ms(1, 2, 0)[1]) == pytest.approx(30.0)
    late = LatencyModel(t, ForwardLatency(fixed_ms=150.0), transfer_ms=4.0, lookup_ms=1.0, **WAKES)
    tw, dw = late.ssd_wakes_ms(1, 2, 1)  # t_p = 450 ms: the target waits 150 + 5 ms (+40), the draft 2 ms
    assert float(tw) == pytest.approx(40.0) and float(dw) == pytest.approx(2.0)


def test_wakes_round_trip_through_a_profile_and_are_absent_when_unmeasured():
    from ssd_sim.model.table import latency_from_dict

    lat = LatencyModel(ForwardLatency(fixed_ms=300.0), ForwardLatency(fixed_ms=100.0), **WAKES)
    back = latency_from_dict(lat.to_dict())
    assert back.target_after_idle == WAKES["target_after_idle"] and back == lat
    assert "target_after_idle" not in LatencyModel(lat.target, lat.draft).to_dict()
    with pytest.raises(ConfigError) as e:
        LatencyModel(lat.target, lat.draft, draft_after_idle=[[50.0, 1.0], [5.0, 1.0]])
    assert e.value.field == "draft_after_idle" and "ascending" in str(e.value)


def test_a_profile_written_before_jit_glue_full_reads_it_from_its_engine():
    from ssd_sim.model.table import latency_from_dict

    d = LatencyModel(ForwardLatency(fixed_ms=1.0), ForwardLatency(fixed_ms=0.5), sd_extra_forward=True).to_dict()
    d.pop("jit_glue_full")
    assert latency_from_dict(d).jit_glue_full  # the reference engine's K + 1 SD forwards: its glue re-reads K + 1
    assert not latency_from_dict({**d, "sd_extra_forward": False}).jit_glue_full  # ssd-run
    assert not latency_from_dict({**d, "jit_glue_full": False}).jit_glue_full  # written: kept
