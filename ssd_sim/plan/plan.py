"""Plan: the knobs of one SSD configuration (K, fan-out, Saguaro C, backup policy), validated, JSON round-trip.

Plan is also the knob schema: each field carries a Knob (its flag, parser, help, check, whether the planner may
search it, what each engine hard-wires). The CLIs' knob flags (ssd_sim.cli.args.add_knob_args), the planner's
fixed knobs and their merge with a plan file (ssd_sim.plan.knobs) all come from it: to add a knob, add a field.

A plan file is JSON: {"schema": "ssd-plan/1", "plan": {...}, ...extra keys written by ssd-plan
(profile, predicted, engine_flags)}. Only "plan" is read back; everything in it is validated and a bad
field raises ConfigError naming the field and the fix.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import read_json_object
from ssd_sim.io.limits import MAX_BATCH, MAX_BUDGET, MAX_DRAFT_DEVICES, MAX_K, MAX_TEMPERATURE
from ssd_sim.io.values import (
    bounded_int,
    fan_out_arg,
    fan_out_list_arg,
    nonfinite_strings,
    nonneg_float,
    threshold_arg,
    unit_float,
)
from ssd_sim.theory.saguaro import DOWNWEIGHT_SETS

PLAN_SCHEMA = "ssd-plan/1"


class Mode(StrEnum):
    """What a run decodes with: autoregressive, synchronous speculative, or speculative speculative."""

    AR = "ar"
    SD = "sd"
    SSD = "ssd"


class Backup(StrEnum):
    """The speculator on a cache miss: jit (neural redraft), fast (random tokens) or adaptive (by batch size)."""

    JIT = "jit"
    FAST = "fast"
    ADAPTIVE = "adaptive"


BACKUPS = tuple(b.value for b in Backup)
MODES = tuple(m.value for m in Mode)
JIT_REDRAFT = ("rows", "batch")


@dataclass(frozen=True)
class Knob:
    """How one Plan field is set on the command line, checked, searched and defaulted: the knob schema.

    flag / short / parse / metavar / choices / help build the argparse flag every CLI shares (None: no flag,
    plan files only); check(value) returns what is wrong with a value, or None; searchable: the planner
    searches the knob when nothing fixes it; engine: the value each engine hard-wires (the planner's default
    for a profile of that engine; None: the Plan default everywhere). Units are in the help text.
    """

    help: str
    group: str = "knob"  # knob: SSD knobs; workload: what runs, not how
    flag: str | None = None
    short: str | None = None
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    searchable: bool = False
    engine: Mapping[str, Any] | None = None
    check: Callable[[Any], str | None] | None = None


def knob(default, **schema) -> Any:
    """A Plan field and its Knob (see Knob)."""
    return field(default=default, metadata={"knob": Knob(**schema)})


def _int_in(lo: int, hi: int) -> Callable[[Any], str | None]:
    def check(v) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
        return None if ok else f"must be an integer in {lo}..{hi}, got {v!r}"

    return check


def _one_of(values: tuple[str, ...], show_value: bool = True) -> Callable[[Any], str | None]:
    def check(v) -> str | None:
        return None if v in values else f"must be one of {values}" + (f", got {v!r}" if show_value else "")

    return check


def _unit_c(v) -> str | None:
    return None if _num(v) and 0.0 <= v <= 1.0 else f"must be in [0, 1] (1 = plain sampling), got {v!r}"


def _c_list(cl) -> str | None:
    ok = isinstance(cl, (tuple, list)) and all(_num(c) and 0.0 <= c <= 1.0 for c in cl)
    return None if ok else f"must be a list of values in [0, 1], one per drafting position 0..K-1, got {cl!r}"


def _threshold(v) -> str | None:
    return None if _num(v) and v >= 1.0 else f"must be a batch size >= 1 (or null or 'inf' for never), got {v!r}"


def _temperature(v) -> str | None:
    ok = _num(v) and 0.0 <= v <= MAX_TEMPERATURE and math.isfinite(v)
    return None if ok else f"must be in [0, {MAX_TEMPERATURE:g}], got {v!r}"


@dataclass(frozen=True)
class Plan:
    """One decoding configuration; each field is declared here once, with its Knob schema. Units: tokens,
    sequences; temperature as in sampling."""

    num_speculative_tokens: int = knob(  # K
        4, flag="--num-speculative-tokens", short="-k", parse=bounded_int(1, MAX_K, "draft tokens per round"),
        metavar="K", searchable=True, check=_int_in(1, MAX_K),
        help=f"draft tokens proposed per round (tokens, 1..{MAX_K})")
    fan_out: tuple[int, ...] = knob(  # F^p_k, k = 0..K; () = one guess per position
        (), flag="--fan-out", parse=fan_out_arg, metavar="F|F0,..,FK", searchable=True,
        help="cached bonus-token guesses per stopping position: one integer (uniform) or K+1 comma-separated "
             f"integers (hit case, F^p); at most {MAX_BUDGET} in all")
    fan_out_miss: tuple[int, ...] = knob(  # F^b_k; () = fan_out
        (), flag="--fan-out-miss", parse=fan_out_list_arg, metavar="F0,..,FK", searchable=True,
        help="the same after a round served by the backup (F^b); must sum like --fan-out")
    saguaro_c: float = knob(
        1.0, flag="--saguaro-c", parse=unit_float, metavar="C", searchable=True, check=_unit_c,
        help="Saguaro down-weight of the cached tokens in [0, 1] (1 = plain sampling)")
    saguaro_c_list: tuple[float, ...] = knob(  # overrides saguaro_c; () = none
        (), searchable=True, check=_c_list, help="per drafting position k = 0..K-1 (plan files only)")
    downweight: str = knob(
        "top_f", flag="--downweight", choices=DOWNWEIGHT_SETS, check=_one_of(DOWNWEIGHT_SETS, False),
        engine={"ssd-runtime": "top_f", "reference": "top_f_plus_1"},  # the reference engine: top F + 1
        help="which set C multiplies: top_f (paper) or top_f_plus_1 (reference engine); default: what the "
             "profile's engine does")
    backup: str = knob(
        "jit", flag="--backup", choices=BACKUPS, searchable=True, check=_one_of(BACKUPS),
        help="on a cache miss: jit (neural redraft), fast (random tokens) or adaptive (by batch size)")
    backup_threshold: float = knob(  # b*
        math.inf, flag="--backup-threshold", parse=threshold_arg, metavar="B", searchable=True, check=_threshold,
        help="adaptive backup: jit below this batch size, fast at or above (sequences; 'inf' or 'never' = never)")
    jit_redraft: str = knob(
        "rows", flag="--jit-redraft", choices=JIT_REDRAFT, check=_one_of(JIT_REDRAFT, False),
        engine={"ssd-runtime": "rows", "reference": "batch"},  # reference: draft_runner.jit_speculate
        help="jit backup redrafts only the rows that missed (rows, ssd-run) or the whole batch (batch, the "
             "reference engine); default: what the profile's engine does")
    temperature: float = knob(
        0.0, group="workload", flag="--temperature", short="-t", parse=nonneg_float, metavar="T",
        check=_temperature, help="sampling temperature of target and draft (default 0 = greedy)")
    batch_size: int = knob(
        1, group="workload", flag="--batch-size", short="-b", parse=bounded_int(1, MAX_BATCH, "sequences"),
        metavar="B", check=_int_in(1, MAX_BATCH), help=f"sequences decoded together (1..{MAX_BATCH}, default 1)")
    draft_devices: int = knob(
        1, group="workload", flag="--draft-devices", parse=bounded_int(1, MAX_DRAFT_DEVICES, "draft accelerators"),
        metavar="N", check=_int_in(1, MAX_DRAFT_DEVICES),
        help=f"devices running the draft; more devices hold a bigger cache budget (1..{MAX_DRAFT_DEVICES}, "
             "default 1)")
    mode: str = knob("ssd", group="workload", check=_one_of(MODES), help="ar | sd | ssd")  # each CLI: own --mode

    def __post_init__(self):
        K = self.num_speculative_tokens
        _check_field(self, "num_speculative_tokens")
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
        _check_field(self, "saguaro_c")
        _check_field(self, "saguaro_c_list")
        cl = self.saguaro_c_list
        _check(not cl or len(cl) == K, "saguaro_c_list",
               f"has {len(cl)} entries, expected K = {K} (the C used when drafting at stopping positions 0..K-1)")
        object.__setattr__(self, "saguaro_c_list", tuple(float(c) for c in cl))
        for name in ("downweight", "backup", "jit_redraft", "backup_threshold", "temperature", "batch_size",
                     "draft_devices", "mode"):
            _check_field(self, name)
        object.__setattr__(self, "backup", Backup(self.backup))
        object.__setattr__(self, "mode", Mode(self.mode))

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
        """JSON data: tuples as lists, enums as their values, an infinite threshold as null."""
        d = {}
        for f in fields(self):
            v = getattr(self, f.name)
            d[f.name] = list(v) if isinstance(v, tuple) else v.value if isinstance(v, Enum) else v
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
        d = nonfinite_strings(d)  # "inf" / "Infinity" as the number: checked like the JSON literal Infinity
        if d.get("backup_threshold", 0) is None:
            d["backup_threshold"] = math.inf
        if isinstance(d.get("saguaro_c"), (list, tuple)):  # a per-position list given as saguaro_c
            d["saguaro_c_list"], d["saguaro_c"] = d["saguaro_c"], 1.0
        for key in ("fan_out", "fan_out_miss", "saguaro_c_list"):
            if key in d:
                _check(isinstance(d[key], (list, tuple)), key, "must be a list, one value per position")
                d[key] = tuple(d[key])
        for key in ("fan_out", "fan_out_miss"):  # () is the dataclass's "one guess per position" default, not data
            _check(d.get(key) != (), key, "is an empty list: give K+1 integers, one per stopping position 0..K, "
                                          "or leave the field out (one guess per position)")
        return cls(**d)

    def replace(self, **changes) -> Plan:
        """A copy with some fields changed (re-validated)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(changes)
        return Plan(**d)


@functools.cache
def knob_fields() -> Mapping[str, Knob]:
    """The knob schema: every Plan field's Knob, in declaration order."""
    return MappingProxyType({f.name: f.metadata["knob"] for f in fields(Plan)})


def engine_defaults(engine: str) -> dict[str, Any]:
    """The knobs an engine hard-wires (downweight, jit_redraft): the planner's defaults for its profiles."""
    return {name: k.engine[engine] for name, k in knob_fields().items() if k.engine is not None}


def _check_field(plan: Plan, name: str) -> None:
    problem = knob_fields()[name].check(getattr(plan, name))
    _check(problem is None, name, problem or "")


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
