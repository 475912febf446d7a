"""Capacity planning: the cheapest deployment (mode, replicas, batch cap, backup) that serves a load within TTFT and
TPOT targets, found by simulating the load across replicas behind a router.

A configuration is AR, SD or SSD with the planner's plan at its batch cap (SSD: with each backup policy), R
replicas of the profile's target devices (+ its draft device in SSD), and a router (ssd_sim.sim.router). It meets
the targets when the chosen percentiles of TTFT (arrival -> first token, ms) and TPOT (decode time / tokens after
the first, ms per token, over requests of two or more tokens) over every request of the load are at or below them.

The search, per (mode, cap, backup): replicas start at the analytic lower bound (offered tokens/s over one
replica's capacity at its cap, model.predict) and grow until the targets are met (one more at a time, then
doubling, then bisecting); configurations whose lower bound already needs more GPUs than the cheapest found are
skipped. It assumes more replicas never make the percentiles worse. Replicas are simulated in parallel (a local
process pool, or Ray's Pool when asked for and installed); each replica has its own seed, so results are the same
either way. Units: ms, tokens, requests/s, $ per GPU-hour.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.profile import Profile
from ssd_sim.plan.knobs import Knobs
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.plan.predict import predict
from ssd_sim.sim.des import simulate
from ssd_sim.sim.router import assign
from ssd_sim.sim.workload import Workload, arrivals, prefill_ms

MODES = ("ar", "sd", "ssd")
SSD_BACKUPS = ("adaptive", "jit", "fast")
OVERLOAD_RHO = 1.0  # offered tokens/s at or above the replicas' capacity: the queue grows for the whole run
# Pruning (an assumption of the search, not a measurement): a configuration whose analytic TPOT alone in the batch
# (b = 1, its fastest) exceeds the TPOT target by this factor is not simulated; the percentile of simulated TPOTs
# would have to fall that far below the analytic mean for it to meet the target.
TPOT_PRUNE = 1.25
SCREEN_REQUESTS = 2_000  # the replica search runs on the first requests of the load; the answer is checked on all


@dataclass(frozen=True)
class Load:
    """The requests to serve: arrival times (ms, sorted), output and prompt lengths (tokens) per request; a prompt
    length given as one number is every request's."""

    arrival_ms: np.ndarray
    output_tokens: np.ndarray
    prompt_tokens: np.ndarray | int = 128

    def __post_init__(self):
        prompts = np.asarray(self.prompt_tokens, dtype=int)
        object.__setattr__(self, "prompt_tokens", np.full(len(self.arrival_ms), int(prompts)) if prompts.ndim == 0
                           else prompts)

    @classmethod
    def of(cls, workload: Workload, seed: int = 0) -> Load:
        """The requests a poisson or arrivals workload draws with this seed."""
        req = workload.requests(np.random.default_rng(seed))
        return cls(req.arrival_ms, req.output_tokens, req.prompt_tokens)

    def head(self, n: int) -> Load:
        """The first n requests (the whole load when it has fewer)."""
        return self if n >= len(self.arrival_ms) else Load(self.arrival_ms[:n], self.output_tokens[:n],
                                                              self.prompt_tokens[:n])

    @property
    def offered_tok_s(self) -> float:
        """Output tokens per second the load asks for over its arrival span (inf when all arrive at once)."""
        span = float(self.arrival_ms[-1] - self.arrival_ms[0]) if len(self.arrival_ms) > 1 else 0.0
        return float(self.output_tokens.sum()) / span * 1e3 if span > 0 else math.inf


