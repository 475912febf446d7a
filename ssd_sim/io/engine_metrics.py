"""Speculative-decoding counts from the metrics users already have, read without the engines.

    vllm       the Prometheus text of /metrics, or LLM.get_metrics() dumped as JSON: the counters
               vllm:spec_decode_num_drafts, vllm:spec_decode_num_accepted_tokens_per_pos{position="i"} (summed over
               engines and models). Per position i: drafts that accepted at least i + 1 tokens (vLLM
               v1/spec_decode/metrics.py), so per-position acceptance is counted, not assumed. Versions that count
               totals only (V0, early V1: ..._num_draft_tokens, ..._num_accepted_tokens) give the mean accepted
               tokens per draft, and per-position acceptance is then a constant rate with that mean (assumed shape).
               Or the server's log: its "SpecDecoding metrics: ... Drafted: N tokens, Per-position acceptance rate:
               r_1, .., r_K" lines (one per logging interval; r_i: drafts that accepted at least i tokens), counted
               per position, with the spread between intervals standing in for the spread between requests.
    sglang     scheduler log lines "Decode batch. ... accept len: X ..." (sglang scheduler metrics): the mean
               tokens per verify including the bonus, per logging interval. Per-position acceptance is not in
               them: it is the constant a with a + a^2 + .. + a^K = accept len - 1 (assumed shape), and the spread
               between intervals stands in for the spread between requests.
    reference  the METRICS dict the reference engine's LLM.generate returns (tanishqkumar/ssd, llm_engine.py), as
               JSON: accepted_suffix_lens_with_recovery (k + 1 per sequence and step) gives per-position acceptance;
               cache_hits (per step) the measured p_hit at the run's fan-out.
Each reader returns EngineCounts; what a source leaves unknown is named in its `assumed` list.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import read_text_file
from ssd_sim.io.limits import MAX_K

ENGINES = ("vllm", "sglang", "reference")


@dataclass(frozen=True)
class EngineCounts:
    """Per-position acceptance counts of one engine's speculative decoding (a_i = passed[i] / tried[i])."""

    engine: str
    tried: tuple[float, ...]  # rounds that reached position i (i = 1..K)
    passed: tuple[float, ...]  # ... and accepted it (float: sglang's are derived from means)
    rounds: int  # verify rounds (drafts) counted
    p_hit: float | None = None  # speculation-cache hit rate (reference engine in async mode), else None
    spread: float | None = None  # SD of per-interval logit acceptance (sglang), else None
    assumed: tuple[str, ...] = ()  # what the source leaves unknown
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def acceptance(self) -> tuple[float, ...]:
        """Per-position conditional acceptance a_1..a_K."""
        return tuple(p / t if t else 0.0 for t, p in zip(self.tried, self.passed, strict=True))

    @property
    def mean_accepted(self) -> float:
        """Accepted draft tokens per round (the bonus not counted)."""
        return sum(self.passed) / self.rounds if self.rounds else 0.0


def read_engine_metrics(path: str | Path, engine: str, k: int | None = None) -> EngineCounts:
    """Read `path` as `engine`'s metrics (see the module docstring); `k` (num_speculative_tokens) is needed where
    the source does not say it (sglang). Any problem is one ConfigError line naming the file."""
    if engine not in ENGINES:
        raise ConfigError("engine", f"must be one of {', '.join(ENGINES)}, got {engine!r}")
    text = read_text_file(path, "metrics", f"save {engine}'s metrics to a file first")
    reader = {"vllm": vllm_counts, "sglang": sglang_counts, "reference": reference_counts}[engine]
    return reader(text, str(path), k)


# ---- vLLM ------------------------------------------------------------------------------------------------
_PROM = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")


_DRAFTS, _PER_POS = "vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens_per_pos"
_DRAFT_TOKENS, _ACCEPTED = "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens"


