"""Forward latency from first principles: a model's shape (model.architecture) on a GPU (model.hardware).

One forward over `rows` sequences x `tokens` tokens each (N = rows x tokens), on `tp` devices (tensor parallel):

    t = floor + max(weights(N) / tp + rows x KV(context) / tp,  FLOPs(N, context) / tp / (peak x mfu))  [memory
        terms at bw_efficiency x HBM bandwidth]  + 2 x layers x all-reduce(N)   (tp > 1)

    floor          = fixed_ms + layers x layer_floor_us         launches, framework, sampling of one forward
    all-reduce(N)  = allreduce_us + N x hidden x 2 B x 2 (tp - 1) / tp / (link bandwidth x link_efficiency)
The efficiencies are assumptions, stated here with the interval each is known to within (RooflineAssumptions);
they are not fitted to any SSD result. `bench/roofline_check.py` compares the result with the measured steps the
presets are built from (a cross-check, not a fit).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ssd_sim.model.architecture import Architecture
from ssd_sim.model.hardware import GpuSpec
from ssd_sim.model.latency import ForwardLatency


@dataclass(frozen=True)
class RooflineAssumptions:
    """What a real serving stack reaches of the datasheet, per term; each with the interval it is assumed in."""

    bw_efficiency: float = 0.80  # share of peak HBM bandwidth decode kernels stream at; assumed in [0.65, 0.90]
    mfu: float = 0.60  # share of dense tensor peak when compute-bound; assumed in [0.40, 0.75]
    link_efficiency: float = 0.70  # share of link bandwidth an all-reduce reaches; assumed in [0.5, 0.85]
    allreduce_us: float = 10.0  # latency of one small all-reduce across the TP group (us); assumed in [5, 25]
    layer_floor_us: float = 15.0  # launch / framework time per layer with captured graphs (us); assumed in [5, 40]
    fixed_ms: float = 0.3  # per forward outside the layers: sampling, host work (ms); assumed in [0.1, 1.0]

    INTERVALS = {"bw_efficiency": (0.65, 0.90), "mfu": (0.40, 0.75), "link_efficiency": (0.5, 0.85),
                 "allreduce_us": (5.0, 25.0), "layer_floor_us": (5.0, 40.0), "fixed_ms": (0.1, 1.0)}

    def describe(self) -> str:
        """One line: every assumption with its interval."""
        return ", ".join(f"{f.name} {getattr(self, f.name):g} (assumed in {lo:g}..{hi:g})"
                         for f in fields(self) for lo, hi in [self.INTERVALS[f.name]])


ASSUMED = RooflineAssumptions()


def forward_latency(arch: Architecture, gpu: GpuSpec, tp: int = 1, dtype: str = "bf16", context: float = 1024.0,
                    kv_dtype: str | None = None, a: RooflineAssumptions = ASSUMED) -> ForwardLatency:
    """The ForwardLatency (ms) of `arch` on `tp` x `gpu` for rows whose KV cache holds `context` tokens."""
    kv_dtype = kv_dtype or ("bf16" if dtype == "fp8" else dtype)  # an FP8 model usually keeps a BF16 KV cache
    bw = gpu.hbm_tb_s * 1e12 * a.bw_efficiency  # bytes/s
    flops = gpu.peak_tflops(dtype) * 1e12 * a.mfu
    per_token_flops = 2.0 * arch.active_params + arch.attn_flops(context)
    link = gpu.link_gb_s * 1e9 * a.link_efficiency
    allreduce_bytes_per_token = arch.hidden * 2.0 * 2.0 * (tp - 1) / tp if tp > 1 else 0.0
    allreduces = 2 * arch.layers if tp > 1 else 0
    return ForwardLatency(
        fixed_ms=a.fixed_ms + arch.layers * a.layer_floor_us / 1e3 + allreduces * a.allreduce_us / 1e3,
        memory_ms=arch.dense_bytes(dtype) / tp / bw * 1e3,
        compute_ms_per_token=per_token_flops / tp / flops * 1e3,
        token_ms=allreduces * allreduce_bytes_per_token / link * 1e3 if link else 0.0,
        token_exponent=1.0,
        row_ms=arch.kv_bytes(context, kv_dtype) / tp / bw * 1e3,
        expert_ms=arch.expert_bytes(dtype) / tp / bw * 1e3,
        expert_share=arch.experts_per_token / arch.experts if arch.experts else 0.0,
    )
