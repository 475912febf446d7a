"""GPU check of the runtime at real model shapes: forwards vs the roofline, overhead, syncs, AR / SD / SSD tok/s, exactness.

    bash bench/gpu_check.sh                                   # CUDA (bf16, real shapes); under 8 minutes
    bash bench/gpu_check.sh --out $OUT/gpu_check.jsonl        # keep the rows somewhere else
    .venv/bin/python bench/gpu_check.py --device cpu --quick  # the CPU fallback (CI): scaled shapes, ~30 s
    .venv/bin/python bench/gpu_check.py --sections forward,toks --models qwen2.5-1.5b   # a part of it

Offline and self-contained: installs nothing, downloads nothing (HF_HUB_OFFLINE=1). The models are random weights of
real shapes built in-process from a config (ssd_runtime.families.tiny_model through ModelSpec.tiny_spec and
load_model): Qwen2.5-1.5B (target), Qwen2.5-0.5B (draft) and Llama-3.2-1B, in bf16 on CUDA. The real checkpoints tie
their input and output embeddings, these do not: the copy costs memory only (a forward gathers b rows of the input
table and reads the whole output one), so the weight bytes read per forward are those of the real model. On the CPU
(--device cpu, the default without CUDA) every shape is scaled down (hidden / 8, fewer layers, vocab 4,096) and runs
in float32, one torch thread in this process (as bench/runtime_scaling.py; ssd-run's CPU workers have one each).

Sections, in this order; by the end of each, at most 6 / 30 / 50 / 100% of --max-seconds is spent (time a section
leaves over goes to the next; one that runs out is cut by SIGALRM, its rows so far stay, the rest say "skipped");
with --sections, the shares of those asked for are scaled to fill --max-seconds.
"Compiled" is --compile (default cuda-graphs on CUDA: ssd_runtime.graphs; off on the CPU); on CUDA each section runs
it before eager (eager is host-bound there, 3-9x slower: its rows matter less if time runs out).
  exact     greedy AR == SD == SSD on the tiny pair (ssd_runtime.specs TINY_TARGET / TINY_DRAFT, float32, target
            and draft in this process through transport.LocalLink; eager and compiled), and a chi-square test at
            T = 1 of the verify rule on the device: the first token emitted after a proposal of K Saguaro-sampled
            draft tokens must follow the target's p exactly (a verifier fed the wrong q must fail the same test).
            On the CPU the chi-square runs with fewer samples.
  forward   one runtime forward (StaticKV.append over a prompt of --context tokens, device synchronised before and
            after) per shape at b = 1 and 8 for 1 and K + 1 tokens, eager and compiled (the first --models
            shape both ways first), against the weight-bytes roofline: weight bytes
            read per forward / HBM bandwidth (the GPU's datasheet number in ssd_sim.model.hardware, matched by
            torch.cuda.get_device_name; on the CPU a measured memcpy bandwidth, read + write).
  overhead  target and draft in this process (transport.LocalLink: the draft replies, then speculates), as in
            bench/runtime_scaling.py: per round, overhead = round wall time - time inside the models' forwards
            (StaticKV._run timed, device synchronised), median over the rounds of at most 32 new tokens, eager and
            compiled, AR / SD / SSD at b = 1 and 8, forced acceptance 0.7; host syncs per round from
            ssd_runtime.syncs.SYNCS (both sides in this process); launches per round (ops the host launches one
            by one outside graph replays, ssd_runtime.opcount; counted in an untimed pass after the timed ones).
  toks      ssd-run's two processes (Session: target on cuda:0, draft on cuda:1 where there are two GPUs, else both
            on cuda:0; on the CPU one core each): AR, SD and SSD decode tok/s (the runtime's summary, all
            sequences) at forced acceptance 0.7 and 1.0 (TargetConfig.forced_acceptance), b = 1 and 8, greedy, EOS
            ignored. SSD uses the fast backup: under forced acceptance a proposal's content does not matter, so a
            miss served by random tokens costs what a cache hit does and the timing is that of a pipeline that
            always hits (random weights would otherwise never hit). One Session per compile mode. Its line "graph
            warm-up rounds" counts the rounds the trace marks as CUDA graph warm-up (RoundRecord.warmup) and those
            io.sanity calls stalled, in the first warm-up pass and in the timed runs (FAIL if a timed round is
            marked: warm caches must capture nothing).
Every measurement is warmed up first (untimed; with CUDA graphs twice, at full length, so that every shape the timed
runs meet is captured before them), repeats are interleaved across configurations, medians reported.
Each measurement is one JSON line in --out as soon as it exists (default runs/gpu_check.jsonl, git-ignored); the
table is built from those rows, so Ctrl-C / SIGTERM prints what was measured and exits 130 / 143.

Exit status: 0 when every check that ran passed (exactness included), 1 when one failed or a section raised, 2 on
bad input (one line naming the flag).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the project runs from this folder (bench/gpu_check.sh installs nothing)
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from ssd_runtime.specs import COMPILE as COMPILE_MODES  # noqa: E402  (torch-free)
from ssd_runtime.specs import GRAPH_MODES  # noqa: E402

PROG = "gpu_check"
SECTIONS = ("exact", "forward", "overhead", "toks")
# cumulative share of --max-seconds by the end of each section (time a section leaves over goes to the next)
SECTION_END = {"exact": 0.06, "forward": 0.30, "overhead": 0.50, "toks": 1.0}
ACCEPTANCES = (0.7, 1.0)
BATCHES = (1, 8)
ALPHA = 1e-3
MAX_POSITIONS = 4096

# Real shapes (the public config.json of each checkpoint; tie_word_embeddings is true in all three).
MODELS = {
    "qwen2.5-1.5b": {"family": "qwen2", "hidden": 1536, "layers": 28, "heads": 12, "kv_heads": 2,
                     "intermediate": 8960, "vocab": 151936},
    "qwen2.5-0.5b": {"family": "qwen2", "hidden": 896, "layers": 24, "heads": 14, "kv_heads": 2,
                     "intermediate": 4864, "vocab": 151936},
    "llama-3.2-1b": {"family": "llama", "hidden": 2048, "layers": 16, "heads": 32, "kv_heads": 8,
                     "intermediate": 8192, "vocab": 128256},
}
TARGET, DRAFT = "qwen2.5-1.5b", "qwen2.5-0.5b"
CPU_VOCAB = 4096


def section_ends(sections: tuple[str, ...]) -> dict[str, float]:
    """Cumulative share of --max-seconds by the end of each section run: SECTION_END's shares of the sections
    asked for, scaled to sum to 1 (a run of forward alone gets all of it, exact + forward 20% / 80%)."""
    ends = list(SECTION_END.values())
    shares = {name: end - prev for name, end, prev in zip(SECTION_END, ends, [0.0, *ends[:-1]], strict=True)}
    total = sum(shares[name] for name in sections)
    out, acc = {}, 0.0
    for name in SECTIONS:
        if name in sections:
            acc += shares[name] / total
            out[name] = acc
    return out


def scaled(shape: dict) -> dict:
    """The CPU fallback's version of a shape: heads and KV heads kept, hidden and intermediate / 8, layers / 7
    (at least 2), vocab 4,096 (e.g. Qwen2.5-1.5B -> hidden 192, 4 layers)."""
    return {**shape, "hidden": shape["hidden"] // 8, "intermediate": shape["intermediate"] // 8,
            "layers": max(2, shape["layers"] // 7), "vocab": CPU_VOCAB}


class Stopped(BaseException):
    """SIGINT / SIGTERM: print what was measured and leave."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class OutOfTime(BaseException):
    """A section's share of --max-seconds is spent (raised by SIGALRM, so a long compile or job is cut too)."""