def vllm_counts(text: str, source: str, k: int | None = None) -> EngineCounts:
    """Per-position counts from vLLM's counters (every label set summed): the Prometheus text of /metrics, or
    LLM.get_metrics() dumped as JSON ([{"name", "value"} or {"name", "values"}, ...]). Counters of totals only
    (vLLM V0 and early V1: draft and accepted tokens, no per-position counts) give a constant per-position rate,
    said in `assumed`."""
    if _VLLM_LOG.search(text):
        return vllm_log_counts(text, source, k)
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for name, labels, value in _vllm_samples(text, source):
        name = name.removesuffix("_total")
        if name == _PER_POS:
            pos = re.search(r'position="(\d+)"', labels)
            if pos is None:
                raise ConfigError("metrics", f"{source}: {name} without a position label")
            per_pos[int(pos.group(1))] = per_pos.get(int(pos.group(1)), 0.0) + value
        elif name in (_DRAFTS, _DRAFT_TOKENS, _ACCEPTED):
            totals[name] = totals.get(name, 0.0) + value
    drafts = totals.get(_DRAFTS, 0.0)
    if drafts > 0 and per_pos:
        return _vllm_per_position(drafts, per_pos, source, k)
    if totals.get(_DRAFT_TOKENS, 0.0) > 0 and _ACCEPTED in totals:
        return _vllm_totals(totals, source, k)
    raise ConfigError("metrics", f"{source}: no vllm:spec_decode_num_drafts / ..._accepted_tokens_per_pos (or "
                                 "..._num_draft_tokens / ..._num_accepted_tokens) counters with counts (is speculative "
                                 "decoding on? scrape /metrics after a run)")


def _vllm_samples(text: str, source: str):
    """(name, labels, value) of every sample: Prometheus text, or get_metrics() as JSON (a Vector's values are the
    samples of positions 0, 1, ...)."""
    if text.lstrip().startswith(("[", "{")):
        try:
            metrics = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError("metrics", f"{source}: not JSON ({e.msg} at line {e.lineno}) nor Prometheus text") from e
        metrics = metrics.get("metrics", []) if isinstance(metrics, dict) else metrics
        for m in metrics if isinstance(metrics, list) else []:
            if not isinstance(m, dict) or not isinstance(m.get("name"), str):
                continue
            if isinstance(m.get("values"), list):
                for i, v in enumerate(m["values"]):
                    yield m["name"], f'position="{i}"', _number(str(v), source, m["name"])
            elif "value" in m:
                yield m["name"], "", _number(str(m["value"]), source, m["name"])
        return
    for line in text.splitlines():
        m = _PROM.match(line.strip())
        if m and not line.startswith("#"):
            yield m.group("name"), m.group("labels") or "", _number(m.group("value"), source, m.group("name"))


def _vllm_per_position(drafts: float, per_pos: dict[int, float], source: str, k: int | None) -> EngineCounts:
    K = max(per_pos) + 1
    if k is not None and k != K:
        raise ConfigError("num_speculative_tokens", f"{source}: the counters hold positions 0..{K - 1} (K = {K}), "
                                                    f"not K = {k}: drop -k or give {K}")
    reached = [drafts] + [per_pos.get(i, 0.0) for i in range(K - 1)]
    passed = [per_pos.get(i, 0.0) for i in range(K)]
    missing = [i for i in range(K) if i not in per_pos]
    if missing:
        raise ConfigError("metrics", f"{source}: the accepted-tokens counter has positions up to {K - 1} but not "
                                     f"position {missing[0]}: is the scrape whole, from one engine?")
    for i, (r, p) in enumerate(zip(reached, passed, strict=True)):
        if p > r:
            what = f"{r:g} drafts" if i == 0 else f"{r:g} accepted at position {i - 1}"
            raise ConfigError("metrics", f"{source}: {p:g} tokens accepted at position {i}, more than the {what} that "
                                         "reached it: counters that cannot happen; is the scrape whole, from one engine?")
    return EngineCounts("vllm", tuple(reached), tuple(passed), int(round(drafts)),
                        assumed=("hit curves (no speculation cache in vLLM)", "the spread between requests (counters "
                                 "are totals)", "the temperature (not in the metrics: state it)"),
                        note=f"vLLM counters: {int(drafts)} drafts, K = {K}")


