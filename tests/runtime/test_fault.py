"""A draft that dies (SIGKILL mid-run) or stops answering: the target finishes autoregressively, loses no
committed token, its output still equals greedy decoding, and the fault is in the trace."""

from __future__ import annotations

import pytest

from ssd_runtime.hooks import TestHooks
from ssd_runtime.run import Job, Session
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.trace import read_trace, summarize
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import DRAFT, TARGET, make_prompts, reference_greedy, spec, target_model

N_NEW = 20
PROMPTS = make_prompts([4, 9, 6], TARGET["vocab"], seed=3)
PLAN = Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), batch_size=3)


@pytest.fixture(scope="module")
def reference():
    model = target_model(TARGET)
    return [reference_greedy(model, p, N_NEW)[0] for p in PROMPTS]


@pytest.mark.parametrize("kind, timeout_s", [("kill", 60.0), ("hang", 1.0)])
def test_run_completes_autoregressively_when_the_draft_fails(reference, tmp_path, kind, timeout_s):
    path = tmp_path / f"{kind}.jsonl"
    with Session(spec(TARGET), spec(DRAFT)) as session:
        res = session.run(Job(PLAN.replace(mode="ssd"), PROMPTS, N_NEW, draft_timeout_s=timeout_s, trace_path=str(path),
                              hooks=TestHooks(draft_fault=kind, fault_round=3)))
        assert res.outputs == reference  # nothing lost, still exact
        assert len(res.faults) == 1 and "round 3" in res.faults[0] and "autoregressively" in res.faults[0]
        tr = read_trace(path)
        assert list(tr.summary.faults) == res.faults
        assert [r.fallback for r in tr.rounds[:3]] == [None] * 3
        assert all(r.fallback == "ar" and r.K == 0 for r in tr.rounds[3:])
        assert summarize(tr).tokens == sum(len(o) for o in res.outputs) - len(PROMPTS)
        with pytest.raises(ConfigError, match="needs the draft process"):
            session.run(Job(PLAN.replace(mode="ssd"), PROMPTS, N_NEW))
        assert session.run(Job(PLAN.replace(mode="ar"), PROMPTS, N_NEW)).outputs == reference