class BadInput(Exception):
    """A flag's value that cannot work; the message names the flag."""


# ---- the run's context ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Ctx:
    """Settings of one run (from the flags) and where its rows go."""

    device: str
    dtype: str
    compiles: tuple[str, ...]  # the compiled modes measured next to eager (("off",): eager only)
    k: int
    context: int
    new_tokens: int
    repeats: int
    inner: int  # forwards timed back to back per sample (the sample is their mean)
    models: tuple[str, ...]
    out: Path
    rows: list[dict] = dataclasses.field(default_factory=list)
    t0: float = dataclasses.field(default_factory=time.monotonic)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def compile(self) -> str:
        """The compiled modes asked for, as the header and title print them ("cuda-graphs,inductor-graphs")."""
        return ",".join(self.compiles)

    @property
    def compile_modes(self) -> list[str]:
        """Eager and the compiled modes asked for; on CUDA the compiled ones first, in the order given (eager's
        forwards are bound by the host there, 3-9x slower: its numbers matter less if the budget runs out)."""
        compiled = [c for c in self.compiles if c != "off"]
        return [*compiled, "off"] if self.cuda else ["off", *compiled]

    def shape(self, name: str) -> dict:
        return MODELS[name] if self.cuda else scaled(MODELS[name])

    def emit(self, row: dict) -> dict:
        """Record a row: kept in memory for the table and appended to --out at once (one JSON line)."""
        row = {**row, "t_s": round(time.monotonic() - self.t0, 2)}
        self.rows.append(row)
        with self.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        return row


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# ---- models -------------------------------------------------------------------------------------------------
def model_spec(ctx: Ctx, shape: dict, compile_mode: str = "off", seed: int = 0, dtype: str | None = None,
               device: str | None = None, init_std: float = 0.02):
    """ModelSpec of a random model of `shape` (tiny_spec), on the run's device and dtype, compiled as asked."""
    from ssd_runtime.specs import ModelSpec

    kw = {"max_positions": MAX_POSITIONS, "seed": seed, "init_std": init_std, **shape}
    return dataclasses.replace(ModelSpec.tiny_spec(**kw), device=device or ctx.device, dtype=dtype or ctx.dtype,
                               compile=compile_mode)


def load(spec, role: str = "model", on_device: bool = True):
    """load_model(spec); on CUDA (with on_device) the random weights are drawn on the device (seconds instead of
    a minute on the CPU for 1.5B parameters), falling back to the CPU build if that fails. The tiny pair is built
    on the CPU (on_device=False): its draft is the target plus noise from a CPU generator."""
    import torch

    from ssd_runtime.models import load_model

    if on_device and spec.device.startswith("cuda"):
        try:
            with torch.device(spec.device):
                return load_model(spec, role)
        except Exception:  # noqa: BLE001 - e.g. a code path that wants CPU tensors: build as load_model does
            torch.cuda.empty_cache()
    return load_model(spec, role)


def weight_bytes(lm) -> int:
    """Bytes of the weights one forward reads: every parameter once, except the input embedding table (a forward
    gathers only its rows) unless it is also the output projection. Counted from load_model's parameter count
    (taken before CPU linears are prepacked into buffers) where it has one."""
    import torch

    model = lm.model
    params = lm.extra.get("parameters") or sum(p.numel() for p in model.parameters())
    size = torch.empty(0, dtype=getattr(torch, lm.spec.dtype)).element_size()
    cfg = model.config.get_text_config()
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    return (params - (0 if tied else cfg.vocab_size * cfg.hidden_size)) * size


