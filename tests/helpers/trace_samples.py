"""Small valid runtime traces (ssd-trace/1) for dashboard and what-if tests, written with TraceWriter."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ssd_sim.io.records import Header, RoundRecord, Summary
from ssd_sim.io.trace import Trace, TraceWriter, summarize
from ssd_sim.plan.plan import Plan


def write_trace(path: Path, mode: str = "ssd", rounds: int = 40, batch: int = 2, seed: int = 0) -> Path:
    """A synthetic trace: K = 3, fan-out 2 per position, random acceptance / hits, fixed phase times (ms)."""
    rng = np.random.default_rng(seed)
    K = 3 if mode != "ar" else 1
    plan = Plan(num_speculative_tokens=K, fan_out=(2,) * (K + 1), batch_size=batch, mode=mode)
    header = {"mode": mode, "plan": plan.to_dict(), "batch_size": batch, "models": {"target": "t", "draft": "d"},
              "devices": {"target": "cpu:0", "draft": "cpu:1"}, "max_new_tokens": 64}
    header = Header.build(**header)
    w = TraceWriter(path, header)
    records = []
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
        records.append(RoundRecord.from_json({"round": r, "K": K, "batch": batch, "seqs": seqs, "timings_ms": timings},
                                             "test"))
        w.round(records[-1])
    return w.close(summary_of(header, records))


def summary_of(header: Header, rounds: list[RoundRecord]) -> Summary:
    """The summary line of these rounds (metrics only, no requests)."""
    return Summary.of(summarize(Trace(header, rounds)))


# A summary for traces whose rounds a test writes raw (possibly impossible ones, to see them refused).
EMPTY_SUMMARY = Summary(rounds=0, tokens=0, wall_ms=0.0, tok_s=0.0, mean_accept_len=0.0, acceptance_rate=0.0,
                        hit_rate=None, primary_hit_rate=None, backup_hit_rate=None, tokens_per_round_hit=None,
                        tokens_per_round_miss=None, per_position_acceptance=())


def trace_from(header: dict, rounds: list[dict]) -> Trace:
    """An in-memory Trace from plain header and round dicts (checked as read_trace checks them)."""
    return Trace(Header.build(**header), [RoundRecord.from_json(r, "test") for r in rounds])
