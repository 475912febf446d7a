"""Fixed knobs and the one merge of a plan file with command-line flags, shared by ssd-plan, ssd-sim and ssd-run.

`resolve(plan_file, flags)` gives the same answer in every CLI: which knobs are fixed (the plan file's, each
replaced by its flag), the workload, and which of the plan file's knobs a flag made invalid (its fan-outs after
a new K). ssd-plan and ssd-sim search what is open (the planner, with the fixed knobs as `Knobs`); ssd-run, which
cannot plan, refuses a plan file whose fan-out no longer fits (`Resolution.plan`). The rules, in order:

  1. every field of the plan file is fixed; a flag replaces the field it names;
  2. K is -k, else the length of a --fan-out list minus one, else the plan file's;
  3. a uniform --fan-out F is F at every stopping position 0..K (with K searched when nothing fixes it);
  4. a K other than the plan file's drops its fan-outs (and a per-position C list that no longer fits);
  5. --fan-out without --fan-out-miss drops the plan file's miss fan-out (it must share the new budget);
  6. --saguaro-c replaces the plan file's per-position C list;
  7. workload fields (temperature, batch size, draft devices): the flag, else the plan file, else the default.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.limits import effective_temperature
from ssd_sim.plan.plan import Plan, engine_defaults, knob_fields


@functools.cache
def searchable() -> tuple[str, ...]:
    """The knobs the planner may search (and so may be fixed for it), from the schema."""
    return tuple(n for n, k in knob_fields().items() if k.searchable or k.engine is not None)


class Knobs:
    """What is fixed for the planner; any other searchable knob is searched (read as None).

    Knobs(num_speculative_tokens=7, fan_out=3): fan_out is a uniform int or a list of K + 1 ints;
    backup_threshold None = b* of the plan; downweight / jit_redraft None = what the profile's engine does.
    """

    __slots__ = ("_values",)

    def __init__(self, **values: Any):
        unknown = sorted(set(values) - set(searchable()))
        if unknown:
            raise TypeError(f"not a knob the planner takes: {', '.join(unknown)}")
        object.__setattr__(self, "_values", {k: v for k, v in values.items() if v is not None})

    def __getattr__(self, name: str) -> Any:
        if name in searchable():
            return self._values.get(name)
        raise AttributeError(name)

    def __setattr__(self, name, value):
        raise AttributeError("Knobs are immutable; use replace()")

    def __eq__(self, other) -> bool:
        return isinstance(other, Knobs) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self) -> str:
        return "Knobs(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def replace(self, **changes: Any) -> Knobs:
        return Knobs(**{**self._values, **changes})

    def for_profile(self, profile) -> Knobs:
        """These knobs with the unset engine knobs (downweight, jit_redraft) taken from the profile's engine."""
        return self.replace(**{k: v for k, v in engine_defaults(profile.engine).items() if k not in self._values})

    @classmethod
    def of(cls, plan: Plan) -> Knobs:
        """Knobs fixing every field of the plan (so the planner evaluates exactly this plan)."""
        values = {name: getattr(plan, name) for name in searchable()}
        values["backup_threshold"] = None if math.isinf(plan.backup_threshold) else plan.backup_threshold
        values["saguaro_c_list"] = plan.saguaro_c_list or None
        return cls(**values)


WORKLOAD = ("temperature", "batch_size", "draft_devices")


@dataclass(frozen=True)
class Resolution:
    """A plan file (or none) merged with command-line flags (see the module docstring)."""

    fixed: Mapping[str, Any]  # Plan field -> value: every knob and workload field fixed by the file or a flag
    dropped: tuple[str, ...]  # plan-file fields a flag made invalid: open again
    has_plan_file: bool

    @property
    def knobs(self) -> Knobs:
        """The fixed knobs for the planner (an empty C list: not fixed)."""
        values = {k: self.fixed[k] for k in searchable() if k in self.fixed}
        if not values.get("saguaro_c_list", True):
            values.pop("saguaro_c_list")
        return Knobs(**values)

    def workload(self, name: str) -> Any:
        """A workload field: fixed, else the Plan default."""
        return self.fixed.get(name, _DEFAULTS[name])

    def plan(self, **extra: Any) -> Plan:
        """A complete plan: what is fixed, Plan defaults for the rest (`extra`: fields the caller sets, e.g.
        mode). A plan file whose fan-out a new K dropped is refused: only the planner can choose a new one."""
        if self.has_plan_file and "fan_out" in self.dropped:
            K = self.fixed["num_speculative_tokens"]
            raise ConfigError("fan_out", f"K = {K} drops the plan file's fan-out (it has one entry per stopping "
                                         f"position of its own K); give --fan-out with {K + 1} entries, or let "
                                         f"ssd-plan choose one: ssd-plan --plan FILE -k {K} -o NEW.json")
        values = {k: v for k, v in self.fixed.items() if not (k == "fan_out" and isinstance(v, int))}
        if isinstance(self.fixed.get("fan_out"), int):  # uniform: F at every position 0..K
            K = values.get("num_speculative_tokens", _DEFAULTS["num_speculative_tokens"])
            values["fan_out"] = (self.fixed["fan_out"],) * (K + 1)
        return Plan(**{**values, **extra})