@dataclass(frozen=True)
class Targets:
    """Latency targets: TTFT and TPOT (ms) at percentiles (e.g. 90 = p90); None = no target."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    ttft_pct: float = 90.0
    tpot_pct: float = 90.0

    def __post_init__(self):
        for name in ("ttft_ms", "tpot_ms"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ConfigError(name, f"a latency target must be a finite number of ms > 0, got {v!r}")
        for name in ("ttft_pct", "tpot_pct"):
            if not 0 < getattr(self, name) <= 100:
                raise ConfigError(name, f"a percentile in (0, 100], got {getattr(self, name)!r}")
        if self.ttft_ms is None and self.tpot_ms is None:
            raise ConfigError("targets", "give a TTFT or a TPOT target (--ttft-ms / --tpot-ms)")


@dataclass(frozen=True)
class Config:
    """One deployment: mode, replicas, batch cap per replica, SSD backup ('-' otherwise), router."""

    mode: str
    replicas: int
    max_batch: int
    backup: str = "-"
    router: str = "round-robin"
    tp: int = 1  # target devices per replica (the profile's)


@dataclass(frozen=True)
class Outcome:
    """A configuration simulated on the load: latency percentiles (ms), GPUs, tok/s, cost, margins."""

    config: Config
    gpus: int
    ttft_ms: float  # at the targets' percentile
    tpot_ms: float
    tok_s: float  # output tokens / (last finish - first arrival)
    usd_per_mtok: float | None  # None without a price
    meets: bool
    rho: float  # offered tokens/s over the replicas' analytic capacity at their cap
    margins: dict[str, float] = field(default_factory=dict)  # target name -> 1 - achieved / target (+ = headroom)

    @property
    def overloaded(self) -> bool:
        return self.rho >= OVERLOAD_RHO


def slo_values(ttft_ms: np.ndarray, tpot_ms: np.ndarray, targets: Targets) -> tuple[float, float]:
    """(TTFT at ttft_pct, TPOT at tpot_pct) of per-request arrays (ms); NaN for an empty array (linear percentile)."""
    def pct(v: np.ndarray, q: float) -> float:
        return float(np.percentile(v, q)) if v.size else math.nan

    return pct(ttft_ms, targets.ttft_pct), pct(tpot_ms, targets.tpot_pct)


def meets(ttft: float, tpot: float, targets: Targets) -> tuple[bool, dict[str, float]]:
    """Whether the achieved values meet the targets, and each target's margin (1 - achieved / target)."""
    margins = {}
    for name, got, want in (("ttft", ttft, targets.ttft_ms), ("tpot", tpot, targets.tpot_ms)):
        if want is not None:
            margins[name] = 1.0 - got / want if math.isfinite(got) else (1.0 if name == "tpot" else -math.inf)
    return all(m >= 0 for m in margins.values()), margins


# ---- one replica, one configuration -----------------------------------------------------------------------------
def _replica(task: tuple) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Simulate one replica's share: (TTFT per request, TPOT per request of >= 2 tokens, first arrival, last finish)."""
    profile, plan, mode, arrival_ms, outputs, prompts, cap, seed, profile_at = task
    if len(arrival_ms) == 0:
        return np.empty(0), np.empty(0), math.inf, -math.inf
    wl = arrivals(arrival_ms, cap, output_lengths=outputs, prompt_lengths=prompts)
    rec = simulate(profile, plan, mode=mode, seed=seed, workload=wl, profile_at=profile_at).records
    dec = rec.decode_tokens[: rec.n]
    tpot = rec.decode_ms[dec > 0] / dec[dec > 0]
    return rec.ttft_ms, tpot, float(arrival_ms[0]), float(rec.finish_ms[: rec.n].max())


