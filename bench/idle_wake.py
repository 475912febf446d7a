"""Does a forward run slower right after its core idled? One table: the same forward back to back, after a sleep,
after a busy wait of the same length, and after a wait in the runtime's gloo receive while a peer works.

    .venv/bin/python bench/idle_wake.py                          # target, 1 x 3 tokens, 0.6 s gaps
    .venv/bin/python bench/idle_wake.py --role draft --tokens 1 --gap-ms 200 --blocks 8

In AR (and in the probe's timing loops) the target runs forward after forward; in SD it sleeps in the channel's
receive while the draft drafts, then verifies; in SSD it sleeps only while it waits for a late reply. If the core
comes back slow from a sleep (a KVM guest's halted vCPU, a lower clock), the verifies of SD and SSD cost more than
the probe's table, which is timed busy. This measures that cost on this host: the model loaded in this process on
core 0 with one thread (as the runtime pins it), at `--context` cached tokens, the cases interleaved in blocks
(each block: --per-block forwards of each case), after a warm-up. The probe prices the wake by timing forwards after
time.sleep; the fourth case checks that a real wait costs the same: this process sends a request through the
runtime's channel (transport.Channel over gloo) to a peer process on core 1, which busy-works for the gap (as the
draft drafts) and replies, then runs the forward (--no-gloo leaves it out). Needs `ssd-run fetch-models`; not part of
CI.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ssd_runtime.models import load_model
from ssd_runtime.probe import ProbeGrid, _Bench
from ssd_runtime.specs import ModelSpec
from ssd_runtime.transport import Channel, free_port, init, pin_cpu

CACHE = Path.home() / ".cache" / "ssd" / "models"
MODELS = {"target": CACHE / "qwen-coder-1.5b" / "hf", "draft": CACHE / "qwen-coder-0.5b" / "hf"}


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _peer(port: int, gap_s: float) -> None:
    """The other rank: on core 1, answer each request after gap_s of busy work, until a request of None."""
    pin_cpu(1)
    init(1, port, "gloo")
    channel = Channel(0)
    while channel.recv() is not None:
        _spin(gap_s)
        channel.send(1)


class GlooPeer:
    """_peer in its own process; calling it is one wait: a request, then the peer's reply after its gap of work."""

    def __init__(self, gap_s: float):
        port = free_port()
        multiprocessing.get_context("spawn").Process(target=_peer, args=(port, gap_s), daemon=True).start()
        init(0, port, "gloo")
        self.channel = Channel(1)

    def __call__(self) -> None:
        self.channel.send(0)
        self.channel.recv(timeout_s=60.0)  # as the runtime's target waits for a reply, with a timeout

    def close(self) -> None:
        self.channel.send(None)


def measure(bench: _Bench, shape: tuple, gap_s: float, blocks: int, per_block: int,
            wait_for_peer: Callable[[], None] | None = None) -> dict[str, list[float]]:
    """ms of `shape`'s forward: back to back, after time.sleep(gap_s), after a busy wait of gap_s and (with
    wait_for_peer: a blocking receive of a reply that a peer sends after gap_s) after that wait; interleaved."""
    out: dict[str, list[float]] = {"back to back": [], "after a sleep": [], "after a busy wait": []}
    if wait_for_peer is not None:
        out["after a gloo receive"] = []
        wait_for_peer()
    for _ in range(3):
        bench.forward(shape)
    for _ in range(blocks):
        out["back to back"] += [bench.forward(shape) for _ in range(per_block)]
        for _ in range(per_block):
            time.sleep(gap_s)
            out["after a sleep"].append(bench.forward(shape))
        for _ in range(per_block):
            _spin(gap_s)
            out["after a busy wait"].append(bench.forward(shape))
        if wait_for_peer is not None:
            for _ in range(per_block):
                wait_for_peer()
                out["after a gloo receive"].append(bench.forward(shape))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=sorted(MODELS), default="target")
    ap.add_argument("--model", help="model directory (default: the fetched Qwen2.5-Coder of --role)")
    ap.add_argument("--tokens", type=int, default=3, help="tokens per forward (default 3: a K = 2 verify)")
    ap.add_argument("--context", type=int, default=40, help="cached tokens (default 40)")
    ap.add_argument("--gap-ms", type=float, default=600.0, help="idle gap before each forward (default 600 ms: "
                                                                "about a K = 2 draft of the fp32 0.5B on 2-core hosts)")
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--per-block", type=int, default=3)
    ap.add_argument("--no-gloo", action="store_true", help="leave out the wait in a gloo receive (no peer process)")
    args = ap.parse_args()
    wait_for_peer = None if args.no_gloo else GlooPeer(args.gap_ms / 1e3)
    pin_cpu(0)
    path = Path(args.model) if args.model else MODELS[args.role]
    loaded = load_model(ModelSpec(path=str(path)), args.role)
    grid = ProbeGrid(batch=(1,), max_k=max(args.tokens - 1, 1), context=args.context, repeats=1)
    res = measure(_Bench(loaded, grid, args.role), ("append", 1, args.tokens), args.gap_ms / 1e3, args.blocks,
                  args.per_block, wait_for_peer)
    if wait_for_peer is not None:
        wait_for_peer.close()
    base = statistics.median(res["back to back"])
    table = Table(title=f"{args.role} forward, 1 x {args.tokens} tokens at {args.context} cached, gaps of "
                        f"{args.gap_ms:g} ms ({args.blocks} interleaved blocks of {args.per_block})")
    for col in ("case", "median ms", "mean ms", "vs back to back"):
        table.add_column(col, justify="right")
    for case, ms in res.items():
        table.add_row(case, f"{statistics.median(ms):.1f}", f"{statistics.fmean(ms):.1f}",
                      f"{statistics.median(ms) / base - 1:+.1%}")
    Console(width=110).print(table)


if __name__ == "__main__":
    main()
