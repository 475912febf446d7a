"""A Profile for any target/draft pair on any GPU, from first principles (no preset, no traces).

    profile_from_specs("Llama-3.1-70B", "Llama-3.2-1B", gpu="h100-sxm", tp=4)      # built-in shapes
    profile_from_specs("models/target/config.json", "models/draft", gpu="l40s")     # your config.json files

Latencies: model.roofline over the two shapes (model.architecture) on the GPU specs (model.hardware), at the
workload's context length (tokens in the KV cache per sequence). The draft runs on one device of `draft_gpu`
(default: the target's kind). Acceptance and hit curves cannot come from specs: they are taken from a named preset
or profile (`acceptance_from`) and marked assumed in the provenance, since they belong to another pair.
Per-round overheads are the presets' stated assumptions. Prediction intervals come from the roofline assumptions'
intervals (the target's and the draft's forward at both ends of every interval).
"""

from __future__ import annotations

import dataclasses
import math

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.architecture import BYTES, Architecture, describe, load_architecture
from ssd_sim.model.hardware import GpuSpec, get_gpu
from ssd_sim.model.latency import LatencyModel
from ssd_sim.model.memory import MEMORY_USE, KvMemory, Side
from ssd_sim.model.profile import Profile
from ssd_sim.model.roofline import ASSUMED, RooflineAssumptions, forward_latency
from ssd_sim.model.uncertainty import Uncertainty
from ssd_sim.model.workload_profile import AcceptanceSource, acceptance_source

DEFAULT_ACCEPTANCE = "llama70b-1b-h100"  # the paper's setting: its measured acceptance stands in, marked assumed
OVERHEADS = {"round_overhead_ms": 0.3, "transfer_ms": 0.1, "lookup_ms": 0.05, "fast_backup_ms": 0.05}  # presets'


def profile_from_specs(target: str, draft: str, gpu: str | dict, tp: int = 1, draft_gpu: str | dict | None = None,
                       dtype: str = "bf16", context: int = 1024, acceptance_from: str = DEFAULT_ACCEPTANCE,
                       assumptions: RooflineAssumptions = ASSUMED) -> Profile:
    """The Profile of `target` on `tp` x `gpu` and `draft` on one `draft_gpu`, at `context` tokens per sequence."""
    if not (isinstance(tp, int) and 1 <= tp <= 64):
        raise ConfigError("tp", f"must be an integer in 1..64 (target devices), got {tp!r}")
    if not (isinstance(context, int) and 1 <= context <= 1_048_576):
        raise ConfigError("context", f"must be an integer in 1..1048576 (tokens per sequence), got {context!r}")
    if dtype not in BYTES:
        raise ConfigError("dtype", f"must be one of {', '.join(BYTES)}, got {dtype!r}")
    t_arch, d_arch = load_architecture(target), load_architecture(draft)
    if t_arch.vocab != d_arch.vocab:
        raise ConfigError("draft", f"the draft's vocabulary ({d_arch.vocab}) differs from the target's "
                                   f"({t_arch.vocab}); speculative decoding needs one tokenizer")
    if t_arch.heads % tp:  # tensor parallelism shards the attention heads (vLLM and SGLang refuse otherwise)
        raise ConfigError("tp", f"{_short(t_arch)} has {t_arch.heads} attention heads, which {tp} devices cannot "
                                f"share evenly: choose a --tp that divides {t_arch.heads}")
    t_gpu, d_gpu = get_gpu(gpu), get_gpu(draft_gpu or gpu)
    latency = _latency(t_arch, d_arch, t_gpu, d_gpu, tp, dtype, context, assumptions)
    source = acceptance_source(acceptance_from)
    memory = _memory(t_arch, d_arch, t_gpu, d_gpu, tp, dtype, context)
    prov = _provenance(t_arch, d_arch, t_gpu, d_gpu, tp, dtype, context, assumptions, source)
    prov["max_batch_size"] = memory.explain()
    return Profile(
        name=f"{_short(t_arch)}+{_short(d_arch)} on {tp}x{t_gpu.name}" + (f" + {d_gpu.name}" if draft_gpu else ""),
        latency=latency, acceptance=source.acceptance,
        description=f"{_short(t_arch)} (TP={tp} on {t_gpu.name}) + {_short(d_arch)} draft on one {d_gpu.name}, "
                    f"{dtype}, context {context} tokens: roofline from specs",
        target_model=t_arch.name, draft_model=d_arch.name,
        hardware=f"{tp + 1}x GPU: target TP={tp} on {t_gpu.name}, draft on a {d_gpu.name}",
        max_batch_size=memory.fits("ssd"), memory=memory,
        sources=(t_gpu.source,) + ((d_gpu.source,) if d_gpu != t_gpu else ()) + source.sources,
        provenance=prov, host=None, uncertainty=_uncertainty(t_arch, d_arch, t_gpu, d_gpu, tp, dtype, context,
                                                             assumptions, source),
        engine="ssd-runtime",
    )


