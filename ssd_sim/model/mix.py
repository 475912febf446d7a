"""A workload mix: the share of each request class in the traffic a profile should predict.

    ssd-plan calibrate traces/*.jsonl --mix code=0.6,chat=0.4 -o profile.json

Acceptance differs more between kinds of prompts than within one kind (the 48-prompt pool on the Zen 4 host:
SD K = 2 decodes code ~30% faster than chat, traces/cpu-fp32-pool40). A calibration averages over its own requests,
so a profile built on one mix mispredicts traffic of another by that difference times the shift in shares. Each
run records its prompts' classes (trace header `request_tags`, from ssd-run's tagged prompt sets or a prompt file's
"tag" field); with a mix, every calibrated request of class c weighs share_c / n_c, n_c the calibrated requests of
class c among the traces averaged together, so the rates are those of the mix, not of the calibration's sample
(post-stratification). Within a class a request keeps its natural weight of rounds: a hard request has more rounds,
exactly as it would in the predicted traffic. The between-request spread of acceptance is then taken within
classes (calibrate._between_sequence_sd), since the mix fixes how many requests of each class a run holds, and the
calibration's sample size is what its requests are worth to the weighted mean (Kish's effective size,
RequestMix.effective_requests): 12 code and 24 chat requests calibrate a code-only mix as 12 requests, not 36.

What a mix cannot do: classes the calibration never ran (refused), or text of a class unlike the calibration's
prompts of that class (the spread within the class is what the intervals carry for that).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ssd_sim.io.errors import ConfigError

_TAG = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class RequestMix:
    """Request shares by class: ((tag, share), ...), shares > 0 summing to 1, tags sorted."""

    shares: tuple[tuple[str, float], ...]

    def __post_init__(self):
        if not self.shares:
            raise ConfigError("mix", "names no class; give e.g. code=0.6,chat=0.4")
        total = sum(s for _, s in self.shares)
        if not math.isclose(total, 1.0, rel_tol=1e-9, abs_tol=1e-9):
            raise ConfigError("mix", f"shares sum to {total:g}, not 1; RequestMix.parse normalises them")

    @classmethod
    def parse(cls, text: str) -> RequestMix:
        """'code=0.6,chat=0.4' (or counts: 'code=3,chat=5'; normalised) -> a mix; ConfigError naming the fix."""
        raw: dict[str, float] = {}
        for part in str(text).split(","):
            tag, sep, value = part.strip().partition("=")
            tag = tag.strip()
            if not sep or not _TAG.fullmatch(tag):
                raise ConfigError("mix", f"{part.strip()!r} is not CLASS=SHARE; write e.g. code=0.6,chat=0.4 "
                                         "(classes: letters, digits, _ . -)")
            if tag in raw:
                raise ConfigError("mix", f"class {tag!r} is given twice; give each class once")
            try:
                share = float(value)
            except ValueError:
                share = math.nan
            if not (math.isfinite(share) and share >= 0):
                raise ConfigError("mix", f"{tag}={value.strip()!r}: a share must be a finite number >= 0; write e.g. "
                                         "code=0.6,chat=0.4")
            raw[tag] = share
        return cls.of_counts(raw)

    @classmethod
    def of_counts(cls, counts: dict[str, float]) -> RequestMix:
        """Shares proportional to `counts` (classes with 0 dropped); ConfigError if nothing is left."""
        total = sum(counts.values())
        if total <= 0:
            raise ConfigError("mix", "every share is 0; give at least one class a share > 0")
        return cls(tuple(sorted((t, c / total) for t, c in counts.items() if c > 0)))

    @classmethod
    def of_requests(cls, tags: Iterable[str]) -> RequestMix:
        """The mix of a set of requests, one tag each (e.g. the half of a prompt pool to predict)."""
        counts = Counter(tags)
        if "" in counts:
            raise ConfigError("mix", f"{counts['']} of the requests have no class; tag every prompt")
        return cls.of_counts(dict(counts))

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.shares)

    def share(self, tag: str) -> float:
        return dict(self.shares).get(tag, 0.0)

    def describe(self) -> str:
        """'code 62%, chat 38%'."""
        return ", ".join(f"{t} {s:.0%}" for t, s in self.shares)

    def weights(self, tags: Sequence[str], what: str = "the calibration") -> np.ndarray:
        """Per request (one tag each), its weight share_c / n_c (n_c: requests of class c here); 0 for classes the
        mix leaves out. ConfigError when a class of the mix has no request here."""
        counts = Counter(tags)
        missing = [t for t in self.tags if counts.get(t, 0) == 0]
        if missing and set(counts) <= {""}:
            raise ConfigError("mix", f"no request in {what} has a class (the traces record no request_tags); "
                                     "re-record with ssd-run from a built-in prompt set or a prompt file with \"tag\" "
                                     "fields, or leave out --mix")
        if missing:
            held = ", ".join(f"{t or '(untagged)'} x{n}" for t, n in sorted(counts.items())) or "none"
            raise ConfigError("mix", f"class {missing[0]!r} has no request in {what} (its requests: {held}); "
                                     "calibrate on runs of that class or leave it out of --mix")
        return np.array([self.share(t) / counts[t] if t in self.tags else 0.0 for t in tags])

    def effective_requests(self, counts: Mapping[str, int]) -> float:
        """How many requests of the mix these ({class: requests}) are worth in a mean weighted by `weights`: Kish's
        (sum w)^2 / sum w^2 = 1 / sum_c share_c^2 / n_c (the variance of the weighted mean is the within-class
        variance over this); 0 when a class of the mix has no request here. Requests of classes the mix leaves out
        add nothing: 12 code and 24 chat requests under code 100% are worth 12."""
        if any(counts.get(t, 0) == 0 for t in self.tags):
            return 0.0
        return 1.0 / sum(share * share / counts[t] for t, share in self.shares)


def tags_by_range(text: str) -> list[str]:
    """'code=0-23,chat=24-47' (inclusive sequence ranges; seq i = the run's i-th prompt) -> one class per sequence
    ("" where no range names it): the classes of runs recorded before ssd-run wrote them into the trace header."""
    tags: list[str] = []
    for part in str(text).split(","):
        tag, sep, span = part.strip().partition("=")
        first, dash, last = span.strip().partition("-")
        if not (sep and _TAG.fullmatch(tag.strip()) and first.strip().isdigit() and (not dash or last.strip().isdigit())):
            raise ConfigError("tags", f"{part.strip()!r} is not CLASS=FIRST-LAST; write e.g. code=0-23,chat=24-47 "
                                      "(sequence numbers from 0, inclusive)")
        lo, hi = int(first), int(last) if dash else int(first)
        if hi < lo or hi >= 1_000_000:
            raise ConfigError("tags", f"{part.strip()!r}: the range must run from low to high, below 1,000,000")
        tags += [""] * (hi + 1 - len(tags))
        if any(tags[lo:hi + 1]):
            raise ConfigError("tags", f"{part.strip()!r} overlaps another range; give each sequence one class")
        tags[lo:hi + 1] = [tag.strip()] * (hi + 1 - lo)
    return tags


def request_weights(mix: RequestMix | None, groups: np.ndarray, group_tags: Sequence[str],
                    what: str = "the calibration") -> np.ndarray | None:
    """Per context, the weight of the request it came from (mix.weights over the requests present in `groups`,
    an index into group_tags); None without a mix (every context weighs 1)."""
    if mix is None:
        return None
    present = np.unique(groups)
    w = mix.weights([group_tags[g] for g in present], what)
    per_group = np.zeros(len(group_tags))
    per_group[present] = w
    return per_group[groups]


def classes_held(traces: Sequence) -> Counter:
    """Calibrated requests per class ("" = untagged) over the traces, in order of first appearance."""
    return Counter(t.tag(seq) for t in traces for seq in t.sequences())


def mix_provenance(mix: RequestMix, traces: Sequence) -> str:
    """The profile's "acceptance.mix" line: the shares and how many calibrated requests each class had."""
    held = classes_held(traces)
    per = ", ".join(f"{tag} {share:.0%} of requests ({held.get(tag, 0)} calibrated)" for tag, share in mix.shares)
    return (f"weighted: rates and their request-to-request spread for the mix {per}, each class' calibrated requests "
            "weighing its share (post-stratified)")


def left_out(mix: RequestMix, traces: Sequence) -> str | None:
    """A warning line when some calibrated requests weigh 0 under the mix (untagged, or of a class it leaves out)."""
    held = classes_held(traces)
    out = {tag: n for tag, n in held.items() if tag not in mix.tags}
    if not out:
        return None
    which = ", ".join(f"{tag or '(untagged)'} x{n}" for tag, n in sorted(out.items()))
    return (f"{sum(out.values())} of {sum(held.values())} calibrated requests weigh 0 under the mix {mix.describe()}: "
            f"{which}; tag them (ssd-plan calibrate --tags) or give their class a share")

