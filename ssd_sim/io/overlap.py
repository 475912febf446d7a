"""Text two sets of runs share: the check that a hold-out holds out text, not only file names.

At T = 0 every run on the same prompts generates the same tokens, whatever its mode, K or fan-out, so a
"prediction" of such a run from traces of another tests bookkeeping, not prediction. Two measurements:
- logged contexts (traces made with ssd-run --log-topn): each committed position is keyed by the target's top-N
  token ids and its top-1 log-prob (to 1e-3); the share of a run's positions whose key occurs in the other side is
  the text they share. On the shipped traces different prompts share 0.000 and the same prompts at T = 0 1.000;
  runs at T = 1 with the same seed share 20-71% of their positions with the other runs on those prompts.
- prompts (traces without logged distributions, e.g. AR): the share of a run's prompts the other side also ran,
  unless both sampled (T > 0) with different seeds; a greedy and a sampled run of one prompt share part of their
  text, two runs with the same seed more.
A run's share is the larger of the two. `LEAK_SHARE` is the share above which a split is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ssd_sim.io.trace import Trace

LEAK_SHARE = 0.05  # a predicted run sharing more than this share of its text with the calibration leaks
_LP_DIGITS = 3


# Built-in sets made of others (ssd_runtime.prompts.PROMPT_SETS, which ssd_sim does not import; a test keeps the two
# in step): `pool:i` is the i-th prompt of these parts in order, so the same text has one label in every set.
COMPOSITE_SETS: dict[str, tuple[tuple[str, int], ...]] = {
    "pool": (("code", 24), ("chat", 24)),
    "pool96": (("code", 24), ("more_code", 24), ("chat", 24), ("more_chat", 24)),
}


def canonical_prompt(name: str, index: int) -> str:
    """'set:index' of a built-in prompt, in the set that holds its text (pool:30 -> chat:6)."""
    for part, size in COMPOSITE_SETS.get(name, ()):
        if index < size:
            return f"{part}:{index}"
        index -= size
    return f"{name}:{index}"


def prompt_labels(trace: Trace) -> list[str] | None:
    """One 'set:index' label per prompt of the whole run (sequence i ran the i-th), canonical (canonical_prompt);
    None when the header's prompt_source names no built-in set slice (a user's prompt file)."""
    src = str(trace.header.prompt_source)
    # "prompt-set:code[0:23:2]" (ssd-run), "calibrate-here:prompt-set:code[0:7:2]" (ssd-run calibrate-here)
    m = re.fullmatch(r"(?:calibrate-here:(?:prompt-set:)?|prompt-set:)(\w+)(?:\[(\d+):(\d+)(?::(\d+))?\])?", src)
    if not m:
        return None
    name, lo, hi, step = m.group(1), m.group(2), m.group(3), m.group(4)
    lo = int(lo or 0)
    hi = int(hi) if hi else lo + int(trace.header.num_prompts)
    return [canonical_prompt(name, i) for i in range(lo, hi, int(step or 1))]


def prompt_ids(trace: Trace) -> set[str]:
    """The prompts a trace ran, as canonical 'set:index' labels (from its header's prompt_source, e.g.
    prompt-set:code[8:16]; prompt_labels); of a cut run (Trace.only_requests) only its sequences' prompts."""
    labels = prompt_labels(trace)
    src = str(trace.header.prompt_source)
    if labels is None:
        return {src} if trace.requests is None else {f"{src}#{i}" for i in trace.requests}
    if trace.requests is None:
        return set(labels)
    return {labels[i] if i < len(labels) else f"{src}#{i}" for i in trace.requests}


def context_keys(trace: Trace) -> list[tuple] | None:
    """One key per committed position with logged distributions (target top-N ids, top-1 log-prob), or None if the
    trace logged none."""
    keys = []
    for r in trace.rounds:
        for s in r.seqs:
            if s.dists:
                keys.extend((tuple(d[0]), round(float(d[1][0]), _LP_DIGITS)) for d in s.dists[: s.committed])
    return keys or None


@dataclass(frozen=True)
class Overlap:
    """How much of one predicted run's text the calibration side holds."""

    share: float  # 0..1: the larger of the context and the prompt share
    contexts: float | None  # share of the run's logged positions found on the other side (None: not measurable)
    prompts: float  # share of the run's prompts the other side ran where text can repeat (see the module)

    @property
    def leaks(self) -> bool:
        return self.share > LEAK_SHARE

    def describe(self) -> str:
        ctx = "no logged contexts to compare" if self.contexts is None else f"{self.contexts:.0%} of its contexts"
        return f"{self.share:.0%} shared ({ctx}; {self.prompts:.0%} of its prompts)"


def _same_text_possible(a: Trace, b: Trace) -> bool:
    """Runs of one prompt repeat text unless both sampled (T > 0) with different seeds."""
    sampled = float(a.plan.get("temperature", 0.0)) > 0 and float(b.plan.get("temperature", 0.0)) > 0
    return not sampled or int(a.header.seed) == int(b.header.seed)


class CalibrationText:
    """The text of a set of calibration traces, read once: their logged contexts, and the traces without any."""

    def __init__(self, calibration: Iterable[Trace]):
        self.traces = list(calibration)
        keys = [(t, context_keys(t)) for t in self.traces]
        self.contexts = {k for _, ks in keys for k in ks or ()}
        self.unlogged = [t for t, ks in keys if ks is None]

    def overlap(self, run: Trace) -> Overlap:
        """The text `run` shares with these traces."""
        keys = context_keys(run)
        contexts = sum(k in self.contexts for k in keys) / len(keys) if keys is not None and self.contexts else None
        # traces whose contexts cannot be compared with the run's decide by their prompts
        undecided = self.traces if keys is None else self.unlogged
        mine = prompt_ids(run)
        shared = set().union(*(prompt_ids(t) for t in undecided if _same_text_possible(t, run))) & mine
        prompts = len(shared) / len(mine) if mine else 0.0
        return Overlap(max(contexts or 0.0, prompts), contexts, prompts)


def overlap(calibration: Iterable[Trace], run: Trace) -> Overlap:
    """The text `run` shares with the calibration traces (CalibrationText(calibration).overlap(run))."""
    return CalibrationText(calibration).overlap(run)