def bandwidth(device: str) -> tuple[float | None, str]:
    """(bytes/s, source): the GPU's HBM bandwidth from ssd_sim.model.hardware, or the CPU's measured memcpy."""
    import torch

    if device.startswith("cuda"):
        from ssd_sim.model.hardware import GPUS

        name = torch.cuda.get_device_name(torch.device(device))
        spec = match_gpu(name, GPUS)
        if spec is None:
            return None, f"{name} is not in ssd_sim.model.hardware.GPUS: no roofline"
        return spec.hbm_tb_s * 1e12, f"{name} = {spec.name}, {spec.hbm_tb_s:g} TB/s (datasheet)"
    x = torch.ones(2**25)  # 128 MiB
    y = torch.empty_like(x)
    y.copy_(x)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        y.copy_(x)
        times.append(time.perf_counter() - t0)
    bw = 2 * x.numel() * x.element_size() / min(times)
    return bw, f"CPU memcpy measured, {bw / 1e9:.1f} GB/s (read + write)"


def match_gpu(name: str, gpus: dict):
    """The GpuSpec whose family is in the CUDA device name ('NVIDIA H100 PCIe' -> h100-pcie, 'NVIDIA H200' ->
    h200), None when none is."""
    flat = "".join(c for c in name.lower() if c.isalnum())
    found = [g for key, g in gpus.items() if key.split("-")[0] in flat]
    if len(found) > 1:  # the H100 variants
        pcie = [g for g in found if "pcie" in g.name]
        found = pcie if "pcie" in flat else [g for g in found if g not in pcie]
    return found[0] if found else None