_DEFAULTS = {f.name: f.default for f in fields(Plan)}


def resolve(plan_file: Plan | None, flags: Mapping[str, Any]) -> Resolution:
    """Merge a plan file's plan (or None) with the knob and workload flags given (None = not given)."""
    given = {k: v for k, v in flags.items() if v is not None and k in knob_fields()}
    fixed: dict[str, Any] = {f.name: getattr(plan_file, f.name) for f in fields(Plan)} if plan_file else {}
    fixed.pop("mode", None)  # each CLI decides the mode (ssd-run: --mode, else the file's)
    if math.isinf(fixed.get("backup_threshold", 0.0)):  # a file's null threshold is "none chosen"; a flag's inf
        fixed.pop("backup_threshold")                   # (below) is "never fast", kept fixed
    dropped: list[str] = []
    fo, K_flag = given.get("fan_out"), given.get("num_speculative_tokens")
    if isinstance(fo, tuple) and K_flag is not None and len(fo) != K_flag + 1:
        raise ConfigError("fan_out", f"--fan-out has {len(fo)} entries but -k {K_flag} needs K+1 = {K_flag + 1} "
                                     "(one per stopping position 0..K)")
    K = K_flag if K_flag is not None else len(fo) - 1 if isinstance(fo, tuple) else fixed.get("num_speculative_tokens")
    if K is not None:
        fixed["num_speculative_tokens"] = K
    if plan_file is not None and K != plan_file.K and fo is None:
        dropped += ["fan_out", "fan_out_miss"]
        if plan_file.saguaro_c_list:
            dropped.append("saguaro_c_list")
    if fo is not None:
        fixed["fan_out"] = (fo,) * (K + 1) if isinstance(fo, int) and K is not None else fo
        if plan_file is not None and "fan_out_miss" not in given and "fan_out_miss" not in dropped:
            dropped.append("fan_out_miss")
    if "saguaro_c" in given and plan_file is not None and plan_file.saguaro_c_list:
        dropped.append("saguaro_c_list")
    for name in dropped:
        fixed.pop(name, None)
    for name, value in given.items():
        if name not in ("num_speculative_tokens", "fan_out"):
            fixed[name] = value
    return Resolution(fixed, tuple(dropped), plan_file is not None)


# The knobs only SSD reads: AR drafts nothing, SD drafts K tokens on the target's devices and caches nothing.
SSD_ONLY = ("fan_out", "fan_out_miss", "saguaro_c", "downweight", "backup", "backup_threshold", "jit_redraft",
            "draft_devices")
UNUSED_BY_MODE = {"ar": ("num_speculative_tokens", *SSD_ONLY), "sd": SSD_ONLY, "ssd-fast": ("backup_threshold",)}
BACKUP_OF_MODE = {"ssd-fast": "fast", "ssd-adaptive": "adaptive"}  # ssd-sim's modes that fix the backup
WHY_UNUSED = {"ar": "the target decodes alone", "sd": "SD drafts on the target's devices and caches nothing",
              "ssd-fast": "the fast backup runs on every miss, at any batch size"}


def check_mode_flags(flags: Mapping[str, Any], mode: str) -> None:
    """ConfigError when a knob flag given (not None) does nothing in `mode` (ar, sd, ssd, or ssd-sim's ssd-fast /
    ssd-adaptive) or contradicts it (--backup jit with ssd-fast): such a run would silently not be what was asked for,
    and its trace header would record a knob that never acted. A plan file's fields are not flags and pass."""
    for name in UNUSED_BY_MODE.get(mode, ()):
        if flags.get(name) is not None:
            raise ConfigError(name, f"{knob_fields()[name].flag} does nothing with --mode {mode} ({WHY_UNUSED[mode]}); "
                                    f"drop it{', or use --mode ssd' if mode in ('ar', 'sd') else ''}")
    backup, fixed = flags.get("backup"), BACKUP_OF_MODE.get(mode)
    if backup is not None and fixed is not None and backup != fixed:
        raise ConfigError("backup", f"--backup {backup} contradicts --mode {mode} (the {fixed} backup); drop one, or "
                                    f"use --mode ssd --backup {backup}")


def ignored_at_greedy(flags: Mapping[str, Any], temperature: float) -> str | None:
    """One line when --saguaro-c below 1 is given for greedy decoding, where it cannot act (None otherwise): at T = 0
    the target's token is its argmax and the draft's proposals are its top tokens whatever C down-weights."""
    c = flags.get("saguaro_c")
    if c is None or c >= 1.0 or effective_temperature(temperature) > 0:
        return None
    return (f"--saguaro-c {c:g} has no effect at T = {temperature:g}: decoding is greedy, and Saguaro sampling acts "
            "only when the draft samples (T > 0)")