@dataclass
class Capacity:
    """The search on one profile, load and targets (see the module docstring)."""

    profile: Profile
    load: Load
    targets: Targets
    temperature: float = 0.0
    price_per_gpu_hour: float | None = None
    seed: int = 0
    mapper: Callable[[Callable, Iterable], Iterable] = map  # map, or a pool's map (same results)
    profile_at: Callable[[int], Profile] | None = None  # the profile at a KV context: rounds at their batch's (des)
    _plans: dict = field(default_factory=dict)

    def plan(self, mode: str, cap: int, backup: str) -> tuple[Plan, str]:
        """The planner's plan for `mode` at batch cap `cap` (SSD: with this backup), and the mode to simulate."""
        key = (cap, backup if mode == "ssd" else "-")
        if key not in self._plans:
            knobs = Knobs(backup=backup) if mode == "ssd" and backup != "adaptive" else Knobs()
            self._plans[key] = make_plan(self.profile, PlanRequest(batch_size=cap, temperature=self.temperature,
                                                                   knobs=knobs))
        res = self._plans[key]
        if mode == "ssd":
            return res.plan, "ssd-adaptive" if backup == "adaptive" else "ssd"
        k = res.sd.num_speculative_tokens or 1
        return res.plan.replace(num_speculative_tokens=k, fan_out=(1,) * (k + 1), fan_out_miss=(1,) * (k + 1)), mode

    def fits(self, mode: str, cap: int, backup: str) -> bool:
        """`cap` sequences' KV caches fit in `mode` (Profile.fits: a spec pair's memory per mode, SSD with its plan's
        branch rows; a measured profile: its max_batch_size)."""
        if self.profile.memory is None or mode != "ssd":
            return cap <= self.profile.fits(mode)
        plan, _ = self.plan(mode, cap, backup)
        return cap <= self.profile.fits(mode, plan.K, plan.budget, plan.draft_devices)

    def gpus_per_replica(self, mode: str) -> int:
        return self.profile.latency.target_devices + (1 if mode == "ssd" else 0)

    def replica_tok_s(self, mode: str, cap: int, backup: str) -> float:
        """One replica's analytic capacity at its cap: total tok/s with `cap` sequences decoding (model.predict)."""
        plan, _ = self.plan(mode, cap, backup)
        return predict(self.profile, plan.replace(batch_size=cap), mode).total_tok_s

    def feasible(self, mode: str, cap: int, backup: str) -> bool:
        """False when even alone in the batch the analytic TPOT exceeds TPOT_PRUNE x the target (see TPOT_PRUNE)."""
        if self.targets.tpot_ms is None:
            return True
        plan, _ = self.plan(mode, cap, backup)
        alone = predict(self.profile, plan.replace(batch_size=1), mode).per_seq_tok_s
        return alone > 0 and 1e3 / alone <= TPOT_PRUNE * self.targets.tpot_ms

    def evaluate(self, config: Config, load: Load | None = None) -> Outcome:
        """Simulate `load` (default the whole load) on `config`: route, simulate each replica (self.mapper), pool
        the requests' latencies."""
        load = load or self.load
        plan, sim_mode = self.plan(config.mode, config.max_batch, config.backup)
        cap, r = config.max_batch, config.replicas
        one = predict(self.profile, plan.replace(batch_size=cap), config.mode)
        service = load.output_tokens / max(one.per_seq_tok_s, 1e-9) * 1e3
        where = assign(config.router, load.arrival_ms, service, r, cap)
        tasks = [(self.profile, plan, sim_mode, load.arrival_ms[where == i], load.output_tokens[where == i],
                  load.prompt_tokens[where == i], cap, self.seed + i, self.profile_at) for i in range(r)]
        parts = list(self.mapper(_replica, tasks))
        ttft = np.concatenate([p[0] for p in parts])
        tpot = np.concatenate([p[1] for p in parts])
        start, end = min(p[2] for p in parts), max(p[3] for p in parts)
        ttft_v, tpot_v = slo_values(ttft, tpot, self.targets)
        ok, margins = meets(ttft_v, tpot_v, self.targets)
        config = replace(config, tp=self.profile.latency.target_devices)
        gpus = r * self.gpus_per_replica(config.mode)
        tok_s = float(load.output_tokens.sum()) / (end - start) * 1e3 if end > start else math.inf
        usd = gpus * self.price_per_gpu_hour / 3600.0 / tok_s * 1e6 if self.price_per_gpu_hour else None
        rho = load.offered_tok_s / (r * one.total_tok_s) if one.total_tok_s > 0 else math.inf
        return Outcome(config, gpus, ttft_v, tpot_v, tok_s, usd, ok, rho, margins)

    def min_replicas(self, mode: str, cap: int, backup: str) -> int:
        """The analytic lower bound: replicas whose capacity at the cap exceeds the offered tokens/s."""
        offered, cap_tok_s = self.load.offered_tok_s, self.replica_tok_s(mode, cap, backup)
        if not math.isfinite(offered):
            return 1
        return max(1, math.floor(offered / cap_tok_s) + 1) if cap_tok_s > 0 else 10**9

    def fewest_replicas(self, mode: str, cap: int, backup: str, router: str, max_replicas: int,
                        start: int | None = None) -> tuple[Outcome | None, list[Outcome]]:
        """The fewest replicas (from `start`, default min_replicas, up to max_replicas) that meet the targets, and
        every outcome simulated on the way."""
        tried: dict[int, Outcome] = {}
        screen = self.load.head(SCREEN_REQUESTS)

        def at(r: int) -> Outcome:
            if r not in tried:
                tried[r] = self.evaluate(Config(mode, r, cap, backup if mode == "ssd" else "-", router), screen)
            return tried[r]

        lo = start or self.min_replicas(mode, cap, backup)
        if lo > max_replicas or not self.feasible(mode, cap, backup):
            return None, []
        r, step = lo, 1
        while not at(r).meets:  # one more, then doubling steps
            if r >= max_replicas:
                return None, list(tried.values())
            r, step = min(r + step, max_replicas), step * 2 if r - lo >= 2 else 1
        fail = max([k for k, o in tried.items() if not o.meets], default=lo - 1)
        while r - fail > 1:  # bisect between the last failure and the first success
            mid = (r + fail) // 2
            r, fail = (mid, fail) if at(mid).meets else (r, mid)
        if screen is self.load:
            return tried[r], list(tried.values())
        full = [self.evaluate(Config(mode, r, cap, backup if mode == "ssd" else "-", router))]  # the whole load
        while not full[-1].meets and full[-1].config.replicas < max_replicas:
            full.append(self.evaluate(replace(full[-1].config, replicas=full[-1].config.replicas + 1)))
        return (full[-1] if full[-1].meets else None), list(tried.values()) + full


