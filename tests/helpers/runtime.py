"""Shared pieces of the ssd_runtime tests: tiny model pairs, references computed without the runtime, the
chi-square test of sampled continuations against the target's exact distribution."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from ssd_runtime.models import ModelSpec, tiny_model
from ssd_runtime.specs import FAMILIES, TINY_DRAFT, TINY_TARGET

ALPHA = 1e-3  # significance level of every goodness-of-fit test in the runtime suite

# Greedy pair (ssd_runtime.specs): all of k = 0..K occur, and cache hits and misses both occur.
TARGET, DRAFT = TINY_TARGET, TINY_DRAFT
# Sampling pair: vocab 8 so the distribution of whole continuations can be enumerated exactly.
SMALL_TARGET = {"vocab": 8, "seed": 11, "hidden": 32, "init_std": 0.3}
SMALL_DRAFT = {**SMALL_TARGET, "noise": 0.05}


# Families run through every two-process case in CI; the others (added later, driven by the same code) get one
# greedy SSD run each there and every case under -m slow (CI stays under 15 minutes with 35 families).
CORE_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "gemma3_text", "gemma3", "phi3")
OTHER_FAMILIES = tuple(f for f in FAMILIES if f not in CORE_FAMILIES)


def family_params() -> list:
    """Every family as a pytest parameter, the non-core ones marked slow."""
    return [f if f in CORE_FAMILIES else pytest.param(f, marks=pytest.mark.slow) for f in FAMILIES]


def spec(kwargs: dict) -> ModelSpec:
    return ModelSpec.tiny_spec(**kwargs)


def make_prompts(lengths: list[int], vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


@torch.no_grad()
def reference_greedy(model, prompt: list[int], n: int) -> tuple[list[int], float]:
    """Greedy continuation by full recomputation (no KV cache), and the smallest top-1 / top-2 logit gap on
    the way (a large gap means float noise cannot flip any argmax, so token-exact comparisons are fair)."""
    seq, gap = list(prompt), float("inf")
    for _ in range(n):
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
        top2 = torch.topk(logits, 2).values
        gap = min(gap, float(top2[0] - top2[1]))
        seq.append(int(logits.argmax()))
    return seq[len(prompt):], gap


@torch.no_grad()
def truncated(probs: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Top-k then top-p of one distribution [V], written independently of ssd_runtime.sampling.Truncation (a
    Python sort, most probable first, ties by lower id): the reference the runtime's sampling is tested against."""
    order = sorted(range(len(probs)), key=lambda i: (-float(probs[i]), i))[:top_k or len(probs)]
    kept, mass, total = [], 0.0, sum(float(probs[i]) for i in order)
    for i in order:
        if mass / total >= top_p:
            break
        kept.append(i)
        mass += float(probs[i])
    out = torch.zeros_like(probs)
    out[kept] = probs[kept] / probs[kept].sum()
    return out


def exact_continuations(model, prompt: list[int], n: int, temperature: float, top_k: int = 0,
                        top_p: float = 1.0) -> dict[tuple[int, ...], float]:
    """P(x_1..x_n | prompt) under the model at this temperature (and top-k / top-p, see truncated()), for every
    continuation (vocab^n of them)."""
    V = model.config.get_text_config().vocab_size
    prefixes = [tuple()] + [c for m in range(1, n) for c in itertools.product(range(V), repeat=m)]
    cond = {}
    for m in range(n):
        batch = [c for c in prefixes if len(c) == m]
        x = torch.tensor([prompt + list(c) for c in batch])
        probs = torch.softmax(model(input_ids=x).logits[:, -1].double() / temperature, dim=-1)
        cond.update({c: truncated(probs[i], top_k, top_p) for i, c in enumerate(batch)})
    out = {}
    for c in itertools.product(range(V), repeat=n):
        p = 1.0
        for m in range(n):
            p *= float(cond[c[:m]][c[m]])
        out[c] = p
    return out


def continuation_pvalue(samples: list[tuple[int, ...]], exact: dict[tuple[int, ...], float],
                        min_expected: float = 5.0) -> float:
    """Chi-square goodness of fit of sampled continuations to the exact distribution; cells expected fewer than
    min_expected times are pooled into one cell."""
    n = len(samples)
    counts = Counter(samples)
    big = [c for c, p in exact.items() if p * n >= min_expected]
    obs = [counts.get(c, 0) for c in big]
    exp = [exact[c] * n for c in big]
    rest_obs, rest_exp = n - sum(obs), n - sum(exp)
    if rest_exp > 0:
        obs.append(rest_obs)
        exp.append(rest_exp)
    assert len(obs) >= 10, f"only {len(obs)} cells: the distribution is too flat for a test with {n} samples"
    scale = sum(obs) / sum(exp)
    return float(chisquare(obs, [e * scale for e in exp]).pvalue)


def target_model(kwargs: dict):
    return tiny_model(**kwargs)