# ---- timing helpers -----------------------------------------------------------------------------------------
class RunClock:
    """Time inside the runtime's model forwards (ms, device synchronised at both ends): StaticKV._run (the call of
    the model by every forward of the runtime) is wrapped at class level for the duration, which works for eager
    and compiled models alike."""

    def __init__(self, device: str):
        self.device, self.total_ms = device, 0.0
        self._orig = None

    def __enter__(self) -> RunClock:
        from ssd_runtime.kv import StaticKV

        orig, clock = StaticKV._run, self

        def timed_run(kv, *args, **kwargs):
            sync(clock.device)
            t0 = time.perf_counter()
            out = orig(kv, *args, **kwargs)
            sync(clock.device)
            clock.total_ms += (time.perf_counter() - t0) * 1e3
            return out

        self._orig, StaticKV._run = orig, timed_run
        return self

    def __exit__(self, *exc) -> None:
        from ssd_runtime.kv import StaticKV

        StaticKV._run = self._orig


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise OutOfTime in this (main) thread after `seconds`."""
    if seconds <= 0:
        raise OutOfTime()

    def ring(signum, frame):
        raise OutOfTime()

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (length,), generator=g).tolist() for _ in range(n)]


def plan_for(mode: str, b: int, k: int):
    """The plans of every section: SD K; SSD K with fan-out 2, 2, 1, ... and the fast backup (see the docstring)."""
    from ssd_sim.plan.plan import Plan

    if mode == "ar":
        return Plan(num_speculative_tokens=k, batch_size=b, mode="ar")
    if mode == "sd":
        return Plan(num_speculative_tokens=k, batch_size=b, mode="sd")
    return Plan(num_speculative_tokens=k, fan_out=(2, 2) + (1,) * (k - 1), batch_size=b, mode="ssd", backup="fast")


def generate_local(target_model, draft_model, vocab: int, plan, new_tokens: int, ps: list[list[int]],
                   forced: float | None = None, on_round: Callable | None = None):
    """Target.generate with the draft in this process (LocalLink); returns (outputs, Target). `on_round` wraps
    Target.round (see overhead)."""
    from ssd_runtime.draft import Drafter
    from ssd_runtime.target import Target, TargetConfig
    from ssd_runtime.transport import LocalLink

    link = None
    if str(getattr(plan.mode, "value", plan.mode)) != "ar":
        link = LocalLink(lambda msg: Drafter(draft_model, plan, 0, vocab))
        link.job({})
    runner = Target(target_model, TargetConfig(plan, new_tokens, seed=0, forced_acceptance=forced), link)
    if on_round is not None:
        runner.round = on_round(runner.round)
    return runner.generate(ps), runner


# ---- section: exactness ---------------------------------------------------------------------------------------
def section_exact(ctx: Ctx) -> None:
    """Greedy equality in each compile mode (compile_modes' order), the chi-square between them."""
    first, *rest = ctx.compile_modes
    greedy_equality(ctx, first)
    n = 200_000 if ctx.cuda else 20_000
    case = f"verify rule at T = 1: chi-square on {ctx.device}"
    try:
        p_ok, p_bad = verify_chi2(ctx.device, n, ctx.k)
        status = "ok" if p_ok > ALPHA else "FAIL"
        ctx.emit({"section": "exact", "case": case, "status": status, "p_value": p_ok, "p_value_broken": p_bad,
                  "samples": n, "detail": f"p = {p_ok:.3g} over {n:,} samples (V = 32, K = {ctx.k}, Saguaro C = 0.5);"
                                          f" a verifier given the unscaled q: p = {p_bad:.2g}"
                                          + ("" if p_bad < ALPHA else " (not detected at this size)")})
    except OutOfTime:
        raise
    except Exception as e:  # noqa: BLE001
        ctx.emit({"section": "exact", "case": case, "status": "FAIL", "detail": one_line(e)})
    for cmode in rest:
        greedy_equality(ctx, cmode)


def greedy_equality(ctx: Ctx, cmode: str) -> None:
    """AR, SD and SSD outputs of the tiny pair (float32, on the run's device) must be identical."""
    from ssd_runtime.specs import TINY_DRAFT, TINY_TARGET

    ps = [p[:12 + 2 * i] for i, p in enumerate(prompts(3, 16, TINY_TARGET["vocab"], seed=5))]
    new = 24
    case = "greedy AR == SD == SSD, tiny pair" + ("" if cmode == "off" else f", compile={cmode}")
    try:
        t = load(model_spec(ctx, TINY_TARGET, cmode, dtype="float32"), "target", on_device=False)
        d = load(model_spec(ctx, TINY_DRAFT, cmode, dtype="float32"), "draft", on_device=False)
        outs = {}
        for mode in ("ar", "sd", "ssd"):
            plan = plan_for(mode, 2, ctx.k if mode != "ssd" else 3).replace(backup="jit")
            outs[mode], _ = generate_local(t.model, d.model, t.vocab_size, plan, new, ps)
        diff = [f"{m} differs from ar on prompt {i}" for m in ("sd", "ssd")
                for i, (a, b) in enumerate(zip(outs["ar"], outs[m], strict=True)) if a != b]
        bad_len = [m for m, o in outs.items() if [len(x) for x in o] != [new] * len(ps)]
        status = "ok" if not diff and not bad_len else "FAIL"
        detail = (f"{len(ps)} prompts x {new} tokens, b = 2, SD K = {ctx.k}, SSD K = 3 (jit backup): identical"
                  if status == "ok" else "; ".join(diff + [f"{m}: wrong token count" for m in bad_len]))
        ctx.emit({"section": "exact", "case": case, "status": status, "detail": detail})
    except OutOfTime:
        raise
    except Exception as e:  # noqa: BLE001 - one FAIL row
        ctx.emit({"section": "exact", "case": case, "status": "FAIL", "detail": one_line(e)})


def verify_chi2(device: str, n: int, k: int, vocab: int = 32, seed: int = 0) -> tuple[float, float]:
    """p-values of the chi-square test of the first token the verify rule emits (s_1 if accepted, else the bonus)
    against the target's p_0: with the q the drafts were sampled from (must pass), and with the unscaled q (a
    biased verifier, should fail). n rows verified at once on the device."""
    import torch
    from scipy.stats import chisquare

    from ssd_runtime.sampling import saguaro_probs, sample, verify_sample

    g = torch.Generator(device=device).manual_seed(seed)
    zp = torch.randn(k + 1, vocab, generator=g, device=device) * 1.5
    zq = zp[:k] + torch.randn(k, vocab, generator=g, device=device)
    p = torch.softmax(zp, dim=-1)
    plain = torch.softmax(zq, dim=-1)
    q = saguaro_probs(plain, 2, 0.5)
    P, Q = p.expand(n, k + 1, vocab), q.expand(n, k, vocab)
    drafts = sample(Q, g)
    expected = (p[0].double() * n).cpu()
    pvals = []
    for q_told in (Q, plain.expand(n, k, vocab)):
        accepted, bonus = (torch.as_tensor(x, device=device) for x in verify_sample(P, drafts, q_told, g))
        first = torch.where(accepted > 0, drafts[:, 0], bonus)
        counts = torch.bincount(first, minlength=vocab).double().cpu()
        big = expected >= 5
        obs = torch.cat([counts[big], counts[~big].sum()[None]])
        exp = torch.cat([expected[big], expected[~big].sum()[None]])
        keep = exp > 0
        obs, exp = obs[keep], exp[keep]
        pvals.append(float(chisquare(obs.numpy(), (exp * obs.sum() / exp.sum()).numpy()).pvalue))
    return pvals[0], pvals[1]


# ---- section: forwards ----------------------------------------------------------------------------------------
def section_forward(ctx: Ctx, bw: float | None) -> None:
    """The first shape (the target) in both modes, then the others in each mode (compile_modes' order): the rows
    that matter most come first if the budget runs out."""
    first, rest = ctx.models[0], ctx.models[1:]
    phases = [(cmode, first) for cmode in ctx.compile_modes] + [(cmode, m) for cmode in ctx.compile_modes
                                                                for m in rest]
    for cmode, name in phases:
        try:
            forward_model(ctx, name, cmode, bw)
        except OutOfTime:
            raise
        except Exception as e:  # noqa: BLE001
            ctx.emit({"section": "forward", "case": f"{name} compile={cmode}", "status": "FAIL",
                      "detail": one_line(e)})
        free(ctx)  # the model of the phase is gone with forward_model's frame


def forward_model(ctx: Ctx, name: str, cmode: str, bw: float | None) -> None:
    import torch

    from ssd_runtime.kv import SCRATCH, StaticKV

    t_load = time.monotonic()
    lm = load(model_spec(ctx, ctx.shape(name), cmode, seed=1))
    load_s = time.monotonic() - t_load
    wb = weight_bytes(lm)
    roof = wb / bw * 1e3 if bw else None
    widths = (1, ctx.k + 1)
    kvs = {}
    for b in BATCHES:
        kv = StaticKV(lm.model, b, SCRATCH + ctx.context + ctx.k + 8)
        kv.append(prompts(b, ctx.context, lm.vocab_size, seed=b), keep=1, rows=kv.add_rows(b))
        kvs[b] = (kv, list(kv.lengths))

    def once(b: int, w: int) -> float:
        kv, lengths = kvs[b]
        sync(ctx.device)
        t0 = time.perf_counter()
        for _ in range(ctx.inner):
            kv.append([[7] * w] * b, keep=w)
            kv.truncate(lengths)
        sync(ctx.device)
        return (time.perf_counter() - t0) * 1e3 / ctx.inner

    with torch.no_grad():
        t_warm = time.monotonic()
        for b in BATCHES:  # warm-up: kernels, allocator, CUDA graphs (captured at a shape's second forward)
            for w in widths:
                for _ in range(3 if cmode == "off" else 5):
                    once(b, w)
        ctx.emit({"section": "forward-ready", "model": name, "compile": cmode, "load_s": load_s,
                  "warmup_s": time.monotonic() - t_warm})
        for rep in range(ctx.repeats):
            for b in BATCHES:
                for w in widths:
                    ctx.emit({"section": "forward", "model": name, "compile": cmode, "b": b, "w": w, "rep": rep,
                              "ms": once(b, w), "weight_bytes": wb, "roofline_ms": roof, "status": "ok"})
    graph_note(ctx, "forward", f"{name} {cmode}", [kv for kv, _ in kvs.values()])


def graph_note(ctx: Ctx, section: str, case: str, caches: list) -> None:
    """One row per run with CUDA graphs: captured, replayed, and shapes whose capture failed (FAIL: those ran
    eager, so the compiled numbers are partly eager ones)."""
    graphs = [kv.graphs for kv in caches if kv is not None and kv.graphs is not None]
    if graphs:
        failed = sum(len(g.failed) for g in graphs)
        ctx.emit({"section": section, "case": f"{case}: graphs", "status": "FAIL" if failed else "ok",
                  "detail": "; ".join(g.note for g in graphs)})


def free(ctx: Ctx) -> None:
    import gc

    gc.collect()
    if ctx.cuda:
        import torch

        torch.cuda.empty_cache()


# ---- section: per-round overhead and syncs ------------------------------------------------------------------
def section_overhead(ctx: Ctx) -> None:
    per_compile_mode(ctx, "overhead", overhead_runs)


def warmups(cmode: str) -> int:
    """Untimed passes over the configurations before the timed ones: two with CUDA graphs (a shape is captured at
    its second forward, so every shape the timed runs meet is captured before them), else one."""
    return 2 if cmode in GRAPH_MODES else 1


def per_compile_mode(ctx: Ctx, section: str, run: Callable[[Ctx, str], None]) -> None:
    """run(ctx, mode) for each mode in compile_modes' order; a failure is one FAIL row, the device freed after each."""
    for cmode in ctx.compile_modes:
        try:
            run(ctx, cmode)
        except OutOfTime:
            raise
        except Exception as e:  # noqa: BLE001
            ctx.emit({"section": section, "case": f"compile={cmode}", "status": "FAIL", "detail": one_line(e)})
        free(ctx)


def overhead_runs(ctx: Ctx, cmode: str) -> None:
    t = load(model_spec(ctx, ctx.shape(TARGET), cmode, seed=1), "target")
    d = load(model_spec(ctx, ctx.shape(DRAFT), cmode, seed=2), "draft")
    from ssd_runtime.syncs import SYNCS as counter
    acc = ACCEPTANCES[0]
    configs = [(mode, b) for b in BATCHES for mode in ("ar", "sd", "ssd")]
    ps = {b: prompts(b, ctx.context, t.vocab_size, seed=10 + b) for b in BATCHES}

    def run(mode: str, b: int, clock: RunClock | None, count: bool = False) -> dict:
        """Per-round medians of one job; count=True (an untimed pass, no clock) counts the ops each round launches
        outside graph replays instead (ssd_runtime.opcount)."""
        from ssd_runtime.opcount import LaunchCounter

        rounds = []

        def wrap(round_fn):
            def timed(*args):
                sync(ctx.device)
                s0 = counter.count
                f0, t0 = clock.total_ms if clock else 0.0, time.perf_counter()
                with LaunchCounter() if count else contextlib.nullcontext() as launched:
                    out = round_fn(*args)
                sync(ctx.device)
                wall = (time.perf_counter() - t0) * 1e3
                fwd = (clock.total_ms if clock else 0.0) - f0
                rounds.append((wall, fwd, counter.count - s0, launched.count if count else None))
                return out
            return timed

        generate_local(t.model, d.model, t.vocab_size, plan_for(mode, b, ctx.k), min(ctx.new_tokens, 32), ps[b],
                       forced=acc if mode != "ar" else None, on_round=wrap)
        body = rounds[1:] or rounds  # the first round has nothing cached yet
        if count:
            return {"launches_per_round": median([r[3] for r in body])}
        return {"round_ms": median([r[0] for r in body]), "forward_ms": median([r[1] for r in body]),
                "overhead_ms": median([r[0] - r[1] for r in body]),
                "syncs_per_round": median([r[2] for r in body]),
                "rounds": len(rounds)}

    for _ in range(warmups(cmode)):  # graphs capture a shape at its second forward: two warm-ups take them all
        for mode, b in configs:
            run(mode, b, None)
    for rep in range(ctx.repeats):
        for mode, b in configs:
            with RunClock(ctx.device) as clock:
                stats = run(mode, b, clock)
            ctx.emit({"section": "overhead", "mode": mode, "b": b, "compile": cmode, "acceptance":
                      acc if mode != "ar" else None, "rep": rep, **stats, "status": "ok"})
    for mode, b in configs:
        ctx.emit({"section": "overhead-launches", "mode": mode, "b": b, "compile": cmode,
                  **run(mode, b, None, count=True)})
    graph_note(ctx, "overhead", cmode, [getattr(t.model, "_ssd_kv", None), getattr(d.model, "_ssd_kv", None)])


# ---- section: tok/s through ssd-run's two processes ------------------------------------------------------------
def section_toks(ctx: Ctx) -> None:
    """One Session (both workers) per compile mode, in compile_modes' order."""
    per_compile_mode(ctx, "toks", toks_session)


def toks_session(ctx: Ctx, cmode: str) -> None:
    import torch

    from ssd_runtime.run import Job, Session
    from ssd_runtime.transport import backend_for

    draft_dev = "cuda:1" if ctx.cuda and torch.cuda.device_count() >= 2 else ctx.device
    backend = backend_for(ctx.device, draft_dev)
    tspec = model_spec(ctx, ctx.shape(TARGET), cmode, seed=1)
    dspec = model_spec(ctx, ctx.shape(DRAFT), cmode, seed=2, device=draft_dev)
    vocab = ctx.shape(TARGET)["vocab"]
    configs = [("ar", b, None) for b in BATCHES] + [(m, b, a) for a in ACCEPTANCES for b in BATCHES
                                                   for m in ("sd", "ssd")]
    ps = {b: prompts(b, ctx.context, vocab, seed=20 + b) for b in BATCHES}

    def job(mode: str, b: int, acc: float | None, new: int) -> Job:
        return Job(plan_for(mode, b, ctx.k), ps[b], new, forced_acceptance=acc, ignore_eos=True,
                   draft_timeout_s=600.0)

    with Session(tspec, dspec, draft_timeout_s=600.0) as session:
        for i in range(warmups(cmode)):  # warm-up: every side, every shape (with graphs at full length, twice)
            for mode, b, acc in configs:
                r = session.run(job(mode, b, acc, ctx.new_tokens if cmode in GRAPH_MODES else min(8, ctx.new_tokens)))
                if i == 0:  # the rounds that captured graphs: marked, and none of them called a stall
                    ctx.emit({"section": "toks-warmup", "mode": mode, "b": b, "acceptance": acc, "compile": cmode,
                              **round_marks(r.rounds)})
        for rep in range(ctx.repeats):
            for mode, b, acc in configs:
                r = session.run(job(mode, b, acc, ctx.new_tokens))
                s = r.summary
                tokens = sum(len(o) for o in r.outputs)
                fallback = sum(1 for rd in r.rounds if rd.fallback)
                problem = "; ".join(r.faults) or (f"{fallback} rounds fell back to AR" if fallback else "") or (
                    f"{tokens} tokens, expected {b * ctx.new_tokens}" if tokens != b * ctx.new_tokens else "")
                ctx.emit({"section": "toks", "mode": mode, "b": b, "acceptance": acc, "rep": rep,
                          "compile": cmode, "tok_s": s.tok_s, "per_seq_tok_s": s.tok_s / b,
                          "accept_len": s.mean_accept_len if mode != "ar" else None,
                          "hit_rate": s.hit_rate if mode == "ssd" else None,
                          "target": tspec.device, "draft": dspec.device, "backend": backend, **round_marks(r.rounds),
                          "status": "FAIL" if problem else "ok", **({"detail": problem} if problem else {})})


def round_marks(rounds: list) -> dict:
    """A job's rounds, those marked as CUDA graph warm-up (RoundRecord.warmup) and those io.sanity calls stalled."""
    from ssd_sim.io.sanity import stalled_rounds, warmup_rounds

    return {"rounds": len(rounds), "warmup_rounds": len(warmup_rounds(rounds)),
            "stalled_rounds": len(stalled_rounds(rounds))}


# ---- the table ----------------------------------------------------------------------------------------------------
def fmt(x: float | None, spec: str = ".2f", unit: str = "") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:{spec}}{unit}"


