"""Outcome streams: the vectorised hit chain, exact output lengths, per-position draws, trace replay."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssd_sim.io.trace import Trace
from ssd_sim.model.acceptance import AcceptancePoint, HitCurve, HitTable
from ssd_sim.plan.plan import Plan
from ssd_sim.sim.outcomes import ModelOutcomes, OutcomeTables, ReplayOutcomes, build_stream, hit_chain


def loop_chain(first, after_hit, after_miss):
    h = [bool(first)]
    for a, b in zip(after_hit[:-1], after_miss[:-1], strict=True):
        h.append(bool(a if h[-1] else b))
    return h[: len(after_hit)]


@settings(max_examples=200, deadline=None)
@given(st.booleans(), st.lists(st.tuples(st.booleans(), st.booleans()), max_size=40))
def test_hit_chain_equals_the_round_by_round_recursion(first, pairs):
    a = np.array([p[0] for p in pairs], dtype=bool)
    b = np.array([p[1] for p in pairs], dtype=bool)
    assert hit_chain(first, a, b).tolist() == loop_chain(first, a, b)


def tables(acceptance=(0.9, 0.7, 0.5), fan_out=(1, 1, 1, 1)):
    pt = AcceptancePoint(0.0, acceptance, HitCurve(0.3, 0.7), HitCurve(0.2, 0.7))
    plan = Plan(num_speculative_tokens=3, fan_out=fan_out)
    return OutcomeTables.from_point(pt, plan), plan


@pytest.mark.parametrize("mode, backup", [("ar", "jit"), ("sd", "jit"), ("ssd", "jit"), ("ssd", "fast")])
def test_a_stream_commits_exactly_the_tokens_it_needs(mode, backup):
    t, _ = tables()
    s = build_stream(ModelOutcomes(t), np.random.default_rng(0), mode, 1000, backup=backup)
    assert int(s.committed.sum()) == 1000 and s.committed.min() >= 1
    assert np.all(s.committed[:-1] == s.accepted[:-1] + 1)
    if mode == "ssd":
        assert not s.hit[0]  # a new sequence's first round always misses
        if backup == "fast":
            assert np.all(s.accepted[~s.hit] == 0)  # random tokens are never accepted


def test_drawn_accept_counts_follow_the_per_position_pmf():
    t, _ = tables()
    draws = ModelOutcomes(t).draws(np.random.default_rng(1), 0, 0, 200_000)
    freq = np.bincount(draws.accepted, minlength=4) / 200_000
    assert freq == pytest.approx(t.accept_pmf, abs=0.004)  # pmf 0.1, 0.27, 0.315, 0.315


def test_replay_keeps_each_trace_sequence_and_clips_k_to_the_plan():
    rounds = [{"round": i, "K": 5, "seqs": [{"seq": 0, "accepted": 5, "bonus": 1, "committed": 6, "bonus_rank": 0},
                                            {"seq": 1, "accepted": 1, "bonus": 1, "committed": 2, "bonus_rank": 2}],
               "timings_ms": {}} for i in range(3)]
    trace = Trace({"schema": "ssd-trace/1", "mode": "ssd", "plan": {}, "batch_size": 2}, rounds)
    t, plan = tables(fan_out=(1, 3, 1, 1))
    src = ReplayOutcomes.from_trace(trace, t, plan)
    rng = np.random.default_rng(0)
    d0, d1 = src.draws(rng, 0, 0, 4), src.draws(rng, 1, 0, 4)
    assert d0.accepted.tolist() == [3, 3, 3, 3]  # trace K = 5 accepted all: the plan's K = 3 accepts all
    assert d1.accepted.tolist() == [1, 1, 1, 1]
    assert d1.next_hit_cache.tolist() == [True] * 4  # rank 2 < fan_out[1] = 3


def test_hit_tables_apply_per_position_and_the_fast_backup_uses_position_0():
    primary = HitTable(((0.0, 0.4, 0.5, 0.6), (0.0, 0.3, 0.4, 0.5)), ((0.0, 0.9, 0.95, 0.97),))
    backup = HitTable(((0.0, 0.7, 0.8, 0.85),), ((0.0, 0.2, 0.3, 0.35),))  # accepted row must not be used
    pt = AcceptancePoint(0.0, (0.9, 0.7, 0.5), primary, backup)
    plan = Plan(num_speculative_tokens=3, fan_out=(1, 2, 3, 1), fan_out_miss=(3, 1, 1, 2))
    t = OutcomeTables.from_point(pt, plan)
    assert t.hit_after_cache.tolist() == pytest.approx([0.4, 0.4, 0.5, 0.9])  # reject rows 0, 1, 1; accepted
    assert t.hit_after_jit.tolist() == pytest.approx([0.6, 0.3, 0.3, 0.95])
    assert t.hit_after_fast == pytest.approx(0.85)  # backup reject row 0 at F = fan_out_miss[0] = 3
