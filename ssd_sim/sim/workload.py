"""Workloads: which requests arrive when, how long their prompts and outputs are, and prefill latency.

Two shapes (both served by the same continuous-batching scheduler, ssd_sim.sim.batching):
- fixed: `num_requests` sequences all arrive at t = 0 and are decoded together (the paper's setting);
  the batch shrinks as sequences finish.
- poisson: requests arrive as a Poisson stream at `rate` per second and join the running batch at
  round boundaries while fewer than `max_batch` sequences are active (continuous batching).
- arrivals: the same, at given arrival times (e.g. replayed from a request log; `read_arrivals` reads them
  from a JSON file {"arrival_ms": [...], "output_tokens": [...] (optional)}).
Output lengths follow `output_dist` around `output_tokens` (or are given per request); prompts have
`prompt_tokens` tokens. Sizes are bounded by ssd_sim.io.limits (tokens per sequence, requests, batch, arrival
times); arrivals the float clock cannot hold are refused (ssd_sim.io.sanity, which also words the warnings).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import read_json_object
from ssd_sim.io.limits import MAX_BATCH, MAX_REQUESTS, MAX_TOKENS
from ssd_sim.io.sanity import check_arrival_ms, check_rate
from ssd_sim.io.values import nonfinite_strings
from ssd_sim.model.latency import LatencyModel

WORKLOADS = ("fixed", "poisson", "arrivals")
DEFAULT_OUTPUT_TOKENS = 512  # output tokens per request when a CLI is not told (tokens)
DEFAULT_PROMPT_TOKENS = 128  # prompt tokens per request when a CLI is not told (tokens)
MIN_RATE, MAX_RATE = 1e-6, 1e6  # poisson arrival rates (requests per second): one in 12 days .. a million a second
ARRIVALS_HINT = ('a JSON object {"arrival_ms": [0, 12.5, ...], "output_tokens": [512, 80, ...] (optional), '
                 '"prompt_tokens": [128, 900, ...] or one number (optional)}')
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
    prompt_lengths: tuple[int, ...] = ()  # prompt length of every request (tokens); overrides prompt_tokens

    def __post_init__(self):
        object.__setattr__(self, "arrival_ms", tuple(float(t) for t in self.arrival_ms))
        object.__setattr__(self, "output_lengths", tuple(int(n) for n in self.output_lengths))
        object.__setattr__(self, "prompt_lengths", tuple(int(n) for n in self.prompt_lengths))
        if self.output_lengths and (len(self.output_lengths) != self.num_requests or min(self.output_lengths) < 1):
            raise ConfigError("output_lengths", f"needs num_requests = {self.num_requests} lengths >= 1 (tokens)")
        if self.prompt_lengths and (len(self.prompt_lengths) != self.num_requests
                                    or not 0 <= min(self.prompt_lengths) <= max(self.prompt_lengths) <= MAX_TOKENS):
            raise ConfigError("prompt_lengths", f"needs num_requests = {self.num_requests} lengths in 0..{MAX_TOKENS} "
                                                "(tokens)")
        if self.kind not in WORKLOADS:
            raise ConfigError("workload", f"must be one of {WORKLOADS}, got {self.kind!r}")
        for name, lo, hi, unit in (("num_requests", 1, MAX_REQUESTS, "requests"), ("max_batch", 1, MAX_BATCH, "sequences"),
                                   ("output_tokens", 1, MAX_TOKENS, "tokens per sequence"),
                                   ("prompt_tokens", 0, MAX_TOKENS, "tokens per request")):
            v = getattr(self, name)
            if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and lo <= v <= hi):
                raise ConfigError(name, f"must be an integer in {lo}..{hi} ({unit}), got {v!r}")
        if self.output_lengths and max(self.output_lengths) > MAX_TOKENS:
            raise ConfigError("output_lengths", f"at most {MAX_TOKENS} tokens per sequence, got {max(self.output_lengths)}")
        if self.output_dist not in OUTPUT_DISTS:
            raise ConfigError("output_dist", f"must be one of {OUTPUT_DISTS}, got {self.output_dist!r}")
        if self.kind == "poisson" and not (MIN_RATE <= self.rate <= MAX_RATE):
            raise ConfigError("rate", f"a poisson workload needs an arrival rate in {MIN_RATE:g}..{MAX_RATE:g} "
                                      f"(requests/s), got {self.rate!r}")
        if self.kind == "poisson":
            check_rate(self.rate, self.num_requests, self.num_requests)  # its first request arrives after one gap
        if self.kind == "arrivals":
            a = np.asarray(self.arrival_ms, dtype=float)
            if (a.size != self.num_requests or not np.all(np.isfinite(a))
                    or (a.size and (a[0] < 0 or np.any(np.diff(a) < 0)))):
                raise ConfigError("arrival_ms", f"needs num_requests = {self.num_requests} sorted finite times >= 0 (ms)")
            if a.size:
                check_arrival_ms(float(a[-1]), f"arrival_ms[{a.size - 1}]")

    def requests(self, rng: np.random.Generator) -> Requests:
        """Draw arrival times (ms, sorted), prompt and output lengths (tokens) of every request."""
        n = self.num_requests
        if self.kind == "fixed":
            arrival = np.zeros(n)
        elif self.kind == "arrivals":
            arrival = np.asarray(self.arrival_ms, dtype=float)
        else:
            arrival = np.cumsum(rng.exponential(1e3 / self.rate, size=n))
        prompts = (np.asarray(self.prompt_lengths, dtype=int) if self.prompt_lengths
                   else np.full(n, self.prompt_tokens, dtype=int))
        return Requests(arrival, prompts, self._output_lengths(rng))

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
        d["prompt_lengths"] = list(self.prompt_lengths)
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


def refilled_batches(batch_size: int, output_tokens: int, prompt_tokens: int, tokens_per_slot: int) -> Workload:
    """Batches of `batch_size` requests of these lengths (tokens), all arriving at t = 0 and admitted as rows finish,
    enough of them that each of the batch's slots decodes at least `tokens_per_slot` output tokens."""
    n = batch_size * max(1, math.ceil(tokens_per_slot / output_tokens))
    return Workload("fixed", n, batch_size, 0.0, output_tokens, "fixed", prompt_tokens)


