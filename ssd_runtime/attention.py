"""The runtime owns the attention mask: every layer of every model family gets the mask of its own window.

transformers builds masks per family (Qwen2 and Gemma take a dict keyed by layer type, Llama one tensor, Mistral
and Phi-3 bake a sliding window into one tensor), so any custom-mask form that suits one family breaks another.
Instead the runtime registers one attention function ("ssd_static") that each attention layer calls with its own
arguments. The model itself says which window a layer has (the `sliding_window` it passes: None for full
attention), so no family's config conventions are re-implemented here. The function builds that layer's mask from
the forward's visibility (which slots each query may see, set by StaticKV) and hands it to the implementation
the model was loaded with (sdpa: torch's SDPA with a boolean mask, grouped KV heads read in place, see
grouped_sdpa; eager: the family's own function with an additive float mask, e.g. Gemma 2's softcapped attention). While the hook is active, transformers builds no masks of its own (the implementation name is not a
mask implementation), and outside StaticKV's forwards the model is untouched.

Sliding windows follow transformers' definition: a query at position q sees keys at positions k with
q - window < k <= q.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from ssd_sim.io.errors import ConfigError

NAME = "ssd_static"
BASES = ("sdpa", "eager")  # implementations the hook delegates to (what from_pretrained picks on CPU and CUDA)


@dataclass
class Visibility:
    """Which slots each query of one forward may see. Shapes: R rows, P queries per row, W slots.

    `vis` [R, P, W] holds the causal / branch structure without any window; `q_pos` [R, P] and `k_pos`
    [R, P or 1, W] are the token positions of queries and slots (for windows); `self_slot` [R, P, W] marks the
    one slot a padding query sees (itself), so that no query row is empty under any window.
    """

    vis: torch.Tensor
    q_pos: torch.Tensor
    k_pos: torch.Tensor
    self_slot: torch.Tensor
    _masks: dict = field(default_factory=dict)

    def mask(self, window: int | None, dtype: torch.dtype | None, groups: int = 1) -> torch.Tensor:
        """[R, 1, P, W] mask for a layer with this sliding window (None = full attention): boolean (dtype None,
        True = attend) or additive in `dtype` (0 = attend, the dtype's minimum = masked). Cached per forward.
        groups > 1 (boolean only): [R, 1, groups P, W], the mask repeated for grouped_sdpa's folded query rows."""
        key = (window, dtype, groups)
        if groups > 1 and key not in self._masks:
            m = self.mask(window, dtype)
            R, _, P, W = m.shape
            self._masks[key] = m[:, :, None].expand(R, 1, groups, P, W).reshape(R, 1, groups * P, W)
        if key not in self._masks:
            seen = self.vis
            if window is not None:
                seen = seen & (self.q_pos[:, :, None] - self.k_pos < int(window))
            seen = (seen | self.self_slot)[:, None]
            if dtype is None:
                self._masks[key] = seen
            else:
                add = torch.zeros(seen.shape, dtype=dtype, device=seen.device)
                self._masks[key] = add.masked_fill_(~seen, torch.finfo(dtype).min)
        return self._masks[key]


@dataclass(frozen=True)
class _Active:
    visibility: Visibility
    base: str  # the model's own implementation: sdpa or eager
    mask: Callable = Visibility.mask  # how a layer gets its mask (eager_mask() under regional compilation)


class _Current:
    """The StaticKV forward in progress: one at a time per process (each model runs in its own process, no threads).
    A plain attribute, not a ContextVar: Dynamo cannot trace ContextVar.get, so a compiled forward broke its graph
    at every layer's attention (10 graphs for the 2-layer tiny model; 1 with this)."""

    active: _Active | None = None


_CURRENT = _Current()


def _attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask, **kwargs):
    """The registered attention function: the layer's own mask, then the model's own implementation."""
    active = _CURRENT.active
    if active is None:
        raise RuntimeError("ssd_static attention was called outside a StaticKV forward")
    window = kwargs["sliding_window"] if "sliding_window" in kwargs else layer_window(module)
    if active.base == "sdpa":
        groups = query.shape[1] // key.shape[1]
        return grouped_sdpa(query, key, value, active.mask(active.visibility, window, None, groups), **kwargs)
    return _eager(module)(module, query, key, value, active.mask(active.visibility, window, query.dtype), **kwargs)


@functools.cache
def eager_mask() -> Callable:
    """Visibility.mask run eagerly even when called from a compiled layer (a graph break there). Its per-forward
    cache is a dict whose keys Dynamo would guard on: the first layer (which builds the mask) and the others
    (which read it) would compile apart. Eager, every layer runs one compiled code (models.compile_forward)."""
    return torch.compiler.disable(Visibility.mask)


