"""Inputs that are valid but almost certainly not meant: the one home of their refusals and warnings.

- arrival times beyond MAX_ARRIVAL_MS (limits.py) are refused: the float clock stops advancing;
- arrivals (a rate or a list of times) spread over LONG_SPAN_MS or more while the decoding they bring would fill
  less than 1 / IDLE_RATIO of that span get a warning (a rate meant per minute, times in us or epoch ms); where the
  decoding is not known (ssd-run, which really waits), the hour alone warns;
- the same trace given twice (the same path, a copy, a link) is counted once, with a warning naming both;
- a trace whose rounds stalled (over STALL_FACTOR x the median round of their rows and K: the host stopped the run
  for a while, e.g. a guest that was not scheduled, or one-time work the runtime does not mark ran) gets a warning
  with the time they took; calibration times latency without them (steady), so a profile predicts steady rounds;
- rounds the runtime marked as CUDA graph warm-up (RoundRecord.warmup: a forward shape's first, eager sighting or its
  capture) are one-time work it knows of: never called a stall, and left out of the latency fit alike (steady).

Each warning is one line of text; the CLIs print it as `PROG: warning: ...` and the dashboard shows it.
Units: ms, requests per second. Imports only io (limits, errors, records, trace).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import replace

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.limits import MAX_ARRIVAL_MS
from ssd_sim.io.records import RoundRecord
from ssd_sim.io.trace import Trace

LONG_SPAN_MS = 3_600_000.0  # an hour of arrivals: shorter spans never warn
# A stated rule, not a fitted one: in the 163 shipped traces (9.7 h of rounds) every round but three is under 3.1x
# the median round of its rows and K; the three are two rounds of one request that stopped for ~35 s
# (cpu-fp32-epyc-pool96i, 20x and 12x) and one int8-draft SD round at 5.7x (cpu-int8draft-bench). Any factor from
# 3.1 to 11 sorts the fidelity splits' rounds alike.
# Such stalls are rare and short against a run: those two events (~33 s and ~3 s extra) in 9.7 h of shipped
# rounds, about 0.2 an hour. A stall moves a run's tok/s past its 90% interval (half-width ~10% or more) only when it
# is over a tenth of the run, i.e. for runs under ~6 min, which meet one with a probability under 2.5%: inside the 5%
# a 90% interval leaves out on each side. So calibration times latency without them and the intervals add no term.
STALL_FACTOR = 5.0
IDLE_RATIO = 10.0  # ... and only when they last 10x the decoding, i.e. the decoder would idle > 90% of the time
_UNITS = ((1e3, 120, "s"), (60e3, 120, "min"), (3.6e6, 48, "hours"), (86.4e6, 730, "days"))


def duration(ms: float) -> str:
    """A span of time (ms) for people: '0.45 s', '12 min', '2.8 hours', '93 days', '54 years'."""
    for unit, below, name in (*_UNITS, (365 * 86.4e6, math.inf, "years")):
        v = ms / unit
        if v < below:
            return f"{v:.2g} {name}" if v < 10 else f"{v:.0f} {name}" if v < 1e4 else f"{v:.3g} {name}"
    return f"{ms:g} ms"  # not reached


def check_arrival_ms(t: float, where: str, field: str = "arrival_ms") -> None:
    """ConfigError unless t is an arrival time the simulated clock can hold: finite, 0..MAX_ARRIVAL_MS (ms)."""
    if not (math.isfinite(t) and t >= 0):
        raise ConfigError(field, f"{where} = {t!r}: arrival times must be finite ms >= 0 from the start")
    if t > MAX_ARRIVAL_MS:
        raise ConfigError(field, f"{where} = {t:.4g} ms is past 2**42 ms (~139 years), where a float clock in ms "
                                 "no longer resolves a round; give arrival times in ms from the start of the log")


def poisson_span_ms(rate: float, gaps: int) -> float:
    """Expected time of the last of `gaps` exponential gaps at `rate` requests/s (ms)."""
    return gaps / rate * 1e3


def check_rate(rate: float, requests: int, gaps: int, flag: str = "--rate") -> None:
    """ConfigError when the expected arrivals at `rate` requests/s run past MAX_ARRIVAL_MS."""
    span = poisson_span_ms(rate, gaps)
    if span > MAX_ARRIVAL_MS:
        raise ConfigError("rate", f"{flag} {rate:g} requests/s spaces {requests} requests over ~{duration(span)}, "
                                  f"past the {duration(MAX_ARRIVAL_MS)} (2**42 ms) a float clock in ms resolves; {flag} "
                                  "is in requests per second: raise it, or give fewer requests")


def idle_span(span_ms: float, busy_ms: float | None) -> bool:
    """The rule: arrivals over >= LONG_SPAN_MS that decoding (busy_ms, when known) fills less than 1 / IDLE_RATIO of."""
    return span_ms >= LONG_SPAN_MS and (busy_ms is None or span_ms >= IDLE_RATIO * busy_ms)


def _against(busy_ms: float | None) -> str:
    return f", against ~{duration(busy_ms)} of decoding them one after another" if busy_ms is not None else ""


def rate_warning(rate: float, requests: int, gaps: int, busy_ms: float | None = None, flag: str = "--rate",
                 waiting: str = "waiting") -> str | None:
    """One line when Poisson arrivals at `rate` requests/s (`gaps` gaps before the last of `requests`) span an
    idle_span; None otherwise. busy_ms: the decoding those requests need (None: unknown, e.g. a real run)."""
    span = poisson_span_ms(rate, gaps)
    if not idle_span(span, busy_ms):
        return None
    return (f"{flag} {rate:g} requests/s spaces {requests} requests over ~{duration(span)} of {waiting}"
            f"{_against(busy_ms)}; {flag} is in requests per second")


def arrivals_warning(where: str, arrival_ms: Sequence[float], busy_ms: float | None = None) -> str | None:
    """One line when given arrival times (ms from the start) span an idle_span; None otherwise."""
    span = max(arrival_ms, default=0.0)
    if not idle_span(span, busy_ms):
        return None
    return (f"{where}: arrival_ms spans ~{duration(span)} of simulated waiting for {len(arrival_ms)} requests"
            f"{_against(busy_ms)}; arrival_ms is ms from the start (not us, ns or an epoch time)")


def trace_digest(trace: Trace) -> str:
    """sha256 of a trace's records (header and rounds; not its path or summary): equal for the same path given
    twice, a copy or a link, and for an upload of the same file."""
    h = hashlib.sha256(json.dumps(trace.header.to_json(), sort_keys=True, default=str).encode())
    for r in trace.rounds:
        h.update(json.dumps(r.to_json(), sort_keys=True, separators=(",", ":"), default=str).encode())
    return h.hexdigest()


def distinct_traces(traces: Sequence[Trace], names: Sequence[str]) -> tuple[list[int], dict[int, int], list[str]]:
    """Identical traces counted once: (indices kept, index dropped -> the index kept that it repeats, one warning
    line per dropped trace naming both)."""
    seen: dict[str, int] = {}
    kept, twin, lines = [], {}, []
    for i, t in enumerate(traces):
        k = seen.setdefault(trace_digest(t), i)
        if k == i:
            kept.append(i)
            continue
        twin[i] = k
        what = "is given twice" if names[i] == names[k] else f"has the same records as {names[k]}"
        lines.append(f"trace {names[i]} {what}: counted once (a second copy would double its samples and narrow "
                     "the intervals)")
    return kept, twin, lines


def _round_ms(rounds: Sequence[RoundRecord]) -> dict[int, float]:
    """{index: the round's time (ms)} of the rounds that were timed, CUDA graph warm-ups left out."""
    return {i: float(r.timings_ms["round"]) for i, r in enumerate(rounds)
            if r.timings_ms and "round" in r.timings_ms and not r.warmup}


def warmup_rounds(rounds: Sequence[RoundRecord]) -> list[int]:
    """Indices of the rounds the runtime marked as CUDA graph warm-up (RoundRecord.warmup)."""
    return [i for i, r in enumerate(rounds) if r.warmup]


def stalled_rounds(rounds: Sequence[RoundRecord]) -> dict[int, float]:
    """{index of a stalled round: the median ms of its kind}: rounds that took over STALL_FACTOR x the median round
    of the same kind (rows and K) in the run, so a burst of wide rounds in a mostly narrow run is not a stall.
    Kinds with fewer than 3 timed rounds are not judged; graph warm-up rounds are neither judged nor counted."""
    kinds: dict[tuple[int, int], dict[int, float]] = {}
    for i, ms in _round_ms(rounds).items():
        kinds.setdefault((len(rounds[i].seqs), rounds[i].K), {})[i] = ms
    out = {}
    for kind in kinds.values():
        median = sorted(kind.values())[len(kind) // 2]
        if len(kind) >= 3 and median > 0:
            out.update({i: median for i, ms in kind.items() if ms > STALL_FACTOR * median})
    return out


def steady(trace: Trace) -> Trace:
    """The trace without its stalled rounds (stalled_rounds) and its CUDA graph warm-up rounds (warmup_rounds), for
    timing latency; the trace itself when it has neither. Its tokens are the whole run's: acceptance and hits are
    read from the trace as recorded."""
    drop = set(stalled_rounds(trace.rounds)) | set(warmup_rounds(trace.rounds))
    if not drop:
        return trace
    return replace(trace, rounds=[r for i, r in enumerate(trace.rounds) if i not in drop])


def unsteady_counts(traces: Sequence[Trace], kept: Sequence[Trace]) -> dict[str, int]:
    """{"rounds": all, "stalled": n, "warmup": n} over the traces when `steady` left any round out of `kept` (their
    steady versions), else {}. Stalls are judged without warm-up rounds, so the two sets do not overlap."""
    rounds = sum(len(t.rounds) for t in traces)
    dropped = rounds - sum(len(t.rounds) for t in kept)
    if not dropped:
        return {}
    warm = sum(len(warmup_rounds(t.rounds)) for t in traces)
    return {"rounds": rounds, "stalled": dropped - warm, "warmup": warm}


def stall_warning(rounds: Sequence[RoundRecord], name: str) -> str | None:
    """One line when some of a run's rounds (a trace's, or a run's just finished) took over STALL_FACTOR x the median
    round of their kind (ms), else None: calibration leaves them out of the latency fit and its level
    (steady), so a profile predicts steady rounds. Rounds marked as CUDA graph warm-up are not stalls."""
    stalled = stalled_rounds(rounds)
    if not stalled:
        return None
    ms = _round_ms(rounds)
    extra = sum(ms[i] - median for i, median in stalled.items())
    typical = duration(min(stalled.values()))
    return (f"{name}: {len(stalled)} of {len(ms)} rounds stalled (over {STALL_FACTOR:g}x the median round of their "
            f"rows and K, {typical}; {duration(extra)} extra, {extra / sum(ms.values()):.1%} of the run's time: a host "
            "stall, or one-time work the runtime does not mark): calibration leaves them out of the latency fit, so a "
            "profile predicts steady rounds")
