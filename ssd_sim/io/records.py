"""The trace's records, declared once: what ssd-run writes and calibration, replay and the dashboard read.

A trace (JSONL) is a Header line, one RoundRecord line per round and a summary line (trace.py reads and writes
the file). Each record validates itself when read (`from_json`: one ConfigError naming the line, the field and
the value) and writes itself (`to_json`). Adding a field: add it here, with its default and its check.

Schema versions: ssd-trace/2 (written since 2026-12-02) leaves out a per-sequence field at its default and a
phase that did not run (0 ms); ssd-trace/1 wrote every field, null or 0 included. Both read into the same
records (a field left out = its default), so every shipped trace still loads.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.limits import MAX_BATCH, MAX_K, MAX_REQUESTS
from ssd_sim.io.values import first_repeat

SCHEMA = "ssd-trace/2"
READABLE_SCHEMAS = ("ssd-trace/1", SCHEMA)
MODES = ("ar", "sd", "ssd")
BACKUPS = ("jit", "fast")
MAX_PHASE_MS = 3.6e6  # one phase of one round longer than an hour is no decode step (and would overflow the fits)
MIN_PHASE_MS = 1e-6  # a phase that ran took at least a nanosecond (0 = it did not run)
MAX_TOKEN_ID = 2**31 - 1  # token ids are int32 in every tokenizer and engine
MAX_SUMMARY_VALUE = 1e12  # a summary's counts, ms, s and tok/s: beyond this no run of ours (1e12 ms = 32 years)


class Phase(StrEnum):
    """The phases of one round, in ms: the runtime times them, the simulator models them (same names)."""

    TARGET_WAIT = "target_wait"  # the target waits for the draft's reply
    VERIFY = "verify"  # the target's forward over [t*, s_1..s_K] (AR: its decode step)
    COMMIT = "commit"  # append tokens, roll the KV back, free finished rows
    DRAFT_LOOKUP = "draft_lookup"  # SSD/SD: mirror the committed tokens, find the keys in the cache
    DRAFT_BACKUP = "draft_backup"  # SSD: redraft the misses (jit) or draw random tokens (fast)
    DRAFT_GLUE = "draft_glue"  # SSD, during the verify: re-read the K + 1 proposed tokens
    DRAFT_BRANCH = "draft_branch"  # SSD, during the verify: fork and decode the branches of the next cache
    DRAFT_SD = "draft_sd"  # SD: draft K tokens sequentially
    ROUND = "round"  # the whole round on the target


PHASES = tuple(p.value for p in Phase)


def _bad(where: str, name: str, value: Any, rule: str) -> ConfigError:
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    field_name = name if not name.startswith("seqs[") else name.rsplit(".", 1)[-1] if "." in name else "seqs"
    return ConfigError(field_name,
                       f"{where}: {name} = {text} {rule}; the trace is corrupt or not from ssd-run")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _missing(d: dict, names: tuple[str, ...], where: str) -> None:
    for name in names:
        if name not in d:
            raise ConfigError(name, f"missing in {where}; the trace does not follow {SCHEMA}")


@dataclass(slots=True)
class SeqRecord:
    """One sequence in one round. Units: tokens (counts, ids)."""

    seq: int
    accepted: int  # draft tokens accepted, 0..K (0 in AR)
    bonus: int  # the bonus / correction token id
    committed: int  # tokens appended this round, 0..accepted + 1 (cut at EOS / max new tokens)
    first: bool = False  # the sequence's first round, which cannot hit
    hit: bool | None = None  # SSD: this round's proposal came from the cache (False: from the backup)
    backup: str | None = None  # jit | fast: the backup that produced this round's proposal on a miss
    fan_out: int | None = None  # F_k the draft cached at this round's k (fan_out on a hit, fan_out_miss else)
    bonus_rank: int | None = None  # rank of the bonus among the draft's candidates at k (next round hits iff < fan_out)
    lookup_hit: bool = False  # found in the cache but thrown away (jit_redraft = batch)
    # ssd-run --log-topn N: per stopping position i = 0..accepted, [t_ids, t_logp, t_rest, d_ids, d_logp, d_rest]:
    # the target's and the draft's N most probable next tokens at T = 1 (natural-log probabilities, rest = 1 - their
    # sum); the draft's three are null where unknown. About 0.56 KB per position at N = 20.
    dists: list | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as written (ssd-trace/2: fields at their default left out)."""
        out = {"seq": self.seq, "accepted": self.accepted, "bonus": self.bonus, "committed": self.committed}
        for f in _OPTIONAL_SEQ:
            value = getattr(self, f.name)
            if value != f.default:
                out[f.name] = value
        return out

    @classmethod
    def from_json(cls, d: Any, K: int, where: str) -> SeqRecord:
        """Read and check one entry of a round with K draft tokens (`where`: 'FILE line N seqs[j]')."""
        if not isinstance(d, dict):
            raise _bad(where.rsplit(" ", 1)[0], where.rsplit(" ", 1)[1], d, "must be an object")
        _missing(d, ("seq", "accepted", "bonus", "committed"), where)
        rec = cls(**{k: v for k, v in d.items() if k in _SEQ_FIELDS})
        line, entry = where.rsplit(" ", 1)
        acc = rec.accepted
        checks = (
            ("seq", _is_int(rec.seq) and 0 <= rec.seq < MAX_REQUESTS,
             f"must be an integer in 0..{MAX_REQUESTS - 1} (the request's index in the run)"),
            ("accepted", _is_int(acc) and 0 <= acc <= K, f"must be an integer in 0..K = 0..{K} (draft tokens accepted)"),
            ("bonus", _is_int(rec.bonus) and 0 <= rec.bonus <= MAX_TOKEN_ID, f"must be a token id in 0..{MAX_TOKEN_ID}"),
            ("committed", _is_int(rec.committed) and 0 <= rec.committed <= (acc if _is_int(acc) else K) + 1,
             "must be an integer in 0..accepted + 1 (tokens appended)"),
            ("first", isinstance(rec.first, bool), "must be true or false"),
            ("hit", rec.hit is None or isinstance(rec.hit, bool), "must be true, false or null"),
            ("backup", rec.backup is None or rec.backup in BACKUPS, "must be jit, fast or null"),
            ("fan_out", rec.fan_out is None or (_is_int(rec.fan_out) and rec.fan_out >= 0),
             "must be an integer >= 0 or null"),
            ("bonus_rank", rec.bonus_rank is None or (_is_int(rec.bonus_rank) and rec.bonus_rank >= 0),
             "must be an integer >= 0 or null"),
            ("lookup_hit", isinstance(rec.lookup_hit, bool), "must be true or false"),
        )
        for name, ok, rule in checks:
            if not ok:
                raise _bad(line, f"{entry}.{name}", getattr(rec, name), rule)
        if rec.dists is not None:
            check_dists(rec, line)
        return rec