def layer_window(module: torch.nn.Module) -> int | None:
    """The sliding window (tokens) of an attention layer that does not pass one to the attention function
    (Qwen2-MoE, PhiMoE): the window transformers' own mask gives that layer. Its `sliding_window` attribute where
    it keeps one, else the config's window on every layer, or on the layers its `layer_types` mark sliding."""
    if hasattr(module, "sliding_window"):
        return module.sliding_window or None
    config = getattr(module, "config", None)
    window = getattr(config, "sliding_window", None) or None  # Qwen2-MoE writes 0 when no layer slides
    types = getattr(config, "layer_types", None)
    if window is None or types is None or not hasattr(module, "layer_idx"):
        return window
    return window if types[module.layer_idx] == "sliding_attention" else None


def grouped_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                 dropout: float = 0.0, scaling: float | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """SDPA with a boolean mask; grouped KV heads are attended without copying K/V (no repeat_kv).

    query [R, H, P, D], key / value [R, Hkv, W, D] (H = G Hkv; query head h reads KV head h // G, as repeat_kv
    does), mask [R, 1, P, W]. The G query heads of one KV head become G P query rows of that head, so SDPA sees
    Hkv heads over the cache as it is; only the boolean mask is repeated G times (P W bytes per copy, against
    2 W D x dtype bytes per head and layer for a K/V copy). Returns ([R, P, H, D], None), as transformers'.
    """
    for name in ("softcap", "s_aux", "sinks"):  # Gemma 2's softcap, gpt-oss's attention sinks: SDPA has neither
        if kwargs.get(name) is not None:
            raise ValueError(f"sdpa attention does not support {name} (load the model with attn_implementation='eager')")
    R, H, P, D = query.shape
    kv_heads, W = key.shape[1], key.shape[2]
    groups = H // kv_heads
    if groups > 1:
        query = query.reshape(R, kv_heads, groups * P, D)
        if mask.shape[2] != groups * P:  # not yet repeated for the folded rows (Visibility.mask(..., groups) is)
            mask = mask.expand(R, 1, P, W)[:, :, None].expand(R, 1, groups, P, W).reshape(R, 1, groups * P, W)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout,
                                                           scale=scaling)
    return out.reshape(R, H, P, value.shape[-1]).transpose(1, 2).contiguous(), None


_EAGER: dict[type, Callable] = {}


def _eager(module: torch.nn.Module) -> Callable:
    """The eager attention function of the module's own modeling file (Gemma 2's applies its softcap)."""
    cls = type(module)
    if cls not in _EAGER:
        fn = getattr(sys.modules.get(cls.__module__), "eager_attention_forward", None)
        if fn is None:
            raise ConfigError("model", f"{cls.__name__} has no eager attention function in {cls.__module__}")
        _EAGER[cls] = fn
    return _EAGER[cls]


def _register() -> None:
    from transformers import AttentionInterface

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, _attention)


class StaticAttention:
    """Routes one model's attention through the hook while `active(visibility)` is entered."""

    def __init__(self, model: torch.nn.Module):
        _register()
        self.configs = _configs(model)
        impl = model.config._attn_implementation
        # a model loaded with another kernel (flash, flex) gets the mask-taking one it supports
        self.base = impl if impl in BASES else "sdpa" if getattr(model, "_supports_sdpa", False) else "eager"
        self.mask = eager_mask() if getattr(model, "_ssd_regional", False) else Visibility.mask

    @contextmanager
    def active(self, visibility: Visibility) -> Iterator[None]:
        """Within the block, the model's attention layers use `visibility` (and transformers builds no masks)."""
        previous, _CURRENT.active = _CURRENT.active, _Active(visibility, self.base, self.mask)
        before = [c._attn_implementation_internal for c in self.configs]
        for c in self.configs:
            c._attn_implementation_internal = NAME
        try:
            yield
        finally:
            for c, impl in zip(self.configs, before, strict=True):
                c._attn_implementation_internal = impl
            _CURRENT.active = previous


def _configs(model: torch.nn.Module) -> list:
    """The model's config and every distinct config its attention layers read (a text sub-config, say)."""
    found = {id(model.config): model.config}
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if hasattr(m, "layer_idx") and cfg is not None and hasattr(cfg, "_attn_implementation_internal"):
            found.setdefault(id(cfg), cfg)
    return list(found.values())
