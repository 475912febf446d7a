"""The draft side in-process: branch decode equals decoding each branch alone; cache hit semantics; the recorder."""

from __future__ import annotations

import pytest
import torch

from ssd_runtime.draft import Drafter
from ssd_runtime.draft_trace import DraftRecorder
from ssd_runtime.models import tiny_model
from ssd_runtime.protocol import Reply, SpecMsg
from ssd_runtime.sampling import candidate_order, probs_from_logits, saguaro_probs
from ssd_runtime.target import Target, TargetConfig
from ssd_runtime.transport import LocalLink
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import DRAFT, TARGET, make_prompts

V = TARGET["vocab"]
PLAN = Plan(num_speculative_tokens=3, fan_out=(2, 1, 1, 2), fan_out_miss=(1, 2, 1, 2))


@pytest.fixture(scope="module")
def draft_model():
    return tiny_model(**DRAFT)


@pytest.fixture(scope="module")
def target_model():
    return tiny_model(**TARGET)


def first_round(model, plan: Plan, prompts: list[list[int]], seed: int = 0) -> tuple[DraftRecorder, dict]:
    """A drafter after its first SPEC (bonus tokens 5, 6, ...) and the speculation that follows the reply."""
    d = DraftRecorder(Drafter(model, plan.replace(mode="ssd"), seed, V))
    d.start_batch(list(enumerate(prompts)))
    reply = d.reply(SpecMsg(0, [(i, -1, 5 + i) for i in range(len(prompts))], []))
    d.speculate()
    return d, reply


@torch.no_grad()
def alone(model, context: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([context])).logits[0, -1].float()


def test_branch_tokens_equal_greedy_decoding_of_each_branch_alone(draft_model):
    prompts = make_prompts([4, 7], V)
    d, _ = first_round(draft_model, PLAN, prompts)
    n = 0
    for st in d.drafter.seqs.values():
        for (k, c), entry in st.cache.items():
            context = st.committed + st.proposal[:k] + [c]
            for tok in entry.tokens:
                assert tok == int(alone(draft_model, context).argmax())
                context.append(tok)
            n += 1
        assert len(st.cache) == sum(PLAN.fan_out_miss)  # the first proposal came from the backup
    assert n == 2 * sum(PLAN.fan_out_miss)


def test_branch_distributions_equal_each_branch_alone_with_saguaro(draft_model):
    plan = PLAN.replace(temperature=0.8, saguaro_c=0.4)
    prompts = make_prompts([3, 8], V, seed=1)
    d, _ = first_round(draft_model, plan, prompts)
    for st in d.drafter.seqs.values():
        for (k, c), entry in st.cache.items():
            context = st.committed + st.proposal[:k] + [c]
            for i, tok in enumerate(entry.tokens):
                q = saguaro_probs(probs_from_logits(alone(draft_model, context), 0.8), plan.fan_out[i], 0.4)
                torch.testing.assert_close(entry.q[i], q, atol=1e-5, rtol=1e-4)
                context.append(tok)


def test_sd_never_applies_saguaro_c(draft_model):
    """An SD draft samples from the plain q even when the plan carries C < 1 (for SSD)."""
    plan = PLAN.replace(temperature=0.8, saguaro_c=0.3)
    prompt = make_prompts([5], V, seed=9)[0]
    d = Drafter(draft_model, plan.replace(mode="sd"), 0, V)
    d.start_batch([(0, prompt)])
    reply = d.reply(SpecMsg(0, [(0, -1, 5)], []))
    context = prompt + [5]
    for i, tok in enumerate(reply.tokens[0].tolist()):
        torch.testing.assert_close(reply.q[0, i], probs_from_logits(alone(draft_model, context), 0.8),
                                   atol=1e-5, rtol=1e-4)
        context.append(tok)


def test_glue_rows_are_the_drafts_logits_at_every_stopping_position(draft_model):
    prompts = make_prompts([5], V, seed=2)
    d, reply = first_round(draft_model, PLAN, prompts)
    st = d.drafter.seqs[0]
    for k in range(PLAN.K + 1):
        torch.testing.assert_close(st.glue[k], alone(draft_model, st.committed + st.proposal[:k]), atol=1e-4, rtol=0)
    assert reply.tokens[0].tolist() == st.proposal


def test_first_round_after_prefill_always_misses(draft_model):
    _, reply = first_round(draft_model, PLAN, make_prompts([4, 6, 3], V))
    assert reply.hit == [False, False, False]
    assert reply.backup == ["jit", "jit", "jit"]


@pytest.mark.parametrize("k", [0, 1, 3])
def test_lookup_hits_iff_the_bonus_was_among_the_candidates_at_k(draft_model, k):
    prompts = make_prompts([4], V, seed=5)
    d, _ = first_round(draft_model, PLAN, prompts)
    st = d.drafter.seqs[0]
    exclude = st.proposal[k] if k < PLAN.K else None
    cands = candidate_order(st.glue[k], exclude, PLAN.fan_out_miss[k])
    outsiders = [t for t in range(V) if t not in cands and t != exclude][:3]
    for bonus in cands + outsiders:
        d, _ = first_round(draft_model, PLAN, prompts)  # same seed: same state every time
        reply = d.reply(SpecMsg(0, [(0, k, bonus)], []))
        hit = bonus in cands
        assert reply.hit == [hit]
        assert (reply.ranks[0] < PLAN.fan_out_miss[k]) == hit
        if hit:
            assert reply.tokens[0].tolist() == st.cache[(k, bonus)].tokens


