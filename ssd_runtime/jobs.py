"""A job (one run over a list of prompts) and its result, and the checks a job needs the loaded models for."""

from __future__ import annotations

from dataclasses import dataclass, field

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.records import RoundRecord, Summary
from ssd_sim.io.sanity import check_arrival_ms
from ssd_sim.plan.plan import Mode, Plan

from .hooks import TestHooks
from .models import ModelSpec
from .sampling import NO_TRUNCATION, Truncation


class WorkerError(RuntimeError):
    """A worker process died, stopped answering or failed unexpectedly; the message is one line saying which."""


@dataclass
class Job:
    """One run: a plan (its mode included) over a list of prompts (token ids). Units: tokens, seconds."""

    plan: Plan
    prompts: list[list[int]]
    max_new_tokens: int
    seed: int = 0
    forced_acceptance: float | None = None
    draft_timeout_s: float | None = 120.0  # the target waits this long for an answer, then goes AR (None: forever)
    ignore_eos: bool = False
    trace_path: str | None = None
    header: dict = field(default_factory=dict)  # extra trace-header fields (prompt_source, ...)
    target: ModelSpec | None = None  # None = the session's model
    draft: ModelSpec | None = None
    hooks: TestHooks | None = None  # tests only: attached to the target and the draft when set
    arrivals_ms: list[float] | None = None  # request i arrives arrivals_ms[i] ms after the start (None: all at 0)
    log_topn: int = 0  # SD / SSD: per verified position, the top-N distributions of target and draft (0: off)
    truncation: Truncation = NO_TRUNCATION  # top-k / top-p of the distributions sampled at T > 0

    @property
    def mode(self) -> Mode:
        return self.plan.mode


@dataclass
class JobResult:
    outputs: list[list[int]]  # generated token ids per prompt, in prompt order
    summary: Summary  # the trace's summary line
    trace_path: str | None
    faults: list[str]
    rounds: list[RoundRecord] = field(default_factory=list)  # the trace's round records
    trace_error: str | None = None  # the trace could not be written (full disk, ...): why; the outputs are complete



def check_job(job: Job, target: dict, draft: dict | None) -> None:
    """Bad input a job can only be checked against the loaded models: token ids beyond the vocabulary, and
    prompts + new tokens beyond a model's context. ConfigError before any work (no trace is written)."""
    from .models import check_context

    if draft is None:
        vocab = target["vocab_size"]
        for n, p in enumerate(job.prompts, start=1):
            if p and max(p) >= vocab:
                raise ConfigError("prompts", f"prompt {n} has token id {max(p)} but the target's vocabulary has "
                                             f"{vocab} tokens (ids 0..{vocab - 1})")
    arr = job.arrivals_ms
    if arr is not None and (len(arr) != len(job.prompts) or not all(0 <= float(a) < float("inf") for a in arr)):
        raise ConfigError("arrivals_ms", f"needs one finite time >= 0 (ms) per prompt: {len(arr)} times for "
                                         f"{len(job.prompts)} prompts")
    for i, t in enumerate(arr or ()):
        check_arrival_ms(float(t), f"arrivals_ms[{i}]")  # a wait the clock can hold (ssd_sim.io.limits)
    limits = {"target": target.get("max_positions")} if draft is None else {"draft": draft.get("max_positions")}
    check_context(job.prompts, job.max_new_tokens, job.mode, job.plan.num_speculative_tokens, limits)
