"""bfloat16 and float16 on the CPU: slow but correct (two processes, cpu + gloo), in a plain family (Llama, sdpa)
and Gemma 2 (eager attention with softcapping, alternating sliding / full layers).

Greedy: in half precision, token equality with a reference is no fair promise: bfloat16 logits of these models
tie exactly (gap 0) within a dozen tokens, and a cached batched forward rounds differently from a fresh one (by up
to ~0.1 here). What holds, and is tested, is that every token AR, SD and SSD emit is a top-1 token of the target up
to that rounding: its logit in a fresh forward (same dtype, full recomputation) is within HALF_TOL of the largest.
A wrong mask or verifier picks tokens several logits below the top (float32 errors of 4-16 were measured with a
window ignored), so this still fails on real bugs; float32 runs are token-exact (test_families).
Sampling: SSD's continuations follow the target's distribution (chi-square, T = 1): the verifier accepts with the
probabilities that were actually sampled from, whatever the dtype rounded them to.
"""

from __future__ import annotations

import pytest
import torch

from ssd_runtime.models import ModelSpec, tiny_model
from ssd_runtime.run import Job, Session
from ssd_runtime.specs import tiny_pair
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import (
    ALPHA,
    SMALL_TARGET,
    TARGET,
    continuation_pvalue,
    exact_continuations,
    make_prompts,
)

# (family, dtype) pairs: each dtype with each family once across the two tests (a half-precision run costs ~7 s)
GREEDY = [("llama", "bfloat16"), ("gemma2", "float16")]
SAMPLING = [("llama", "float16"), ("gemma2", "bfloat16")]
N_NEW = 12
PROMPTS = make_prompts([3, 9, 6, 8], TARGET["vocab"], seed=0)
HALF_TOL = 0.25  # logits: 2.5x the largest cached-vs-fresh difference measured in these dtypes (~0.1)


def model_spec(family: str, dtype: str, base: dict = TARGET, draft: bool = False) -> ModelSpec:
    return ModelSpec(tiny=ModelSpec.tiny_spec(**tiny_pair(family, base)[int(draft)]).tiny, dtype=dtype)


def reference(family: str, dtype: str, base: dict = TARGET):
    return tiny_model(**tiny_pair(family, base)[0]).to(getattr(torch, dtype))


@pytest.fixture(scope="module")
def session():
    with Session(model_spec("llama", "bfloat16"), model_spec("llama", "bfloat16", draft=True)) as s:
        yield s


@torch.no_grad()
def shortfall(model, prompt: list[int], output: list[int]) -> float:
    """The largest gap between the top logit and the emitted token's logit along `output` (fresh forward)."""
    logits = model(input_ids=torch.tensor([prompt + output])).logits[0, len(prompt) - 1:-1].float()
    return float((logits.max(-1).values - logits.gather(-1, torch.tensor(output)[:, None])[:, 0]).max())


@pytest.mark.parametrize("family,dtype", GREEDY)
def test_greedy_ar_sd_and_ssd_in_half_precision_emit_top_1_tokens(session, family, dtype):
    model = reference(family, dtype)
    for mode, plan in (("ar", Plan()), ("sd", Plan(num_speculative_tokens=3)),
                       ("ssd", Plan(num_speculative_tokens=2, fan_out=(2, 1, 2))),
                       ("ssd", Plan(num_speculative_tokens=2, fan_out=(2, 1, 2), backup="fast"))):
        res = session.run(Job(plan.replace(batch_size=3, mode=mode), PROMPTS, N_NEW, target=model_spec(family, dtype),
                              draft=model_spec(family, dtype, draft=True)))
        assert res.faults == [] and [len(o) for o in res.outputs] == [N_NEW] * len(PROMPTS)
        worst = max(shortfall(model, p, o) for p, o in zip(PROMPTS, res.outputs, strict=True))
        assert worst <= HALF_TOL, (mode, plan.backup, worst)


@pytest.mark.parametrize("family,dtype", SAMPLING)
def test_ssd_sampling_in_half_precision_matches_the_target_distribution(session, family, dtype):
    n, prompt = 3000, [1, 2, 3]
    plan = Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), temperature=1.0, saguaro_c=0.5, batch_size=n)
    res = session.run(Job(plan.replace(mode="ssd"), [prompt] * n, 4, target=model_spec(family, dtype, SMALL_TARGET),
                          draft=model_spec(family, dtype, SMALL_TARGET, draft=True)))
    assert res.faults == []
    exact = exact_continuations(reference(family, dtype, SMALL_TARGET), prompt, 4, 1.0)
    pvalue = continuation_pvalue([tuple(o) for o in res.outputs], exact)
    assert pvalue > ALPHA, f"{family} {dtype}: chi-square p = {pvalue:.3g}"
