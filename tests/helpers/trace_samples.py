"""Small valid runtime traces (ssd-trace/1) for dashboard and what-if tests, written with TraceWriter."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ssd_sim.io.trace import TraceWriter
from ssd_sim.plan.plan import Plan


def write_trace(path: Path, mode: str = "ssd", rounds: int = 40, batch: int = 2, seed: int = 0) -> Path:
    """A synthetic trace: K = 3, fan-out 2 per position, random acceptance / hits, fixed phase times (ms)."""
    rng = np.random.default_rng(seed)
    K = 3 if mode != "ar" else 1
    plan = Plan(num_speculative_tokens=K, fan_out=(2,) * (K + 1), batch_size=batch, mode=mode)
    header = {"mode": mode, "plan": plan.to_dict(), "batch_size": batch, "models": {"target": "t", "draft": "d"},
              "devices": {"target": "cpu:0", "draft": "cpu:1"}, "max_new_tokens": 64}
    w = TraceWriter(path, header)
    for r in range(rounds):
        seqs = []
        for s in range(batch):
            acc = 0 if mode == "ar" else int(rng.integers(0, K + 1))
            seq = {"seq": s, "accepted": acc, "bonus": int(rng.integers(0, 100)), "committed": acc + 1}
            if mode == "ssd":
                hit = bool(r > 0 and rng.random() < 0.7)
                seq.update(first=r == 0, hit=hit, backup=None if hit else "jit", fan_out=2,
                           bonus_rank=int(rng.integers(0, 4)))
            seqs.append(seq)
        timings = {"verify": 10.0, "target_wait": 1.0 if mode == "ssd" else 0.0, "commit": 0.5,
                   "draft_glue": 2.0 if mode == "ssd" else 0.0, "draft_branch": 5.0 if mode == "ssd" else 0.0,
                   "draft_sd": 6.0 if mode == "sd" else 0.0, "round": 12.0}
        w.round({"round": r, "K": K, "batch": batch, "seqs": seqs, "timings_ms": timings})
    return w.close({"tokens": 0, "wall_s": rounds * 0.012, "tok_s": 0.0, "rounds": rounds, "faults": []})
