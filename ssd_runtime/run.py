"""Spawn the target and draft processes, run jobs on them, collect outputs, summaries and traces.

    with Session(ModelSpec(path=...), ModelSpec(path=...)) as s:     # loads each model once
        result = s.run(Job(plan, "ssd", prompts, max_new_tokens=64, trace_path="runs/x.jsonl"))

Processes: this one (the controller: prompts, progress, results) <-pipe-> target (rank 0) <-torch.distributed->
draft (rank 1). On CPU the target is pinned to the first allowed core and the draft to the second, one
thread each. A session runs any number of jobs (AR, SD, SSD, different plans), so tests and benchmarks
pay process start and model loading once. If the draft dies or stops answering, the running job finishes
autoregressively (recorded in the trace's faults) and later speculative jobs are refused.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import usable_cores
from ssd_sim.plan.plan import Plan

from .hooks import TestHooks
from .models import ModelSpec

TRACE_META = ("prompt_source",)


@dataclass
class Job:
    """One run: a plan and mode over a list of prompts (token ids). Units: tokens, seconds."""

    plan: Plan
    mode: str  # ar | sd | ssd
    prompts: list[list[int]]
    max_new_tokens: int
    seed: int = 0
    forced_acceptance: float | None = None
    draft_timeout_s: float | None = 120.0  # the target waits this long for an answer, then goes AR (None: forever)
    ignore_eos: bool = False
    trace_path: str | None = None
    header: dict = field(default_factory=dict)  # extra trace-header fields (prompt_source, ...)
    target: ModelSpec | None = None  # None = the session's model
    draft: ModelSpec | None = None
    hooks: TestHooks | None = None  # tests only: attached to the target and the draft when set
    compact_slack: int = 32
    log_topn: int = 0  # SD / SSD: per verified position, the top-N distributions of target and draft (0: off)


@dataclass
class JobResult:
    outputs: list[list[int]]  # generated token ids per prompt, in prompt order
    summary: dict  # the trace's summary line
    trace_path: str | None
    faults: list[str]
    rounds: list[dict] = field(default_factory=list)  # the trace's round records


class Session:
    """A target process and (optionally) a draft process, kept alive across jobs."""

    def __init__(self, target: ModelSpec, draft: ModelSpec | None = None, pin: bool = True,
                 start_timeout_s: float = 1800.0):
        from .transport import backend_for, free_port

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        port = free_port()
        backend = backend_for(target.device, draft.device) if draft else "gloo"
        pin_t = 0 if pin and target.device == "cpu" else None
        pin_d = 1 if pin and draft and draft.device == "cpu" else None
        self.tproc = ctx.Process(target=target_worker, args=(child, target, draft, port, backend, pin_t),
                                 daemon=True, name="ssd-target")
        self.dproc = ctx.Process(target=draft_worker, args=(draft, port, backend, pin_d), daemon=True,
                                 name="ssd-draft") if draft else None
        self.draft_failed = False  # a job saw the draft die or hang: close() kills it instead of waiting
        self.tproc.start()
        if self.dproc:
            self.dproc.start()
        try:
            self.info = self._expect("ready", start_timeout_s)
        except BaseException:
            self.close()
            raise

    @property
    def draft_pid(self) -> int | None:
        return self.dproc.pid if self.dproc else None

    def run(self, job: Job, on_progress: Callable[[int], None] | None = None) -> JobResult:
        """Run a job; on_progress(tokens) is called as tokens are committed. Raises ConfigError on bad input."""
        self.conn.send(("job", job))
        while True:
            kind, payload = self._recv(None)
            if kind == "progress":
                if on_progress:
                    on_progress(payload)
            elif kind == "result":
                self.draft_failed |= bool(payload.faults)
                return payload
            else:
                self._raise(kind, payload)

    def close(self) -> None:
        if self.tproc.is_alive():
            try:
                self.conn.send(("stop", None))
            except (BrokenPipeError, OSError):
                pass
        if self.dproc is not None and self.draft_failed and self.dproc.is_alive():
            self.dproc.kill()
        for proc in (self.tproc, self.dproc):
            if proc is None:
                continue
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _expect(self, want: str, timeout_s: float):
        kind, payload = self._recv(timeout_s)
        if kind != want:
            self._raise(kind, payload)
        return payload

    def _recv(self, timeout_s: float | None):
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.conn.poll(0.2):
            if not self.tproc.is_alive():
                raise RuntimeError(f"the target process exited (code {self.tproc.exitcode}); see its stderr")
            if deadline is not None and time.monotonic() > deadline:
                raise RuntimeError(f"the target process did not answer within {timeout_s:g} s")
        return self.conn.recv()

    @staticmethod
    def _raise(kind: str, payload):
        if kind == "config_error":
            raise ConfigError(*payload)
        raise RuntimeError(f"ssd-run worker failed:\n{payload}")


# ---- worker processes ------------------------------------------------------------------------------
def target_worker(conn, target: ModelSpec, draft: ModelSpec | None, port: int, backend: str,
                  core: int | None) -> None:
    """Rank 0: load the target, meet the draft, then run jobs sent by the controller until 'stop'."""
    from .models import describe, load_model
    from .transport import Channel, init

    worker = None
    try:
        cores = usable_cores()  # before pinning: the cores this run has, for the trace's host record
        _use_device(target.device, core)
        models = {target: load_model(target, "target")}
        chan, draft_info = None, None
        if draft is not None:
            init(0, port, backend)
            chan = Channel(1, target.device, backend)
            draft_info = chan.recv(None)
            if "error" in draft_info:
                conn.send(("config_error", tuple(draft_info["error"])))
                os._exit(0)
        conn.send(("ready", {"target": describe(models[target]), "draft": draft_info}))
        worker = _TargetWorker(conn, models, target, draft, chan, cores)
        while True:
            kind, job = conn.recv()
            if kind == "stop":
                worker.stop()
                break
            worker.run_job(job)
    except ConfigError as e:
        conn.send(("config_error", (e.field, str(e).split(": ", 1)[-1])))
    except Exception:  # noqa: BLE001 - report anything to the controller
        conn.send(("error", traceback.format_exc()))
    _leave(healthy=worker is not None and (draft is None or worker.draft_alive))


class _TargetWorker:
    """Job execution inside the target process."""

    def __init__(self, conn, models: dict, target: ModelSpec, draft: ModelSpec | None, chan, cores: int):
        self.conn, self.models, self.target, self.draft, self.chan = conn, models, target, draft, chan
        self.cores = cores
        self.draft_alive = chan is not None

    def run_job(self, job: Job) -> None:
        try:
            self.conn.send(("result", self._run(job)))
        except ConfigError as e:
            self.conn.send(("config_error", (e.field, str(e).split(": ", 1)[-1])))
        except Exception:  # noqa: BLE001
            self.conn.send(("error", traceback.format_exc()))

    def stop(self) -> None:
        if self.draft_alive:
            from .transport import DraftFault, ProcessLink

            try:
                ProcessLink(self.chan, 10.0).stop()
            except DraftFault:
                pass

    def _model(self, spec: ModelSpec | None):
        from .models import load_model

        spec = spec or self.target
        if spec not in self.models:
            self.models[spec] = load_model(spec, "target")
        return self.models[spec]

    def _run(self, job: Job) -> JobResult:
        from ssd_sim.io.trace import TraceWriter

        from .models import check_same_vocab, describe
        from .target import Target, TargetConfig
        from .transport import DraftFault, ProcessLink

        lm = self._model(job.target)
        link, draft_info = None, None
        if job.mode != "ar":
            if not self.draft_alive:
                raise ConfigError("mode", f"{job.mode} needs the draft process, which is not running "
                                          "(no draft model, or it failed earlier); use --mode ar or restart")
            link = ProcessLink(self.chan, job.draft_timeout_s)
            msg = {"op": "job", "plan": job.plan.to_dict(), "mode": job.mode, "seed": job.seed,
                   "model": job.draft, "hooks": job.hooks, "compact_slack": job.compact_slack,
                   "log_topn": job.log_topn}
            try:
                answer = link.job(msg)
            except DraftFault as e:
                self.draft_alive = False
                raise RuntimeError(f"the draft process did not take the job: {e}") from e
            if "error" in answer:
                raise ConfigError(*answer["error"])
            draft_info = answer["info"]
            check_same_vocab(describe(lm), draft_info)
        header = _header(job, describe(lm), draft_info, self.cores)
        writer = TraceWriter(job.trace_path, header) if job.trace_path else None
        rounds: list[dict] = []

        def on_round(rec: dict) -> None:
            rounds.append(rec)
            if writer:
                writer.round(rec)

        cfg = TargetConfig(job.plan, job.mode, job.max_new_tokens, job.seed,
                           () if job.ignore_eos else tuple(lm.eos_token_ids), job.forced_acceptance,
                           job.log_topn if job.mode != "ar" else 0)
        target = Target(lm.model, cfg, link, on_round, lambda n: self.conn.send(("progress", n)),
                        job.compact_slack)
        if job.hooks is not None:
            job.hooks.attach_target(target)
        try:
            outputs = target.generate(job.prompts)
        except BaseException:
            if writer:
                writer.abort()
            raise
        if target.faults:
            self.draft_alive = False
        summary = _summary(header, rounds, target, outputs)
        path = str(writer.close(summary)) if writer else None
        return JobResult(outputs, summary, path, list(target.faults), rounds)


def draft_worker(draft: ModelSpec, port: int, backend: str, core: int | None) -> None:
    """Rank 1: load the draft, then answer the target until 'stop' (or until the target goes away)."""
    from .draft import Drafter
    from .draft_trace import DraftRecorder
    from .models import describe, load_model
    from .transport import Channel, DraftFault, init

    _use_device(draft.device, core)
    models = {}
    try:
        models[draft] = load_model(draft, "draft")
        info = describe(models[draft])
    except ConfigError as e:
        info = {"error": (e.field, str(e).split(": ", 1)[-1])}
    init(1, port, backend)
    chan = Channel(0, draft.device, backend)
    chan.send(info)
    recorder = None
    try:
        while True:
            msg = chan.recv(None)
            op = msg["op"]
            if op == "stop":
                break
            if op == "job":
                spec = msg.get("model") or draft
                try:
                    if spec not in models:
                        models[spec] = load_model(spec, "draft")
                except ConfigError as e:
                    chan.send({"error": (e.field, str(e).split(": ", 1)[-1])})
                    continue
                lm = models[spec]
                drafter = Drafter(lm.model, Plan.from_dict(msg["plan"]), msg["mode"], msg["seed"],
                                  lm.vocab_size, msg.get("compact_slack", 32))
                if msg.get("hooks") is not None:
                    msg["hooks"].attach_drafter(drafter)
                recorder = DraftRecorder(drafter, msg.get("log_topn", 0))  # replies carry ranks, timings, dists
                chan.send({"ok": True, "info": describe(lm)})
            elif op == "batch":
                recorder.start_batch(msg["seqs"])
            elif op == "spec":
                chan.send(recorder.reply(msg))
                recorder.speculate()
    except DraftFault:
        _leave(healthy=False)  # the target went away: nothing left to do
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    _leave(healthy=True)


def _leave(healthy: bool) -> None:
    """Tear down the process group when both sides are fine; otherwise exit hard (a dead peer can hang it)."""
    import torch.distributed as dist

    sys.stdout.flush()
    sys.stderr.flush()
    if not healthy:
        os._exit(0)
    if dist.is_initialized():
        dist.destroy_process_group()


def _use_device(device: str, core: int | None) -> None:
    """CPU: pin this process to its core with one thread. CUDA: make the device current (NCCL needs it)."""
    from .transport import pin_cpu

    if device.startswith("cuda"):
        import torch

        torch.cuda.set_device(torch.device(device))
    elif core is not None:
        pin_cpu(core)


# ---- trace header and summary ------------------------------------------------------------------------
def _header(job: Job, target: dict, draft: dict | None, cores: int) -> dict:
    import torch
    import transformers

    from . import __version__
    from .device import host_record

    speculative = job.mode != "ar"
    return {
        "mode": job.mode, "plan": {**job.plan.to_dict(), "mode": job.mode},
        "models": {"target": target["source"] if target["source"] != "tiny" else target["label"],
                   "draft": (draft["source"] if draft["source"] != "tiny" else draft["label"])
                   if speculative else None},
        "dtype": {"target": target["dtype"], "draft": draft["dtype"] if speculative else None},
        "quantize": {"target": target["quantize"], "draft": draft["quantize"] if speculative else None},
        "devices": {"target": target["device"], "draft": draft["device"] if speculative else None},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "ssd": __version__},
        "prompt_source": job.header.get("prompt_source", "api"), "num_prompts": len(job.prompts),
        "batch_size": job.plan.batch_size, "max_new_tokens": job.max_new_tokens,
        "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cpus, "
                   f"torch threads 1 per process",
        "host": host_record({"target": target["kernels"], **({"draft": draft["kernels"]} if speculative else {})},
                            cores).to_dict(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seed": job.seed, "forced_acceptance": job.forced_acceptance, "ignore_eos": job.ignore_eos,
        "log_topn": job.log_topn if speculative else 0,
        **{k: v for k, v in job.header.items() if k != "prompt_source"},
    }


def _summary(header: dict, rounds: list[dict], target, outputs: list[list[int]]) -> dict:
    """The summary line: decode tokens / decode wall time (prefill reported apart), plus summarize()."""
    from ssd_sim.io.trace import Trace, summarize

    wall_s = sum(r["timings_ms"]["round"] for r in rounds) / 1e3
    tokens = sum(s["committed"] for r in rounds for s in r["seqs"])
    metrics = summarize(Trace(header, rounds, {"wall_s": wall_s} if wall_s else None)).to_dict()
    return {**metrics, "tokens": tokens, "wall_s": wall_s, "tok_s": tokens / wall_s if wall_s else 0.0,
            "rounds": len(rounds), "faults": list(target.faults), "prefill_ms": target.prefill_ms,
            "generated_tokens": sum(len(o) for o in outputs)}


def default_trace_path(mode: str) -> Path:
    """runs/<mode>-<UTC timestamp>.jsonl under the current directory."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return Path("runs") / f"{mode}-{stamp}.jsonl"
