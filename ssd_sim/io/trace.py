"""Trace schema (JSONL) shared by the runtime (writer), calibration and the dashboard (readers).

Line 1, the header:
    {"type": "header", "schema": "ssd-trace/1", "mode": "ar"|"sd"|"ssd", "plan": {Plan.to_dict()},
     "models": {"target": str, "draft": str|null}, "dtype": {"target": str, "draft": str|null},
     "quantize": {"target": str|null, "draft": str|null}, "devices": {"target": str, "draft": str|null},
     "versions": {"python": str, "torch": str, "transformers": str, "ssd": str},
     "prompt_source": str, "num_prompts": int, "batch_size": int, "max_new_tokens": int,
     "machine": str, "started_at": ISO-8601 str,
     "host": {Host.to_dict()} (ssd_sim.io.host: CPU, ISA, cores, memory, GPUs, torch / oneDNN versions, the
             Linear kernel path each model ran; optional: traces made before it was recorded lack it)}
One line per round (one target verification, or one target step in AR mode):
    {"type": "round", "round": int, "K": int, "batch": int (active sequences),
     "seqs": [{"seq": int, "accepted": int (draft tokens accepted, 0..K; 0 in AR),
               "bonus": int (bonus/correction token id), "committed": int (tokens appended this round),
               "first": bool (optional: the sequence's first round, which cannot hit),
               "hit": bool|null (SSD: the lookup at the start of this round hit, so this round's
                   proposal came from the cache; false = it came from the backup; null outside SSD),
               "backup": "jit"|"fast"|null (the backup that produced this round's proposal on a miss),
               "fan_out": int|null (F_k the draft cached at this round's realised k; from fan_out when
                   hit, from fan_out_miss otherwise),
               "bonus_rank": int|null (rank of this round's bonus token among the draft's candidates
                   at k, 0 = best, the rejected draft token excluded; the next round hits iff
                   bonus_rank < fan_out; null when unknown, e.g. the sequence finished),
               "dists": optional (ssd-run --log-topn N; the header's "log_topn" is N): one entry per
                   stopping position i = 0..accepted, [t_ids, t_logp, t_rest, d_ids, d_logp, d_rest]: the
                   target's and the draft's N most probable next tokens at T = 1 in the context before
                   position i (ids by descending probability, natural-log probabilities, rest = 1 - their
                   sum); the draft's three are null where unknown (SD's all-accepted position at a
                   sequence's end). About 0.56 KB per position at N = 20}],
     "timings_ms": {"target_wait": float (target waits for the draft's reply), "verify": float,
                    "commit": float, "draft_lookup": float, "draft_backup": float,
                    "draft_glue": float, "draft_branch": float (speculative work done during this
                    round's verify), "draft_sd": float (SD: sequential drafting), "round": float}}
Last line, the summary (what the runtime printed):
    {"type": "summary", "tokens": int, "wall_s": float, "tok_s": float, "rounds": int,
     "faults": [str, ...], ...metrics of `summarize`,
     optional (ssd-run since 2026-12): "e2e_tok_s": float (generated tokens / job_s, prefill and arrival waits
     included), "job_s": float, "requests": [{"seq", "arrival_ms", "first_token_ms", "finish_ms",
     "output_tokens"}] (ms since the job started), "ttft_ms_p50|p90|p99", "tpot_ms_p50|p90|p99": float|null
     (TTFT = first token - arrival, TPOT = (finish - first token) / (output tokens - 1), as ssd_sim.sim.metrics)}
Unknown extra keys are allowed (forward compatible); the keys above are required where listed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import check_writable, parse_json, read_text_file, replace_regular

TRACE_SCHEMA = "ssd-trace/1"
PHASES = ("target_wait", "verify", "commit", "draft_lookup", "draft_backup", "draft_glue", "draft_branch",
          "draft_sd", "round")
_HEADER_REQUIRED = ("schema", "mode", "plan", "batch_size")
_ROUND_REQUIRED = ("round", "K", "seqs", "timings_ms")
_SEQ_REQUIRED = ("seq", "accepted", "bonus", "committed")


@dataclass
class Trace:
    """A parsed trace: header dict, list of round dicts, summary dict (or None if the run was cut)."""

    header: dict[str, Any]
    rounds: list[dict[str, Any]]
    summary: dict[str, Any] | None = None
    path: str | None = None

    @property
    def mode(self) -> str:
        return self.header["mode"]

    @property
    def plan(self) -> dict[str, Any]:
        return self.header["plan"]


def read_trace(path: str | Path) -> Trace:
    """Parse and validate a JSONL trace file; problems raise ConfigError naming the line and field."""
    p = Path(path)
    lines = read_text_file(p, "trace", "record one with `ssd-run --trace FILE`").splitlines()
    return parse_trace(lines, source=str(p))


def parse_trace(lines: Iterable[str], source: str = "<trace>") -> Trace:
    """Parse trace lines (see module docstring)."""
    header, rounds, summary = None, [], None
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = parse_json(line, f"{source} line {no}")
        except ConfigError as e:
            raise ConfigError("trace", str(e).split(": ", 1)[1]) from e
        kind = rec.get("type") if isinstance(rec, dict) else None
        if kind == "header":
            _require(rec, _HEADER_REQUIRED, f"{source} header")
            if not isinstance(rec["plan"], dict):
                raise ConfigError("plan", f"{source} header: must be an object (the plan the run used)")
            if rec["schema"] != TRACE_SCHEMA:
                raise ConfigError("schema", f"{source}: {rec['schema']!r} unsupported, expected {TRACE_SCHEMA!r}")
            header = rec
        elif kind == "round":
            if header is None:
                raise ConfigError("trace", f"{source} line {no}: round before the header line")
            _require(rec, _ROUND_REQUIRED, f"{source} line {no}")
            if not isinstance(rec["seqs"], list):
                raise ConfigError("seqs", f"{source} line {no}: must be a list of per-sequence records, "
                                          f"got {type(rec['seqs']).__name__}")
            for s in rec["seqs"]:
                if not isinstance(s, dict):
                    raise ConfigError("seqs", f"{source} line {no}: each entry must be an object, got {s!r:.40}")
                _require(s, _SEQ_REQUIRED, f"{source} line {no} seqs[]")
                if "dists" in s:
                    check_dists(s, f"{source} line {no}")
            rounds.append(rec)
        elif kind == "summary":
            summary = rec
        else:
            raise ConfigError("type", f"{source} line {no}: expected header|round|summary, got {kind!r}")
    if header is None:
        raise ConfigError("trace", f"{source} has no header line; is it an ssd-run trace?")
    return Trace(header, rounds, summary, source)


def check_dists(seq: dict, where: str) -> None:
    """ConfigError naming `where` unless seq["dists"] follows the schema (see the module docstring)."""

    def bad(what: str) -> ConfigError:
        return ConfigError("dists", f"{where}: seq {seq.get('seq')} {what}; re-record the trace with ssd-run --log-topn")

    dists = seq["dists"]
    if not isinstance(dists, list) or not isinstance(seq["accepted"], int) or len(dists) != seq["accepted"] + 1:
        raise bad(f"dists must be a list of accepted + 1 = {seq['accepted']}+1 positions")
    for i, d in enumerate(dists):
        if not isinstance(d, list) or len(d) != 6:
            raise bad(f"dists[{i}] must be [t_ids, t_logp, t_rest, d_ids, d_logp, d_rest]")
        for side, (ids, lp, rest) in (("target", d[:3]), ("draft", d[3:])):
            if side == "draft" and ids is None and lp is None and rest is None:
                continue
            if not (isinstance(ids, list) and isinstance(lp, list) and ids and len(ids) == len(lp)
                    and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids)
                    and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v <= 1e-6
                            for v in lp)
                    and isinstance(rest, int | float) and not isinstance(rest, bool) and -1e-6 <= rest <= 1 + 1e-6):
                raise bad(f"dists[{i}] {side}: needs equal-length lists of token ids >= 0 and log-probs <= 0, "
                          "and a rest mass in [0, 1]")


def _require(rec: dict, keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if k not in rec]
    if missing:
        raise ConfigError(missing[0], f"missing in {where}; the trace does not follow {TRACE_SCHEMA}")


class TraceWriter:
    """Writes a trace line by line to `path.partial`, renamed to `path` on close.

    A run that dies leaves the .partial file (useful, clearly marked) and never a half-valid trace
    under the final name.
    """

    def __init__(self, path: str | Path, header: dict[str, Any]):
        self.path = check_writable(path, "trace")
        self.partial = self.path.with_name(self.path.name + ".partial")
        try:
            self._f = self.partial.open("w")
        except OSError as e:
            raise ConfigError("trace", f"cannot write {self.partial} ({e.strerror or e})") from e
        self.write({"type": "header", "schema": TRACE_SCHEMA, **header})

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record, separators=(",", ":"), default=_json_default) + "\n")

    def flush(self) -> None:
        """Push written records to the file (a run that dies then leaves whole lines in `.partial`)."""
        if not self._f.closed:
            self._f.flush()

    def round(self, record: dict[str, Any]) -> None:
        self.write({"type": "round", **record})

    def close(self, summary: dict[str, Any]) -> Path:
        self.write({"type": "summary", **summary})
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


@dataclass(frozen=True)
class TraceMetrics:
    """Metrics of a run, computed the same way for real traces and simulated runs.

    Units: tokens, ms, tok/s; rates in [0, 1]. mean_accept_len includes the bonus token (vLLM convention).
    """

    rounds: int
    tokens: int
    wall_ms: float  # sum of round times: decoding only, prefill and start-up excluded
    tok_s: float  # decode throughput, all sequences: tokens / wall_ms
    mean_accept_len: float
    acceptance_rate: float  # accepted / drafted
    hit_rate: float | None  # SSD: cache hits / lookups (entries marked "first" excluded: they cannot hit)
    primary_hit_rate: float | None  # P(next round hits | this round came from the cache)
    backup_hit_rate: float | None  # P(next round hits | this round came from the backup)
    tokens_per_round_hit: float | None
    tokens_per_round_miss: float | None
    per_position_acceptance: tuple[float, ...]
    phase_ms: dict[str, float] = field(default_factory=dict)  # mean ms per round of each phase

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_position_acceptance"] = list(self.per_position_acceptance)
        return d


def summarize(trace: Trace) -> TraceMetrics:
    """Compute TraceMetrics from the rounds of a trace (decode time = sum of round times, in ms)."""
    rounds = trace.rounds
    K = max((r["K"] for r in rounds), default=0)
    tokens = sum(s["committed"] for r in rounds for s in r["seqs"])
    wall_ms = sum(r["timings_ms"].get("round", 0.0) for r in rounds)  # decode only: prefill excluded
    seqs = [(r, s) for r in rounds for s in r["seqs"]]
    drafted = sum(r["K"] for r, _ in seqs) if trace.mode != "ar" else 0
    accepted = sum(s["accepted"] for _, s in seqs)
    lens = [s["accepted"] + 1 for _, s in seqs]
    tried = [0] * K
    passed = [0] * K
    for r, s in seqs:
        if trace.mode == "ar":
            break
        for i in range(min(s["accepted"] + 1, r["K"])):
            tried[i] += 1
            passed[i] += i < s["accepted"]
    looked = [s for _, s in seqs if s.get("hit") is not None and not s.get("first", False)]
    hits = [s for s in looked if s["hit"]]
    ranked = [s for _, s in seqs if s.get("bonus_rank") is not None and s.get("fan_out") is not None]
    hit_tok = [s["committed"] for s in looked if s["hit"]]
    miss_tok = [s["committed"] for s in looked if not s["hit"]]
    phases = {ph: _mean([r["timings_ms"].get(ph, 0.0) for r in rounds]) for ph in PHASES}
    return TraceMetrics(
        rounds=len(rounds),
        tokens=tokens,
        wall_ms=wall_ms,
        tok_s=tokens / wall_ms * 1e3 if wall_ms > 0 else 0.0,
        mean_accept_len=_mean(lens),
        acceptance_rate=accepted / drafted if drafted else 0.0,
        hit_rate=len(hits) / len(looked) if looked else None,
        primary_hit_rate=_next_hit_rate([s for s in ranked if s.get("hit")]),
        backup_hit_rate=_next_hit_rate([s for s in ranked if not s.get("hit")]),
        tokens_per_round_hit=_mean(hit_tok) if hit_tok else None,
        tokens_per_round_miss=_mean(miss_tok) if miss_tok else None,
        per_position_acceptance=tuple(p / t if t else math.nan for p, t in zip(passed, tried, strict=True)),
        phase_ms=phases,
    )


def _mean(xs: list[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else 0.0


def _next_hit_rate(seqs: list[dict]) -> float | None:
    """Share of outcomes the draft had cached (bonus_rank < fan_out), i.e. the next round hits."""
    return sum(s["bonus_rank"] < s["fan_out"] for s in seqs) / len(seqs) if seqs else None