def table_rows(rows: list[dict]) -> list[tuple[str, str, str, str, str]]:
    """(section, case, result, reference, status) per table line: samples grouped, medians."""
    out = []
    header = next((r for r in rows if r.get("section") == "header"), {})
    plain = [r for r in rows if "case" in r]  # exact rows, failures, skips
    for r in plain:
        if r["section"] == "exact":
            out.append(("exact", r["case"], r.get("detail", ""), f"alpha {ALPHA:g}" if "p_value" in r else "-",
                        r["status"]))
    fw = [r for r in rows if r.get("section") == "forward" and "ms" in r]
    keys = list(dict.fromkeys((r["model"], r["b"], r["w"]) for r in fw))
    for model, b, w in keys:
        group = [r for r in fw if (r["model"], r["b"], r["w"]) == (model, b, w)]
        eager = median([r["ms"] for r in group if r["compile"] == "off"])
        comps = {c: median([r["ms"] for r in group if r["compile"] == c])
                 for c in dict.fromkeys(r["compile"] for r in group if r["compile"] != "off")}
        roof = group[0]["roofline_ms"]
        best = min(x for x in (eager, *comps.values()) if x is not None)
        ratio = f", best x{best / roof:.1f}" if roof else ""
        asked = [c for c in header.get("compile", "off").split(",") if c != "off"]
        compiled = ", ".join(f"{c} {fmt(ms, '.3f')} ms" for c, ms in comps.items()) or (
            ", ".join(f"{c} -" for c in asked) or "compiled -")
        wb = group[0]["weight_bytes"]
        size = f"{wb / 1e9:.2f} GB" if wb >= 1e9 else f"{wb / 1e6:.1f} MB"
        out.append(("forward", f"{model} b={b}, {w} tok", f"eager {fmt(eager, '.3f')} ms, {compiled}",
                    f"roofline {fmt(roof, '.3f')} ms ({size}){ratio}", "ok"))
    for r in rows:
        if r.get("section") == "forward-ready":
            out.append(("forward", f"{r['model']} {r['compile']}: ready", f"loaded in {r['load_s']:.1f} s, warm-up "
                        f"(compiles, captures) {r['warmup_s']:.1f} s", "-", "ok"))
    ov = [r for r in rows if r.get("section") == "overhead" and "round_ms" in r]
    launched = {(r["mode"], r["b"], r["compile"]): r["launches_per_round"] for r in rows
                if r.get("section") == "overhead-launches"}
    for mode, b, cmode in dict.fromkeys((r["mode"], r["b"], r["compile"]) for r in ov):
        g = [r for r in ov if (r["mode"], r["b"], r["compile"]) == (mode, b, cmode)]
        acc = g[0]["acceptance"]
        syncs = median([r["syncs_per_round"] for r in g])
        out.append(("overhead", f"{mode} b={b}" + (f" acc={acc:g}" if acc is not None else "") + f", {cmode}",
                    f"round {fmt(median([r['round_ms'] for r in g]))} ms = forwards "
                    f"{fmt(median([r['forward_ms'] for r in g]))} + overhead "
                    f"{fmt(median([r['overhead_ms'] for r in g]))} ms",
                    f"syncs/round {fmt(syncs, '.0f')}, launches/round "
                    f"{fmt(launched.get((mode, b, cmode)), '.0f')}", "ok"))
    tk = [r for r in rows if r.get("section") == "toks" and "tok_s" in r]
    med = {}
    for key in dict.fromkeys((r["mode"], r["b"], r["acceptance"], r["compile"]) for r in tk):
        g = [r for r in tk if (r["mode"], r["b"], r["acceptance"], r["compile"]) == key]
        med[key] = (median([r["tok_s"] for r in g]), g)
    for (mode, b, acc, cmode), (tok_s, g) in med.items():
        ar = med.get(("ar", b, None, cmode), (None,))[0]
        sd = med.get(("sd", b, acc, cmode), (None,))[0] if mode == "ssd" else None
        vs = []
        if ar and mode != "ar":
            vs.append(f"x{tok_s / ar:.2f} AR")
        if sd:
            vs.append(f"x{tok_s / sd:.2f} SD")
        extra = f", acc.len {fmt(median([r['accept_len'] for r in g]))}" if mode != "ar" else ""
        status = "FAIL" if any(r["status"] != "ok" for r in g) else "ok"
        out.append(("toks", f"{mode} b={b}" + (f" acc={acc:g}" if acc is not None else "") + f", {cmode}",
                    f"{fmt(tok_s, '.1f')} tok/s ({fmt(tok_s / b, '.1f')} per seq){extra}", ", ".join(vs) or "-",
                    status + (f": {g[0].get('detail', '')}" if status != "ok" else "")))
    out += warmup_lines(rows)
    for r in plain:
        if r["section"] != "exact":
            out.append((r["section"], r["case"], r.get("detail", ""), "-", r["status"]))
    return out


