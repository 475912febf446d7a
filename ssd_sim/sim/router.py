"""Routers: which replica serves each request of a load, as the request router in front of the replicas decides.

- round-robin: request i goes to replica i mod R (what a plain load balancer does);
- least-loaded: each request goes to the replica with the fewest outstanding requests at its arrival (ties: the
  lowest index), as vLLM's and SGLang's routers do by pending-request counts. The router sees its own estimate of
  which requests are still running: each replica has `slots` (its batch cap) and a request holds one for its
  estimated service time (ms), waiting for the earliest free slot when all are taken. The simulator (ssd_sim.sim.des)
  then decodes each replica's share; only the assignment uses the estimate.

Pure numpy / heapq; units: ms, requests.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from ssd_sim.io.errors import ConfigError

ROUTERS = ("round-robin", "least-loaded")


def round_robin(n_requests: int, replicas: int) -> np.ndarray:
    """The replica of each request (in arrival order): 0, 1, ..., R-1, 0, 1, ..."""
    return np.arange(n_requests) % replicas


def least_loaded(arrival_ms: Sequence[float], service_ms: Sequence[float], replicas: int, slots: int) -> np.ndarray:
    """The replica of each request (arrival order): fewest outstanding requests by the router's estimate (see the
    module docstring); `service_ms` is each request's estimated time in a slot (ms), `slots` the batch cap."""
    free_at = [[0.0] * slots for _ in range(replicas)]  # per replica: a heap of slot-free times
    finishes: list[list[float]] = [[] for _ in range(replicas)]  # per replica: a heap of estimated finish times
    out = np.empty(len(arrival_ms), dtype=np.int64)
    for i, (t, s) in enumerate(zip(arrival_ms, service_ms, strict=True)):
        for f in finishes:
            while f and f[0] <= t:
                heapq.heappop(f)
        r = min(range(replicas), key=lambda k: (len(finishes[k]), k))
        start = max(t, heapq.heappop(free_at[r]))
        heapq.heappush(free_at[r], start + s)
        heapq.heappush(finishes[r], start + s)
        out[i] = r
    return out


def assign(router: str, arrival_ms: Sequence[float], service_ms: Sequence[float], replicas: int,
           slots: int) -> np.ndarray:
    """The replica of each request under `router` (one of ROUTERS)."""
    if router == "round-robin":
        return round_robin(len(arrival_ms), replicas)
    if router == "least-loaded":
        return least_loaded(arrival_ms, service_ms, replicas, slots)
    raise ConfigError("router", f"must be one of {', '.join(ROUTERS)}, got {router!r}")
