"""Test-only behaviours of the runtime, in one place; production code never sets them.

The exactness and fault tests need a runtime that is deliberately wrong or broken in known ways. Rather
than branching inside the algorithm, a TestHooks object travels with the job (Job.hooks, and in the draft's
job message) and, when present, is attached to the Target and the Drafter by wrapping their methods:
  greedy_fast        Target.accept: rows proposed by the fast backup are verified by greedy matching (the
                     reference engine's fast path at T > 0; NOT exact), the other rows by the ratio test;
  report_unscaled_q  Drafter.sample: report q = softmax(logits / T) instead of the Saguaro-rescaled q the
                     tokens were sampled from (the ratio test is then biased);
  draft_fault        the draft process fails: "kill" (SIGKILL, like an OOM kill), "hang" (stop answering) or
                     "raise" (an unexpected exception), where fault_phase says:
                       "spec"   Drafter.lookup, at the draft's SPEC number fault_round (0-based, from the job's start);
                       "batch"  Drafter.add, at its prefill number fault_round (the requests joining then);
                       "load"   right after the draft process loaded its model, before it meets the target
                                (these hooks travel with the Session, `Session(..., hooks=...)`, not with a job).
The exactness tests show the chi-square test catches the first two; the fault tests show the target finishes
a run autoregressively after a draft fault mid-run, and that start-up ends in one line after a fault at load.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass

import torch

from .sampling import probs_from_logits, verify_greedy


@dataclass(frozen=True)
class TestHooks:
    """Deliberate misbehaviour for tests only (see the module docstring). Picklable: bools, ints, strings."""

    __test__ = False  # not a pytest test class

    greedy_fast: bool = False
    report_unscaled_q: bool = False
    draft_fault: str | None = None  # "kill" | "hang" | "raise"
    fault_round: int = 0  # the draft's SPEC (or prefill, with fault_phase "batch"), 0-based, at which it strikes
    fault_phase: str = "spec"  # "spec" | "batch" | "load"

    def attach_target(self, target) -> None:
        """Wrap target.accept (a Target) with the target-side hooks."""
        if self.greedy_fast:
            target.accept = _greedy_fast_rows(target, target.accept)

    def attach_drafter(self, drafter) -> None:
        """Wrap drafter.sample / lookup / add (a Drafter) with the draft-side hooks."""
        if self.report_unscaled_q:
            drafter.sample = _unscaled_q(drafter, drafter.sample)
        if self.draft_fault is not None and self.fault_phase == "spec":
            drafter.lookup = _fault_at(self.fault_round, self.draft_fault, drafter.lookup)
        if self.draft_fault is not None and self.fault_phase == "batch":
            drafter.add = _fault_at(self.fault_round, self.draft_fault, drafter.add)

    def at_load(self, role: str) -> None:
        """Called by a worker process once its model is loaded: the "load" phase of draft_fault strikes here."""
        if role == "draft" and self.draft_fault is not None and self.fault_phase == "load":
            _fail(self.draft_fault)


def _greedy_fast_rows(target, accept):
    """accept(logits, drafts, reply), then greedy matching for the rows the fast backup proposed (T > 0).

    Those rows are accepted while s_i == argmax p_i and the bonus is argmax p at the first mismatch. The exact
    rule runs first on every row, so the target's generator is consumed exactly as without the hook.
    """
    def greedy_fast(logits: torch.Tensor, drafts: torch.Tensor, reply):  # protocol.Reply | None
        accepted, bonus = accept(logits, drafts, reply)
        if not drafts.shape[1] or target.T == 0 or target.cfg.forced_acceptance is not None:
            return accepted, bonus
        fast = torch.tensor([b == "fast" for b in reply.backup], device=drafts.device)
        if fast.any():
            g_acc, g_bonus = verify_greedy(logits, drafts)
            accepted, bonus = torch.where(fast, g_acc, accepted), torch.where(fast, g_bonus, bonus)
        return accepted, bonus

    return greedy_fast


def _unscaled_q(drafter, sample):
    """sample(...), reporting softmax(logits / T) as q instead of the Saguaro q actually sampled from."""
    def unscaled(logits: torch.Tensor, F: int, C: float):
        tokens, q = sample(logits, F, C)
        return tokens, None if q is None else probs_from_logits(logits, drafter.T)

    return unscaled


def _fault_at(at: int, kind: str, method):
    """method(arg), except that the call number `at` (0-based) first triggers the fault."""
    count = itertools.count()

    def faulty(*args):
        if next(count) == at:
            _fail(kind)
        return method(*args)

    return faulty


def _fail(kind: str) -> None:
    """Die (SIGKILL), stop answering (sleep) or raise an unexpected exception."""
    if kind == "raise":
        raise RuntimeError("test hook: the draft failed on purpose")
    if kind == "hang":
        time.sleep(1e6)
    os.kill(os.getpid(), signal.SIGKILL)
