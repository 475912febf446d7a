"""Plan: the knobs of one SSD configuration (K, fan-out, Saguaro C, backup policy), validated, JSON round-trip.

A plan file is JSON: {"schema": "ssd-plan/1", "plan": {...}, ...extra keys written by ssd-plan
(profile, predicted, engine_flags)}. Only "plan" is read back; everything in it is validated and a bad
field raises ConfigError naming the field and the fix.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import read_json_object
from ssd_sim.io.limits import MAX_BATCH, MAX_BUDGET, MAX_DRAFT_DEVICES, MAX_K, MAX_TEMPERATURE
from ssd_sim.theory.saguaro import DOWNWEIGHT_SETS

PLAN_SCHEMA = "ssd-plan/1"
BACKUPS = ("jit", "fast", "adaptive")
JIT_REDRAFT = ("rows", "batch")
MODES = ("ar", "sd", "ssd")


@dataclass(frozen=True)
class Plan:
    """One decoding configuration. Units: tokens, sequences; temperature as in sampling."""

    num_speculative_tokens: int = 4  # K: draft tokens proposed per round
    fan_out: tuple[int, ...] = ()  # F^p_k, k = 0..K: cached bonus guesses per stopping position (hit case)
    fan_out_miss: tuple[int, ...] = ()  # F^b_k: the same after a round served by the backup
    saguaro_c: float = 1.0  # Saguaro down-weight of the cached tokens in [0, 1]; 1 = plain sampling
    saguaro_c_list: tuple[float, ...] = ()  # per drafting position k = 0..K-1 (overrides saguaro_c); () = none
    downweight: str = "top_f"  # set multiplied by C: "top_f" (paper) or "top_f_plus_1" (reference engine)
    backup: str = "jit"  # on a cache miss: jit (neural), fast (random tokens) or adaptive (by batch size)
    backup_threshold: float = math.inf  # adaptive: jit below this batch size, fast at or above (b*)
    jit_redraft: str = "rows"  # jit backup redrafts only the missed rows, or the whole batch (engine)
    temperature: float = 0.0  # sampling temperature of target and draft (0 = greedy)
    batch_size: int = 1  # sequences decoded together
    draft_devices: int = 1  # devices running the draft (more devices, bigger cache budget)
    mode: str = "ssd"  # ar | sd | ssd

    def __post_init__(self):
        K = self.num_speculative_tokens
        _check(isinstance(K, int) and not isinstance(K, bool) and 1 <= K <= MAX_K, "num_speculative_tokens",
               f"must be an integer in 1..{MAX_K}, got {K!r}")
        fo = _int_tuple(self.fan_out, "fan_out") if self.fan_out else (1,) * (K + 1)
        fm = _int_tuple(self.fan_out_miss, "fan_out_miss") if self.fan_out_miss else fo
        object.__setattr__(self, "fan_out", fo)
        object.__setattr__(self, "fan_out_miss", fm)
        for name, lst in (("fan_out", fo), ("fan_out_miss", fm)):
            _check(len(lst) == K + 1, name,
                   f"has {len(lst)} entries, expected K+1 = {K + 1} (one per stopping position 0..K)")
        _check(sum(fm) == sum(fo), "fan_out_miss",
               f"sums to {sum(fm)} but fan_out sums to {sum(fo)}: both lists share one cache budget")
        _check(sum(fo) >= 1, "fan_out", "must cache at least one guess (sum >= 1)")
        check_budget(fo)
        _check(_num(self.saguaro_c) and 0.0 <= self.saguaro_c <= 1.0, "saguaro_c",
               f"must be in [0, 1] (1 = plain sampling), got {self.saguaro_c!r}")
        cl = self.saguaro_c_list
        _check(isinstance(cl, (tuple, list)) and all(_num(c) and 0.0 <= c <= 1.0 for c in cl), "saguaro_c_list",
               f"must be a list of values in [0, 1], one per drafting position 0..K-1, got {cl!r}")
        _check(not cl or len(cl) == K, "saguaro_c_list",
               f"has {len(cl)} entries, expected K = {K} (the C used when drafting at stopping positions 0..K-1)")
        object.__setattr__(self, "saguaro_c_list", tuple(float(c) for c in cl))
        _check(self.downweight in DOWNWEIGHT_SETS, "downweight", f"must be one of {DOWNWEIGHT_SETS}")
        _check(self.backup in BACKUPS, "backup", f"must be one of {BACKUPS}, got {self.backup!r}")
        _check(self.jit_redraft in JIT_REDRAFT, "jit_redraft", f"must be one of {JIT_REDRAFT}")
        thr = self.backup_threshold
        _check(_num(thr) and thr >= 1.0, "backup_threshold",
               f"must be a batch size >= 1 (or null for never), got {thr!r}")
        _check(_num(self.temperature) and 0.0 <= self.temperature <= MAX_TEMPERATURE and math.isfinite(self.temperature),
               "temperature", f"must be in [0, {MAX_TEMPERATURE:g}], got {self.temperature!r}")
        for name, hi in (("batch_size", MAX_BATCH), ("draft_devices", MAX_DRAFT_DEVICES)):
            v = getattr(self, name)
            _check(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= hi, name,
                   f"must be an integer in 1..{hi}, got {v!r}")
        _check(self.mode in MODES, "mode", f"must be one of {MODES}, got {self.mode!r}")

    @property
    def K(self) -> int:
        return self.num_speculative_tokens

    @property
    def budget(self) -> int:
        """Cache budget per sequence: total bonus-token guesses cached each round."""
        return sum(self.fan_out)

    def c_at(self, k: int) -> float:
        """The Saguaro C used when drafting at stopping position k (a per-position list, else saguaro_c)."""
        return self.saguaro_c_list[k] if self.saguaro_c_list else self.saguaro_c

    @property
    def c_label(self) -> str:
        """'0.7', or the per-position list '[0.7, 0.5]' (for printing)."""
        if self.saguaro_c_list:
            return "[" + ", ".join(f"{c:g}" for c in self.saguaro_c_list) + "]"
        return f"{self.saguaro_c:g}"

    def backup_for(self, batch_size: int) -> str:
        """The backup actually used at this batch size: jit or fast (adaptive switches at b*)."""
        if self.backup != "adaptive":
            return self.backup
        return "jit" if batch_size < self.backup_threshold else "fast"

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["fan_out"] = list(self.fan_out)
        d["fan_out_miss"] = list(self.fan_out_miss)
        d["saguaro_c_list"] = list(self.saguaro_c_list)
        d["backup_threshold"] = None if math.isinf(self.backup_threshold) else self.backup_threshold
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        """Build a plan from JSON data; unknown or ill-typed fields raise ConfigError."""
        if not isinstance(d, dict):
            raise ConfigError("plan", f"must be a JSON object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        for key in d:
            _check(key in known, key, f"unknown plan field; valid fields: {', '.join(sorted(known))}")
        d = dict(d)
        if d.get("backup_threshold", 0) is None:
            d["backup_threshold"] = math.inf
        if isinstance(d.get("saguaro_c"), (list, tuple)):  # a per-position list given as saguaro_c
            d["saguaro_c_list"], d["saguaro_c"] = d["saguaro_c"], 1.0
        for key in ("fan_out", "fan_out_miss", "saguaro_c_list"):
            if key in d:
                _check(isinstance(d[key], (list, tuple)), key, "must be a list, one value per position")
                d[key] = tuple(d[key])
        return cls(**d)

    def replace(self, **changes) -> Plan:
        """A copy with some fields changed (re-validated)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(changes)
        return Plan(**d)


