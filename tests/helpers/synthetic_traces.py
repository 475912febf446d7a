"""Traces with known ground truth, written in the runtime's schema (for calibration and dashboard tests)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ssd_sim.io.records import Header, RoundRecord
from ssd_sim.io.trace import TraceWriter, read_trace
from ssd_sim.model.latency import ForwardLatency, overlapped_ms
from ssd_sim.plan.plan import Plan
from tests.helpers.trace_samples import summary_of

TARGET = ForwardLatency(fixed_ms=300.0, token_ms=150.0, token_exponent=0.9)
DRAFT = ForwardLatency(fixed_ms=100.0, token_ms=40.0, token_exponent=0.85)
OVERHEAD = {"commit": 4.0, "transfer": 1.5, "lookup": 0.3, "fast": 0.4}
SETUP = {"models": {"target": "tiny-target", "draft": "tiny-draft"}, "dtype": {"target": "float32", "draft": "float32"},
         "quantize": {"target": None, "draft": None}, "devices": {"target": "cpu:0", "draft": "cpu:1"}}


def sample_rank(rng, c: float, r: float) -> int:
    """A bonus rank with P(rank >= F) = min(1, c F^-r) for F >= 1."""
    u = rng.random()
    return 0 if u >= c else int(np.floor((c / u) ** (1.0 / r)))


def write_trace(path: Path, plan: Plan, rounds: int = 200, acceptance: float = 0.7, primary_hit=(0.4, 0.8),
                backup_hit=(0.3, 0.8), seed: int = 0, noise: float = 0.01, header: dict | None = None,
                interference: tuple[float, float] = (0.0, 0.0), draft_slowdown: float = 0.0) -> Path:
    """Simulate `rounds` rounds of plan.mode with i.i.d. acceptance and power-law bonus ranks; `header` adds
    or replaces header fields (e.g. a host record); SSD verifies are slowed by `interference` = (one-row,
    multi-row) while the draft's glue and branch run (latency.overlapped_ms), and those take `draft_slowdown` longer
    than the draft's forwards alone."""
    rng = np.random.default_rng(seed)
    b, K = plan.batch_size, plan.K
    head = Header.build(**{**SETUP, "mode": plan.mode, "plan": plan.to_dict(), "batch_size": b,
                           "max_new_tokens": 10_000, "prompt_source": "synthetic", "num_prompts": b, **(header or {})})
    w, records = TraceWriter(path, head), []
    prev_rank_hit = [False] * b
    prev_all = [False] * b  # SD: the sequence's last round accepted all K (its next first draft step feeds 2)
    overrun = 0.0  # SSD: how long the draft's glue + branch outlasted the last verify (ms), waited for in this round

    def jitter(x):
        return float(x * (1 + noise * rng.standard_normal()))

    for i in range(rounds):
        seqs, missed = [], 0
        for s in range(b):
            hit = prev_rank_hit[s] if plan.mode == "ssd" else None
            backup = None if hit is not False else plan.backup_for(b)
            random_tokens = plan.mode == "ssd" and backup == "fast"
            if plan.mode == "ar":
                acc = 0
            elif random_tokens:
                acc = 0
            else:
                acc = int(min(K, rng.geometric(1 - acceptance) - 1))
            entry = {"seq": s, "accepted": acc, "bonus": int(rng.integers(0, 1000)), "committed": acc + 1}
            if plan.mode == "sd" and i == 0:
                entry["first"] = True
            if plan.mode == "ssd":
                rank = sample_rank(rng, *(backup_hit if random_tokens else primary_hit))
                fan = (plan.fan_out if hit else plan.fan_out_miss)[acc]
                entry.update(hit=hit, backup=backup, fan_out=int(fan), bonus_rank=rank, first=i == 0)
                prev_rank_hit[s] = rank < fan
                missed += hit is False
            seqs.append(entry)
        two = plan.mode == "sd" and any(prev_all)
        prev_all = [e["accepted"] == K for e in seqs]
        records.append(RoundRecord.from_json({"round": i, "K": K if plan.mode != "ar" else 0, "batch": b, "seqs": seqs,
                 "timings_ms": timings(plan, b, K, missed, jitter, interference, two,
                                  overrun, draft_slowdown)}, "test"))
        ms = records[-1].timings_ms
        overrun = max(ms["draft_glue"] + ms["draft_branch"] - ms["verify"], 0.0) if plan.mode == "ssd" else 0.0
        w.round(records[-1])
    return w.close(summary_of(head, records))


