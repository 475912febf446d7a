"""The latency probe: time every forward shape the planner asks about, on this host, in the runtime's own code.

A profile fitted to a handful of runs knows latency only at the shapes those runs used, and its smooth curve
guesses the rest (a fit's token exponent ends on a bound in half the calibrations; a 4-token verify was cheaper
than a 3-token one on one host). The probe measures instead, in two processes placed as a run places them (the
target on core 0, the draft on core 1, one thread each; or each on its CUDA device):

    target   kv.append + the verify's acceptance rule at rows in `batch` x tokens 1..max_k + 1 (AR, verifies)
    draft    kv.append + draft sampling at the same shapes (SD steps, the SSD glue) and one tree step
             (kv.tree_step + sampling) of 1 sequence x P branches for P in `branch_rows` (branch decode)
    both     the target's verifies while the draft loops one-row tree steps, then multi-row ones (the verify's
             slowdown beside a busy draft), and the draft's steps while the target loops each verify shape; every
             time beside the other model against the same shapes timed alone right before and right after it
    transfer one request + reply round trip through the runtime's channel (gloo / NCCL) with the reply's
             tokens and (T > 0) its q of b x K x vocab float32, per (b, K)
    idle     each model's one-row forwards right after a sleep of each of `idle_gaps_ms`, interleaved with the same
             forwards back to back (the other model idle): in SD each model sleeps while the other works, in SSD
             the target sleeps while a late reply comes and the draft while a long verify runs, and on some hosts
             a forward after a sleep costs more (a KVM guest's halted vCPU, a lower clock; +5-12% for the target
             and +27% for the draft's step on one Intel Xeon host, bench/idle_wake.py, which also shows a wait in
             the runtime's gloo receive costing what a sleep costs: +1.2% against +1.0% on another)

Every shape is timed `repeats` times, interleaved (round-robin over the shapes, after untimed warm-up passes: one,
or with CUDA graphs until a pass warms no graph, since a shape's first sighting runs eager and its second captures)
so that drift spreads over all of them; each row of the result keeps every sample. Rows sit at `context`
cached tokens (the workload's prompt + half its output), so the KV reads are a real run's.
The result is a probe file (ssd-probe/1) that `ssd-plan calibrate --probe` turns into measured latency tables
(ssd_sim.model.table).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.limits import MAX_BATCH, MAX_TOKENS
from ssd_sim.io.probe import MAX_SLOWDOWN, PROBE_SCHEMA
from ssd_sim.io.values import utc_now

from .models import ModelSpec
from .protocol import Ctl
from .protocol import ProbeCtl as P

Shape = tuple[str, int, int]  # (kind "append" | "tree", rows, tokens per row)
WARM_PASSES = 3  # untimed passes at most: a graph's shape runs eager once, is captured the next time, then replays


def check_idle_gaps(gaps) -> None:
    """ConfigError unless `gaps` are ascending sleeps in (0, 10000] ms (an empty list skips the after-idle forwards)."""
    if list(gaps) != sorted(set(gaps)) or any(not 0 < g <= 10_000 for g in gaps):
        raise ConfigError("probe.idle_gaps_ms", f"must be ascending sleeps in (0, 10000] ms like 5,50,500, got "
                                                f"{list(gaps)!r}")


@dataclass(frozen=True)
class ProbeGrid:
    """What the probe times (see the module docstring). Units: rows (sequences or branches), tokens."""

    batch: tuple[int, ...] = (1, 2, 4)  # sequences per forward
    max_k: int = 8  # verifies and glues of up to max_k + 1 tokens
    branch_rows: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # draft tree-step rows (b x budget)
    context: int = 256  # cached tokens per row
    repeats: int = 5  # timed samples per shape
    temperature: float = 0.0  # the sampling the verify and the draft do (greedy at 0)
    transfer_k: tuple[int, ...] = (1, 4, 8)  # K of the transfer round trips (x every batch size)
    idle_gaps_ms: tuple[float, ...] = (5.0, 50.0, 500.0)  # sleeps before the after-idle forwards (ms; () skips them)

    def __post_init__(self):
        for name, most in (("batch", MAX_BATCH), ("branch_rows", MAX_BATCH), ("transfer_k", MAX_BATCH)):
            vals = getattr(self, name)
            if not vals or any(int(v) != v or not 1 <= v <= most for v in vals):
                raise ConfigError(f"probe.{name}", f"must be integers in 1..{most}, got {list(vals)!r:.60}")
        if not 1 <= self.context <= MAX_TOKENS:
            raise ConfigError("probe.context", f"must be in 1..{MAX_TOKENS} tokens, got {self.context}")
        check_idle_gaps(self.idle_gaps_ms)
        if not 1 <= self.max_k <= 64:
            raise ConfigError("probe.max_k", f"must be in 1..64, got {self.max_k}")
        if self.repeats < 1 or self.context < 1:
            raise ConfigError("probe.repeats", "repeats and context must be >= 1")

    def target_shapes(self) -> list[Shape]:
        return [("append", b, t) for b in self.batch for t in range(1, self.max_k + 2)]

    def draft_shapes(self) -> list[Shape]:
        return self.target_shapes() + [("tree", r, 1) for r in self.branch_rows]

    def idle_shapes(self, role: str) -> list[Shape]:
        """The one-row forwards timed after a sleep: the target's verifies (short, middle, longest), the draft's
        one- and two-token steps (SD's draft, its first step after a round that accepted all K) and its longest glue."""
        if role == "target":
            return sorted({("append", 1, t) for t in (2, (self.max_k + 2) // 2 + 1, self.max_k + 1)})
        return sorted({("append", 1, t) for t in (1, 2, self.max_k + 1)})

    def capacity(self) -> int:
        """KV slots per row: the context, the longest append or tree step, scratch and slack."""
        return self.context + max(self.max_k + 1, max(self.branch_rows)) + 8


@dataclass
class ProbeResult:
    """What a probe measured: per role {shape: [ms, ...]}, slowdowns (fractions) and transfer ms per (b, K)."""

    grid: ProbeGrid
    target: dict[Shape, list[float]] = field(default_factory=dict)
    draft: dict[Shape, list[float]] = field(default_factory=dict)
    interference: dict = field(default_factory=dict)
    transfer: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    after_idle: dict = field(default_factory=dict)  # role -> _Bench.after_sleep's {"back": ..., "after": ...}
    models: dict = field(default_factory=dict)
    host: dict | None = None
    wall_s: float = 0.0
    started_at: str = ""  # UTC, as trace headers write it: where the latencies sit in time (model.drift's horizons)

    def to_dict(self) -> dict:
        """The probe file (ssd-probe/1, read by ssd_sim.io.probe): per key its median and every sample."""
        return {"schema": PROBE_SCHEMA, "grid": asdict(self.grid), "models": self.models, "host": self.host,
                "started_at": self.started_at, "wall_s": round(self.wall_s, 1), "target": _rows(self.target),
                "draft": _rows(self.draft),
                "interference": self.interference, "transfer": _rows(self.transfer),
                **({"after_idle": _idle_rows(self.after_idle)} if self.after_idle else {})}


def _rows(samples: dict[tuple, list[float]]) -> list[list]:
    """[*key, median ms, [ms, ...]] per key of `samples`."""
    return [[*key, statistics.median(v), [round(x, 4) for x in v]] for key, v in samples.items()]


def _idle_rows(after_idle: dict) -> dict:
    """{role: {"back_to_back": rows, "after_sleep": [[gap ms, rows], ...]}} with rows as _rows writes them."""
    return {role: {"back_to_back": _rows(d["back"]),
                   "after_sleep": [[gap, _rows(v)] for gap, v in d["after"].items()]}
            for role, d in after_idle.items()}


# ---- the worker side -------------------------------------------------------------------------------------
class _Bench:
    """One model at `grid.context` cached tokens per row, timing forwards of the runtime's own code paths."""

    def __init__(self, loaded, grid: ProbeGrid, role: str):
        import torch

        from .kv import StaticKV

        self.torch, self.grid, self.role = torch, grid, role
        self.model, self.vocab = loaded.model, loaded.vocab_size
        self.gen = torch.Generator(device=loaded.spec.device).manual_seed(0)
        self.kv = self._prefilled(StaticKV(self.model, rows=max(grid.batch), capacity=grid.capacity()))
        self.device = self.kv.device
        # a tree step decodes every active row's branches: one sequence x P branches needs a one-row cache
        self.tree_kv = self._prefilled(StaticKV(self.model, rows=1, capacity=grid.capacity())) if role == "draft" else None

    def _prefilled(self, kv):
        """Every row of `kv` holding `context` random tokens."""
        torch, n = self.torch, kv.max_rows
        kv.add_rows(n)
        ids = torch.randint(0, self.vocab, (n, self.grid.context), generator=torch.Generator().manual_seed(1))
        for lo in range(0, self.grid.context, 128):  # prefill in chunks: a long prompt at once costs memory only
            kv.append(ids[:, lo:lo + 128].tolist())
        return kv

    def forward(self, shape: Shape) -> float:
        """One forward of `shape` with its sampling, then roll back; ms (CUDA: synchronised)."""
        from .device import now_ms

        t0 = now_ms(self.device)
        kind, rows, tokens = shape
        if kind == "append":
            logits = self.kv.append([[1] * tokens] * rows, keep=tokens, rows=range(rows))
            self.kv.truncate([self.grid.context] * self.kv.n)
        else:
            torch = self.torch
            tok = torch.ones(1, rows, dtype=torch.long, device=self.device)
            real = torch.ones(1, rows, dtype=torch.bool, device=self.device)
            prefix = torch.full((1, rows), self.grid.context, dtype=torch.long, device=self.device)
            logits = self.tree_kv.tree_step(tok, real, prefix, 0)
        self._sample(logits, kind, tokens)
        return now_ms(self.device) - t0

    def _sample(self, logits, kind: str, tokens: int) -> None:
        """The sampling a run does after this forward: the acceptance rule (target) or a draft token per row."""
        from .sampling import draft_token, probs_from_logits, verify_greedy, verify_sample

        T, torch = self.grid.temperature, self.torch
        if self.role == "draft" or kind == "tree":
            draft_token(logits.reshape(-1, logits.shape[-1]), T, 1, 1.0, "top_f", self.gen)
            return
        drafts = torch.ones(logits.shape[0], tokens - 1, dtype=torch.long, device=self.device)
        if T == 0:
            verify_greedy(logits, drafts)
        else:
            p = probs_from_logits(logits, T)
            verify_sample(p, drafts, p[:, :-1], self.gen)

    def _warmups(self) -> int:
        """CUDA graph warm-up forwards of this bench's caches so far (StaticKV.graph_warmups; 0 without graphs)."""
        return sum(kv.graph_warmups() for kv in (self.kv, self.tree_kv) if kv is not None)

    def warm(self, shapes: list[Shape]) -> None:
        """Untimed passes over `shapes` until one warms no CUDA graph (at most WARM_PASSES): without graphs one pass;
        with them the eager first sighting, the capture, then a pass that replays. A timed forward is then a
        steady one, never a capture."""
        for _ in range(WARM_PASSES):
            before = self._warmups()
            for s in shapes:
                self.forward(s)
            if self._warmups() == before:
                return

    def time(self, shapes: list[Shape], repeats: int) -> dict[Shape, list[float]]:
        """Every shape `repeats` times, round-robin, after the untimed passes of `warm`."""
        self.warm(shapes)
        out: dict[Shape, list[float]] = {s: [] for s in shapes}
        for _ in range(repeats):
            for s in shapes:
                out[s].append(self.forward(s))
        return out

    def after_sleep(self, shapes: list[Shape], gaps_ms: list[float], repeats: int) -> dict:
        """{"back": {shape: [ms]}, "after": {gap ms: {shape: [ms]}}}: per repeat and shape, one forward after each
        sleep, then one right after that forward (back to back), so that drift spreads over both; after the untimed
        passes of `warm`."""
        self.warm(shapes)
        back: dict[Shape, list[float]] = {s: [] for s in shapes}
        after: dict[float, dict[Shape, list[float]]] = {g: {s: [] for s in shapes} for g in gaps_ms}
        for _ in range(repeats):
            for s in shapes:
                for g in gaps_ms:
                    time.sleep(g / 1e3)
                    after[g][s].append(self.forward(s))
                back[s].append(self.forward(s))
        return {"back": back, "after": after}

    def loop(self, shape: Shape, conn) -> list[float]:
        """Forwards of `shape` until the controller sends anything; their ms (after the untimed passes of `warm`)."""
        self.warm([shape])
        conn.send((P.LOOPING, None))
        out = []
        while not conn.poll():
            out.append(self.forward(shape))
        conn.recv()
        return out


def probe_worker(conn, spec: ModelSpec, role: str, grid: ProbeGrid, core: int | None, port: int, backend: str,
                 controller: int) -> None:
    """One probe process (rank 0 = target, 1 = draft): load, then serve the controller's commands."""
    from .workers import _become_worker, _error_line, _leave, _send, _use_device

    _become_worker(f"ssd-probe-{role}", controller)
    try:
        from .models import describe, load_model
        from .transport import Channel, init

        _use_device(spec.device, core)
        loaded = load_model(spec, role)
        bench = _Bench(loaded, grid, role)
        init(0 if role == "target" else 1, port, backend)
        chan = Channel(1 if role == "target" else 0, spec.device, backend)
        _send(conn, (Ctl.READY, describe(loaded)))
        _serve(conn, bench, chan, role)
    except ConfigError as e:
        _send(conn, (Ctl.CONFIG_ERROR, (e.field, str(e).split(": ", 1)[-1])))
    except Exception:  # noqa: BLE001 - the controller prints it in one line
        _send(conn, (Ctl.ERROR, _error_line()))
    _leave(healthy=True)


def _serve(conn, bench: _Bench, chan, role: str) -> None:
    while True:
        try:
            cmd, arg = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if cmd == P.EXIT:
            return
        if cmd == P.TIME:
            conn.send((P.TIMES, bench.time(*arg)))
        elif cmd == P.IDLE:
            conn.send((P.IDLED, bench.after_sleep(*arg)))
        elif cmd == P.LOOP:
            conn.send((P.LOOPED, bench.loop(arg, conn)))
        elif cmd == P.TRANSFER:
            conn.send((P.TRANSFER, _transfer(chan, role, bench, *arg)))


def _transfer(chan, role: str, bench: _Bench, cases: list[tuple[int, int]], repeats: int) -> dict:
    """Round trips: the target sends a request (keys of b sequences), the draft replies with b x K tokens and, at
    T > 0, q of b x K x vocab float32, as a SPEC / reply does. Target-side ms per (b, K)."""
    torch, out = bench.torch, {c: [] for c in cases}
    for _ in range(repeats + 1):  # the first pass warms the channel up
        for b, k in cases:
            if role == "target":
                t0 = time.perf_counter()
                chan.send({"keys": [(i, k, 1) for i in range(b)]})
                chan.recv(None)
                out[(b, k)].append((time.perf_counter() - t0) * 1e3)
            else:
                chan.recv(None)
                q = torch.zeros(b, k, bench.vocab) if bench.grid.temperature > 0 else None
                chan.send({"tokens": torch.zeros(b, k, dtype=torch.long), "q": q})
    return {c: v[1:] for c, v in out.items()}


# ---- the controller side ---------------------------------------------------------------------------------
INTERFERENCE_ROWS = 8  # the draft's multi-row tree step while the target is timed (rows beside a verify)


class _Pair:
    """The two probe processes and their pipes (killed on any exit path)."""

    def __init__(self, target: ModelSpec, draft: ModelSpec, grid: ProbeGrid, pin: bool, timeout_s: float):
        from .run import worker_context
        from .transport import backend_for, free_port

        ctx, me, port = worker_context(), os.getpid(), free_port()
        backend = backend_for(target.device, draft.device)
        self.timeout_s, self.conns, self.procs = timeout_s, {}, {}
        for role, spec, core in (("target", target, 0), ("draft", draft, 1)):
            mine, theirs = ctx.Pipe()
            pinned = core if pin and spec.device == "cpu" else None
            self.procs[role] = ctx.Process(target=probe_worker, args=(theirs, spec, role, grid, pinned, port, backend, me),
                                           daemon=True, name=f"ssd-probe-{role}")
            self.conns[role] = mine
        for p in self.procs.values():
            p.start()
        self.info = {role: self.expect(role, Ctl.READY) for role in self.procs}

    def send(self, role: str, cmd: str, arg=None) -> None:
        self.conns[role].send((cmd, arg))

    def expect(self, role: str, kind: str):
        """The next message of `role`, which must be `kind`; a worker's failure is raised as one line."""
        conn = self.conns[role]
        if not conn.poll(self.timeout_s):
            raise RuntimeError(f"the {role} probe process did not answer within {self.timeout_s:g} s")
        try:
            got, payload = conn.recv()
        except (EOFError, OSError):
            raise RuntimeError(f"the {role} probe process died (exit code {self.procs[role].exitcode})") from None
        if got == Ctl.CONFIG_ERROR:
            raise ConfigError(*payload)
        if got != kind:
            raise RuntimeError(f"the {role} probe process failed: {payload}")
        return payload

    def close(self) -> None:
        for role, p in self.procs.items():
            if p.is_alive():
                try:
                    self.send(role, P.EXIT)
                except (BrokenPipeError, OSError):
                    pass
        for p in self.procs.values():
            p.join(10.0)
            if p.is_alive():
                p.kill()
                p.join()


def run_probe(target: ModelSpec, draft: ModelSpec, grid: ProbeGrid, pin: bool = True, timeout_s: float = 1800.0,
              say=print) -> ProbeResult:
    """Time the grid's shapes on the target and the draft (each alone), both at once, and the transfer."""
    from .device import host_record

    t0, started_at = time.monotonic(), utc_now()
    pair = _Pair(target, draft, grid, pin, timeout_s)
    try:
        res = ProbeResult(grid, models={r: pair.info[r] for r in ("target", "draft")}, started_at=started_at)
        say(f"probe: target alone, {len(grid.target_shapes())} shapes x {grid.repeats}")
        res.target = _timed(pair, "target", grid.target_shapes(), grid.repeats)
        say(f"probe: draft alone, {len(grid.draft_shapes())} shapes x {grid.repeats}")
        res.draft = _timed(pair, "draft", grid.draft_shapes(), grid.repeats)
        say("probe: both at once (interference)")
        res.interference = _interference(pair, grid)
        say("probe: transfer round trips")
        cases = [(b, k) for b in grid.batch for k in grid.transfer_k]
        for role in ("target", "draft"):
            pair.send(role, P.TRANSFER, (cases, grid.repeats))
        res.transfer = pair.expect("target", P.TRANSFER)
        pair.expect("draft", P.TRANSFER)
        if grid.idle_gaps_ms:
            say(f"probe: forwards after sleeps of {', '.join(f'{g:g}' for g in grid.idle_gaps_ms)} ms")
            for role in ("target", "draft"):  # one at a time: the other model idles, as in SD
                pair.send(role, P.IDLE, (grid.idle_shapes(role), list(grid.idle_gaps_ms), grid.repeats))
                res.after_idle[role] = pair.expect(role, P.IDLED)
    finally:
        pair.close()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    res.host = host_record({r: str(res.models[r].get("kernels", "")) for r in ("target", "draft")}, cores).to_dict()
    res.wall_s = time.monotonic() - t0
    return res


def _interference(pair: _Pair, grid: ProbeGrid) -> dict:
    """Slowdown fractions (median ratio - 1): the verify beside one-row and multi-row draft steps, the draft's
    steps and glue beside each verify shape looping. Each time beside the other model is set against the same shapes
    timed alone right before and right after it (`_bracketed`), so drift over the probe's minutes is not read as
    interference (on one Zen 4 guest the draft's forwards alone moved 4-10% in two minutes); "pairs" keeps every
    (busy shape, timed shape, ratio)."""
    verifies = sorted({("append", 1, t) for t in (2, (grid.max_k + 2) // 2 + 1, grid.max_k + 1)})
    rows = max([r for r in grid.branch_rows if r <= INTERFERENCE_ROWS] or [min(grid.branch_rows)])
    out: dict = {"verify_shapes": [list(s) for s in verifies], "pairs": []}
    for name, busy in (("one_row", ("tree", 1, 1)), ("rows", ("tree", rows, 1))):
        ratios = _bracketed(pair, "draft", busy, "target", verifies, grid.repeats)
        out[name] = _slowdown(ratios)
        out[f"{name}_draft_shape"] = list(busy)
        out["pairs"] += [[list(busy), list(s), r] for s, r in ratios.items()]
    steps = [("tree", 1, 1), ("tree", rows, 1), ("append", 1, grid.max_k + 1)]
    ratios = {}
    for v in verifies:  # the draft beside every verify shape: a short verify loops more often than a long one
        beside = _bracketed(pair, "target", v, "draft", steps, grid.repeats)
        ratios |= {(v, s): r for s, r in beside.items()}
        out["pairs"] += [[list(v), list(s), r] for s, r in beside.items()]
    out["draft"] = _slowdown(ratios)
    out["draft_shapes"] = [list(s) for s in steps]
    return out


def _bracketed(pair: _Pair, looper: str, shape: Shape, timed: str, shapes: list[Shape], repeats: int) -> dict:
    """{timed shape: its median time while `looper` loops `shape`, over its median alone right before and after}."""
    before = _timed(pair, timed, shapes, repeats)
    beside = _while_looping(pair, looper, shape, timed, shapes, repeats)
    after = _timed(pair, timed, shapes, repeats)
    return {s: statistics.median(v) / statistics.median(before[s] + after[s]) for s, v in beside.items()}


def _timed(pair: _Pair, role: str, shapes: list[Shape], repeats: int) -> dict[Shape, list[float]]:
    """{shape: `repeats` ms} of `role`'s forwards of `shapes` (P.TIME), whatever the other process is doing."""
    pair.send(role, P.TIME, (shapes, repeats))
    return pair.expect(role, P.TIMES)


def _while_looping(pair: _Pair, looper: str, shape: Shape, timed: str, shapes: list[Shape], repeats: int):
    pair.send(looper, P.LOOP, shape)
    pair.expect(looper, P.LOOPING)
    beside = _timed(pair, timed, shapes, repeats)
    pair.send(looper, Ctl.STOP)
    pair.expect(looper, P.LOOPED)
    return beside


def _slowdown(ratios: dict) -> float:
    """The median of the ratios (time beside the other model / time alone) - 1, at least 0; RuntimeError beyond
    MAX_SLOWDOWN (the host was busy with something else: no file that load_probe would refuse)."""
    slowdown = max(statistics.median(ratios.values()) - 1.0, 0.0)
    if slowdown > MAX_SLOWDOWN:
        raise RuntimeError(f"a forward ran {slowdown + 1:.1f}x slower beside the other model than alone: something "
                           "else is using these cores; probe again with nothing else running")
    return slowdown
