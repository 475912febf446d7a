"""A workload profile: how well this draft guesses this target on this traffic, apart from any hardware.

    ssd-plan workload METRICS --engine vllm|sglang|reference -t T [-k K] -o workload.json
    ssd-plan --target ... --gpu ... --acceptance-from workload.json       # your pair from specs, your acceptance
    ssd-plan --profile probed.json --acceptance-from workload.json         # this host's latencies, your traffic

It holds per-position acceptance at one temperature with 95% intervals, where it came from (io.engine_metrics) and
what that source leaves assumed. SSD also needs hit rates, which no SD engine measures: they are derived from the
acceptance through the synthetic family (model.synthetic: after all K accepted the bonus is a plain target
sample; after a rejection the family's residual), marked assumed, and a reference-engine run's own p_hit is kept
to compare with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ssd_sim.io.engine_metrics import EngineCounts
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import read_json_object
from ssd_sim.io.limits import effective_temperature
from ssd_sim.io.values import nonfinite_strings
from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitTable
from ssd_sim.model.synthetic import hit_rows
from ssd_sim.model.uncertainty import Uncertainty

WORKLOAD_SCHEMA = "ssd-workload/1"
HIT_F = 16  # guesses per position the derived hit rows list
ASSUMED_LOGIT_SD = 0.5  # between-request spread where the source has none (the Uncertainty default, assumed)


@dataclass(frozen=True)
class WorkloadProfile:
    """Per-position acceptance of one workload at one temperature (T), with its source and assumptions."""

    name: str
    temperature: float
    acceptance: tuple[float, ...]  # a_1..a_K: P(accept position i | the earlier ones accepted)
    ci95: tuple[tuple[float, float], ...]
    engine: str
    rounds: int
    note: str = ""
    assumed: tuple[str, ...] = ()
    p_hit: float | None = None  # the source run's own cache hit rate (reference engine), for comparison
    request_logit_sd: float | None = None  # spread between requests (or logging intervals), None = unknown

    def __post_init__(self):
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError("workload.temperature", f"must be a finite number >= 0, got {self.temperature!r}")
        if not self.acceptance or not all(isinstance(a, (int, float)) and 0.0 <= a <= 1.0 for a in self.acceptance):
            raise ConfigError("workload.acceptance", f"must be a non-empty list in [0, 1], got {self.acceptance!r}")

    @classmethod
    def from_counts(cls, counts: EngineCounts, temperature: float, name: str) -> WorkloadProfile:
        from ssd_sim.model.calibrate import wilson

        for i, (t, p) in enumerate(zip(counts.tried, counts.passed, strict=True)):
            if not 0 <= p <= t:
                raise ConfigError("metrics", f"{counts.engine}: position {i + 1} accepted {p:g} of {t:g} tries, which "
                                             "counters cannot hold; is the input whole, from one engine?")
        ci = tuple(wilson(int(round(p)), max(int(round(t)), 1)) for t, p in zip(counts.tried, counts.passed, strict=True))
        return cls(name, float(temperature), counts.acceptance, ci, counts.engine, counts.rounds, counts.note,
                   counts.assumed, counts.p_hit, counts.spread)

    def acceptance_model(self) -> AcceptanceModel:
        """One acceptance point at T (C = 1): the counted acceptance, hit rows derived from it (assumed)."""
        mean = min(max(sum(self.acceptance) / len(self.acceptance), 1e-3), 1 - 1e-3)
        reject, accepted = hit_rows(mean, effective_temperature(self.temperature), HIT_F)
        primary = HitTable(reject=(reject,), accepted=(accepted,))
        backup = HitTable(reject=(accepted,), accepted=(accepted,))  # random tokens are rejected at once
        source = "derived" if self.engine == "sglang" else "measured"
        return AcceptanceModel((AcceptancePoint(self.temperature, self.acceptance, primary, backup, 1.0, source,
                                                "assumed"),))

    def uncertainty(self) -> Uncertainty:
        """Spreads for intervals: the source's between-interval spread where it has one, else assumed."""
        sd = self.request_logit_sd if self.request_logit_sd is not None else ASSUMED_LOGIT_SD
        how = (f"measured: SD {sd:.2f} of logit acceptance between the source's logging intervals"
               if self.request_logit_sd is not None else f"assumed {sd}: {self.engine}'s metrics are totals")
        return Uncertainty(acceptance_logit_sd=float(sd), hit_assumed=True,
                           sources={"acceptance_logit_sd": how, "hit": "assumed: derived from the acceptance"})

    def provenance(self, path: str) -> str:
        hit = f"; the run's own p_hit {self.p_hit:.3f} (at its fan-out)" if self.p_hit is not None else ""
        return (f"{'derived' if self.engine == 'sglang' else 'measured'}: per-position acceptance at T = "
                f"{self.temperature:g} from {self.engine} metrics ({self.note}; {path}); hit rates derived from it "
                f"(assumed shape){hit}; assumed: {', '.join(self.assumed)}")

    def to_dict(self) -> dict:
        return {"schema": WORKLOAD_SCHEMA, "name": self.name, "temperature": self.temperature,
                "acceptance": [round(a, 6) for a in self.acceptance], "ci95": [list(c) for c in self.ci95],
                "engine": self.engine, "rounds": self.rounds, "note": self.note, "assumed": list(self.assumed),
                "p_hit": self.p_hit, "request_logit_sd": self.request_logit_sd}

    @classmethod
    def from_dict(cls, d: dict, source: str = "workload") -> WorkloadProfile:
        if d.get("schema") != WORKLOAD_SCHEMA:
            raise ConfigError("workload.schema", f"{source}: expected {WORKLOAD_SCHEMA!r}, got {d.get('schema')!r}")
        try:
            return cls(str(d["name"]), d["temperature"], tuple(d["acceptance"]),
                       tuple(tuple(c) for c in d.get("ci95", ())), str(d["engine"]), int(d.get("rounds", 0)),
                       str(d.get("note", "")), tuple(d.get("assumed", ())), d.get("p_hit"), d.get("request_logit_sd"))
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise ConfigError("workload", f"{source} is malformed ({type(e).__name__}: {e}); write it with "
                                          "ssd-plan workload") from e