def poisson(rate: float, num_requests: int, max_batch: int, output_tokens: int = 512, prompt_tokens: int = 128,
            output_dist: str = "fixed") -> Workload:
    """A Poisson stream of `num_requests` requests at `rate` req/s, batched continuously up to `max_batch`."""
    return Workload("poisson", num_requests, max_batch, rate, output_tokens, output_dist, prompt_tokens)


def arrivals(arrival_ms, max_batch: int, output_tokens: int = 512, prompt_tokens: int = 128,
             output_dist: str = "fixed", output_lengths=(), prompt_lengths=()) -> Workload:
    """Requests at the given arrival times (ms), batched continuously up to `max_batch`; output_lengths and
    prompt_lengths (tokens, one per request) override output_dist and prompt_tokens."""
    times = tuple(float(t) for t in arrival_ms)
    return Workload("arrivals", len(times), max_batch, 0.0, output_tokens, output_dist, prompt_tokens, times,
                    tuple(output_lengths), tuple(prompt_lengths))


def read_arrivals(path: str, max_batch: int, output_tokens: int = 512, prompt_tokens: int = 128,
                  output_dist: str = "fixed", file_prompts: bool = True) -> Workload:
    """An arrivals workload from a JSON file (ARRIVALS_HINT): sorted arrival times (ms from the start) and,
    optionally, every request's output length and prompt length (tokens; prompts also as one number for all). The
    file's prompts replace `prompt_tokens` unless file_prompts is False (a flag gave them). Any problem is a one-line
    ConfigError naming the entry."""
    data = read_json_object(path, "arrivals", f"write {ARRIVALS_HINT}")
    times = [_float(t) for t in _number_list(data, "arrival_ms", path, required=True)]
    for i, t in enumerate(times):
        if not (math.isfinite(t) and t >= 0) or (i and t < times[i - 1]):
            raise ConfigError("arrivals", f"{path}: arrival_ms[{i}] = {t!r}: times must be finite, >= 0 (ms) and sorted")
        check_arrival_ms(t, f"{path}: arrival_ms[{i}]", "arrivals")
    lengths = _number_list(data, "output_tokens", path, required=False)
    if lengths and len(lengths) != len(times):
        raise ConfigError("arrivals", f"{path}: {len(lengths)} output_tokens for {len(times)} arrival_ms; give one "
                                      "per request or none")
    for i, n in enumerate(lengths):
        if not (isinstance(n, int) and 1 <= n <= MAX_TOKENS):
            raise ConfigError("arrivals", f"{path}: output_tokens[{i}] = {n!r} must be an integer in 1..{MAX_TOKENS}")
    prompts = file_prompt_lengths(data, len(times), path) if file_prompts else []
    if len(set(prompts)) == 1:  # one length for all: the plain field
        prompt_tokens, prompts = prompts[0], []
    return arrivals(times, max_batch, output_tokens, prompt_tokens, output_dist, lengths, prompts)


def file_prompt_lengths(data: dict, n: int, path: str) -> list[int]:
    """An arrivals file's prompt_tokens: [] when absent, else one length per request (tokens, 0..MAX_TOKENS);
    one number means every request's."""
    if "prompt_tokens" not in data:
        return []
    v = data["prompt_tokens"]
    values = v if isinstance(v, list) else [v] * n
    ok = all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_TOKENS for x in values)
    if not ok or len(values) != n:
        raise ConfigError("arrivals", f"{path}: prompt_tokens must be one integer or {n} (one per request), "
                                      f"each in 0..{MAX_TOKENS}")
    return list(values)


def _float(x: int | float) -> float:
    """float(x), inf for an integer too large for a float."""
    try:
        return float(x)
    except OverflowError:
        return math.inf


def _number_list(data: dict, key: str, path: str, required: bool) -> list:
    """data[key] as a list of 1..MAX_REQUESTS JSON numbers (ConfigError naming the file and key otherwise)."""
    v = nonfinite_strings(data.get(key))  # "inf" / "Infinity" are refused like the literal Infinity
    if v is None and not required:
        return []
    if not isinstance(v, list) or not 1 <= len(v) <= MAX_REQUESTS:
        raise ConfigError("arrivals", f"{path}: {key} must be a list of 1..{MAX_REQUESTS} numbers; write {ARRIVALS_HINT}")
    bad = next((i for i, x in enumerate(v) if isinstance(x, bool) or not isinstance(x, (int, float))), None)
    if bad is not None:
        raise ConfigError("arrivals", f"{path}: {key}[{bad}] = {v[bad]!r} is not a number")
    return v


def prefill_ms(latency: LatencyModel, prompt_tokens: int) -> float:
    """Target prefill of newly admitted requests: one forward over all their prompt tokens, then sampling (ms)."""
    if prompt_tokens <= 0:
        return 0.0
    return float(latency.target(1, prompt_tokens)) + latency.round_overhead_ms


def draft_prefill_ms(latency: LatencyModel, prompt_tokens: int) -> float:
    """The draft's prefill of the same prompts (fills its KV cache; no sampling) (ms)."""
    return float(latency.draft(1, prompt_tokens)) if prompt_tokens > 0 else 0.0
