"""Per-round overhead and memory of the runtime against context length and cache budget: one table.

    .venv/bin/python bench/runtime_scaling.py            # tiny random models, about a minute
    .venv/bin/python bench/runtime_scaling.py --real     # the fetched Qwen2.5-Coder pair (several minutes)

What is measured. Each configuration runs in its own spawned process, so its peak RSS is its own: the target and
the draft in that one process (transport.LocalLink: the draft replies, then speculates, synchronously), one torch
thread, SSD at T = 1 (so the q buffers are exercised), b = 1, K = 3, a prompt of `context` tokens and a fixed
number of new tokens. Forward hooks on both models time every model call; per round,

    overhead = round wall time - time inside the two models' forwards

is everything the runtime adds: KV bookkeeping, masks, sampling and Saguaro, the fork, messages, Python. Its median
over the rounds is reported, with the median model time for scale, the bytes held by the K/V buffers and the
branch q buffer, and the process's peak RSS. Goals (issue 13): overhead flat in context length (within 10% from
64 to 2,048 tokens) and memory linear in the budget with a stated constant (README, "per-round bytes").
Not part of CI. Works on older checkouts too (it only uses Target / Drafter / LocalLink), to compare before/after.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import time

K = 3
TINY = {"vocab": 2048, "seed": 3, "hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 128,
        "init_std": 0.5, "max_positions": 4096}


def fan_out(budget: int) -> tuple[int, ...]:
    """`budget` guesses spread over the K + 1 stopping positions, the earlier positions first."""
    return tuple(budget // (K + 1) + (k < budget % (K + 1)) for k in range(K + 1))


def load_pair(real: bool):
    """(target, draft, vocab) on the CPU: the fetched Qwen pair or two tiny random models."""
    from ssd_runtime.models import ModelSpec, load_model, resolve_path, tiny_model

    if real:
        t = load_model(ModelSpec(path=str(resolve_path("qwen-coder-1.5b"))), "target")
        d = load_model(ModelSpec(path=str(resolve_path("qwen-coder-0.5b"))), "draft")
        return t.model, d.model, t.vocab_size
    return tiny_model(**TINY), tiny_model(**TINY, noise=0.05), TINY["vocab"]


class ForwardClock:
    """Accumulates the wall time (ms) spent inside the forwards of the given models."""

    def __init__(self, *models):
        self.ms, self._t = 0.0, 0.0
        for m in models:
            m.register_forward_pre_hook(self._start)
            m.register_forward_hook(self._stop)

    def _start(self, *_):
        self._t = time.perf_counter()

    def _stop(self, *_):
        self.ms += (time.perf_counter() - self._t) * 1e3


def measure(real: bool, context: int, budget: int, new_tokens: int, queue) -> None:
    """Child process: one SSD run; puts {overhead_ms, model_ms, rounds, kv_bytes, q_bytes, peak_rss_mb}."""
    import torch

    from ssd_runtime.draft import Drafter
    from ssd_runtime.target import Target, TargetConfig
    from ssd_runtime.transport import LocalLink
    from ssd_sim.plan.plan import Plan

    torch.set_num_threads(1)
    target, draft, vocab = load_pair(real)
    plan = Plan(num_speculative_tokens=K, fan_out=fan_out(budget), fan_out_miss=fan_out(budget), temperature=1.0)
    drafters = []

    def factory(msg):
        drafters.append(Drafter(draft, plan.replace(mode="ssd"), 0, vocab))
        return drafters[-1]

    link = LocalLink(factory)
    link.job({})
    prompt = torch.randint(0, vocab, (context,), generator=torch.Generator().manual_seed(context)).tolist()
    runner = Target(target, TargetConfig(plan.replace(mode="ssd"), new_tokens, seed=1), link)
    clock = ForwardClock(target, draft)
    overhead, model = [], []
    round_fn = runner.round

    def timed_round(*args):
        f0, t0 = clock.ms, time.perf_counter()
        out = round_fn(*args)
        wall, fwd = (time.perf_counter() - t0) * 1e3, clock.ms - f0
        overhead.append(wall - fwd)
        model.append(fwd)
        return out

    runner.round = timed_round
    runner.generate([prompt])
    d = drafters[-1]
    kv_bytes = sum(kv.nbytes() for kv in (getattr(runner, "kv", None), getattr(d, "kv", None))
                   if kv is not None and hasattr(kv, "nbytes"))
    qbuf = getattr(d, "qbuf", None)
    queue.put({"overhead_ms": statistics.median(overhead[1:]), "model_ms": statistics.median(model[1:]),
               "rounds": len(overhead), "kv_bytes": kv_bytes,
               "q_bytes": 0 if qbuf is None else qbuf.numel() * qbuf.element_size(),
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def run_config(real: bool, context: int, budget: int, new_tokens: int) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=measure, args=(real, context, budget, new_tokens, q))
    p.start()
    out = q.get()
    p.join()
    return {"context": context, "budget": budget, **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", action="store_true", help="the fetched Qwen pair instead of tiny models")
    ap.add_argument("--contexts", type=int, nargs="+", default=[64, 256, 1024, 2048])
    ap.add_argument("--budgets", type=int, nargs="+", default=[1, 6, 12, 24])
    ap.add_argument("--budget-at", type=int, default=6, help="budget of the context sweep")
    ap.add_argument("--context-at", type=int, default=64, help="context of the budget sweep")
    ap.add_argument("--new-tokens", type=int, default=None, help="tokens generated per run (tiny 64, real 16)")
    args = ap.parse_args()
    new = args.new_tokens or (16 if args.real else 64)
    rows = [run_config(args.real, c, args.budget_at, new) for c in args.contexts]
    rows += [run_config(args.real, args.context_at, b, new) for b in args.budgets if b != args.budget_at]
    print(f"runtime scaling, {'Qwen2.5-Coder 1.5B / 0.5B fp32' if args.real else 'tiny models'}, b = 1, K = {K}, "
          f"T = 1, {new} new tokens, one thread, medians over rounds")
    print(f"{'context':>8} {'budget':>7} {'rounds':>7} {'model ms':>9} {'overhead ms':>12} {'KV MB':>8} "
          f"{'q MB':>8} {'peak RSS MB':>12}")
    for r in sorted(rows, key=lambda r: (r["budget"], r["context"])):
        print(f"{r['context']:>8} {r['budget']:>7} {r['rounds']:>7} {r['model_ms']:>9.2f} {r['overhead_ms']:>12.2f} "
              f"{r['kv_bytes'] / 2**20:>8.1f} {r['q_bytes'] / 2**20:>8.1f} {r['peak_rss_mb']:>12.0f}")
    sweep = [r for r in rows if r["budget"] == args.budget_at]
    lo, hi = min(sweep, key=lambda r: r["context"]), max(sweep, key=lambda r: r["context"])
    change = hi["overhead_ms"] / lo["overhead_ms"] - 1
    print(f"overhead {lo['context']} -> {hi['context']} tokens: {change:+.0%} (goal: within +-10%)")


if __name__ == "__main__":
    main()
