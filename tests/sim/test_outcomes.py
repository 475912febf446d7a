"""Outcome streams: the vectorised hit chain, exact output lengths, per-position draws, trace replay."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.records import Header
from ssd_sim.io.trace import TraceWriter, read_trace
from ssd_sim.model.acceptance import AcceptancePoint, HitCurve, HitTable
from ssd_sim.model.presets import get_preset
from ssd_sim.plan.plan import Plan
from ssd_sim.sim.des import outcome_source
from ssd_sim.sim.outcomes import (
    BLOCK_ROUNDS,
    ForcedOutcomes,
    ModelOutcomes,
    OutcomeTables,
    ReplayOutcomes,
    build_stream,
    hit_chain,
    next_block,
)
from tests.helpers.trace_samples import EMPTY_SUMMARY, trace_from


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
    trace = trace_from({"schema": "ssd-trace/1", "mode": "ssd", "plan": {}, "batch_size": 2}, rounds)
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


# ---- bounded memory: long sequences are drawn block by block -------------------------------------------------


@pytest.mark.parametrize("mode", ["ar", "sd", "ssd"])
def test_a_two_million_token_sequence_is_drawn_in_blocks_that_add_up_exactly(mode):
    t, _ = tables()
    src, rng = ModelOutcomes(t), np.random.default_rng(0)
    s = build_stream(src, rng, mode, 2_000_000)
    sizes, tokens = [], 0
    while True:
        sizes.append(s.rounds)
        tokens += int(s.committed.sum())
        assert s.committed.dtype.itemsize <= 2 and s.tokens_before(s.rounds) == tokens
        if s.final:
            break
        assert s.left == 2_000_000 - tokens
        s = next_block(s, src, rng, seq=0)
        assert s.base == sum(sizes)
    assert tokens == 2_000_000 and max(sizes) == BLOCK_ROUNDS
    assert len(sizes) == -(-sum(sizes) // BLOCK_ROUNDS)  # every block but the last is full


def test_the_hit_chain_continues_across_blocks():
    # Forced draws do not depend on the random stream: blocks of 4 rounds must chain into the one-block stream.
    forced = ForcedOutcomes(accepted=[[1, 0, 2]], next_hit=[[True, False, False, True]])
    one = build_stream(forced, None, "ssd", 40)
    parts, s = [], build_stream(forced, None, "ssd", 40, block=4)
    while True:
        parts.append(s)
        if s.final:
            break
        s = next_block(s, forced, None, seq=0, block=4)
    assert np.concatenate([p.hit for p in parts]).tolist() == one.hit.tolist()
    assert np.concatenate([p.committed for p in parts]).tolist() == one.committed.tolist()
    assert [p.prev_hit for p in parts[:3]] == [None, bool(one.hit[3]), bool(one.hit[7])]


def test_a_two_million_token_run_at_batch_1_stays_in_bounded_memory():
    # Peak RSS of a 2,000,000-token SSD run over that of a 64-token run, in a fresh process. Per-token arrays
    # took ~130 MB here (hit chain temporaries of 2M rounds); blocks of 4,096 rounds take well under 20 MB.
    code = (
        "import resource, sys\n"
        "from ssd_sim.model.presets import get_preset\n"
        "from ssd_sim.plan.planner import make_plan\n"
        "from ssd_sim.sim.des import simulate\n"
        "from ssd_sim.sim.workload import fixed_batch\n"
        "p = get_preset('llama70b-1b-h100'); plan = make_plan(p).plan\n"
        "simulate(p, plan, workload=fixed_batch(1, 64, prompt_tokens=0))\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "m = simulate(p, plan, workload=fixed_batch(1, 2_000_000, prompt_tokens=0)).metrics\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(m.output_tokens, (peak - base) // 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True).stdout
    tokens, growth_mb = map(int, out.split())
    assert tokens == 2_000_000 and growth_mb < 20


# ---- replay refuses traces that do not fit the plan ------------------------------------------------------------


def trace_file(tmp_path, mode: str, K: int, accepted: int = 1, rounds: int = 5) -> Path:
    path = tmp_path / f"{mode}.jsonl"
    w = TraceWriter(path, Header.build(**{"mode": mode, "plan": Plan(num_speculative_tokens=max(K, 1)).to_dict(), "batch_size": 1}))
    for i in range(rounds):
        seq = {"seq": 0, "accepted": accepted if i == 3 else 0, "bonus": 5, "committed": 1, "bonus_rank": None}
        w.write({"type": "round", "round": i, "K": K, "batch": 1, "seqs": [seq], "timings_ms": {"round": 20.0}})
    w.close(EMPTY_SUMMARY)
    return path


def test_an_ar_trace_is_not_replayed_into_a_drafting_plan(tmp_path):
    path = trace_file(tmp_path, "ar", 0, accepted=0)
    t, plan = tables()
    with pytest.raises(ConfigError) as e:
        ReplayOutcomes.from_trace(read_trace(path), t, plan)
    assert str(e.value) == (f"replay: trace {path} is an ar run: it has no accepted counts to replay into an ssd "
                            "plan; replay an sd or ssd trace")


def test_accepted_above_k_is_refused_naming_file_line_and_field(tmp_path):
    path = trace_file(tmp_path, "ssd", 3, accepted=4)  # round 3 is on line 5 (line 1 is the header)
    t, plan = tables()
    with pytest.raises(ConfigError) as e:
        ReplayOutcomes.from_trace(read_trace(path), t, plan)
    assert e.value.field == "accepted"
    assert str(e.value).startswith(f"accepted: {path} line 5: seqs[0].accepted = 4 must be an integer in 0..K = 0..3")


def test_a_trace_with_a_smaller_k_than_the_plan_is_refused(tmp_path):
    t, plan = tables()  # K = 3
    with pytest.raises(ConfigError, match=r"ran K = 2 but the plan has K = 3: .* \(pass -k 2 or less\)"):
        ReplayOutcomes.from_trace(read_trace(trace_file(tmp_path, "sd", 2)), t, plan)


def test_a_replay_in_ar_mode_is_refused():
    _, plan = tables()
    trace = trace_from({"schema": "ssd-trace/1", "mode": "sd", "plan": {}, "batch_size": 1}, [])
    with pytest.raises(ConfigError, match="mode ar drafts nothing"):
        outcome_source(get_preset("llama70b-1b-h100"), plan.replace(mode="ar"), trace)
