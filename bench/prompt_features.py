"""Can a request's acceptance be predicted from its prompt alone? (issue 26: what is left of a half's error)

    .venv/bin/python bench/prompt_features.py TRACES... [--prompts FILE] [--features CACHE.json] [--draws 200]
    .venv/bin/python bench/prompt_features.py traces/cpu-fp32-zen4-mixed192*/zm192-s*.jsonl \\
        --prompts bench/prompts/mixed192.jsonl --features /tmp/mixed192-features.json

Random halves of 24-48 requests miss the worst-error goal because two halves' requests accept differently (the class
floor). The only inputs known about half B before it runs are its prompts. This bench runs the target and the draft
over each prompt (one prefill each, no generation; the traces' models, fp32, `ssd-run fetch-models`) and scores
features the pair shows on the prompt's own tokens: the mean over positions of sum_v min(p, q) (a T = 1 acceptance
probability), the argmax agreement (T = 0), the same at the last position (the first generated token's distribution),
and the target's entropy. Per trace it prints each feature's Spearman correlation with the request's measured
acceptance (tokens per round) within each class and over all, then the check that matters: over random halves, the
error of half B's mean acceptance predicted from half A (median / 90th percentile over the draws) by class means
alone and by class means plus a least-squares line in the best feature (fitted on half A; the feature is chosen by
its correlation over all requests, which can only flatter it). Not part of CI (needs the weights; ~1.5 s a prompt on
2 cores).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from ssd_sim.io.trace import read_trace

FEATURES = ("min_pq", "argmax_agree", "min_pq_last", "argmax_last", "target_entropy")


def prompt_features(prompts_file: Path, target: str, draft: str) -> list[dict]:
    """One dict per prompt line: its tag and FEATURES, from one prefill of each model (fp32, raw text, as ssd-run
    encodes a prompt file)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ssd_runtime.models import resolve_path
    from ssd_runtime.prompts import load_prompts

    t_path, d_path = resolve_path(target, "target"), resolve_path(draft, "draft")
    tok = AutoTokenizer.from_pretrained(t_path)
    models = [AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval() for p in (t_path, d_path)]
    out = []
    for pr in load_prompts(prompts_file):
        ids = torch.tensor([list(pr.ids) if pr.ids is not None else tok(pr.text)["input_ids"]])
        with torch.no_grad():
            target_logits, draft_logits = (m(ids).logits[0] for m in models)
        out.append({"tag": pr.tag or "", **pair_scores(target_logits, draft_logits)})
    return out


def pair_scores(target_logits, draft_logits) -> dict[str, float]:
    """FEATURES of one prompt from the two models' logits over its tokens ([positions, vocab] tensors; the draft's
    extra vocabulary rows, if any, dropped): the mean over the positions before the last of sum_v min(p, q) and of
    the argmax agreement, both at the last position alone, and the target's mean entropy (nats)."""
    lt = target_logits.float().log_softmax(-1)
    ld = draft_logits.float()[:, :lt.shape[-1]].log_softmax(-1)
    min_pq = lt.exp().minimum(ld.exp()).sum(-1)
    agree = (lt.argmax(-1) == ld.argmax(-1)).float()
    return {"min_pq": float(min_pq[:-1].mean()), "argmax_agree": float(agree[:-1].mean()),
            "min_pq_last": float(min_pq[-1]), "argmax_last": float(agree[-1]),
            "target_entropy": float(-(lt.exp() * lt).sum(-1).mean())}


def request_acceptance(path: str) -> dict[int, float]:
    """Each request's measured tokens per round (accepted + 1, averaged over its rounds)."""
    tokens, rounds = defaultdict(float), defaultdict(int)
    for r in read_trace(path).rounds:
        for s in r.seqs:
            tokens[s.seq] += s.accepted + 1
            rounds[s.seq] += 1
    return {s: tokens[s] / rounds[s] for s in tokens}


def halves_error(y: np.ndarray, x: np.ndarray, tags: list[str], draws: int, seed: int = 0) -> tuple[str, str]:
    """Median and 90th percentile |error| (%) of half B's mean acceptance predicted from half A: by class means (each
    B request gets its class's A mean), and by class means plus a least-squares line in x (within-class deviations,
    fitted on A)."""
    rng, cls = np.random.default_rng(seed), np.array(tags)
    plain, with_x = [], []
    for _ in range(draws):
        a = np.zeros(len(y), bool)
        a[rng.permutation(len(y))[: len(y) // 2]] = True
        mean_a = {c: y[a & (cls == c)].mean() for c in set(tags)}
        mx_a = {c: x[a & (cls == c)].mean() for c in set(tags)}
        base = np.array([mean_a[c] for c in cls])
        dx = x - np.array([mx_a[c] for c in cls])
        slope = np.polyfit(dx[a], (y - base)[a], 1)[0]
        b = ~a
        for out, guess in ((plain, base), (with_x, base + slope * dx)):
            out.append(abs(guess[b].mean() / y[b].mean() - 1) * 100)
    return tuple(f"{np.median(e):.2f}% / {np.percentile(e, 90):.2f}%" for e in (plain, with_x))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--prompts", default="bench/prompts/mixed192.jsonl", help="the prompt file the traces ran")
    ap.add_argument("--features", help="a JSON cache of the prompt features (written when missing)")
    ap.add_argument("--target", default="qwen-coder-1.5b")
    ap.add_argument("--draft", default="qwen-coder-0.5b")
    ap.add_argument("--draws", type=int, default=200)
    args = ap.parse_args()
    cache = Path(args.features) if args.features else None
    if cache and cache.exists():
        feats = json.loads(cache.read_text())
    else:
        feats = prompt_features(Path(args.prompts), args.target, args.draft)
        if cache:
            cache.write_text(json.dumps(feats))
    print("| trace | requests | class | " + " | ".join(FEATURES) + " | halves: class means | + best feature |")
    print("|---|---|---|" + "---|" * (len(FEATURES) + 2))
    for path in args.traces:
        acc = request_acceptance(path)
        seqs = sorted(acc)
        y, tags = np.array([acc[s] for s in seqs]), [feats[s]["tag"] for s in seqs]
        for cls in sorted(set(tags)) + ["all"]:
            idx = [i for i, t in enumerate(tags) if cls in ("all", t)]
            rho = {f: spearmanr([feats[seqs[i]][f] for i in idx], y[idx])[0] for f in FEATURES}
            cells = " | ".join(f"{rho[f]:+.2f}" for f in FEATURES)
            extra = " | |"
            if cls == "all":
                best = max(FEATURES, key=lambda f: np.mean([abs(spearmanr(
                    [feats[seqs[i]][f] for i, t in enumerate(tags) if t == c], y[[t == c for t in tags]])[0])
                    for c in set(tags)]))
                plain, with_x = halves_error(y, np.array([feats[s][best] for s in seqs]), tags, args.draws)
                extra = f" | {plain} | {with_x} ({best}) |"
            print(f"| {Path(path).name} | {len(idx)} | {cls} | {cells}{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