_SEQ_FIELDS = {f.name for f in fields(SeqRecord)}
_OPTIONAL_SEQ = tuple(f for f in fields(SeqRecord) if f.name not in ("seq", "accepted", "bonus", "committed"))


def check_dists(seq: SeqRecord, where: str) -> None:
    """ConfigError naming `where` unless seq.dists follows the schema (see SeqRecord.dists)."""

    def bad(what: str) -> ConfigError:
        return ConfigError("dists", f"{where}: seq {seq.seq} {what}; re-record the trace with ssd-run --log-topn")

    dists = seq.dists
    if not isinstance(dists, list) or len(dists) != seq.accepted + 1:
        raise bad(f"dists must be a list of accepted + 1 = {seq.accepted}+1 positions")
    for i, d in enumerate(dists):
        if not isinstance(d, list) or len(d) != 6:
            raise bad(f"dists[{i}] must be [t_ids, t_logp, t_rest, d_ids, d_logp, d_rest]")
        for side, (ids, lp, rest) in (("target", d[:3]), ("draft", d[3:])):
            if side == "draft" and ids is None and lp is None and rest is None:
                continue
            if not _top_n_ok(ids, lp, rest):
                raise bad(f"dists[{i}] {side}: needs equal-length lists of token ids >= 0 and log-probs <= 0, "
                          "and a rest mass in [0, 1]")


