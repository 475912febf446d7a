"""--log-topn: the trace's per-position distributions are the models' own, at the right contexts, in SD and SSD."""

from __future__ import annotations

import math

import pytest
import torch

from ssd_runtime.draft import Drafter
from ssd_runtime.draft_trace import DraftRecorder
from ssd_runtime.models import tiny_model
from ssd_runtime.target import Target, TargetConfig
from ssd_runtime.transport import LocalLink
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import DRAFT, TARGET, make_prompts

V, N = TARGET["vocab"], 5
PLAN = Plan(num_speculative_tokens=3, fan_out=(2, 1, 1, 2), fan_out_miss=(1, 2, 1, 2), batch_size=2)
PROMPTS = make_prompts([4, 9], V, seed=5)


@pytest.fixture(scope="module")
def models():
    return tiny_model(**TARGET), tiny_model(**DRAFT)


def run(models, plan: Plan, mode: str, n: int = 24, log_topn: int = N):
    target, draft = models
    recs: list[dict] = []
    link = LocalLink(lambda msg: DraftRecorder(Drafter(draft, plan.replace(mode=mode), 0, V), log_topn))
    link.job({})
    outs = Target(target, TargetConfig(plan.replace(mode=mode), n, log_topn=log_topn), link, on_round=recs.append).generate(PROMPTS)
    return recs, outs


@torch.no_grad()
def top(model, context: list[int]) -> tuple[list[int], list[float]]:
    lp = torch.log_softmax(model(input_ids=torch.tensor([context])).logits[0, -1].double(), dim=-1)
    vals, ids = torch.topk(lp, N)
    return ids.tolist(), vals.tolist()


@pytest.mark.parametrize("mode,T", [("ssd", 0.0), ("sd", 0.0), ("ssd", 0.8), ("sd", 0.8)])
def test_logged_distributions_are_each_models_own_at_every_stopping_position(models, mode, T):
    plan = PLAN.replace(temperature=T, saguaro_c=0.6 if T else 1.0)
    recs, outs = run(models, plan, mode)
    target, draft = models
    checked = {"target": 0, "draft": 0, "stop_K": 0}
    gen = {sid: [] for sid in range(len(PROMPTS))}
    prefill_first = {sid: o[0] for sid, o in enumerate(outs)}
    for r in recs:
        for s in r.seqs:
            sid, k = s.seq, s.accepted
            if not gen[sid]:
                gen[sid].append(prefill_first[sid])
            committed = outs[sid][len(gen[sid]):len(gen[sid]) + s.committed]
            assert len(s.dists) == k + 1
            for i, (t_ids, t_lp, t_rest, d_ids, d_lp, d_rest) in enumerate(s.dists):
                if i > len(committed):
                    break  # the round was cut at max_new_tokens: the rest of its context is not in the output
                ctx = PROMPTS[sid] + gen[sid] + committed[:i]
                ids, lp = top(target, ctx)
                assert t_ids == ids and max(abs(a - b) for a, b in zip(t_lp, lp, strict=True)) < 2e-3
                assert math.isclose(t_rest, 1 - sum(math.exp(v) for v in t_lp), abs_tol=1e-3)
                checked["target"] += 1
                if d_ids is None:
                    assert mode == "sd" and i == plan.K  # only SD's all-accepted position can lack the draft
                    continue
                ids, lp = top(draft, ctx)
                assert d_ids == ids and max(abs(a - b) for a, b in zip(d_lp, lp, strict=True)) < 2e-3
                assert 0.0 <= d_rest <= 1.0
                checked["draft"] += 1
                checked["stop_K"] += i == plan.K
                if T == 0 and i < k:  # greedy: the accepted token is both models' argmax
                    assert t_ids[0] == d_ids[0] == committed[i]
            if T == 0 and len(committed) == k + 1:
                assert s.dists[k][0][0] == committed[k]  # the bonus is the target's argmax at the stop
            gen[sid] += committed
    assert checked["target"] > 20 and checked["draft"] > 20 and checked["stop_K"] >= 1


def test_logging_does_not_change_the_output(models):
    for mode in ("sd", "ssd"):
        _, with_logs = run(models, PLAN, mode)
        recs, without = run(models, PLAN, mode, log_topn=0)
        assert with_logs == without
        assert not any(s.dists is not None for r in recs for s in r.seqs)