def is_workload_file(path: str | Path) -> bool:
    """True if `path` is a JSON object with the workload schema (cheap check before loading)."""
    try:
        return read_json_object(path, "workload", "").get("schema") == WORKLOAD_SCHEMA
    except ConfigError:
        return False


def load_workload(path: str | Path) -> WorkloadProfile:
    data = read_json_object(path, "workload", "write one with `ssd-plan workload`")
    return WorkloadProfile.from_dict(nonfinite_strings(data, ("schema", "name", "engine", "note", "assumed")), str(path))


@dataclass(frozen=True)
class AcceptanceSource:
    """Where a profile's acceptance comes from when it is not its own: a preset, a profile or a workload file."""

    name: str
    acceptance: AcceptanceModel
    uncertainty: Uncertainty | None
    sources: tuple[str, ...]
    provenance: str  # the profile's "acceptance" provenance line
    pair: tuple[str, str] | None = None  # (target, draft) of a profile source; None for a workload file
    own_provenance: str = ""  # a profile source's own "acceptance" line (kept when the pair is the same)
    own_details: tuple[tuple[str, str], ...] = ()  # and its "acceptance.*" lines (hit curves, Saguaro, mix, ...)


def acceptance_source(name_or_path: str) -> AcceptanceSource:
    """A preset name, a profile file or a workload file (ssd-plan workload) -> its acceptance and how it is known."""
    from ssd_sim.model.presets import list_presets, load_profile

    if name_or_path not in list_presets() and Path(name_or_path).is_file() and is_workload_file(name_or_path):
        w = load_workload(name_or_path)
        return AcceptanceSource(w.name, w.acceptance_model(), w.uncertainty(), (str(name_or_path),),
                                w.provenance(str(name_or_path)))
    if name_or_path in list_presets() or Path(name_or_path).exists():
        p = load_profile(name_or_path, None) if name_or_path in list_presets() else load_profile(None, name_or_path)
        return profile_acceptance(p)
    raise ConfigError("acceptance_from", f"{name_or_path!r} is neither a preset ({', '.join(list_presets())}), a "
                                         "profile file nor a workload file (ssd-plan workload); acceptance cannot "
                                         "come from specs, name where it comes from")


def profile_acceptance(p) -> AcceptanceSource:
    """A profile's acceptance and hit curves as the source of another profile's (with_acceptance): assumed for
    another pair; for the same target and draft, its own measured or derived provenance, since acceptance is a property
    of the models and the text, not of the hardware that timed them."""
    return AcceptanceSource(p.name, p.acceptance, p.uncertainty, p.sources,
                            f"assumed: the acceptance and hit curves of {p.name} ({p.target_model} + "
                            f"{p.draft_model}), another pair or setup; pass --acceptance-from a workload file "
                            "(ssd-plan workload) or a calibrated profile of yours",
                            (p.target_model, p.draft_model), p.provenance.get("acceptance", ""),
                            tuple((k, v) for k, v in p.provenance.items() if k.startswith("acceptance.")))


def with_acceptance(profile, source: AcceptanceSource):
    """`profile` (its latencies) with `source`'s acceptance; the acceptance parts of its uncertainty replaced. A
    profile source of the same pair (same target and draft) keeps its own acceptance provenance, marked as from it."""
    from dataclasses import replace

    u = profile.uncertainty
    if u is not None and source.uncertainty is not None:
        s = source.uncertainty
        u = replace(u, acceptance_logit_sd=s.acceptance_logit_sd, sequences=s.sequences, hit_assumed=s.hit_assumed,
                    sources={**u.sources, **{k: v for k, v in s.sources.items()
                                             if k in ("acceptance_logit_sd", "hit")}})
    prov = {k: v for k, v in profile.provenance.items() if not k.startswith("acceptance")}
    lines = {"acceptance": source.provenance}
    if source.pair == (profile.target_model, profile.draft_model) and all(source.pair) and source.own_provenance:
        lines = {"acceptance": f"from {source.name} (the same target and draft, other runs): {source.own_provenance}",
                 **dict(source.own_details)}
    return replace(profile, acceptance=source.acceptance, uncertainty=u, provenance={**prov, **lines},
                   name=f"{profile.name} + {source.name}", sources=profile.sources + source.sources)
