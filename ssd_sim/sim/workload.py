"""Workloads: which requests arrive when, how long their prompts and outputs are, and prefill latency.

Two shapes (both served by the same continuous-batching scheduler, ssd_sim.sim.batching):
- fixed: `num_requests` sequences all arrive at t = 0 and are decoded together (the paper's setting);
  the batch shrinks as sequences finish.
- poisson: requests arrive as a Poisson stream at `rate` per second and join the running batch at
  round boundaries while fewer than `max_batch` sequences are active (continuous batching).
- arrivals: the same, at given arrival times (e.g. replayed from a request log).
Output lengths follow `output_dist` around `output_tokens`; prompts have `prompt_tokens` tokens.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.latency import LatencyModel

WORKLOADS = ("fixed", "poisson", "arrivals")
OUTPUT_DISTS = ("fixed", "uniform", "geometric")


@dataclass(frozen=True)
class Workload:
    """What to simulate. Units: tokens, requests, requests per second."""

    kind: str = "fixed"  # fixed: all requests at t = 0; poisson: arrivals at `rate` req/s
    num_requests: int = 1  # sequences to decode (fixed: the batch size)
    max_batch: int = 1  # most sequences decoded together; more wait in the queue (continuous batching)
    rate: float = 0.0  # poisson: mean arrival rate (requests per second)
    output_tokens: int = 512  # mean output length per sequence (tokens, the first token included)
    output_dist: str = "fixed"  # fixed | uniform (on [ceil(mean/2), mean + that - 1]) | geometric (mean as given)
    prompt_tokens: int = 128  # prompt length (tokens); prefill = one target forward over all new prompts; 0 = none
    arrival_ms: tuple[float, ...] = ()  # arrivals: the arrival time of every request (ms, sorted)
    output_lengths: tuple[int, ...] = ()  # exact output length of every request (tokens); overrides output_dist

    def __post_init__(self):
        object.__setattr__(self, "arrival_ms", tuple(float(t) for t in self.arrival_ms))
        object.__setattr__(self, "output_lengths", tuple(int(n) for n in self.output_lengths))
        if self.output_lengths and (len(self.output_lengths) != self.num_requests or min(self.output_lengths) < 1):
            raise ConfigError("output_lengths", f"needs num_requests = {self.num_requests} lengths >= 1 (tokens)")
        if self.kind not in WORKLOADS:
            raise ConfigError("workload", f"must be one of {WORKLOADS}, got {self.kind!r}")
        for name in ("num_requests", "max_batch", "output_tokens"):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and v >= 1):
                raise ConfigError(name, f"must be an integer >= 1, got {v!r}")
        if not (isinstance(self.prompt_tokens, (int, np.integer)) and self.prompt_tokens >= 0):
            raise ConfigError("prompt_tokens", f"must be an integer >= 0, got {self.prompt_tokens!r}")
        if self.output_dist not in OUTPUT_DISTS:
            raise ConfigError("output_dist", f"must be one of {OUTPUT_DISTS}, got {self.output_dist!r}")
        if self.kind == "poisson" and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ConfigError("rate", f"a poisson workload needs an arrival rate > 0 (requests/s), got {self.rate!r}")
        if self.kind == "arrivals":
            a = np.asarray(self.arrival_ms, dtype=float)
            if a.size != self.num_requests or (a.size and (a[0] < 0 or np.any(np.diff(a) < 0))):
                raise ConfigError("arrival_ms", f"needs num_requests = {self.num_requests} sorted times >= 0 (ms)")

    def requests(self, rng: np.random.Generator) -> Requests:
        """Draw arrival times (ms, sorted), prompt and output lengths (tokens) of every request."""
        n = self.num_requests
        if self.kind == "fixed":
            arrival = np.zeros(n)
        elif self.kind == "arrivals":
            arrival = np.asarray(self.arrival_ms, dtype=float)
        else:
            arrival = np.cumsum(rng.exponential(1e3 / self.rate, size=n))
        return Requests(arrival, np.full(n, self.prompt_tokens, dtype=int), self._output_lengths(rng))

    def _output_lengths(self, rng: np.random.Generator) -> np.ndarray:
        n, m = self.num_requests, self.output_tokens
        if self.output_lengths:
            return np.asarray(self.output_lengths, dtype=int)
        if self.output_dist == "fixed":
            return np.full(n, m, dtype=int)
        if self.output_dist == "uniform":
            lo = math.ceil(m / 2)
            return rng.integers(lo, m + lo, size=n)  # mean (2 lo + m - 1) / 2 ~= m
        return rng.geometric(1.0 / m, size=n)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["arrival_ms"] = list(self.arrival_ms)
        d["output_lengths"] = list(self.output_lengths)
        return d


@dataclass(frozen=True)
class Requests:
    """One drawn workload: per request arrival (ms), prompt length and output length (tokens)."""

    arrival_ms: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __len__(self) -> int:
        return int(self.arrival_ms.size)


def fixed_batch(batch_size: int, output_tokens: int = 512, prompt_tokens: int = 128,
                output_dist: str = "fixed") -> Workload:
    """`batch_size` sequences arriving together at t = 0 (the paper's offline setting)."""
    return Workload("fixed", batch_size, batch_size, 0.0, output_tokens, output_dist, prompt_tokens)


def poisson(rate: float, num_requests: int, max_batch: int, output_tokens: int = 512, prompt_tokens: int = 128,
            output_dist: str = "fixed") -> Workload:
    """A Poisson stream of `num_requests` requests at `rate` req/s, batched continuously up to `max_batch`."""
    return Workload("poisson", num_requests, max_batch, rate, output_tokens, output_dist, prompt_tokens)


def arrivals(arrival_ms, max_batch: int, output_tokens: int = 512, prompt_tokens: int = 128,
             output_dist: str = "fixed") -> Workload:
    """Requests at the given arrival times (ms), batched continuously up to `max_batch`."""
    times = tuple(float(t) for t in arrival_ms)
    return Workload("arrivals", len(times), max_batch, 0.0, output_tokens, output_dist, prompt_tokens, times)


def prefill_ms(latency: LatencyModel, prompt_tokens: int) -> float:
    """Target prefill of newly admitted requests: one forward over all their prompt tokens, then sampling (ms)."""
    if prompt_tokens <= 0:
        return 0.0
    return float(latency.target(1, prompt_tokens)) + latency.round_overhead_ms


def draft_prefill_ms(latency: LatencyModel, prompt_tokens: int) -> float:
    """The draft's prefill of the same prompts (fills its KV cache; no sampling) (ms)."""
    return float(latency.draft(1, prompt_tokens)) if prompt_tokens > 0 else 0.0