def _top_n_ok(ids: Any, lp: Any, rest: Any) -> bool:
    """One side's [ids, log-probs, rest] as JSON gives it: ints >= 0 (not bools), finite numbers <= 0 (1e-6 of
    rounding allowed), a rest mass in [0, 1]. Set and map checks: a trace holds millions of these numbers."""
    return (isinstance(ids, list) and isinstance(lp, list) and bool(ids) and len(ids) == len(lp)
            and {type(t) for t in ids} == {int} and min(ids) >= 0
            and {type(v) for v in lp} <= {int, float} and all(map(math.isfinite, lp)) and max(lp) <= 1e-6
            and _is_number(rest) and -1e-6 <= rest <= 1 + 1e-6)


def no_timings() -> dict[str, float]:
    """Every phase at 0 ms (did not run)."""
    return dict.fromkeys(PHASES, 0.0)


@dataclass(slots=True)
class RoundRecord:
    """One target verification (one decode step in AR). Units: tokens, ms."""

    round: int
    K: int  # draft tokens proposed per sequence (0: AR, or after a draft fault)
    batch: int  # sequences in the round
    seqs: list[SeqRecord]
    timings_ms: dict[str, float] = field(default_factory=no_timings)  # every Phase; 0 = did not run
    fallback: str | None = None  # "ar": the draft failed earlier, this round ran without it
    # A forward of the round (either side's) ran before its CUDA graph replayed: a shape's first sighting or its
    # capture (ssd_runtime.graphs), one-time work that makes the round no steady one (io.sanity.steady).
    warmup: bool = False

    def to_json(self) -> dict[str, Any]:
        out = {"round": self.round, "K": self.K, "batch": self.batch, "seqs": [s.to_json() for s in self.seqs],
               "timings_ms": {k: v for k, v in self.timings_ms.items() if v}}
        if self.fallback is not None:
            out["fallback"] = self.fallback
        if self.warmup:
            out["warmup"] = True  # steady rounds (every round without graphs) keep the line they always had
        return out

    @classmethod
    def from_json(cls, d: dict, where: str) -> RoundRecord:
        """Read and check one round line (`where`: 'FILE line N')."""
        _missing(d, ("round", "K", "seqs", "timings_ms"), where)
        K, seqs, ms = d["K"], d["seqs"], d["timings_ms"]
        if not (_is_int(d["round"]) and d["round"] >= 0):
            raise _bad(where, "round", d["round"], "must be an integer >= 0 (the round's index)")
        if not (_is_int(K) and 0 <= K <= MAX_K):
            raise _bad(where, "K", K, f"must be an integer in 0..{MAX_K} (draft tokens per round)")
        if not isinstance(seqs, list):
            raise _bad(where, "seqs", seqs, "must be a list of per-sequence entries")
        batch = d.get("batch", len(seqs))
        if not (_is_int(batch) and 0 <= batch <= MAX_BATCH):
            raise _bad(where, "batch", batch, f"must be an integer in 0..{MAX_BATCH} (sequences)")
        if not isinstance(ms, dict):
            raise _bad(where, "timings_ms", ms, "must be an object of phase -> ms")
        for key, v in ms.items():
            if not (_is_number(v) and math.isfinite(v) and (v == 0 or MIN_PHASE_MS <= v <= MAX_PHASE_MS)):
                raise _bad(where, f"timings_ms.{key}", v,
                           f"must be 0 (did not run) or a number of ms in {MIN_PHASE_MS:g}..{MAX_PHASE_MS:g}")
        warmup = d.get("warmup", False)
        if not isinstance(warmup, bool):
            raise _bad(where, "warmup", warmup, "must be true or false (a CUDA graph warm-up ran in the round)")
        entries = [SeqRecord.from_json(s, K, f"{where} seqs[{j}]") for j, s in enumerate(seqs)]
        twice = first_repeat(e.seq for e in entries)
        if twice is not None:
            raise _bad(where, "seqs", [e.seq for e in entries],
                       f"names sequence {twice} twice (a round decodes each sequence once)")
        return cls(d["round"], K, batch, entries, {**no_timings(), **ms}, d.get("fallback"), warmup)


