"""ssd_runtime.hooks: the only place test-only behaviour lives; each hook does what it says."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

import ssd_runtime
from ssd_runtime import hooks as hooks_module
from ssd_runtime.draft import Drafter
from ssd_runtime.hooks import TestHooks
from ssd_runtime.models import tiny_model
from ssd_runtime.protocol import Reply, SpecMsg
from ssd_runtime.run import Job
from ssd_runtime.sampling import probs_from_logits, saguaro_probs, verify_greedy
from ssd_runtime.target import Target, TargetConfig
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import DRAFT, TARGET, make_prompts

V = TARGET["vocab"]
PLAN = Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), temperature=0.8, saguaro_c=0.4)
HOOK_WORDS = ("greedy_fast", "unscaled", "draft_fault", "fault_round", "inject", "debug")


@pytest.fixture(scope="module")
def draft_model():
    return tiny_model(**DRAFT)


def test_no_production_module_mentions_a_test_hook():
    modules = [p for p in Path(ssd_runtime.__file__).parent.glob("*.py") if p.name != "hooks.py"]
    assert {"target.py", "draft.py", "sampling.py", "run.py"} <= {p.name for p in modules}
    for path in modules:
        text = path.read_text().replace("sync_debug_mode", "")  # torch's API (graphs.py), not a hook
        assert not [w for w in HOOK_WORDS if w in text], path.name


def test_hooks_are_a_plain_picklable_value_and_off_by_default():
    hooks = TestHooks(report_unscaled_q=True, draft_fault="hang", fault_round=4)
    assert pickle.loads(pickle.dumps(hooks)) == hooks
    assert Job(PLAN.replace(mode="ssd"), [[1]], 4).hooks is None


def first_reply_q(model, hooks: TestHooks | None, prompt: list[int], bonus: int):
    """(tokens [K], q [K, V]) of a one-sequence drafter's first reply."""
    d = Drafter(model, PLAN.replace(mode="ssd"), 0, V)
    if hooks is not None:
        hooks.attach_drafter(d)
    d.start_batch([(0, prompt)])
    reply = d.reply(SpecMsg(0, [(0, -1, bonus)], []))
    return reply.tokens[0], reply.q[0]


@torch.no_grad()
def test_unscaled_q_reports_the_plain_softmax_instead_of_the_saguaro_q(draft_model):
    prompt, bonus = make_prompts([5], V, seed=4)[0], 7
    tokens, q = first_reply_q(draft_model, None, prompt, bonus)
    hooked_tokens, hooked_q = first_reply_q(draft_model, TestHooks(report_unscaled_q=True), prompt, bonus)
    assert hooked_tokens.tolist() == tokens.tolist()  # the same tokens, sampled from the same q
    context = prompt + [bonus]
    for i, tok in enumerate(tokens.tolist()):
        plain = probs_from_logits(draft_model(input_ids=torch.tensor([context])).logits[0, -1], PLAN.temperature)
        torch.testing.assert_close(q[i], saguaro_probs(plain, PLAN.fan_out_miss[i], PLAN.saguaro_c),
                                   atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(hooked_q[i], plain, atol=1e-5, rtol=1e-4)
        context.append(tok)
    assert (q - hooked_q).abs().max() > 1e-2  # C = 0.4 really rescales


def test_greedy_fast_matches_fast_backup_rows_greedily_and_keeps_the_rest_exact():
    plan = PLAN.replace(batch_size=2)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, plan.K + 1, V, generator=g)
    drafts = torch.randint(0, V, (2, plan.K), generator=g)
    drafts[0, 0] = int(logits[0, 0].argmax())  # the fast row's first token is the target's greedy choice
    reply = Reply(tokens=None, backup=["fast", "jit"])

    def accept(hooks: TestHooks | None):
        target = Target(tiny_model(**TARGET), TargetConfig(plan.replace(mode="ssd"), 4, seed=1))
        if hooks is not None:
            hooks.attach_target(target)
        return target.accept(logits, drafts, reply)

    exact_acc, exact_bonus = accept(None)
    acc, bonus = accept(TestHooks(greedy_fast=True))
    greedy_acc, greedy_bonus = verify_greedy(logits, drafts)
    assert (int(exact_acc[0]), int(exact_bonus[0])) != (int(greedy_acc[0]), int(greedy_bonus[0]))
    assert (int(acc[0]), int(bonus[0])) == (int(greedy_acc[0]), int(greedy_bonus[0]))
    assert (int(acc[1]), int(bonus[1])) == (int(exact_acc[1]), int(exact_bonus[1]))  # same generator draws


def test_draft_fault_strikes_at_its_round(draft_model, monkeypatch):
    struck: list[tuple[int, str]] = []
    d = Drafter(draft_model, PLAN.replace(mode="sd"), 0, V)
    TestHooks(draft_fault="hang", fault_round=2).attach_drafter(d)
    monkeypatch.setattr(hooks_module, "_fail", lambda kind: struck.append((n, kind)))
    d.start_batch([(0, [1, 2, 3])])
    for n in range(4):
        d.reply(SpecMsg(0, [(0, -1 if n == 0 else 0, 5)], []))
    assert struck == [(2, "hang")]