def test_fast_backup_sends_random_tokens_as_point_masses(draft_model):
    plan = PLAN.replace(backup="fast", temperature=1.0)
    _, reply = first_round(draft_model, plan, make_prompts([4, 5], V))
    assert reply.backup == ["fast", "fast"] and reply.q is None and reply.q_rows == []


def test_jit_redraft_rows_keeps_hits_and_batch_mode_redrafts_everyone(draft_model, target_model):
    """Over whole runs: with jit_redraft=rows some rounds mix hits and misses; with batch no round does."""
    prompts = make_prompts([3, 9, 5], V, seed=6)
    for mode, mixed_allowed in (("rows", True), ("batch", False)):
        recs = run_local(target_model, draft_model, PLAN.replace(batch_size=3, jit_redraft=mode), prompts, 24)
        mixed = [r for r in recs if len({s.hit for s in r.seqs}) > 1]
        assert bool(mixed) == mixed_allowed


def run_local(target_model, draft_model, plan: Plan, prompts, n: int) -> list[dict]:
    recs: list[dict] = []
    link = LocalLink(lambda msg: DraftRecorder(Drafter(draft_model, plan.replace(mode="ssd"), 0, V)))
    link.job({})
    Target(target_model, TargetConfig(plan.replace(mode="ssd"), n), link, on_round=recs.append).generate(prompts)
    return recs


def test_trace_hit_follows_the_previous_rounds_bonus_rank(draft_model, target_model):
    """Per sequence, round i+1 hits iff round i's bonus ranked below round i's fan-out at its k."""
    plan = PLAN.replace(batch_size=2)
    recs = run_local(target_model, draft_model, plan, make_prompts([3, 7], V, seed=7), 30)
    by_seq: dict[int, list[dict]] = {}
    for r in recs:
        for s in r.seqs:
            by_seq.setdefault(s.seq, []).append(s)
    pairs = 0
    for entries in by_seq.values():
        assert entries[0].first and entries[0].hit is False
        for prev, cur in zip(entries, entries[1:], strict=False):
            assert cur.hit == (prev.bonus_rank < prev.fan_out)
            pairs += 1
    hits = [s.hit for e in by_seq.values() for s in e[1:]]
    assert pairs >= 10 and any(hits) and not all(hits)



def test_recorder_adds_ranks_and_timings_to_the_plain_reply(draft_model):
    """Same seed, same SPECs: the recorded replies are the plain ones plus ranks, timings and prev_timings."""
    plan = PLAN.replace(temperature=0.8, saguaro_c=0.5)
    plain, rec = Drafter(draft_model, plan.replace(mode="ssd"), 0, V), DraftRecorder(Drafter(draft_model, plan.replace(mode="ssd"), 0, V))

    def both(spec: SpecMsg, speculated: bool) -> Reply:
        want = plain.reply(spec)
        ranks = rec.bonus_ranks(spec.done + spec.keys)  # before lookup
        got = rec.reply(spec)
        assert want.ranks == want.timings == want.prev_timings == want.dists == {}  # the plain reply: proposal only
        assert got.dists == {}  # log_topn = 0
        for key in ("tokens", "q", "q_rows", "hit", "lookup_hit", "backup"):
            value = getattr(want, key)
            if isinstance(value, torch.Tensor):
                torch.testing.assert_close(getattr(got, key), value, atol=0, rtol=0)
            else:
                assert getattr(got, key) == value, key
        assert got.ranks == ranks
        assert set(got.timings) == ({"draft_lookup", "draft_backup"} if spec.keys else set())
        assert set(got.prev_timings) == {"draft_glue", "draft_branch"}
        assert (min(got.prev_timings.values()) > 0) == speculated
        plain.speculate()
        rec.speculate()
        return got

    for d in (plain, rec):
        d.start_batch(list(enumerate(make_prompts([4, 6], V, seed=8))))
    both(SpecMsg(0, [(0, -1, 5), (1, -1, 6)], []), speculated=False)
    st = rec.drafter.seqs
    top = candidate_order(st[0].glue[1], st[0].proposal[1], 1)[0]  # sequence 0 hits at k = 1, 1 misses at k = 0
    got = both(SpecMsg(0, [(0, 1, top), (1, 0, st[1].proposal[0])], []), speculated=True)
    assert got.hit == [True, False]
    assert isinstance(rec.bonus_ranks([(1, 3, 7)])[1], int)
    both(SpecMsg(0, [(1, 3, 7)], [(0, 0, 9)]), speculated=True)  # sequence 0 finishes
    both(SpecMsg(0, [], [(1, 2, 4)]), speculated=True)  # then sequence 1: no keys left
    assert plain.seqs.keys() == rec.drafter.seqs.keys() == set()