@dataclass(slots=True)
class Header:
    """The trace's first line: what ran, on what, with which plan. Units: tokens, ISO-8601 times."""

    mode: str  # ar | sd | ssd
    plan: dict[str, Any]  # Plan.to_dict() of the run (its mode included)
    batch_size: int  # rows decoded together (ssd-run --max-batch)
    schema: str = SCHEMA
    models: dict = field(default_factory=dict)  # {"target": name, "draft": name | None}
    dtype: dict = field(default_factory=dict)  # {"target": str, "draft": str | None}
    quantize: dict = field(default_factory=dict)  # {"target": str | None, "draft": str | None}
    devices: dict = field(default_factory=dict)  # {"target": str, "draft": str | None}
    versions: dict = field(default_factory=dict)  # python, torch, transformers, ssd
    prompt_source: str = ""
    num_prompts: int = 0
    max_new_tokens: int = 0
    machine: str = ""
    started_at: str = ""
    host: dict | None = None  # Host.to_dict() (ssd_sim.io.host); traces made before it was recorded lack it
    seed: int = 0
    ignore_eos: bool = False  # generation ran past EOS (benchmarks)
    forced_acceptance: float | None = None  # synthetic acceptance (pipeline tests; not exact)
    log_topn: int = 0  # the N of every SeqRecord.dists (0: none logged)
    phases: tuple[str, ...] = PHASES  # the round phases the run timed (ssd-trace/2)
    # Per sequence (seq i = the run's i-th prompt), the class of its prompt ("code", "chat", a user's label; "" =
    # none): what a workload mix (model.mix) weighs requests by. None: the run recorded no classes.
    request_tags: tuple[str, ...] | None = None
    extra: dict = field(default_factory=dict)  # fields this version does not know (forward compatible)

    def to_json(self) -> dict[str, Any]:
        out = {"type": "header"}
        for f in fields(self):
            if f.name == "request_tags" and self.request_tags is None:
                continue  # traces without classes keep the header they always had
            if f.name != "extra":
                v = getattr(self, f.name)
                out[f.name] = list(v) if f.name in ("phases", "request_tags") else v
        return {**out, **self.extra}

    @classmethod
    def build(cls, **values: Any) -> Header:
        """A header from keyword fields; names this version does not declare go to `extra`."""
        known = {f.name for f in fields(cls)} - {"extra"}
        extra = {k: v for k, v in values.items() if k not in known and k != "type"}
        if "phases" in values:
            values["phases"] = tuple(values["phases"])
        if values.get("request_tags") is not None:
            values["request_tags"] = tuple(values["request_tags"])
        return cls(**{k: v for k, v in values.items() if k in known}, extra=extra)

    @classmethod
    def from_json(cls, d: dict, where: str) -> Header:
        _missing(d, ("schema", "mode", "plan", "batch_size"), where)
        if d["schema"] not in READABLE_SCHEMAS:
            raise ConfigError("schema", f"{where.rsplit(' ', 1)[0]}: {d['schema']!r} unsupported, expected one of "
                                        f"{', '.join(map(repr, READABLE_SCHEMAS))}")
        if d["mode"] not in MODES:
            raise ConfigError("mode", f"{where}: mode = {d['mode']!r}, expected one of {', '.join(MODES)}")
        if not isinstance(d["plan"], dict):
            raise ConfigError("plan", f"{where}: must be an object (the plan the run used)")
        if not (_is_int(d["batch_size"]) and 1 <= d["batch_size"] <= MAX_BATCH):
            raise ConfigError("batch_size", f"{where}: batch_size = {d['batch_size']!r:.40} must be an integer in "
                                            f"1..{MAX_BATCH}")
        _check_plan(d["plan"], where)
        _check_tags(d.get("request_tags"), where)
        _check_header_types(d, where)
        return cls.build(**d)