def timings(plan: Plan, b: int, K: int, missed: int, jitter, interference=(0.0, 0.0), two: bool = False,
            overrun: float = 0.0, draft_slowdown: float = 0.0) -> dict:
    """Phase timings (ms) of one round from the ground-truth latency functions (`two`: SD's first draft step feeds
    2 tokens, as the runtime's does after a round in which some row accepted all K). SSD as the runtime records it:
    a round's glue and branch are those beside its own verify (the glue one token per row after a jit backup of every
    row), and the target waits for the draft's `overrun` of the previous verify (ms) before the next round's reply."""
    t = {"commit": jitter(OVERHEAD["commit"])}
    if plan.mode == "ar":
        t["verify"] = jitter(TARGET(b, 1))
        t["round"] = t["verify"] + t["commit"]
        return t
    t["verify"] = jitter(TARGET(b, K + 1))
    if plan.mode == "sd":
        t["draft_sd"] = jitter((K - 1) * DRAFT(b, 1) + DRAFT(b, 2 if two else 1))
        t["target_wait"] = t["draft_sd"] + OVERHEAD["transfer"]
        t["round"] = t["target_wait"] + t["verify"] + t["commit"]
        return t
    backup, glue_tokens = 0.0, K + 1
    if missed:
        rows = b if plan.jit_redraft == "batch" else missed
        jit = plan.backup_for(b) == "jit"
        backup = jitter(K * DRAFT(rows, 1)) if jit else jitter(OVERHEAD["fast"])
        glue_tokens = 1 if jit and rows == b else K + 1  # the backup cached all but s_K of every row
    t.update(draft_lookup=jitter(OVERHEAD["lookup"]), draft_backup=backup,
             draft_glue=jitter(DRAFT(b, glue_tokens) * (1 + draft_slowdown)),
             draft_branch=jitter(K * DRAFT(b * plan.budget, 1) * (1 + draft_slowdown)))
    s_one, s_rows = interference
    s_branch = s_one if b * plan.budget == 1 else s_rows
    t["verify"] = float(overlapped_ms(t["verify"], [(t["draft_glue"], s_rows), (t["draft_branch"], s_branch)]))
    t["target_wait"] = overrun + OVERHEAD["transfer"] + t["draft_lookup"] + backup
    t["round"] = t["target_wait"] + t["verify"] + t["commit"]
    return t


def dist_pairs(n: int, seed: int = 0, vocab: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """n (target p, draft q) pairs over `vocab` tokens: Zipf-like draft logits in a random token order, target =
    draft + context-dependent noise (acceptance ~0.5-0.9 at T = 1)."""
    rng = np.random.default_rng(seed)
    beta = rng.uniform(0.8, 2.0, size=(n, 1))
    z = -beta * np.log(np.arange(1, vocab + 1))[None, :] + 0.3 * rng.standard_normal((n, vocab))
    z = z[:, rng.permutation(vocab)]
    zp = z + rng.uniform(0.2, 1.5, size=(n, 1)) * rng.standard_normal((n, vocab))

    def soft(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    return soft(zp), soft(z)


def dist_record(dist: np.ndarray, n: int) -> list:
    """[ids, log-probs, rest] of the n most probable tokens (a trace's per-side distribution record)."""
    ids = np.argsort(-dist, kind="stable")[:n]
    return [ids.tolist(), np.log(dist[ids]).tolist(), float(max(0.0, 1 - dist[ids].sum()))]


def add_greedy_dists(path: Path, n_top: int = 8, seed: int = 0) -> Path:
    """Give every round of a T = 0 trace logged distributions consistent with its greedy outcomes: positions
    before the stop have agreeing argmaxes, a rejection position disagreeing ones (ssd-run --log-topn's format)."""
    import json

    p, q = dist_pairs(4000, seed)
    agree = np.flatnonzero(p.argmax(1) == q.argmax(1))
    differ = np.flatnonzero(p.argmax(1) != q.argmax(1))
    rng = np.random.default_rng(seed)
    lines = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["type"] == "header":
            rec["log_topn"] = n_top
        if rec["type"] == "round" and rec["K"] > 0:
            for s in rec["seqs"]:
                k = s["accepted"]
                pick = [rng.choice(agree) for _ in range(k)] + [rng.choice(differ if k < rec["K"] else agree)]
                s["dists"] = [dist_record(p[j], n_top) + dist_record(q[j], n_top) for j in pick]
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


def stalled_trace(path: Path, factor: float, warmup: bool = False):
    """A synthetic SD trace (K = 2, 40 rounds, no noise) whose round 7 took `factor` x its own time (the verify took
    the extra), read back; with warmup the runtime marked that round as CUDA graph warm-up (RoundRecord.warmup)."""
    write_trace(path, Plan(mode="sd", num_speculative_tokens=2), rounds=40, seed=3, noise=0.0)
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    for r in recs:
        if r.get("round") == 7 and "timings_ms" in r:
            extra = (factor - 1) * r["timings_ms"]["round"]
            r["timings_ms"]["round"] += extra
            r["timings_ms"]["verify"] += extra
            if warmup:
                r["warmup"] = True
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return read_trace(path)
