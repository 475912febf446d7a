"""Trace files (JSONL) shared by the runtime (writer), calibration, replay and the dashboard (readers).

The records themselves (Header, RoundRecord, SeqRecord, Summary, Phase) and their checks are declared once, in
ssd_sim.io.records. A file is the header line, one line per round and, when the run finished, a summary line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import check_writable, parse_json, read_text_file, replace_regular
from ssd_sim.io.records import (  # noqa: F401  (re-exported: the trace API in one place)
    PHASES,
    SCHEMA,
    Header,
    Phase,
    RoundRecord,
    SeqRecord,
    Summary,
    TraceMetrics,
    check_dists,
)


@dataclass
class Trace:
    """A parsed trace: its header, its rounds, the summary dict (None if the run was cut) and the file it came from."""

    header: Header
    rounds: list[RoundRecord]
    summary: Summary | None = None
    path: str | None = None
    requests: tuple[int, ...] | None = None  # the sequences kept by `only_requests` (None: the whole run)

    @property
    def mode(self) -> str:
        return self.header.mode

    @property
    def plan(self) -> dict[str, Any]:
        return self.header.plan

    def sequences(self) -> list[int]:
        """The sequences (requests) the trace's rounds decode, in order."""
        return sorted({s.seq for r in self.rounds for s in r.seqs})

    def tag(self, seq: int) -> str:
        """The class of sequence `seq`'s prompt (header.request_tags), "" where the run recorded none."""
        tags = self.header.request_tags or ()
        return tags[seq] if 0 <= seq < len(tags) else ""

    def with_tags(self, tags: Iterable[str]) -> Trace:
        """The trace with its requests' classes set, one per sequence (seq i = the run's i-th prompt): for runs
        recorded before ssd-run wrote them (a manifest's "request_tags")."""
        header = replace(self.header, request_tags=tuple(str(t) for t in tags))
        return Trace(header, self.rounds, self.summary, self.path, self.requests)

    def only_requests(self, seqs: Iterable[int], label: str = "") -> Trace:
        """The run cut to the rounds of these sequences (seq i = the run's i-th prompt): a hold-out of requests drawn
        from one run, e.g. a random half of a prompt pool. The summary is dropped (its wall time and request list
        are the whole run's); metrics come from the kept rounds (`summarize`). A round is all kept or all dropped:
        one that batches kept with dropped sequences (b > 1) cannot be split, since its time is theirs together,
        and is refused in one line. `label` is appended to the path ("FILE[label]") to name the cut."""
        keep = frozenset(int(q) for q in seqs)
        rounds = []
        for r in self.rounds:
            ids = {q.seq for q in r.seqs}
            if ids <= keep:
                rounds.append(r)
            elif ids & keep:
                raise ConfigError("requests", f"{self.path} round {r.round} batches kept sequences with others "
                                              f"({sorted(ids)}): its time cannot be split; cut runs of batch size 1")
        unknown = keep - {q.seq for r in self.rounds for q in r.seqs}
        if unknown:
            raise ConfigError("requests", f"{self.path} has no sequence {min(unknown)}; its sequences are the run's "
                                          "prompts in order, from 0")
        return Trace(self.header, rounds, None, f"{self.path}[{label}]" if label else self.path,
                     tuple(sorted(keep)))


def read_trace(path: str | Path) -> Trace:
    """Parse and validate a JSONL trace file; problems raise ConfigError naming the line and field."""
    p = Path(path)
    lines = read_text_file(p, "trace", "record one with `ssd-run --trace FILE`").splitlines()
    return parse_trace(lines, source=str(p))


def parse_trace(lines: Iterable[str], source: str = "<trace>") -> Trace:
    """Parse and check trace lines (any readable schema version, see ssd_sim.io.records)."""
    header, rounds, summary = None, [], None
    seen: dict[str, int] = {}  # header / summary -> its line: one of each per trace, the summary last
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = parse_json(line, f"{source} line {no}")
        except ConfigError as e:
            raise ConfigError("trace", str(e).split(": ", 1)[1]) from e
        kind = rec.get("type") if isinstance(rec, dict) else None
        _check_order(kind, no, seen, source)
        if kind == "header":
            header = Header.from_json(rec, f"{source} header")
        elif kind == "round":
            if header is None:
                raise ConfigError("trace", f"{source} line {no}: round before the header line")
            rounds.append(RoundRecord.from_json(rec, f"{source} line {no}"))
        elif kind == "summary":
            summary = (rec, f"{source} line {no}")  # read once the rounds are known (metrics it lacks)
        else:
            raise ConfigError("type", f"{source} line {no}: expected header|round|summary, got {kind!r}")
    if header is None:
        raise ConfigError("trace", f"{source} has no header line; is it an ssd-run trace?")
    trace = Trace(header, rounds, None, source)
    if summary is not None:
        trace.summary = Summary.from_json(*summary, metrics=lambda: summarize(trace))
    return trace