@dataclass(frozen=True)
class SearchResult:
    """The cheapest configuration (None: nothing met the targets within the limits), every outcome simulated,
    and for each mode its cheapest one."""

    best: Outcome | None
    outcomes: tuple[Outcome, ...]
    per_mode: dict[str, Outcome | None]

    def to_dict(self) -> dict:
        """Plain JSON rows (outcome_row): the cheapest, the cheapest per mode, every outcome simulated."""
        return {"best": outcome_row(self.best) if self.best else None,
                "per_mode": {m: outcome_row(o) if o else None for m, o in self.per_mode.items()},
                "simulated": [outcome_row(o) for o in self.outcomes]}


def search(cap_search: Capacity | Sequence[Capacity], modes: Sequence[str] = MODES,
           caps: Sequence[int] = (1, 2, 4, 8, 16), routers: Sequence[str] = ("round-robin",),
           max_replicas: int = 64) -> SearchResult:
    """The cheapest configuration over profiles (e.g. one per tensor-parallel degree) x modes x caps (up to each
    the KV caches must fit: Capacity.fits) x SSD backups x routers (fewest GPUs; ties: the largest smallest
    margin). Configurations are visited by their analytic lower bound on GPUs, and skipped once that bound exceeds
    the cheapest found."""
    for m in modes:
        if m not in MODES:
            raise ConfigError("modes", f"must be among {', '.join(MODES)}, got {m!r}")
    searches = [cap_search] if isinstance(cap_search, Capacity) else list(cap_search)
    _check_reachable(searches)
    space = [(i, m, c, b, rt) for i, cs in enumerate(searches) for m in modes for c in caps
             for b in (SSD_BACKUPS if m == "ssd" else ("-",)) if cs.fits(m, c, b) for rt in routers]
    if not space:
        most = {m: max(cs.profile.fits(m) for cs in searches) for m in modes}
        raise ConfigError("batch_caps", "every batch cap is above what the KV caches fit (" +
                          ", ".join(f"{m.upper()} {n}" for m, n in most.items()) + " sequences at most"
                          + (", SSD's before its branch rows" if "ssd" in modes else "") + "); give smaller --batch-caps")
    bound = {s: searches[s[0]].min_replicas(*s[1:4]) * searches[s[0]].gpus_per_replica(s[1]) for s in space}
    best: Outcome | None = None
    seen: list[Outcome] = []
    per_mode: dict[str, Outcome | None] = dict.fromkeys(modes)
    for s in sorted(space, key=lambda s: (bound[s], s)):
        i, mode, cap, backup, router = s
        if best is not None and bound[s] > best.gpus and per_mode[mode] is not None:
            continue
        found, tried = searches[i].fewest_replicas(mode, cap, backup, router, max_replicas)
        seen += tried
        if found is None:
            continue
        if per_mode[mode] is None or _better(found, per_mode[mode]):
            per_mode[mode] = found
        if best is None or _better(found, best):
            best = found
    return SearchResult(best, tuple(seen), per_mode)