def _check(ok: bool, name: str, message: str) -> None:
    if not ok:
        raise ConfigError(name, message)


def check_budget(fan_out: tuple[int, ...], name: str = "fan_out") -> None:
    """ConfigError unless the fan-out caches at most MAX_BUDGET guesses per sequence (the cache budget)."""
    _check(sum(fan_out) <= MAX_BUDGET, name, f"caches {sum(fan_out)} guesses per sequence per round, at most "
           f"{MAX_BUDGET} (each is a branch row the draft decodes every round): use a smaller fan-out")


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def _int_tuple(values, name: str) -> tuple[int, ...]:
    out = []
    for v in values:
        _check(isinstance(v, int) and not isinstance(v, bool) and v >= 0, name,
               f"entries must be integers >= 0, got {v!r}")
        out.append(int(v))
    return tuple(out)


@dataclass(frozen=True)
class PlanFile:
    """A plan plus what ssd-plan said about it (profile name, predictions, engine flags)."""

    plan: Plan
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"schema": PLAN_SCHEMA, "plan": self.plan.to_dict(), **self.extra}, indent=2)


def load_plan(path: str | Path) -> PlanFile:
    """Read and validate a plan file; every failure is a ConfigError with a one-line message."""
    data = read_json_object(path, "plan file", f"write one with `ssd-plan ... -o {path}`")
    schema = data.get("schema", PLAN_SCHEMA)
    _check(schema == PLAN_SCHEMA, "schema", f"{schema!r} is not supported; expected {PLAN_SCHEMA!r}")
    body = data.get("plan", None)
    if body is None:
        raise ConfigError("plan", f"{path} has no 'plan' object; regenerate it with ssd-plan")
    extra = {k: v for k, v in data.items() if k not in ("schema", "plan")}
    try:
        return PlanFile(Plan.from_dict(body), extra)
    except ConfigError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as e:
        raise ConfigError("plan", f"{path} is malformed ({type(e).__name__}: {str(e)[:120]}); regenerate it with "
                                  "ssd-plan -o") from e
