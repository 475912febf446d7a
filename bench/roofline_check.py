"""Cross-check (not a fit): the spec roofline (ssd_sim.model.roofline, stated assumptions) against the measured
forwards the GPU presets are built from.

    python bench/roofline_check.py

Each row is one measured step of the reference engine on H100s (the preset's INPUT lines and their sources), and
what the roofline predicts for the same model, devices, rows and tokens (round overhead added where the measured
step is a whole AR step). The roofline's assumptions were chosen before this table was made and are not tuned to
it; where it is far off, the reason is written in the last column.
"""

from __future__ import annotations

from ssd_sim.model.architecture import load_architecture
from ssd_sim.model.hardware import get_gpu
from ssd_sim.model.roofline import ASSUMED, RooflineAssumptions, forward_latency
from ssd_sim.model.spec_profile import OVERHEADS

# (what, model, gpu, tp, rows, tokens, measured ms, whole AR step?, source, context)
MEASURED = [
    ("Llama-3.1-70B AR step", "Llama-3.1-70B", "h100-sxm", 4, 1, 1, 1e3 / 54.7, True,
     "SSD paper: AR 54.7 tok/s, b = 1 (preset llama70b-1b-h100)", 512),
    ("Qwen3-32B AR step", "Qwen3-32B", "h100-sxm", 4, 1, 1, 1e3 / 88.8, True,
     "third-party SSD_PROFILE run: AR 88.8 tok/s (preset qwen32b-0.6b-h100; TP = 4 assumed there)", 512),
    ("Qwen3-32B verify, K = 4", "Qwen3-32B", "h100-sxm", 4, 1, 5, 11.45, False,
     "same run: verify phase 11.45 ms over 5 tokens", 512),
    ("Qwen3-0.6B tree step, 15 rows", "Qwen3-0.6B", "h100-sxm", 1, 15, 1, 2.54, False,
     "same run: one tree-decode step over 1 x 3 x 5 branch rows", 512),
]


def rows(a: RooflineAssumptions = ASSUMED) -> list[tuple]:
    out = []
    for what, model, gpu, tp, r, t, ms, whole, source, ctx in MEASURED:
        f = forward_latency(load_architecture(model), get_gpu(gpu), tp, context=ctx, a=a)
        pred = f(r, t) + (OVERHEADS["round_overhead_ms"] if whole else 0.0)
        out.append((what, ms, pred, pred / ms - 1.0, f.memory_ms, source))
    return out


def main() -> int:
    print("spec roofline vs measured steps (ms); assumptions: " + RooflineAssumptions().describe())
    print(f"{'step':32} {'measured':>9} {'roofline':>9} {'error':>7} {'weights':>8}  source")
    for what, ms, pred, err, mem, source in rows():
        print(f"{what:32} {ms:9.2f} {pred:9.2f} {err:+7.0%} {mem:8.2f}  {source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
