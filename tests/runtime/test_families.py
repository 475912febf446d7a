"""Every supported model family through the real two-process runtime (cpu + gloo): greedy AR == SD == SSD
(jit and fast backup, b = 1 and b = 3 with a refill), one trace line per round, and one chi-square exactness test
at T = 1 per family that a broken verifier fails. In CI the CORE_FAMILIES run every case and the other families one
greedy SSD run each (their per-layer logits through the cache are checked for every family in test_kv.py); under
-m slow every family runs every case.

Each family's tiny target (ssd_runtime.specs.tiny_pair) has a sliding window of 5 tokens where the family has one (Gemma alternates
sliding and full layers, Qwen mixes them, Mistral / Mixtral / Phi-3 slide everywhere), and the contexts here are
longer than the window, so a mask that ignored a layer's window would change the greedy reference (transformers'
own forward, no cache) and fail. The draft is the target plus weight noise.
"""

from __future__ import annotations

import json

import pytest

from ssd_runtime.hooks import TestHooks
from ssd_runtime.run import Job, Session
from ssd_runtime.specs import tiny_pair
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import (
    ALPHA,
    OTHER_FAMILIES,
    SMALL_TARGET,
    TARGET,
    continuation_pvalue,
    exact_continuations,
    family_params,
    make_prompts,
    reference_greedy,
    spec,
    target_model,
)

N_NEW = 12
PROMPTS = make_prompts([3, 9, 6, 8], TARGET["vocab"], seed=0)  # at b = 3 the 4th prompt refills a finished row
BATCHES = {1: 2, 3: 4}  # batch size -> prompts run (b = 1 on the first two)


@pytest.fixture(scope="module")
def session():
    target, draft = tiny_pair("llama")
    with Session(spec(target), spec(draft)) as s:
        yield s


def greedy_reference(name: str) -> tuple[dict, dict, list[list[int]]]:
    """(target kwargs, draft kwargs, greedy reference outputs on PROMPTS) of a family, computed without the runtime."""
    target, draft = tiny_pair(name)
    model = target_model(target)
    outs, gaps = zip(*(reference_greedy(model, p, N_NEW) for p in PROMPTS), strict=True)  # gaps: >> float noise
    assert min(gaps) >= 1e-3, f"{name}: the tiny target has a near-tie (gap {min(gaps):.2g})"
    return target, draft, list(outs)


@pytest.fixture(scope="module", params=family_params())
def family(request):
    """(family, target kwargs, draft kwargs, greedy reference outputs)."""
    return request.param, *greedy_reference(request.param)


CASES = {
    "ar": ("ar", Plan()),
    "sd-K3": ("sd", Plan(num_speculative_tokens=3)),
    "ssd-K2-jit": ("ssd", Plan(num_speculative_tokens=2, fan_out=(2, 1, 2))),
    "ssd-K2-fast": ("ssd", Plan(num_speculative_tokens=2, fan_out=(2, 1, 2), backup="fast")),
}


@pytest.mark.parametrize("b", list(BATCHES))
def test_greedy_ar_sd_and_ssd_equal_the_reference_in_every_family(session, family, b, tmp_path):
    name, target, draft, reference = family
    n = BATCHES[b]
    for case, (mode, plan) in CASES.items():
        trace = tmp_path / f"{case}.jsonl"
        res = session.run(Job(plan.replace(batch_size=b, mode=mode), PROMPTS[:n], N_NEW, target=spec(target),
                              draft=spec(draft), trace_path=str(trace)))
        assert res.faults == [], (name, case)
        assert res.outputs == reference[:n], (name, case, b)
        records = [json.loads(line)["type"] for line in trace.read_text().splitlines()]
        assert records == ["header"] + ["round"] * len(res.rounds) + ["summary"], (name, case)
        assert max(r.batch for r in res.rounds) == b
        seqs = [s for r in res.rounds for s in r.seqs]
        if mode != "ar":
            assert len({s.accepted for s in seqs}) > 1, (name, case)  # the draft is right sometimes, not always
        if mode == "ssd":
            hits = {s.hit for s in seqs if not s.first}
            assert hits == {True, False}, (name, case)  # the cache and the backup both served rounds


@pytest.mark.parametrize("name", OTHER_FAMILIES)
def test_every_other_family_runs_greedy_ssd_with_a_refill_exactly(session, name):
    """The families outside CORE_FAMILIES in CI: one SSD run (jit backup, b = 3, the 4th prompt refilling a finished
    row) equals transformers' own greedy continuation; the draft is right sometimes and the cache both hits and
    misses. Every case of the test above runs for them under -m slow."""
    target, draft, reference = greedy_reference(name)
    mode, plan = CASES["ssd-K2-jit"]
    res = session.run(Job(plan.replace(batch_size=3, mode=mode), PROMPTS, N_NEW, target=spec(target),
                          draft=spec(draft)))
    assert res.faults == [] and res.outputs == reference, name
    seqs = [s for r in res.rounds for s in r.seqs]
    assert len({s.accepted for s in seqs}) > 1 and {s.hit for s in seqs if not s.first} == {True, False}, name


def test_a_target_and_draft_of_different_families_sharing_a_vocabulary_are_exact(session):
    target, _ = tiny_pair("llama")
    _, draft = tiny_pair("mistral")
    reference = [reference_greedy(target_model(target), p, N_NEW)[0] for p in PROMPTS]
    for case, (mode, plan) in CASES.items():
        res = session.run(Job(plan.replace(batch_size=3, mode=mode), PROMPTS, N_NEW, target=spec(target),
                              draft=spec(draft)))
        assert res.outputs == reference and res.faults == [], case


# ---- sampling: one chi-square test per family -----------------------------------------------------------
SAMPLES = 2000
SMALL_PROMPT = [1, 2, 3]
SMALL_NEW = 4
SAMPLING_PLAN = Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), temperature=1.0, saguaro_c=0.5,
                     batch_size=SAMPLES)


def sampled(session, family: str, hooks: TestHooks | None = None) -> list[tuple[int, ...]]:
    target, draft = tiny_pair(family, SMALL_TARGET)
    res = session.run(Job(SAMPLING_PLAN.replace(mode="ssd"), [SMALL_PROMPT] * SAMPLES, SMALL_NEW, target=spec(target),
                          draft=spec(draft), hooks=hooks))
    assert res.faults == []
    return [tuple(o) for o in res.outputs]


@pytest.mark.parametrize("name", family_params())
def test_ssd_sampling_is_exact_and_a_broken_verifier_is_caught_in_every_family(session, name):
    """SSD at T = 1, C = 0.5 follows the target's distribution; a draft that samples from Saguaro q_C but reports
    the plain q (so the ratio test is biased) fails the same test (p < 1e-7 in every family when measured)."""
    target, _ = tiny_pair(name, SMALL_TARGET)
    exact = exact_continuations(target_model(target), SMALL_PROMPT, SMALL_NEW, 1.0)
    pvalue = continuation_pvalue(sampled(session, name), exact)
    assert pvalue > ALPHA, f"{name}: chi-square p = {pvalue:.3g}"
    broken = continuation_pvalue(sampled(session, name, TestHooks(report_unscaled_q=True)), exact)
    assert broken < ALPHA, f"{name}: a broken verifier passed (p = {broken:.3g})"