def warmup_lines(rows: list[dict]) -> list[tuple[str, str, str, str, str]]:
    """Per compile mode: the first warm-up pass's rounds marked as graph warm-up and called stalls, against the timed
    runs' (on warm caches a round must capture nothing: FAIL when one is marked)."""
    out = []
    for cmode in dict.fromkeys(r["compile"] for r in rows if r.get("section") == "toks-warmup"):
        first = [r for r in rows if r.get("section") == "toks-warmup" and r["compile"] == cmode]
        timed = [r for r in rows if r.get("section") == "toks" and "tok_s" in r and r["compile"] == cmode]

        def count(g: list[dict], key: str) -> int:
            return sum(r.get(key, 0) for r in g)

        result = (f"first pass: {count(first, 'warmup_rounds')} of {count(first, 'rounds')} rounds marked warm-up, "
                  f"{count(first, 'stalled_rounds')} stalled; timed runs: {count(timed, 'warmup_rounds')} of "
                  f"{count(timed, 'rounds')} marked, {count(timed, 'stalled_rounds')} stalled")
        out.append(("toks", f"graph warm-up rounds, {cmode}", result, "timed runs: 0 marked",
                    "FAIL" if count(timed, "warmup_rounds") else "ok"))
    return out


def print_table(ctx: Ctx, note: str = "") -> None:
    from rich.console import Console
    from rich.table import Table

    header = next((r for r in ctx.rows if r.get("section") == "header"), {})
    title = (f"gpu_check --device {ctx.device}: {header.get('gpu', '?')}, torch {header.get('torch', '?')}, "
             f"{ctx.dtype}, K = {ctx.k}, context {ctx.context}, {ctx.new_tokens} new tokens, medians of "
             f"{ctx.repeats}; roofline bandwidth: {header.get('bandwidth_source', '-')}; compile: "
             f"{ctx.compile}; syncs: ssd_runtime.syncs")
    toks = next((r for r in ctx.rows if r.get("section") == "toks" and "backend" in r), None)
    if toks:
        title += f"; toks: target {toks['target']}, draft {toks['draft']} ({toks['backend']})"
    if not ctx.cuda:
        title += "; shapes scaled down for the CPU"
    table = Table(title=title, title_justify="left")
    for col in ("section", "case", "result", "vs", "status"):
        table.add_column(col, overflow="fold")
    for row in table_rows(ctx.rows):
        table.add_row(*row)
    console = Console(width=None if sys.stdout.isatty() else 170, soft_wrap=False)
    console.print(table)
    if note:
        console.print(note)


