"""How far the mean decode context is from a context that grows over the decode (ssd-plan --prompt-tokens / --tokens).

A request's KV cache grows from P to P + N tokens; the planners take a GPU profile's KV reads at the mean, P + N / 2
(ssd_sim/cli/source.py). Tokens per round do not depend on the context, so a plan's exact tok/s over the decode is its
tokens per round over its round ms averaged over c uniform on [P, P + N]. Where the round is linear in c (AR, SD: KV
reads streamed from HBM) the mean context is exact; SSD's round is max(T_v, T_p) + ..., which bends where the draft's
tree decode (b x budget rows, each reading its KV) overtakes the verify late in the decode. bench/context_growth.py
tabulates it for the GPU presets and spec pairs.

That average holds for rows that advance together (a batch that starts together). Under continuous batching in
steady state the rows sit at independent points of their decode, so the batch's mean context is P plus the mean of b
uniform positions, which concentrates at the mean as b grows: `staggered_*` is the round's expectation over that
(STAGGER_SAMPLES fixed draws, the round interpolated between the nodes). The simulator, which charges each round at its
batch's context, lands between the two (bench/context_growth.py).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import numpy as np
from scipy.integrate import simpson

from ssd_sim.cli.source import at_context, profile_of
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.predict import predict_ar, predict_sd, predict_ssd
from ssd_sim.sim.workload import Workload

NODES = 9  # Simpson points over [P, P + N]
STAGGER_SAMPLES = 4096  # draws of the staggered batch's mean position (seeded: the same numbers every call)
MODES = ("ar", "sd", "ssd")


def profile_at(source: dict[str, Any], context: int) -> Profile:
    """The profile of a source (a preset or spec pair) with its KV reads at `context` tokens per sequence, built once
    per (source, context) (profiles are immutable)."""
    return _profile_at(json.dumps(source, sort_keys=True), context)


@lru_cache(maxsize=512)
def _profile_at(source_json: str, context: int) -> Profile:
    return profile_of(at_context(json.loads(source_json), context))


class ProfileAt:
    """profile_at bound to one source: the simulator's `profile_at` (a picklable callable, for capacity's pools)."""

    def __init__(self, source: dict[str, Any]):
        self.source = source

    def __call__(self, context: int) -> Profile:
        """The source's profile at `context` tokens per sequence."""
        return profile_at(self.source, context)


def shown_pct(pct: float) -> float:
    """A mean-context error (%) as printed: below 0.05% it is 0 (no "-0.0%")."""
    return pct if abs(pct) >= 0.05 else 0.0


def _rounds(source: dict[str, Any], context: int, sd_k: int, plan: Plan,
            modes: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """Per mode: (round ms, tokens per round) of the fixed plans with the latencies at `context` tokens."""
    prof = profile_at(source, context)
    b = plan.batch_size
    predict = {"ar": lambda: predict_ar(prof, b), "sd": lambda: predict_sd(prof, b, sd_k),
               "ssd": lambda: predict_ssd(prof, plan)}
    return {m: (p.round_ms, p.tokens_per_round) for m in modes for p in (predict[m](),)}


def growth(source: dict[str, Any], prompt: int, output: int, sd_k: int, plan: Plan,
           modes: tuple[str, ...] = MODES) -> dict[str, dict[str, float]]:
    """Per mode: the exact tok/s per sequence over a decode from `prompt` to `prompt + output` cached tokens with the
    batch's rows in step, and how much longer (%) its mean round is than the round at the mean decode context, i.e.
    how much faster the mean-context prediction is; the same with the rows staggered (`staggered_tok_s`,
    `staggered_err_pct`: see the module docstring). SD at K = sd_k; SSD with `plan`, whose batch size serves every
    mode."""
    mean = _rounds(source, max(1, prompt + output // 2), sd_k, plan, modes)
    cs = np.linspace(prompt, prompt + output, NODES)
    nodes = [_rounds(source, max(1, int(round(c))), sd_k, plan, modes) for c in cs]
    positions = _staggered_positions(plan.batch_size)
    out = {}
    for m in modes:
        round_ms = [n[m][0] for n in nodes]
        exact_ms = float(simpson(round_ms, x=cs)) / output if output else mean[m][0]
        staggered_ms = (exact_ms if positions is None or not output
                        else float(np.interp(prompt + output * positions, cs, round_ms).mean()))
        tokens = mean[m][1]
        out[m] = {"tok_s": tokens / exact_ms * 1e3, "mean_context_err_pct": 100.0 * (exact_ms / mean[m][0] - 1.0),
                  "staggered_tok_s": tokens / staggered_ms * 1e3,
                  "staggered_err_pct": 100.0 * (staggered_ms / mean[m][0] - 1.0)}
    return out


def _staggered_positions(batch: int) -> np.ndarray | None:
    """STAGGER_SAMPLES draws of the mean of `batch` independent uniform positions in [0, 1] (normal beyond 64 rows);
    None for one row, whose position is uniform (the rows-in-step average)."""
    if batch <= 1:
        return None
    rng = np.random.default_rng(0)
    if batch <= 64:
        return rng.random((STAGGER_SAMPLES, batch)).mean(axis=1)
    return np.clip(0.5 + rng.standard_normal(STAGGER_SAMPLES) / np.sqrt(12.0 * batch), 0.0, 1.0)


def mean_lengths(workload: Workload) -> tuple[int, int]:
    """(mean prompt, mean output) tokens per request of a workload (source.workload_context's inputs)."""
    prompts = workload.prompt_lengths or (workload.prompt_tokens,)
    outputs = workload.output_lengths or (workload.output_tokens,)
    return round(sum(prompts) / len(prompts)), round(sum(outputs) / len(outputs))


def growth_line(mode: str, g: dict[str, float], prompt: int, output: int, batch: int,
                tail: str = "the simulation runs at the mean context") -> str:
    """One line: the analytic tok/s of `mode` over the growing context and how much the mean context overstates it,
    then `tail` (what that means for the numbers beside it)."""
    err = shown_pct(g["mean_context_err_pct"])
    staggered = ""
    if batch > 1:
        staggered = (f", {shown_pct(g['staggered_err_pct']):+.1f}% ({g['staggered_tok_s']:.2f}) with them at independent "
                     "points of their decode (continuous batching)")
    return (f"over a context growing from {prompt} to {prompt + output} tokens the analytic {mode.upper()} round at "
            f"b = {batch} is on average {err:+.1f}% against the one at the mean context "
            f"({g['tok_s']:.2f} tok/s per sequence) with the rows in step{staggered}; {tail}")