_HEADER_TYPES = {**dict.fromkeys(("models", "dtype", "quantize", "devices", "versions"), (dict, "an object")),
                 **dict.fromkeys(("prompt_source", "machine", "started_at"), (str, "a string")),
                 **dict.fromkeys(("num_prompts", "max_new_tokens", "seed", "log_topn"), (int, "an integer")),
                 "ignore_eos": (bool, "true or false"), "phases": (list, "a list of phase names")}


def _check_header_types(d: dict, where: str) -> None:
    """Each header field a reader uses is of its kind when present (a string for devices, null for phases: these
    were tracebacks deep in calibration or replay)."""
    for key, (kind, what) in _HEADER_TYPES.items():
        v = d.get(key)
        if key in d and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
            raise ConfigError(key, f"{where}: {key} = {v!r:.40} must be {what}")
    if "phases" in d and not all(isinstance(x, str) for x in d["phases"]):
        raise ConfigError("phases", f"{where}: phases = {d['phases']!r:.40} must be a list of phase names")
    if d.get("host") is not None and not isinstance(d["host"], dict):
        raise ConfigError("host", f"{where}: host = {d['host']!r:.40} must be an object or null")


MAX_TAG_CHARS = 64
_TAG = re.compile(r"[A-Za-z0-9_.-]*")


def _check_tags(tags: Any, where: str) -> None:
    """request_tags: absent / null, or a list of class labels (letters, digits, _ . -; "" = untagged)."""
    if tags is None:
        return
    if not (isinstance(tags, list) and all(isinstance(t, str) and len(t) <= MAX_TAG_CHARS and _TAG.fullmatch(t)
                                           for t in tags)):
        raise ConfigError("request_tags", f"{where}: request_tags = {tags!r:.60} must be a list of class labels "
                                          f"(up to {MAX_TAG_CHARS} letters, digits, _ . -; \"\" = untagged), one "
                                          "per sequence")


def _check_plan(plan: dict, where: str) -> None:
    for key in ("fan_out", "fan_out_miss"):
        v = plan.get(key)
        if v is not None and not (isinstance(v, list) and all(_is_int(x) and x >= 0 for x in v)):
            raise ConfigError(f"plan.{key}", f"{where}: plan.{key} = {v!r:.40} must be a list of integers >= 0")
    for key in ("temperature", "saguaro_c"):
        v = plan.get(key)
        if key in plan and not (_is_number(v) and math.isfinite(v) and v >= 0):
            raise ConfigError(f"plan.{key}", f"{where}: plan.{key} = {v!r:.40} must be a finite number >= 0")
    for key, most in (("num_speculative_tokens", MAX_K), ("batch_size", MAX_BATCH)):
        v = plan.get(key)
        if key in plan and not (_is_int(v) and 0 <= v <= most):
            raise ConfigError(f"plan.{key}", f"{where}: plan.{key} = {v!r:.40} must be an integer in 0..{most}")


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


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request of a job: its times in ms since the job started, and the tokens it generated."""

    seq: int
    arrival_ms: float
    first_token_ms: float
    finish_ms: float
    output_tokens: int

    @property
    def ttft_ms(self) -> float:
        """Time to first token: first token - arrival (ms)."""
        return self.first_token_ms - self.arrival_ms

    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first: (finish - first token) / (output tokens - 1) (ms); None for
        a one-token request."""
        n = self.output_tokens - 1
        return (self.finish_ms - self.first_token_ms) / n if n > 0 else None