def _vllm_totals(totals: dict[str, float], source: str, k: int | None) -> EngineCounts:
    """A constant rate a with a + .. + a^K = accepted tokens per draft, from counters of totals only."""
    tokens, drafts = totals[_DRAFT_TOKENS], totals.get(_DRAFTS, 0.0)
    K = k or (round(tokens / drafts) if drafts > 0 else None)
    if not K:
        raise ConfigError("num_speculative_tokens", f"{source}: the counters hold totals only and no drafts count: "
                                                    "give -k (num_speculative_tokens)")
    n = drafts if drafts > 0 else tokens / K
    if abs(n * K - tokens) > 0.01 * tokens or abs(n - round(n)) > 1e-6:  # K tokens per draft, whole drafts
        raise ConfigError("num_speculative_tokens", f"{source}: {tokens:g} draft tokens in {n:g} drafts is not "
                                                    f"K = {K} per draft: is -k right?")
    mean = totals[_ACCEPTED] / n
    if not 0 <= mean <= K:
        raise ConfigError("metrics", f"{source}: {totals[_ACCEPTED]:g} accepted of {tokens:g} draft tokens is "
                                     "outside 0..all")
    a = _constant_rate(mean, K)
    return EngineCounts("vllm", *_constant_counts(n, a, K), int(round(n)),
                        assumed=("per-position acceptance (a constant rate solved from the accepted tokens per draft: "
                                 "these counters hold totals only)", "hit curves (no speculation cache in vLLM)",
                                 "the spread between requests (counters are totals)",
                                 "the temperature (not in the metrics: state it)"),
                        note=f"vLLM totals: {n:.0f} drafts, {mean:.2f} accepted per draft at K = {K}")


_VLLM_LOG = re.compile(r"SpecDecoding metrics:(?P<line>.*)")
_DRAFTED = re.compile(r"Drafted:\s*(\d+) tokens")
_PER_POS_RATES = re.compile(r"Per-position acceptance rate:\s*((?:[0-9.]+(?:,\s*)?)+)")


def vllm_log_counts(text: str, source: str, k: int | None = None) -> EngineCounts:
    """Per-position counts from vLLM's "SpecDecoding metrics: ..." log lines (v1 LoggingStatLogger, one per logging
    interval): its drafted tokens / K drafts, of which the per-position rate i accepted at least i + 1 tokens."""
    tried: list[float] = []
    passed: list[float] = []
    logits = []
    for m in _VLLM_LOG.finditer(text):
        drafted, rates = _DRAFTED.search(m.group("line")), _PER_POS_RATES.search(m.group("line"))
        if drafted is not None and int(drafted.group(1)) == 0:  # an interval without drafts (its rates are nan)
            continue
        if drafted is None or rates is None:
            raise ConfigError("metrics", f"{source}: a SpecDecoding metrics line without 'Drafted: N tokens' and "
                                         "'Per-position acceptance rate: ...' (an older vLLM: scrape /metrics instead)")
        r = _interval_rates(rates.group(1), source, k or (len(tried) if tried else None))
        drafts = int(drafted.group(1)) / len(r)
        tried = [t + drafts * x for t, x in zip(tried or [0.0] * len(r), [1.0, *r[:-1]], strict=True)]
        passed = [p + drafts * x for p, x in zip(passed or [0.0] * len(r), r, strict=True)]
        a = _constant_rate(sum(r), len(r))
        logits.append(_logit(a))
    if not tried or tried[0] <= 0:
        raise ConfigError("metrics", f"{source}: its SpecDecoding metrics lines count no drafts")
    K = len(tried)
    return EngineCounts("vllm", tuple(tried), tuple(passed), int(round(tried[0])),
                        spread=statistics.stdev(logits) if len(logits) >= 2 else None,
                        assumed=("hit curves (no speculation cache in vLLM)", "the temperature (not in the log: state "
                                 "it)"),
                        note=f"vLLM log: {len(logits)} intervals, {tried[0]:.0f} drafts, K = {K}")


def _interval_rates(text: str, source: str, k: int | None) -> list[float]:
    """One log line's per-position rates r_1..r_K (shares of drafts, falling), K = k where known."""
    r = [_number(x.strip(), source, "Per-position acceptance rate") for x in text.split(",") if x.strip()]
    if k is not None and len(r) != k:
        raise ConfigError("num_speculative_tokens", f"{source}: a log line has {len(r)} positions, not K = {k} (-k, "
                                                    "or the log's first line): one K per log")
    if not r or any(not 0 <= a <= 1 for a in r) or any(b > a for a, b in zip(r, r[1:], strict=False)):
        raise ConfigError("metrics", f"{source}: per-position rates {r} are not falling shares in 0..1")
    return r


# ---- SGLang ----------------------------------------------------------------------------------------------
_ACCEPT_LEN = re.compile(r"accept len:\s*([0-9.]+)")