def _check_order(kind: Any, no: int, seen: dict[str, int], source: str) -> None:
    """One header and at most one summary, nothing after the summary: two traces joined into one file (`cat a b`)
    would otherwise read as one run with the second header's plan."""
    if kind in ("header", "summary") and kind in seen:
        raise ConfigError("trace", f"{source} line {no}: a second {kind} line (the first is line {seen[kind]}); one "
                                   "trace per file: were two traces joined? split them")
    if "summary" in seen and kind in ("header", "round"):
        raise ConfigError("trace", f"{source} line {no}: a {kind} line after the summary (line {seen['summary']}), "
                                   "which ends a trace; were two traces joined? split them")
    if kind in ("header", "summary"):
        seen[kind] = no


class TraceWriter:
    """Writes a trace line by line to `path.partial`, renamed to `path` on close.

    A run that dies leaves the .partial file (useful, clearly marked) and never a half-valid trace
    under the final name. One writer per path: the process that starts the run claims it first
    (ssd_sim.io.outputs.claim_outputs; ssd_runtime.run.Session.run does), so no two runs share a .partial.
    """

    def __init__(self, path: str | Path, header: Header):
        self.path = check_writable(path, "trace")
        self.partial = self.path.with_name(self.path.name + ".partial")
        try:
            self._f = self.partial.open("w")
        except OSError as e:
            raise ConfigError("trace", f"cannot write {self.partial} ({e.strerror or e})") from e
        self.write(header.to_json())

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record, separators=(",", ":"), default=_json_default) + "\n")

    def flush(self) -> None:
        """Push written records to the file (a run that dies then leaves whole lines in `.partial`)."""
        if not self._f.closed:
            self._f.flush()

    def round(self, record: RoundRecord) -> None:
        self.write({"type": "round", **record.to_json()})

    def close(self, summary: Summary) -> Path:
        self.write({"type": "summary", **summary.to_json()})
        self._f.close()
        replace_regular(self.partial, self.path, "trace")
        return self.path

    def abort(self) -> None:
        if not self._f.closed:
            self._f.close()


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def summarize(trace: Trace) -> TraceMetrics:
    """Compute TraceMetrics from the rounds of a trace (decode time = sum of round times, in ms)."""
    rounds = trace.rounds
    K = max((r.K for r in rounds), default=0)
    tokens = sum(s.committed for r in rounds for s in r.seqs)
    wall_ms = sum(r.timings_ms[Phase.ROUND] for r in rounds)  # decode only: prefill excluded
    seqs = [(r, s) for r in rounds for s in r.seqs]
    drafted = sum(r.K for r, _ in seqs) if trace.mode != "ar" else 0
    accepted = sum(s.accepted for _, s in seqs)
    lens = [s.accepted + 1 for _, s in seqs]
    tried = [0] * K
    passed = [0] * K
    for r, s in seqs:
        if trace.mode == "ar":
            break
        for i in range(min(s.accepted + 1, r.K)):
            tried[i] += 1
            passed[i] += i < s.accepted
    looked = [s for _, s in seqs if s.hit is not None and not s.first]
    hits = [s for s in looked if s.hit]
    ranked = [s for _, s in seqs if s.bonus_rank is not None and s.fan_out is not None]
    hit_tok = [s.committed for s in looked if s.hit]
    miss_tok = [s.committed for s in looked if not s.hit]
    phases = {ph: _mean([r.timings_ms[ph] for r in rounds]) for ph in PHASES}
    return TraceMetrics(
        rounds=len(rounds),
        tokens=tokens,
        wall_ms=wall_ms,
        tok_s=tokens / wall_ms * 1e3 if wall_ms > 0 else 0.0,
        mean_accept_len=_mean(lens),
        acceptance_rate=accepted / drafted if drafted else 0.0,
        hit_rate=len(hits) / len(looked) if looked else None,
        primary_hit_rate=_next_hit_rate([s for s in ranked if s.hit]),
        backup_hit_rate=_next_hit_rate([s for s in ranked if not s.hit]),
        tokens_per_round_hit=_mean(hit_tok) if hit_tok else None,
        tokens_per_round_miss=_mean(miss_tok) if miss_tok else None,
        per_position_acceptance=tuple(p / t if t else math.nan for p, t in zip(passed, tried, strict=True)),
        phase_ms=phases,
    )


def _mean(xs: list[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0


def _next_hit_rate(seqs: list[SeqRecord]) -> float | None:
    """Share of outcomes the draft had cached (bonus_rank < fan_out), i.e. the next round hits."""
    return sum(s.bonus_rank < s.fan_out for s in seqs) / len(seqs) if seqs else None