def _check_reachable(searches: Sequence[Capacity]) -> None:
    """ConfigError when no configuration can meet the TTFT target: every request's TTFT includes one target forward
    over its prompt (workload.prefill_ms), so the target's percentile of those prefills alone, at the fastest
    profile (TP degree), bounds every configuration's from below (it searched for minutes to find none)."""
    cs = searches[0]
    if cs.targets.ttft_ms is None or len(cs.load.arrival_ms) == 0:
        return
    lengths, each = np.unique(np.asarray(cs.load.prompt_tokens), return_inverse=True)
    floor = min(float(np.percentile(np.array([prefill_ms(c.profile.latency, int(n)) for n in lengths])[each],
                                    cs.targets.ttft_pct)) for c in searches)
    if cs.targets.ttft_ms < floor:
        raise ConfigError("ttft_ms", f"{cs.targets.ttft_ms:g} ms is below what any configuration can meet: the "
                                     f"p{cs.targets.ttft_pct:g} of the requests' prefills alone (one target forward "
                                     f"over each prompt) is {floor:.1f} ms; raise --ttft-ms or shorten the prompts")


def _better(a: Outcome, b: Outcome) -> bool:
    """Fewer GPUs, then the larger smallest margin."""
    return (a.gpus, -min(a.margins.values())) < (b.gpus, -min(b.margins.values()))


def same_gpus(cap_search: Capacity, gpus: int, mode: str, cap: int, router: str = "round-robin",
              backup: str = "-") -> Outcome | None:
    """`mode` with the same GPU count as more (or fewer) replicas: floor(gpus / GPUs per replica) of them (None when
    not even one fits)."""
    r = gpus // cap_search.gpus_per_replica(mode)
    return cap_search.evaluate(Config(mode, r, cap, backup, router)) if r >= 1 else None


def example(profile: Profile, tokens: int = 512) -> tuple[float, Targets]:
    """A load and targets derived from a profile's own analytic AR numbers (what bench/capacity_search.py and the
    dashboard start from; no mode is favoured): the rate (requests/s) that would put one AR replica at batch cap 16
    at twice its capacity, TPOT p90 <= 1.5x a lone AR request's, TTFT p90 <= 20 prefills of a 128-token prompt."""
    from ssd_sim.plan.predict import predict_ar

    alone, full = predict_ar(profile, 1).per_seq_tok_s, predict_ar(profile, 16).total_tok_s
    prefill = float(profile.latency.target(1, 128))
    return 2.0 * full / tokens, Targets(ttft_ms=20 * prefill, tpot_ms=1.5 * 1e3 / alone)


def overload_line(offered_tok_s: float, capacity_tok_s: float, what: str) -> str | None:
    """One line when a load offers at least the capacity (tok/s): the queue, and with it TTFT, grows for the whole
    run; None otherwise."""
    if not math.isfinite(offered_tok_s) or capacity_tok_s <= 0 or offered_tok_s < OVERLOAD_RHO * capacity_tok_s:
        return None
    return (f"overloaded: the load offers {offered_tok_s:,.0f} output tok/s where {what} can deliver at most "
            f"{capacity_tok_s:,.0f}; the queue grows for the whole run, so TTFT grows with the run's length (add "
            "replicas, raise the batch cap or lower the rate)")


def outcome_row(o: Outcome) -> dict:
    """An outcome as plain JSON data."""
    c = o.config
    return {"mode": c.mode, "tp": c.tp, "replicas": c.replicas, "max_batch": c.max_batch, "backup": c.backup,
            "router": c.router,
            "gpus": o.gpus, "ttft_ms": o.ttft_ms, "tpot_ms": o.tpot_ms, "tok_s": o.tok_s, "usd_per_mtok": o.usd_per_mtok,
            "meets": o.meets, "rho": o.rho, "margins": o.margins}