def _latency(t_arch, d_arch, t_gpu, d_gpu, tp, dtype, context, a) -> LatencyModel:
    return LatencyModel(target=forward_latency(t_arch, t_gpu, tp, dtype, context, a=a),
                        draft=forward_latency(d_arch, d_gpu, 1, dtype, context, a=a), target_devices=tp, **OVERHEADS)


def _memory(t_arch: Architecture, d_arch: Architecture, t_gpu: GpuSpec, d_gpu: GpuSpec, tp: int, dtype: str,
            context: int) -> KvMemory:
    """What each side's devices hold for KV caches (model.memory); a ConfigError naming the fix where a side's weights,
    or one sequence's cache beside them, do not fit."""
    memory = KvMemory(Side.of(t_arch, t_gpu, tp, dtype), Side.of(d_arch, d_gpu, 1, dtype), context)
    for side, arch, gpu, devices, field in ((memory.target, t_arch, t_gpu, tp, "tp"),
                                            (memory.draft, d_arch, d_gpu, 1, "draft_gpu")):
        room = f"{MEMORY_USE:.0%} of {devices} x {gpu.memory_gb:g} GB on {gpu.name}"
        if side.free_bytes <= 0:
            fix = "raise --tp" if field == "tp" else "choose a larger --draft-gpu or a smaller draft"
            raise ConfigError(field, f"{_short(arch)} needs {side.weights_bytes / 1e9:.0f} GB of weights, more than "
                                     f"{room}: {fix}")
        if side.kv_bytes(context) > side.free_bytes:
            raise ConfigError("context", f"one sequence's {_short(arch)} KV cache at {context} tokens "
                                         f"({side.kv_bytes(context) / 1e9:.0f} GB) does not fit beside its weights in "
                                         f"{room}: lower the context (--context, or --prompt-tokens / --tokens)"
                                         + (" or raise --tp" if field == "tp" else " or choose a larger --draft-gpu"))
    return memory


def _uncertainty(t_arch, d_arch, t_gpu, d_gpu, tp, dtype, context, a, source) -> Uncertainty:
    """Latency spreads from the roofline assumptions' intervals: the relative spread of a forward (b = 1, one
    token and K + 1 = 8 tokens) over every assumption at either end, read as a 90% interval."""
    def spread(arch, gpu, devices) -> float:
        base = forward_latency(arch, gpu, devices, dtype, context, a=a)
        ends = [forward_latency(arch, gpu, devices, dtype, context, a=dataclasses.replace(a, **{k: v}))
                for k, (lo, hi) in a.INTERVALS.items() for v in (lo, hi)]
        rel = [abs(math.log(f(1, n) / base(1, n))) for f in ends for n in (1, 8)]
        return math.sqrt(sum(x * x for x in rel) / 2) / 1.645  # each assumption's half of the interval, combined

    t_sd, d_sd = spread(t_arch, t_gpu, tp), spread(d_arch, d_gpu, 1)
    base = source.uncertainty or Uncertainty()
    return dataclasses.replace(base, latency_run_sd=round(max(base.latency_run_sd, t_sd), 4),
                               draft_latency_sd=round(d_sd, 4), timed_rows_tokens=(),
                               sources={**base.sources, "latency_run_sd": f"roofline assumptions' intervals: "
                                        f"target forward +-{t_sd:.0%} (1 SD)", "draft_latency_sd":
                                        f"roofline assumptions' intervals: draft forward +-{d_sd:.0%} (1 SD)"})


def _provenance(t_arch, d_arch, t_gpu, d_gpu, tp, dtype, context, a, source: AcceptanceSource) -> dict[str, str]:
    return {
        "target.shape": describe(t_arch), "draft.shape": describe(d_arch),
        "target.latency": f"derived from specs: roofline of {t_arch.name} ({dtype}) on {tp} x {t_gpu.name} at context "
                          f"{context} (model.roofline)",
        "draft.latency": f"derived from specs: roofline of {d_arch.name} ({dtype}) on one {d_gpu.name} at context "
                         f"{context}",
        "roofline": "assumed: " + a.describe(),
        "overheads": "assumed: the presets' per-round overheads (" +
                     ", ".join(f"{k} {v:g}" for k, v in OVERHEADS.items()) + " ms)",
        "acceptance": source.provenance,
    }


def _short(a: Architecture) -> str:
    return a.name.split("/")[-1]
