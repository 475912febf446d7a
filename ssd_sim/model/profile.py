"""Profile = LatencyModel + AcceptanceModel + where the numbers came from.

Profiles come from built-in presets (ssd_sim/model/presets/*.toml, derived by ssd_sim.model.presets), from a
calibration of runtime traces (`ssd-plan calibrate`), or from a JSON file written by either.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host
from ssd_sim.io.jsonfile import read_json_object
from ssd_sim.io.values import nonfinite_strings
from ssd_sim.model.acceptance import AcceptanceModel
from ssd_sim.model.latency import LatencyModel
from ssd_sim.model.memory import KvMemory
from ssd_sim.model.table import latency_from_dict
from ssd_sim.model.uncertainty import Uncertainty

PROFILE_SCHEMA = "ssd-profile/1"
# The engines whose loop a profile's latencies can describe; the plan knobs each hard-wires (the planner's defaults
# for its profiles) are part of the knob schema (ssd_sim.plan.plan.Plan, each Knob's `engine`).
ENGINES = ("ssd-runtime", "reference")
# How model.calibrate's provenance["host"] starts for traces made before ssd-run recorded hosts (Profile.measured_host)
UNRECORDED_HOST = "not recorded in the traces"
# Profile keys whose values are text, never numbers: a name "inf" stays a name (nonfinite_strings)
TEXT_KEYS = ("schema", "name", "description", "target_model", "draft_model", "hardware", "sources", "provenance",
             "host", "engine", "source", "hit_source", "response", "downweight")


@dataclass(frozen=True)
class Profile:
    """Everything the planner and the simulator need to know about one target/draft/hardware setup."""

    name: str
    latency: LatencyModel
    acceptance: AcceptanceModel
    description: str = ""
    target_model: str = ""
    draft_model: str = ""
    hardware: str = ""
    max_batch_size: int = 64
    sources: tuple[str, ...] = ()
    provenance: dict[str, str] = field(default_factory=dict)  # quantity -> measured/derived/assumed + how
    host: Host | None = None  # where the latencies were measured; None = not host-specific (datasheets, papers)
    uncertainty: Uncertainty | None = None  # spreads for prediction intervals; None = stated defaults (plan.intervals)
    engine: str = "ssd-runtime"  # the engine whose loop the latencies describe (one of ENGINES)
    memory: KvMemory | None = None  # per-mode KV memory from shapes and GPUs (spec pairs); None = not derived

    def fits(self, mode: str, K: int = 0, budget: int = 0, draft_devices: int = 1) -> int:
        """Sequences whose KV caches fit in `mode` (model.memory, SSD with budget x K branch tokens per sequence);
        without a derived memory, max_batch_size (a preset's or calibration's measured range)."""
        if self.memory is None:
            return self.max_batch_size
        return self.memory.fits(mode, K=K, budget=budget, draft_devices=draft_devices)

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise ConfigError("engine", f"must be one of {', '.join(ENGINES)}, got {self.engine!r}")

    def measured_host(self) -> Host | None:
        """The host the latencies were measured on: the recorded one, or for a profile calibrated from traces made
        before ssd-run recorded hosts (its provenance says so) an unrecorded Host whose note is the traces' machine
        line (what they knew of it); None only for profiles that are not host-specific (datasheets, papers)."""
        if self.host is not None or not self.provenance.get("host", "").startswith(UNRECORDED_HOST):
            return self.host
        return Host(note=f"{self.hardware or 'machine not named'}; host {self.provenance['host']}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": PROFILE_SCHEMA,
            "name": self.name,
            "description": self.description,
            "target_model": self.target_model,
            "draft_model": self.draft_model,
            "hardware": self.hardware,
            "max_batch_size": self.max_batch_size,
            "sources": list(self.sources),
            "provenance": dict(self.provenance),
            "host": self.host.to_dict() if self.host is not None else None,
            "latency": self.latency.to_dict(),
            "acceptance": self.acceptance.to_dict(),
            "uncertainty": self.uncertainty.to_dict() if self.uncertainty is not None else None,
            "engine": self.engine,
        } | ({"memory": self.memory.to_dict()} if self.memory is not None else {})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Profile:
        if d.get("schema") != PROFILE_SCHEMA:
            raise ConfigError("schema", f"expected {PROFILE_SCHEMA!r}, got {d.get('schema')!r}")
        for key in ("name", "latency", "acceptance"):
            if key not in d:
                raise ConfigError(key, "missing from the profile; write profiles with ssd-plan calibrate")
        for key in ("name", "description", "target_model", "draft_model", "hardware", "engine"):
            if key in d and not isinstance(d[key], str):
                raise ConfigError(key, f"must be a string (text), got {d[key]!r:.60}")
        return cls(
            name=d["name"],
            latency=latency_from_dict(d["latency"]),
            acceptance=AcceptanceModel.from_dict(d["acceptance"]),
            description=d.get("description", ""),
            target_model=d.get("target_model", ""),
            draft_model=d.get("draft_model", ""),
            hardware=d.get("hardware", ""),
            max_batch_size=_batch(d.get("max_batch_size", 64)),
            sources=tuple(d.get("sources", ())),
            provenance=dict(d.get("provenance", {})),
            host=Host.from_dict(d["host"], "host") if d.get("host") is not None else None,
            uncertainty=Uncertainty.from_dict(d["uncertainty"]) if d.get("uncertainty") is not None else None,
            engine=d.get("engine", "ssd-runtime"),
            memory=KvMemory.from_dict(d["memory"]) if d.get("memory") is not None else None,
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _batch(v: Any) -> int:
    """max_batch_size: a whole number of sequences >= 1 (an integral float such as 64.0 included)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v == int(v) and v >= 1
    if not ok:
        raise ConfigError("max_batch_size", f"must be a whole number of sequences >= 1, got {v!r}")
    return int(v)


def load_profile_file(path: str | Path) -> Profile:
    """Read a profile JSON file (a calibrated profile or a saved preset); any problem is one ConfigError line."""
    data = read_json_object(path, "profile", f"make one with `ssd-plan calibrate TRACES -o {path}`")
    return profile_from_dict(data, str(path))


def profile_from_dict(data: dict, source: str) -> Profile:
    """Profile.from_dict where a structural surprise (a list for an object, a string for a number) is a one-line
    ConfigError naming the source, not a traceback."""
    try:
        return Profile.from_dict(nonfinite_strings(data, TEXT_KEYS))  # "inf" is checked like the literal Infinity
    except ConfigError as e:
        raise ConfigError(e.field, f"{source}: {str(e).split(': ', 1)[1]}") from e
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError) as e:
        raise ConfigError("profile", f"{source} is malformed ({type(e).__name__}: {str(e)[:120]}); write profiles "
                                     "with ssd-plan calibrate") from e
