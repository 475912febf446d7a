"""How many sequences' KV caches fit beside the weights, per decoding mode, from a pair's shapes and GPUs.

Each side's devices keep MEMORY_USE of their memory for weights and KV caches (the rest: activations, the runtime;
an assumption) and the weights take their share; what is left holds the caches at `context` tokens per sequence:

  ar   the target's cache on its TP devices
  sd   the target's and the draft's caches and the draft's weights on the target's TP devices (where SD's draft runs
       in ssd-run and in vLLM)
  ssd  the target's cache on its TP devices, and on each draft device the draft's cache of every sequence plus that
       device's share of the branch rows: budget x K tokens per sequence over draft_devices (ssd_runtime.kv's tree
       slots: branch j of a row writes K slots past the row's prefix)

A sliding-window layer keeps at most its window (model.architecture.Architecture.attended).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.architecture import BYTES, Architecture
from ssd_sim.model.hardware import GpuSpec

MEMORY_USE = 0.9  # share of device memory for weights + KV caches (assumed; vLLM's gpu_memory_utilization default)
MAX_FIT = 4096  # counts are capped here (beyond any batch the planner searches)
MODES = ("ar", "sd", "ssd")


@dataclass(frozen=True)
class Side:
    """One side's devices: memory left for KV caches and what one token of one sequence costs there (bytes)."""

    label: str  # "4 x h100-sxm"
    free_bytes: float  # MEMORY_USE x the devices' memory minus the weights
    weights_bytes: float
    full_bytes: float  # cache per token of the layers that keep every token
    window_bytes: float = 0.0  # cache per token of the sliding-window layers, which keep the last `window` tokens
    window: int = 0

    @classmethod
    def of(cls, arch: Architecture, gpu: GpuSpec, devices: int, dtype: str) -> Side:
        weights = BYTES[dtype] * arch.params
        per_layer = arch.kv_width * BYTES[dtype]
        return cls(label=f"{devices} x {gpu.name}", free_bytes=MEMORY_USE * gpu.memory_gb * 1e9 * devices - weights,
                   weights_bytes=weights, full_bytes=((arch.kv_layers or arch.layers) - arch.sliding_layers) * per_layer,
                   window_bytes=arch.sliding_layers * per_layer, window=arch.sliding_window)

    def kv_bytes(self, context: float) -> float:
        """One sequence's cache at `context` tokens (bytes)."""
        return self.full_bytes * context + self.window_bytes * (min(context, self.window) if self.window else context)

    def token_bytes(self) -> float:
        """One more token in every layer (bytes): a branch slot."""
        return self.full_bytes + self.window_bytes


@dataclass(frozen=True)
class KvMemory:
    """The target's TP devices and the draft's device, at `context` tokens per sequence (see the module docstring)."""

    target: Side
    draft: Side
    context: int

    def fits(self, mode: str, context: int | None = None, K: int = 0, budget: int = 0, draft_devices: int = 1) -> int:
        """Sequences whose caches fit in `mode` at `context` tokens each (default the profile's), with SSD's branch
        rows of budget x K tokens per sequence spread over `draft_devices`; 0 when not one fits."""
        ctx = self.context if context is None else context
        on_target = _count(self.target.free_bytes, self.target.kv_bytes(ctx))
        if mode == "ar":
            return on_target
        if mode == "sd":
            return _count(self.target.free_bytes - self.draft.weights_bytes,
                          self.target.kv_bytes(ctx) + self.draft.kv_bytes(ctx))
        return min(on_target, self.on_draft(ctx, K, budget, draft_devices))

    def on_draft(self, context: int, K: int = 0, budget: int = 0, draft_devices: int = 1) -> int:
        """Sequences one SSD draft device holds: each one's prefix cache and its share of the branch slots."""
        branch = budget * K / max(draft_devices, 1) * self.draft.token_bytes()
        return _count(self.draft.free_bytes, self.draft.kv_bytes(context) + branch)

    def by_mode(self, context: int | None = None, K: int = 0, budget: int = 0, draft_devices: int = 1) -> dict:
        """fits() of each mode (SSD with these branch rows)."""
        return {m: self.fits(m, context, K, budget, draft_devices) for m in MODES}

    def explain(self, context: int | None = None, K: int = 0, budget: int = 0, draft_devices: int = 1) -> str:
        """The counts and what they hold, one clause (for provenance and warnings)."""
        ctx = self.context if context is None else context
        n = self.by_mode(ctx, K, budget, draft_devices)
        branch = (f", each with {budget * K / draft_devices:.3g} branch tokens: budget {budget} x K {K}"
                  + (f" / {draft_devices} draft devices" if draft_devices > 1 else "")) if budget * K else ""
        return (f"derived: sequences whose KV caches at {ctx} tokens fit beside the weights in "
                f"{MEMORY_USE:.0%} of device memory: AR {n['ar']} (the target's cache on {self.target.label}), "
                f"SD {n['sd']} (both caches and the draft's weights there), SSD {n['ssd']} (the target's there; one "
                f"{self.draft.label.split(' x ', 1)[1]} holds {self.on_draft(ctx, K, budget, draft_devices)} of the "
                f"draft's{branch})")

    def to_dict(self) -> dict[str, Any]:
        return {"target": asdict(self.target), "draft": asdict(self.draft), "context": self.context}

    @classmethod
    def from_dict(cls, d: Any) -> KvMemory:
        if not isinstance(d, dict) or not all(isinstance(d.get(k), dict) for k in ("target", "draft")):
            raise ConfigError("memory", "must be an object with target and draft objects (as ssd-plan writes it)")
        return cls(target=_side(d["target"], "target"), draft=_side(d["draft"], "draft"),
                   context=int(_number(d.get("context"), "context", whole=True)))


def _count(free: float, per_sequence: float) -> int:
    return int(min(MAX_FIT, max(free, 0.0) // per_sequence)) if per_sequence > 0 else MAX_FIT


def _side(d: dict, role: str) -> Side:
    nums = {k: _number(d.get(k), f"{role}.{k}", whole=k == "window") for k in
            ("free_bytes", "weights_bytes", "full_bytes", "window_bytes", "window")}
    return Side(label=str(d.get("label", role)), **{k: int(v) if k == "window" else v for k, v in nums.items()})


def _number(v: Any, name: str, whole: bool = False) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    if not ok or (whole and v != int(v)):
        raise ConfigError("memory", f"memory.{name} must be a finite {'whole ' if whole else ''}number >= 0 "
                                    f"(bytes or tokens), got {v!r:.40}")
    return float(v)
