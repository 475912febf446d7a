"""What a profile does not know exactly, and how to draw profiles that span it (prediction intervals).

Sources, each measured by calibration where the traces allow and otherwise a stated assumption:
  workload      acceptance and hit rates of a new run differ from the calibration's by a shift delta in logit
                space (one shift for both: text that is hard to draft is also hard to guess). delta ~ N(0, s^2),
                s^2 = sd_seq^2 (1/n_run + 1/n_cal): sd_seq is the spread of the calibration's per-sequence
                acceptance (between prompts plus each sequence's own sampling noise, both of which a run's mean
                carries), n_run the predicted run's sequences, n_cal the calibration's distinct sequences.
  latency       a run's forwards are slower or faster than the fit by a factor exp(N(0, sd_run^2)) (host drift
                between runs, shapes the smooth curve misses); target and draft share half of it. A draft latency
                borrowed rather than measured (GPU presets) adds exp(N(0, draft_latency_sd^2)). The drift depends on
                the time since the calibration timed its forwards (model.drift): sd_run is for a run hours later (the
                default horizon, "later"); at_horizon("session") swaps in the spread of a run within the hour.
  extrapolation forwards larger than any the calibration timed: a further factor exp(N(0, sd_ext^2)), sd_ext =
                EXTRAPOLATION_SD per doubling past the largest timed rows x tokens (target and draft apart), for
                the forwards each mode runs (for_forwards: AR one token per row, SD its verify and 2-token draft
                step, SSD the plan's verify and cache), from the same draws.
  interference  the target's slowdown beside the busy draft (and the draft's beside the target): N(fit, sd^2) when
                SSD traces measured it, uniform on a stated range when assumed.
  hit curves    assumed curves (no ranks, no distributions): miss(1) ~ U[0.1, 0.9], r ~ U[0.3, 1.5].
  Saguaro       a C moved by the synthetic response (assumed): the effect is scaled by w ~ U[0, 1].
`sample_profiles` draws n profiles; plan.intervals turns them into tok/s intervals and decisions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.values import parse_utc
from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve, HitTable, lerp_point
from ssd_sim.model.derived import unchecked_replace
from ssd_sim.model.drift import HORIZONS

EXTRAPOLATION_SD = 0.1  # relative latency SD per doubling of rows x tokens beyond the timed range (assumed)
CPU_INTERFERENCE = (0.0, 0.5)  # assumed range on CPUs: the project's calibrations measured +1% .. +46%
GPU_INTERFERENCE = (0.0, 0.1)  # separate accelerators share only host resources (assumed)
DRAFT_SHARE = 0.4  # the draft's slowdown range is this share of the target's (measured: 0% .. 12% on CPUs)


@dataclass(frozen=True)
class Uncertainty:
    """Spreads a profile's predictions are sampled over (see the module docstring). Rates in logits, times relative."""

    acceptance_logit_sd: float = 0.5  # between-sequence SD of logit per-sequence acceptance
    sequences: int = 8  # distinct sequences the calibration saw
    run_sequences: int = 8  # sequences of a predicted run (default: a calibration run's)
    latency_run_sd: float = 0.08  # relative SD of a run's forward times around the fit
    interference: tuple[float, ...] = CPU_INTERFERENCE  # (low, high): assumed uniform range; () = measured
    interference_sd: float = 0.03  # measured: SD around the fitted slowdowns
    hit_assumed: bool = False  # hit curves are assumed
    timed_rows_tokens: tuple[int, ...] = ()  # (target, draft): the most rows x tokens one timed forward had; () = any
    sources: dict[str, str] = field(default_factory=dict)  # field -> measured / assumed + how
    draft_latency_sd: float = 0.0  # extra relative SD of the draft's latency when it is borrowed, not measured (presets)
    # latency_run_sd of a run within model.drift.SESSION_MINUTES of the calibration's timed forwards; None = not
    # measured (latency_run_sd then serves every horizon)
    latency_session_sd: float | None = None
    timed_at: tuple[str, ...] = ()  # (first, last) UTC start of the runs / probe the latency was timed on; () = unknown
    horizon: str = "later"  # the horizon latency_run_sd describes (at_horizon)

    def __post_init__(self):
        names = ("acceptance_logit_sd", "latency_run_sd", "draft_latency_sd", "interference_sd")
        for name in names + (("latency_session_sd",) if self.latency_session_sd is not None else ()):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v <= 5):
                raise ConfigError(f"uncertainty.{name}", f"must be a number in [0, 5], got {v!r}")
        if self.horizon not in HORIZONS:
            raise ConfigError("uncertainty.horizon", f"must be one of {', '.join(HORIZONS)}, got {self.horizon!r}")
        stamps = tuple(self.timed_at)
        if stamps and not (len(stamps) == 2 and all(isinstance(x, str) and parse_utc(x) for x in stamps)):
            raise ConfigError("uncertainty.timed_at", f"must be [] or [first, last] ISO UTC times, got {list(stamps)}")
        object.__setattr__(self, "timed_at", stamps)
        for name in ("sequences", "run_sequences"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ConfigError(f"uncertainty.{name}", f"must be an integer >= 1, got {v!r}")
        rng = tuple(float(x) for x in self.interference)
        if rng and not (len(rng) == 2 and 0 <= rng[0] <= rng[1] <= 3):
            raise ConfigError("uncertainty.interference", f"must be [] (measured) or [low, high] in [0, 3], got {rng}")
        object.__setattr__(self, "interference", rng)
        timed = self.timed_rows_tokens
        ok = isinstance(timed, (list, tuple)) and len(timed) in (0, 2) and all(
            isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 2**31 for x in timed)
        if not ok:
            raise ConfigError("uncertainty.timed_rows_tokens", f"must be [] (any) or [target, draft]: the most rows x "
                                                               f"tokens of one timed forward (integers >= 1), got {timed!r:.60}")
        object.__setattr__(self, "timed_rows_tokens", tuple(timed))

    def extrapolation_sd(self, target_n: float, draft_n: float) -> tuple[float, float]:
        """Extra relative SD of target / draft latency for forwards of n rows x tokens beyond the timed ones:
        EXTRAPOLATION_SD per doubling past the largest timed (an assumption: the fitted curve is smooth, the
        hardware is not, e.g. the compute-bound knee of a CPU lies between 8 and 16 tokens here)."""
        if not self.timed_rows_tokens:
            return 0.0, 0.0
        t_max, d_max = self.timed_rows_tokens
        return (EXTRAPOLATION_SD * max(0.0, math.log2(max(target_n, 1) / max(t_max, 1))),
                EXTRAPOLATION_SD * max(0.0, math.log2(max(draft_n, 1) / max(d_max, 1))))

    def workload_sd(self, run_sequences: int | None = None) -> float:
        """SD of the logit shift of a run of `run_sequences` sequences (default: run_sequences)."""
        n = run_sequences or self.run_sequences
        return self.acceptance_logit_sd * math.sqrt(1.0 / n + 1.0 / self.sequences)

    def at_horizon(self, horizon: str) -> Uncertainty:
        """These spreads for a run at `horizon` ("session": within the hour of the timed forwards; "later"): the
        session spread replaces latency_run_sd when it was measured; without it the later one is kept (and said)."""
        if horizon not in HORIZONS:
            raise ConfigError("horizon", f"must be one of {', '.join(HORIZONS)}, got {horizon!r}")
        if horizon == self.horizon:
            return self
        if self.horizon != "later":
            raise ConfigError("horizon", "these spreads are already narrowed to a session; take them from the profile")
        if self.latency_session_sd is None:
            return replace(self, horizon=horizon, sources={**self.sources, "latency_run_sd": self.sources.get(
                "latency_run_sd", "") + "; kept for a run within the hour (no session spread measured)"})
        return replace(self, latency_run_sd=self.latency_session_sd, horizon=horizon,
                       sources={**self.sources, "latency_run_sd": self.sources.get("latency_session_sd", "")})

    def to_dict(self) -> dict:
        d = asdict(self)
        d["interference"] = list(self.interference)
        d["timed_at"] = list(self.timed_at)
        for key, empty in (("latency_session_sd", None), ("timed_at", []), ("horizon", "later")):
            if d[key] == empty:  # profiles without them read and write as before
                del d[key]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Uncertainty:
        known = {f for f in cls.__dataclass_fields__}
        bad = [k for k in d if k not in known]
        if bad:
            raise ConfigError(f"uncertainty.{bad[0]}", f"unknown field; valid: {', '.join(sorted(known))}")
        return cls(**{**d, "interference": tuple(d.get("interference", CPU_INTERFERENCE)),
                      "timed_at": tuple(d.get("timed_at", ())), "sources": dict(d.get("sources", {}))})



# ---- drawing profiles ------------------------------------------------------------------------------------
def _logit_shift(p: np.ndarray, delta: float) -> np.ndarray:
    """p moved by delta in logit space; exact 0 and 1 stay put (no guess never hits; certain stays certain)."""
    p = np.asarray(p, dtype=float)
    inner = (p > 0) & (p < 1)
    q = np.clip(p, 1e-12, 1 - 1e-12)
    return np.where(inner, 1.0 / (1.0 + np.exp(-(np.log(q / (1 - q)) + delta))), p)


@dataclass(frozen=True)
class ShiftedHit:
    """A hit model (HitCurve or HitTable) with every hit probability moved by delta in logit space, evaluated on
    demand (a logit shift keeps hit rates monotone in F, 0 at F = 0 and exact 1s)."""

    base: HitCurve | HitTable
    delta: float

    def hit(self, fan_out) -> np.ndarray:
        return _logit_shift(self.base.hit(fan_out), self.delta)

    def miss(self, fan_out) -> np.ndarray:
        return 1.0 - self.hit(fan_out)

    def miss_matrix(self, K: int, max_f: int) -> np.ndarray:
        return 1.0 - _logit_shift(1.0 - self.base.miss_matrix(K, max_f), self.delta)

    @property
    def miss_at_one(self) -> float:
        return float(self.miss([1])[0])

    @property
    def r(self) -> float:
        return self.base.r


def shift_hit(h, delta: float):
    """h with every hit probability moved by delta in logit space (h itself when delta is 0)."""
    return h if delta == 0 else ShiftedHit(h, delta)


@dataclass(frozen=True)
class DrawnAcceptance:
    """An AcceptanceModel seen through one draw: logit shift, an assumed hit curve, a Saguaro weight."""

    base: AcceptanceModel
    delta: float = 0.0
    hit: HitCurve | None = None  # replaces assumed hit curves
    saguaro_w: float = 1.0  # fraction of the synthetic Saguaro effect (assumed responses only)

    @property
    def downweight(self) -> str:
        return self.base.downweight

    @property
    def response(self) -> str:
        return self.base.response

    def at(self, temperature: float, saguaro_c: float = 1.0, downweight: str | None = None) -> AcceptancePoint:
        """The drawn point at (T, C); kept per draw (by value and type of the arguments), so the SD and the SSD
        prediction of one draw share it."""
        key = (type(temperature), temperature, type(saguaro_c), saguaro_c, downweight)
        memo = self.__dict__.setdefault("_points", {})
        if key not in memo:
            memo[key] = self._at(temperature, saguaro_c, downweight)
        return memo[key]

    def _at(self, temperature: float, saguaro_c: float, downweight: str | None) -> AcceptancePoint:
        pt = self.base.at(temperature, saguaro_c, downweight)
        if self.saguaro_w < 1.0 and saguaro_c < 1.0 and pt.source == "assumed" and self.base.response == "synthetic":
            moved = lerp_point(self.base.at(temperature, 1.0), pt, self.saguaro_w, temperature, saguaro_c)
            pt = replace(moved, source=pt.source, hit_source=pt.hit_source)
        return self._draw(pt)

    def at_positions(self, temperature: float, cs, downweight: str | None = None) -> AcceptancePoint:
        return self._draw(self.base.at_positions(temperature, cs, downweight))

    def _draw(self, pt: AcceptancePoint) -> AcceptancePoint:
        primary, backup = pt.primary_hit, pt.backup_hit
        if self.hit is not None:
            primary = backup = self.hit
        if self.delta:
            primary, backup = shift_hit(primary, self.delta), shift_hit(backup, self.delta)
        acc = tuple(float(v) for v in _logit_shift(np.asarray(pt.acceptance), self.delta))
        return replace(pt, acceptance=acc, primary_hit=primary, backup_hit=backup)


def draws(u: Uncertainty, n: int, seed: int = 0, run_sequences: int | None = None,
          only: str | None = None, rows_tokens: tuple[float, float] = (1, 1)) -> dict[str, np.ndarray]:
    """n draws of every source as arrays; `only` keeps one source random and the others at their centre.
    rows_tokens: the largest (target, draft) forward of the run, for the extrapolation spread; for_forwards gives the
    same draws for another run's forwards (each mode's own, so AR is not charged for SSD's larger ones)."""
    rng = np.random.default_rng(seed)
    on = lambda name: only is None or only == name  # noqa: E731
    z0, zt, zd = rng.standard_normal((3, n))
    lat = u.latency_run_sd * np.sqrt(0.5)
    ze_t, ze_d, zb = rng.standard_normal((3, n))
    run_t = lat * (z0 + zt) if on("latency") else np.zeros(n)
    run_d = lat * (z0 + zd) + u.draft_latency_sd * zb if on("latency") else np.zeros(n)
    ext = on("extrapolation")
    out = {"delta": rng.standard_normal(n) * u.workload_sd(run_sequences) if on("workload") else np.zeros(n),
           "run_log_target": run_t, "run_log_draft": run_d,
           "ext_z_target": ze_t if ext else np.zeros(n), "ext_z_draft": ze_d if ext else np.zeros(n)}
    out.update(for_forwards(u, out, rows_tokens))
    if u.interference:
        lo, hi = u.interference
        out["interference"] = rng.uniform(lo, hi, n) if on("interference") else np.full(n, (lo + hi) / 2)
        out["interference_draft"] = DRAFT_SHARE * (rng.uniform(lo, hi, n) if on("interference") else np.full(n, (lo + hi) / 2))
    else:
        out["interference_noise"] = rng.standard_normal(n) * u.interference_sd if on("interference") else np.zeros(n)
    out["miss_at_one"] = rng.uniform(0.1, 0.9, n) if on("hit") else np.full(n, 0.5)
    out["r"] = rng.uniform(0.3, 1.5, n) if on("hit") else np.full(n, 0.9)
    out["saguaro_w"] = rng.uniform(0.0, 1.0, n) if on("saguaro") else np.full(n, 0.5)
    return out


def for_forwards(u: Uncertainty, d: dict[str, np.ndarray], rows_tokens: tuple[float, float]) -> dict[str, np.ndarray]:
    """The draws `d` (of draws()) with the latency scales of a run whose largest (target, draft) forwards are
    rows_tokens (rows x tokens): the same run-to-run and extrapolation draws, the extrapolation spread of those
    forwards only."""
    ext_t, ext_d = u.extrapolation_sd(*rows_tokens)
    return {**d, "target_scale": np.exp(d["run_log_target"] + ext_t * d["ext_z_target"]),
            "draft_scale": np.exp(d["run_log_draft"] + ext_d * d["ext_z_draft"])}


def drawn_profile(profile, u: Uncertainty, d: dict[str, np.ndarray], i: int):
    """The profile of draw i (a Profile with scaled latencies, its interference and a DrawnAcceptance)."""
    lat = profile.latency

    if "interference" in d:
        one = rows = float(d["interference"][i])
        drf = float(d["interference_draft"][i])
    else:
        e = float(d["interference_noise"][i])
        one, rows = max(0.0, lat.verify_slowdown_one_row + e), max(0.0, lat.verify_slowdown_rows + e)
        drf = max(0.0, lat.draft_slowdown + e)
    # unchecked: scaled forwards of checked ones and interference draws >= 0 (model.derived)
    lat = unchecked_replace(lat, target=lat.target.scaled(float(d["target_scale"][i])),
                  draft=lat.draft.scaled(float(d["draft_scale"][i])),
                  verify_slowdown_one_row=one, verify_slowdown_rows=rows, draft_slowdown=drf)
    hit = HitCurve(float(d["miss_at_one"][i]), float(d["r"][i])) if u.hit_assumed else None
    acc = DrawnAcceptance(profile.acceptance, float(d["delta"][i]), hit, float(d["saguaro_w"][i]))
    return unchecked_replace(profile, latency=lat, acceptance=acc)


SOURCES = ("workload", "latency", "extrapolation", "interference", "hit", "saguaro")