def sglang_counts(text: str, source: str, k: int | None = None) -> EngineCounts:
    """A constant per-position acceptance from the mean accept length of each logged interval."""
    if not k:
        raise ConfigError("num_speculative_tokens", "SGLang's log does not say K: give -k (its speculative-num-steps)")
    lens = [float(m.group(1)) for m in _ACCEPT_LEN.finditer(text)]
    if not lens:
        raise ConfigError("metrics", f"{source}: no 'accept len: X' in it (SGLang's 'Decode batch.' log lines)")
    bad = [v for v in lens if not 1.0 <= v <= k + 1]
    if bad:
        raise ConfigError("metrics", f"{source}: accept len {bad[0]} is outside 1..K + 1 = {k + 1}: is -k right?")
    per = [_constant_rate(v - 1.0, k) for v in lens]
    a = _constant_rate(statistics.fmean(lens) - 1.0, k)
    logits = [_logit(p) for p in per]
    n = len(lens)
    tried, passed = _constant_counts(n, a, k)
    return EngineCounts("sglang", tried, passed, n,
                        spread=statistics.stdev(logits) if n >= 2 else None,
                        assumed=("per-position acceptance (a constant rate solved from the mean accept length)",
                                 "hit curves", "the temperature (not in the log: state it)"),
                        note=f"SGLang log: {n} intervals, mean accept len {statistics.fmean(lens):.2f} at K = {k}")


def _constant_counts(n: float, a: float, K: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(tried, passed) per position: the expected counts of n rounds at the constant rate a."""
    return tuple(n * a**i for i in range(K)), tuple(n * a ** (i + 1) for i in range(K))


def _logit(p: float) -> float:
    """log(p / (1 - p)), p held inside [1e-4, 1 - 1e-4]."""
    return math.log(max(p, 1e-4) / max(1 - p, 1e-4))


def _constant_rate(mean_accepted: float, K: int) -> float:
    """a in [0, 1] with a + a^2 + ... + a^K = mean_accepted (bisection; monotone in a)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(1, K + 1)) < mean_accepted:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# ---- the reference engine --------------------------------------------------------------------------------
def reference_counts(text: str, source: str, k: int | None = None) -> EngineCounts:
    """Per-position counts from accepted_suffix_lens_with_recovery (k + 1 per sequence-step), p_hit from cache_hits."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError("metrics", f"{source}: not JSON ({e.msg} at line {e.lineno}); dump the METRICS dict that "
                                     "LLM.generate returns with json.dump") from e
    lens = d.get("accepted_suffix_lens_with_recovery") if isinstance(d, dict) else None
    if not isinstance(lens, list) or not lens or not all(isinstance(x, int) and x >= 1 for x in lens):
        raise ConfigError("metrics", f"{source}: accepted_suffix_lens_with_recovery must be a non-empty list of "
                                     "integers >= 1 (the reference engine's METRICS dict)")
    longest = max(lens) - 1
    if k is None and not 1 <= longest <= MAX_K:
        raise ConfigError("num_speculative_tokens", f"{source}: K is read as the longest accepted run, {longest} tokens, "
                          f"which is not a K in 1..{MAX_K}; give the run's K with --num-speculative-tokens")
    K = k or longest
    if longest > K:
        raise ConfigError("num_speculative_tokens", f"{source}: {longest} tokens accepted in a round but K = {K}")
    accepted = [x - 1 for x in lens]
    tried = [sum(a >= i for a in accepted) for i in range(K)]
    passed = [sum(a >= i + 1 for a in accepted) for i in range(K)]
    hits = d.get("cache_hits")
    p_hit = None
    if isinstance(hits, list) and hits and all(isinstance(h, (int, float)) for h in hits):
        p_hit = float(statistics.fmean(hits))
    assumed = ["the spread between requests (the lists are pooled)", "the temperature (not in the dict: state it)"]
    assumed += [] if k else [f"K = {K}, the longest accepted run (give --num-speculative-tokens if no round accepted all)"]
    assumed += ["hit curves beyond the run's one p_hit"] if p_hit is not None else ["hit curves (no cache_hits: SD run)"]
    return EngineCounts("reference", tuple(float(t) for t in tried), tuple(float(p) for p in passed), len(lens),
                        p_hit=p_hit,
                        assumed=tuple(assumed), note=f"reference engine METRICS: {len(lens)} sequence-steps, K = {K}"
                        + (f", p_hit {p_hit:.3f}" if p_hit is not None else ""))


def _number(text: str, source: str, name: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ConfigError("metrics", f"{source}: {name} has value {text!r}, not a number") from None
    if not math.isfinite(v) or v < 0:
        raise ConfigError("metrics", f"{source}: {name} = {text} (a counter is finite and >= 0)")
    return v