def one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"


# ---- flags and main -------------------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own prints the usage first)
        raise BadInput(message)


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog=PROG, description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None,
                    help="cuda (default where torch sees a GPU): real shapes, bf16; cpu: scaled shapes, float32")
    ap.add_argument("--quick", action="store_true", help="fewer repeats and tokens (the CPU run of the tests)")
    ap.add_argument("--max-seconds", type=float, default=420.0, metavar="S",
                    help="time for all sections together (default 420 = 7 min); a section that runs out is cut")
    ap.add_argument("--out", default=str(ROOT / "runs" / "gpu_check.jsonl"), metavar="PATH",
                    help="JSON lines, one per measurement, written as measured (default runs/gpu_check.jsonl)")
    ap.add_argument("--sections", default=",".join(SECTIONS), metavar="LIST",
                    help=f"comma-separated subset of {','.join(SECTIONS)} (default all)")
    ap.add_argument("--models", default=",".join(MODELS), metavar="LIST",
                    help=f"shapes of the forward section, comma-separated ({','.join(MODELS)})")
    ap.add_argument("--compile", default=None, metavar="LIST",
                    help="the compiled modes measured next to eager, comma-separated, in this order (ModelSpec."
                         f"compile: {', '.join(COMPILE_MODES)}; default cuda-graphs on cuda, off on cpu)")
    ap.add_argument("-k", "--k", type=int, default=4, metavar="K", help="draft tokens per round (1..8, default 4)")
    ap.add_argument("--context", type=int, metavar="N", help="prompt tokens (default cuda 256, cpu 64, quick 32)")
    ap.add_argument("--new-tokens", type=int, metavar="N", help="tokens per sequence (default cuda 64, cpu 32, "
                                                                 "quick 16)")
    ap.add_argument("--repeats", type=int, metavar="N", help="interleaved repeats (default 3, quick 2)")
    return ap