@dataclass(frozen=True)
class Summary(TraceMetrics):
    """The trace's last line: what the runtime printed. TraceMetrics of the rounds (decode only), plus the job's
    end-to-end numbers. Units: tokens, ms, s, tok/s. Traces written before 2026-12 lack the end-to-end fields."""

    faults: tuple[str, ...] = ()  # draft faults the job finished past (autoregressively)
    prefill_ms: float = 0.0  # the target's prefills, summed
    generated_tokens: int = 0  # every generated token, first tokens (from the prefill) included
    job_s: float = 0.0  # the job's wall time: the last request's finish
    e2e_tok_s: float = 0.0  # generated_tokens / job_s (prefill and arrival waits included)
    ttft_ms_p50: float | None = None  # TTFT = first token - arrival, as ssd_sim.sim.metrics
    ttft_ms_p90: float | None = None
    ttft_ms_p99: float | None = None
    tpot_ms_p50: float | None = None  # TPOT = (finish - first token) / (output tokens - 1); None: no request
    tpot_ms_p90: float | None = None  # produced two tokens
    tpot_ms_p99: float | None = None
    requests: tuple[RequestRecord, ...] = ()  # by seq
    # host reads of device tensors per round (median; each one a sync on a GPU), the target's and the draft's
    host_syncs_target: float | None = None
    host_syncs_draft: float | None = None
    # CUDA graphs at the job's end per side ({"graphs", "replays", "eager_shapes"}); None: that side ran without
    graphs_target: dict | None = None
    graphs_draft: dict | None = None
    extra: dict = field(default_factory=dict)  # fields this version does not know

    @property
    def wall_s(self) -> float:
        return self.wall_ms / 1e3

    @classmethod
    def of(cls, metrics: TraceMetrics, **job: Any) -> Summary:
        """The summary of a job: the metrics of its rounds plus the job's own fields (faults, requests, ...)."""
        return cls(**{f.name: getattr(metrics, f.name) for f in fields(TraceMetrics)}, **job)

    def to_json(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        d.update(per_position_acceptance=list(self.per_position_acceptance), faults=list(self.faults),
                 requests=[asdict(r) for r in self.requests], wall_s=self.wall_s)
        return {**d, **self.extra}

    @classmethod
    def from_json(cls, d: dict, where: str, metrics: Callable[[], TraceMetrics] | None = None) -> Summary:
        """Read a summary line (any version: missing end-to-end fields take their defaults; metrics the line
        lacks, e.g. a hand-written summary, come from `metrics()`, those of the trace's own rounds, computed
        only then)."""
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in d.items() if k in known}
        lacking = [f.name for f in fields(TraceMetrics) if f.name not in values and f.default is dataclasses.MISSING]
        if lacking and metrics is None:
            _missing(d, tuple(lacking), where)
        if lacking:
            computed = metrics()
            values.update({name: getattr(computed, name) for name in lacking})
        _check_summary_numbers(values, where)
        try:
            values["per_position_acceptance"] = tuple(values["per_position_acceptance"])
            values["faults"] = tuple(values.get("faults", ()))
            values["requests"] = tuple(RequestRecord(**r) for r in values.get("requests", ()))
        except TypeError as e:
            raise ConfigError("summary", f"{where}: {e}; the trace is corrupt or not from ssd-run") from e
        extra = {k: v for k, v in d.items() if k not in known and k not in ("type", "wall_s")}
        return cls(**values, extra=extra)


def _summary_numbers(values: dict) -> Iterable[tuple[str, Any]]:
    """(name, value) of every number a summary holds: its fields, phase_ms, per-position rates, request times."""
    for key, v in values.items():
        if isinstance(v, dict) and key == "phase_ms":
            yield from ((f"phase_ms.{k}", x) for k, x in v.items())
        elif isinstance(v, list) and key == "per_position_acceptance":
            yield from ((f"{key}[{i}]", x) for i, x in enumerate(v))
        elif isinstance(v, list) and key == "requests":
            yield from ((f"requests[{i}].{k}", x) for i, r in enumerate(v) if isinstance(r, dict) for k, x in r.items())
        else:
            yield key, v


def _check_summary_numbers(values: dict, where: str) -> None:
    """Every number in a summary is in 0..MAX_SUMMARY_VALUE, or NaN where there was nothing to count (a position no
    round reached); 1e30 tok/s, an infinite or a negative ms read silently before."""
    for name, v in _summary_numbers(values):
        if _is_number(v) and not math.isnan(v) and not 0 <= v <= MAX_SUMMARY_VALUE:
            raise _bad(where, name, v, f"must be a number in 0..{MAX_SUMMARY_VALUE:g} (or NaN: none counted)")