def parse(argv: list[str] | None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if not (args.max_seconds > 0 and math.isfinite(args.max_seconds)):
        raise BadInput(f"--max-seconds must be a positive number of seconds, got {args.max_seconds:g}")
    if not 1 <= args.k <= 8:
        raise BadInput(f"--k must be in 1..8, got {args.k}")
    for flag in ("context", "new_tokens", "repeats"):
        v = getattr(args, flag)
        if v is not None and not 1 <= v <= 4096:
            raise BadInput(f"--{flag.replace('_', '-')} must be in 1..4096, got {v}")
    if args.context is not None and args.new_tokens is not None and args.context + args.new_tokens + 64 > MAX_POSITIONS:
        raise BadInput(f"--context + --new-tokens must leave room in {MAX_POSITIONS} positions")
    args.sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
    bad = [s for s in args.sections if s not in SECTIONS]
    if bad or not args.sections:
        raise BadInput(f"--sections: unknown {', '.join(bad) or '(empty)'}; choose from {', '.join(SECTIONS)}")
    args.models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    bad = [m for m in args.models if m not in MODELS]
    if bad or not args.models:
        raise BadInput(f"--models: unknown {', '.join(bad) or '(empty)'}; choose from {', '.join(MODELS)}")
    if args.compile is not None:
        args.compile = tuple(dict.fromkeys(c.strip() for c in args.compile.split(",") if c.strip()))
        bad = [c for c in args.compile if c not in COMPILE_MODES]
        if bad or not args.compile:
            raise BadInput(f"--compile: unknown {', '.join(bad) or '(empty)'}; choose from {', '.join(COMPILE_MODES)}")
    out = Path(args.out)
    if out.exists() and out.is_dir():
        raise BadInput(f"--out {out} is a directory; give a file path")
    return args


def make_ctx(args: argparse.Namespace) -> Ctx:
    import torch

    has_cuda = torch.cuda.is_available() and torch.cuda.device_count() > 0
    device = args.device or ("cuda" if has_cuda else "cpu")
    if device == "cuda" and not has_cuda:
        why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        raise BadInput(f"--device cuda: {why} (torch {torch.__version__}); use --device cpu")
    cuda = device == "cuda"
    ctx = Ctx(device="cuda:0" if cuda else "cpu", dtype="bfloat16" if cuda else "float32",
              compiles=args.compile or (("cuda-graphs",) if cuda else ("off",)), k=args.k,
              context=args.context or (256 if cuda else 32 if args.quick else 64),
              new_tokens=args.new_tokens or (64 if cuda else 16 if args.quick else 32),
              repeats=args.repeats or (2 if args.quick else 3), inner=10 if cuda else 2 if args.quick else 3,
              models=args.models, out=Path(args.out))
    if cuda:
        torch.cuda.set_device(0)
    try:
        ctx.out.parent.mkdir(parents=True, exist_ok=True)
        ctx.out.write_text("")
    except OSError as e:
        raise BadInput(f"--out {ctx.out}: cannot write ({e.strerror or e})") from None
    return ctx


def _on_sigterm(signum, frame):
    raise Stopped(signum)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(argv)
        ctx = make_ctx(args)
    except BadInput as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    t_start = time.monotonic()
    old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    note, code = "", None
    import torch

    threads = torch.get_num_threads()
    if not ctx.cuda:
        torch.set_num_threads(1)  # as bench/runtime_scaling.py and ssd-run's CPU workers: one thread per model
    try:

        bw, bw_source = bandwidth(ctx.device)
        ctx.emit({"section": "header", "device": ctx.device, "dtype": ctx.dtype, "torch": torch.__version__,
                  "gpu": torch.cuda.get_device_name(0) if ctx.cuda else "CPU", "bandwidth_bytes_s": bw,
                  "bandwidth_source": bw_source, "compile": ctx.compile, "k": ctx.k, "context": ctx.context,
                  "new_tokens": ctx.new_tokens, "repeats": ctx.repeats, "max_seconds": args.max_seconds,
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        ends = section_ends(args.sections)
        runs = {"exact": lambda: section_exact(ctx), "forward": lambda: section_forward(ctx, bw),
                "overhead": lambda: section_overhead(ctx), "toks": lambda: section_toks(ctx)}
        for name in SECTIONS:
            if name not in args.sections:
                continue
            left = t_start + ends[name] * args.max_seconds - time.monotonic()
            t0 = time.monotonic()
            print(f"{PROG}: {name} (at most {max(left, 0):.0f} s) ...", file=sys.stderr, flush=True)
            try:
                with time_limit(left):
                    runs[name]()
            except OutOfTime:
                ctx.emit({"section": name, "case": "time budget", "status": "skipped",
                          "detail": f"its share of --max-seconds ran out after {time.monotonic() - t0:.0f} s; "
                                    "the rest of the section was not measured"})
            except Exception as e:  # noqa: BLE001 - one FAIL row, the next section still runs
                ctx.emit({"section": name, "case": "section", "status": "FAIL", "detail": one_line(e)})
            free(ctx)
    except (KeyboardInterrupt, Stopped) as e:
        signum = e.signum if isinstance(e, Stopped) else signal.SIGINT
        note = f"{PROG}: interrupted ({signal.Signals(signum).name}); the table holds what was measured"
        code = 128 + int(signum)
    finally:
        signal.signal(signal.SIGTERM, old_term)
        torch.set_num_threads(threads)
    failed = [r for r in ctx.rows if r.get("status") == "FAIL"]
    note = note or (f"{PROG}: {time.monotonic() - t_start:.0f} s; rows in {ctx.out}; "
                    + (f"{len(failed)} FAILED" if failed else "every check that ran passed"))
    print_table(ctx, note)
    return code if code is not None else (1 if failed else 0)


if __name__ == "__main__":
    raise SystemExit(main())
