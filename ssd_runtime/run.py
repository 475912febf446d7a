"""Spawn the target and draft processes, run jobs on them, collect outputs, summaries and traces.

    with Session(ModelSpec(path=...), ModelSpec(path=...)) as s:     # loads each model once
        result = s.run(Job(plan, "ssd", prompts, max_new_tokens=64, trace_path="runs/x.jsonl"))

Processes: this one (the controller: prompts, progress, results) <-pipe-> target (rank 0) <-torch.distributed->
draft (rank 1); the draft also has a one-way pipe to the controller for its start-up report. On CPU the target
is pinned to the first allowed core and the draft to the second, one thread each. A session runs any number of
jobs (AR, SD, SSD, different plans), so tests and benchmarks pay process start and model loading once.

Supervision (the controller watches both processes from launch):
  start-up   a worker that dies, fails to load its model or reports bad input ends start-up with one line
             (ConfigError for bad input, WorkerError otherwise), and both processes are stopped; the target waits
             at most the draft timeout for a draft that is still not there once the target's model is loaded;
  a job      if the draft dies or stops answering (the target waits at most the job's draft timeout per
             message), the job finishes autoregressively (exactly; recorded in the trace's faults) and later
             speculative jobs are refused; if the target dies, WorkerError (its .partial trace holds whole lines);
  signals    the workers ignore SIGINT (Ctrl-C reaches the whole process group: only the controller acts) and die
             with the controller; leaving a Session on KeyboardInterrupt or another BaseException kills both at once.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import platform
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import usable_cores
from ssd_sim.plan.plan import Plan

from .hooks import TestHooks
from .models import ModelSpec

TRACE_META = ("prompt_source",)
STOP_GRACE_S = 10.0  # close(): how long a healthy worker gets to leave on its own before it is killed


class WorkerError(RuntimeError):
    """A worker process died, stopped answering or failed unexpectedly; the message is one line saying which."""


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
    arrivals_ms: list[float] | None = None  # request i arrives arrivals_ms[i] ms after the start (None: all at 0)
    log_topn: int = 0  # SD / SSD: per verified position, the top-N distributions of target and draft (0: off)


@dataclass
class JobResult:
    outputs: list[list[int]]  # generated token ids per prompt, in prompt order
    summary: dict  # the trace's summary line
    trace_path: str | None
    faults: list[str]
    rounds: list[dict] = field(default_factory=list)  # the trace's round records
    trace_error: str | None = None  # the trace could not be written (full disk, ...): why; the outputs are complete


class Session:
    """A target process and (optionally) a draft process, kept alive across jobs (see the module docstring)."""

    def __init__(self, target: ModelSpec, draft: ModelSpec | None = None, pin: bool = True,
                 start_timeout_s: float = 1800.0, draft_timeout_s: float | None = 120.0,
                 hooks: TestHooks | None = None):
        from .transport import backend_for, free_port

        ctx = mp.get_context("spawn")
        self.target_spec, self.draft_spec = target, draft
        self.conn, tchild = ctx.Pipe()
        self.dconn, dchild = ctx.Pipe(duplex=False) if draft else (None, None)
        port, me = free_port(), os.getpid()
        backend = backend_for(target.device, draft.device) if draft else "gloo"
        pin_t = 0 if pin and target.device == "cpu" else None
        pin_d = 1 if pin and draft and draft.device == "cpu" else None
        self.tproc = ctx.Process(target=target_worker, args=(tchild, target, draft, port, backend, pin_t, me),
                                 daemon=True, name="ssd-target")
        self.dproc = ctx.Process(target=draft_worker, args=(dchild, draft, port, backend, pin_d, me, hooks),
                                 daemon=True, name="ssd-draft") if draft else None
        self.draft_failed = False  # a job saw the draft die or hang: close() kills it instead of waiting
        self.started = False
        try:
            with _children_ignore_sigint():
                self.tproc.start()
                if self.dproc:
                    self.dproc.start()
            for end in (tchild, dchild):  # the children hold these now; a dead child then reads as EOF here
                if end is not None:
                    end.close()
            self.info = self._start(start_timeout_s, draft_timeout_s)
            self.started = True
        except BaseException:
            self.close(kill=True)
            raise

    @property
    def draft_pid(self) -> int | None:
        return self.dproc.pid if self.dproc else None

    def run(self, job: Job, on_progress: Callable[[int], None] | None = None) -> JobResult:
        """Run a job; on_progress(tokens) is called as tokens are committed. Raises ConfigError on bad input,
        WorkerError if the target process dies or fails."""
        try:
            self.conn.send(("job", job))
        except (BrokenPipeError, OSError):
            raise self._target_died() from None
        while True:
            kind, payload = self._recv()
            if kind == "progress":
                if on_progress:
                    on_progress(payload)
            elif kind == "result":
                self.draft_failed |= bool(payload.faults)
                return payload
            else:
                self._raise(kind, payload, "target")

    def close(self, kill: bool = False) -> None:
        """Stop both processes: ask the target to stop (it stops the draft) and wait up to STOP_GRACE_S, then
        kill what is left. kill=True (or an interrupt while waiting) kills both at once."""
        try:
            if not kill:
                self._stop_gracefully()
        finally:
            with _signals_deferred():
                _kill(self.tproc, self.dproc)
            for end in (self.conn, self.dconn):
                if end is not None:
                    end.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # an interrupt (KeyboardInterrupt, SIGTERM, SystemExit) must stop everything at once, not after a grace
        self.close(kill=exc_type is not None and not issubclass(exc_type, Exception))

    # ---- start-up and messages ---------------------------------------------------------------------
    def _start(self, start_timeout_s: float, draft_timeout_s: float | None) -> dict:
        """Wait for the target's 'ready' while watching both processes (see the module docstring)."""
        t0, loaded_at = time.monotonic(), None
        while True:
            self._check_draft_start()
            if self.conn.poll(0.05):
                kind, payload = self._recv_target()
                if kind == "ready":
                    return payload
                if kind == "loaded":
                    loaded_at = time.monotonic()
                    continue
                if kind == "error":  # at start-up, often the draft's death seen from the target: say that
                    self._check_draft_start(grace_s=1.0)
                self._raise(kind, payload, "target")
            now = time.monotonic()
            if self.dproc and loaded_at is not None and draft_timeout_s and now - loaded_at > draft_timeout_s:
                raise WorkerError(f"the draft process was not ready {draft_timeout_s:g} s after the target "
                                  f"(--draft-timeout); is loading {self.draft_spec.label} stuck? Check the model, "
                                  "or raise --draft-timeout (0 = wait forever)")
            if now - t0 > start_timeout_s:
                raise WorkerError(f"the target process did not load {self.target_spec.label} within "
                                  f"{start_timeout_s:g} s")

    def _check_draft_start(self, grace_s: float = 0.0) -> None:
        """Raise the draft's start-up report (bad input: ConfigError; a failure: WorkerError), or WorkerError if
        the draft process is gone; wait up to grace_s for either."""
        if self.dconn is None:
            return
        alive = self.dproc.is_alive()
        try:
            if self.dconn.poll(grace_s):
                kind, payload = self.dconn.recv()
                self._raise(kind, payload, "draft")
        except (EOFError, OSError):
            alive = False  # the draft closed its end: it is exiting
        if not alive:
            self.dproc.join(1.0)
            raise WorkerError(f"the draft process died during start-up ({_how(self.dproc.exitcode)}) while "
                              f"loading {self.draft_spec.label}; nothing was run")

    def _recv(self):
        """The target's next message; WorkerError if it dies (EOF on the pipe, or the process gone)."""
        while not self.conn.poll(0.2):
            if not self.tproc.is_alive():
                raise self._target_died()
        return self._recv_target()

    def _recv_target(self):
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            raise self._target_died() from None

    def _target_died(self) -> WorkerError:
        """WorkerError saying how the target ended (after a moment in which a pending signal may arrive: a signal
        to the whole process group must read as that signal, not as the target's death)."""
        time.sleep(0.1)
        self.tproc.join(1.0)
        when = "mid-run" if self.started else "during start-up"
        return WorkerError(f"the target process died {when} ({_how(self.tproc.exitcode)})")

    @staticmethod
    def _raise(kind: str, payload, role: str):
        if kind == "config_error":
            raise ConfigError(*payload)
        raise WorkerError(f"the {role} process failed: {payload}")

    def _stop_gracefully(self) -> None:
        if self.tproc.pid is not None and self.tproc.is_alive():
            try:
                self.conn.send(("stop", None))
            except (BrokenPipeError, OSError):
                pass
        target_gone = self.tproc.pid is None or not self.tproc.is_alive()
        if self.draft_failed or target_gone:
            _kill(self.dproc)  # it died, hangs, or has no one left to answer
        for proc in (self.tproc, self.dproc):
            if proc is not None and proc.pid is not None:
                proc.join(timeout=STOP_GRACE_S)


def _kill(*procs) -> None:
    """SIGKILL the started worker processes that are still alive, all first (they free their memory in
    parallel), then reap them."""
    started = [p for p in procs if p is not None and p.pid is not None]
    for proc in started:
        if proc.is_alive():
            proc.kill()
    for proc in started:
        proc.join(timeout=5)


def _how(exitcode: int | None) -> str:
    """'killed by SIGKILL', 'exit code 1', ..."""
    if exitcode is None:
        return "no exit status"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _children_ignore_sigint() -> Iterator[None]:
    """Processes started inside inherit SIGINT ignored from their first instruction (Python keeps an inherited
    SIG_IGN), so a Ctrl-C to the process group prints nothing from them while they import. A Ctrl-C meanwhile is
    held back (blocked), not lost: it reaches this process when the block ends."""
    if not _in_main_thread():
        yield
        return
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait (blocked) until the block ends, so a second Ctrl-C cannot cut a clean-up short."""
    if not _in_main_thread():
        yield
        return
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


# ---- worker processes ------------------------------------------------------------------------------
def _become_worker(name: str, parent: int) -> None:
    """Start of a worker process: ignore SIGINT (the controller handles Ctrl-C), die with the controller (Linux),
    and show `name` in ps / top."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
            libc.prctl(15, name.encode()[:15])  # PR_SET_NAME
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the controller died before the line above took effect
        os._exit(0)


def _send(conn, msg) -> None:
    """Send to the controller; if it is gone there is no one to work for: leave quietly."""
    try:
        conn.send(msg)
    except (BrokenPipeError, EOFError, OSError):
        os._exit(0)


def _error_line() -> str:
    """The exception being handled in one line: 'Type: message (at file.py:line)'."""
    etype, exc, tb = sys.exc_info()
    frames = traceback.extract_tb(tb)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    text = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{etype.__name__}: {text}{where}" if etype else "unknown error"


def _config_payload(e: ConfigError) -> tuple[str, str]:
    return e.field, str(e).split(": ", 1)[-1]


def target_worker(conn, target: ModelSpec, draft: ModelSpec | None, port: int, backend: str,
                  core: int | None, parent: int) -> None:
    """Rank 0: load the target, meet the draft, then run jobs sent by the controller until 'stop'."""
    _become_worker("ssd-target", parent)
    from .models import describe, load_model
    from .transport import Channel, init

    worker = None
    try:
        cores = usable_cores()  # before pinning: the cores this run has, for the trace's host record
        _use_device(target.device, core)
        models = {target: load_model(target, "target")}
        chan, draft_info = None, None
        if draft is not None:
            _send(conn, ("loaded", None))  # from now on the controller gives the draft --draft-timeout to show up
            init(0, port, backend)
            chan = Channel(1, target.device, backend)
            draft_info = chan.recv(None)
        _send(conn, ("ready", {"target": describe(models[target]), "draft": draft_info}))
        worker = _TargetWorker(conn, models, target, draft, chan, cores)
        while True:
            try:
                kind, job = conn.recv()
            except (EOFError, OSError):  # the controller is gone
                os._exit(0)
            if kind == "stop":
                worker.stop()
                break
            worker.run_job(job)
    except ConfigError as e:
        _send(conn, ("config_error", _config_payload(e)))
    except Exception:  # noqa: BLE001 - report anything to the controller, in one line
        _send(conn, ("error", _error_line()))
    _leave(healthy=worker is not None and (draft is None or worker.draft_alive))


class _TargetWorker:
    """Job execution inside the target process."""

    def __init__(self, conn, models: dict, target: ModelSpec, draft: ModelSpec | None, chan, cores: int):
        self.conn, self.models, self.target, self.draft, self.chan = conn, models, target, draft, chan
        self.cores = cores
        self.draft_alive = chan is not None

    def run_job(self, job: Job) -> None:
        try:
            result = self._run(job)
        except ConfigError as e:
            _send(self.conn, ("config_error", _config_payload(e)))
        except Exception:  # noqa: BLE001
            _send(self.conn, ("error", _error_line()))
        else:
            _send(self.conn, ("result", result))

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

    def _open_draft(self, job: Job, target_info: dict):
        """The link to the draft for a speculative job and the draft's model info; (None, None, fault) when the
        draft is gone (it died or hangs since start-up: the job then runs autoregressively, exactly)."""
        from .models import check_same_vocab
        from .transport import DraftFault, ProcessLink

        if job.mode == "ar":
            return None, None, None
        if not self.draft_alive:
            raise ConfigError("mode", f"{job.mode} needs the draft process, which is not running "
                                      "(no draft model, or it failed earlier); use --mode ar or restart")
        link = ProcessLink(self.chan, job.draft_timeout_s)
        msg = {"op": "job", "plan": job.plan.to_dict(), "mode": job.mode, "seed": job.seed,
               "model": job.draft, "hooks": job.hooks, "log_topn": job.log_topn}
        try:
            answer = link.job(msg)
        except DraftFault as e:
            self.draft_alive = False
            return None, None, f"job start: the draft did not take the job ({e}); finishing autoregressively"
        if "error" in answer:
            raise ConfigError(*answer["error"])
        check_same_vocab(target_info, answer["info"])
        return link, answer["info"], None

    def _run(self, job: Job) -> JobResult:
        from .models import describe
        from .target import Target, TargetConfig

        lm = self._model(job.target)
        target_info = describe(lm)
        _check_job(job, target_info, None)
        link, draft_info, fault = self._open_draft(job, target_info)
        if draft_info is not None:
            _check_job(job, target_info, draft_info)
        header = _header(job, target_info, draft_info or _draft_stub(job.draft or self.draft), self.cores)
        trace = _TraceOut(job.trace_path, header) if job.trace_path else None
        rounds: list[dict] = []

        def on_round(rec: dict) -> None:
            rounds.append(rec)
            if trace:
                trace.round(rec)

        cfg = TargetConfig(job.plan, job.mode, job.max_new_tokens, job.seed,
                           () if job.ignore_eos else tuple(lm.eos_token_ids), job.forced_acceptance,
                           job.log_topn if job.mode != "ar" else 0)
        target = Target(lm.model, cfg, link, on_round, lambda n: _send(self.conn, ("progress", n)))
        if fault:
            target.faults.append(fault)
        if job.hooks is not None:
            job.hooks.attach_target(target)
        try:
            outputs = target.generate(job.prompts, job.arrivals_ms)
        except BaseException:
            if trace:
                trace.abort()
            raise
        if target.faults:
            self.draft_alive = False
        summary = _summary(header, rounds, target, outputs)
        path = trace.close(summary) if trace else None
        return JobResult(outputs, summary, path, list(target.faults), rounds,
                         trace_error=trace.error if trace else None)


def _check_job(job: Job, target: dict, draft: dict | None) -> None:
    """Bad input a job can only be checked against the loaded models: token ids beyond the vocabulary, and
    prompts + new tokens beyond a model's context. ConfigError before any work (no trace is written)."""
    from .models import check_context

    if draft is None:
        vocab = target["vocab_size"]
        for n, p in enumerate(job.prompts, start=1):
            if p and max(p) >= vocab:
                raise ConfigError("prompts", f"prompt {n} has token id {max(p)} but the target's vocabulary has "
                                             f"{vocab} tokens (ids 0..{vocab - 1})")
    arr = job.arrivals_ms
    if arr is not None and (len(arr) != len(job.prompts) or not all(0 <= float(a) < float("inf") for a in arr)):
        raise ConfigError("arrivals_ms", f"needs one finite time >= 0 (ms) per prompt: {len(arr)} times for "
                                         f"{len(job.prompts)} prompts")
    limits = {"target": target.get("max_positions")} if draft is None else {"draft": draft.get("max_positions")}
    check_context(job.prompts, job.max_new_tokens, job.mode, job.plan.num_speculative_tokens, limits)


def _draft_stub(spec: ModelSpec | None) -> dict:
    """What the trace header says about a draft that never answered this job (it died before)."""
    label = spec.label if spec else "none"
    return {"source": label, "label": label, "dtype": spec.dtype if spec else None,
            "quantize": None if not spec or spec.quantize == "none" else spec.quantize,
            "device": spec.device if spec else None, "kernels": "unknown (the draft was gone)"}


class _TraceOut:
    """The job's trace: a TraceWriter flushed after every record, so a killed target leaves whole lines in .partial.
    A write error (a full disk) stops the trace, not the run: the .partial file is cut back to its last whole
    line, `error` says why, and the outputs stay complete."""

    def __init__(self, path: str, header: dict):
        from ssd_sim.io.trace import TraceWriter

        self.writer = TraceWriter(path, header)  # ConfigError here (unwritable) is bad input, before any work
        self.error: str | None = None
        self.whole = 0  # bytes of .partial known to end with a whole line
        self._guard(lambda: None)

    def round(self, rec: dict) -> None:
        if self.error is None:
            self._guard(lambda: self.writer.round(rec))

    def close(self, summary: dict) -> str | None:
        """The final trace path, or None when writing failed (the .partial file then holds whole lines)."""
        if self.error is None:
            self._guard(lambda: self.writer.close(summary))
        return None if self.error else str(self.writer.path)

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.abort()

    def _guard(self, write: Callable[[], object]) -> None:
        try:
            write()
            if self.writer.partial.exists():  # still open (close() renames it)
                self.writer.flush()
                self.whole = self.writer.partial.stat().st_size
        except OSError as e:
            self.error = f"cannot write the trace {self.writer.partial} ({e.strerror or e}); it stops there"
            self.abort()
            with contextlib.suppress(OSError):
                os.truncate(self.writer.partial, self.whole)


def draft_worker(report, draft: ModelSpec, port: int, backend: str, core: int | None, parent: int,
                 hooks: TestHooks | None = None) -> None:
    """Rank 1: load the draft (failures go to the controller over `report`), meet the target, then answer it
    until 'stop' (or until the target goes away)."""
    _become_worker("ssd-draft", parent)
    from .draft_trace import DraftRecorder
    from .models import describe, load_model
    from .transport import Channel, DraftFault, init

    models = {}
    try:
        _use_device(draft.device, core)
        models[draft] = load_model(draft, "draft")
        info = describe(models[draft])
        if hooks is not None:
            hooks.at_load("draft")
    except ConfigError as e:
        _send(report, ("config_error", _config_payload(e)))
        os._exit(1)
    except Exception:  # noqa: BLE001 - the controller prints it in one line
        _send(report, ("error", _error_line()))
        os._exit(1)
    try:
        init(1, port, backend)
        chan = Channel(0, draft.device, backend)
        chan.send(info)
    except Exception:  # noqa: BLE001 - the target is gone during start-up: the controller reports it
        os._exit(1)
    try:
        _serve(chan, draft, models, DraftRecorder)
    except DraftFault:
        _leave(healthy=False)  # the target went away: nothing left to do
    except Exception:  # noqa: BLE001 - the target finishes autoregressively; say why in one line
        print(f"ssd-run: the draft process failed ({_error_line()}); the run finishes autoregressively",
              file=sys.stderr)
        sys.stderr.flush()
        os._exit(1)
    _leave(healthy=True)


def _serve(chan, draft: ModelSpec, models: dict, recorder_cls) -> None:
    """The draft's message loop: job / batch / spec until 'stop' (see transport's protocol)."""
    from .draft import Drafter
    from .models import describe, load_model

    recorder = None
    while True:
        msg = chan.recv(None)
        op = msg["op"]
        if op == "stop":
            return
        if op == "job":
            spec = msg.get("model") or draft
            try:
                if spec not in models:
                    models[spec] = load_model(spec, "draft")
            except ConfigError as e:
                chan.send({"error": _config_payload(e)})
                continue
            lm = models[spec]
            drafter = Drafter(lm.model, Plan.from_dict(msg["plan"]), msg["mode"], msg["seed"], lm.vocab_size)
            if msg.get("hooks") is not None:
                msg["hooks"].attach_drafter(drafter)
            recorder = recorder_cls(drafter, msg.get("log_topn", 0))  # replies carry ranks, timings, dists
            chan.send({"ok": True, "info": describe(lm)})
        elif op == "add":
            recorder.add(msg["seqs"], msg["done"])
        elif op == "spec":
            chan.send(recorder.reply(msg))
            recorder.speculate()


def _leave(healthy: bool) -> None:
    """Tear down the process group when both sides are fine (a dead peer can hang it), then exit at once: every
    result has been sent, and the interpreter's own teardown of torch and transformers took ~2 s per run."""
    import torch.distributed as dist

    sys.stdout.flush()
    sys.stderr.flush()
    if healthy and dist.is_initialized():
        dist.destroy_process_group()
    os._exit(0)


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
    """The summary line: decode tokens / decode wall time (prefill reported apart), end-to-end tok/s (every
    generated token / the job's wall time, prefill and arrival waits included), per-request times and their
    TTFT / TPOT percentiles (ms, defined as in ssd_sim.sim.metrics), plus summarize()."""
    from ssd_sim.io.trace import Trace, summarize

    wall_s = sum(r["timings_ms"]["round"] for r in rounds) / 1e3
    tokens = sum(s["committed"] for r in rounds for s in r["seqs"])
    metrics = summarize(Trace(header, rounds, {"wall_s": wall_s} if wall_s else None)).to_dict()
    generated = sum(len(o) for o in outputs)
    job_s = max((r["finish_ms"] for r in target.requests), default=0.0) / 1e3
    return {**metrics, "tokens": tokens, "wall_s": wall_s, "tok_s": tokens / wall_s if wall_s else 0.0,
            "rounds": len(rounds), "faults": list(target.faults), "prefill_ms": target.prefill_ms,
            "generated_tokens": generated, "job_s": job_s, "e2e_tok_s": generated / job_s if job_s else 0.0,
            **request_percentiles(target.requests), "requests": sorted(target.requests, key=lambda r: r["seq"])}


def request_percentiles(requests: list[dict]) -> dict:
    """TTFT = first token - arrival and TPOT = (finish - first token) / (output tokens - 1), p50 / p90 / p99 (ms)."""
    import numpy as np

    ttft = [r["first_token_ms"] - r["arrival_ms"] for r in requests]
    tpot = [(r["finish_ms"] - r["first_token_ms"]) / (r["output_tokens"] - 1) for r in requests
            if r["output_tokens"] > 1]
    out = {}
    for name, xs in (("ttft_ms", ttft), ("tpot_ms", tpot)):
        qs = np.percentile(xs, [50, 90, 99]).tolist() if xs else [None] * 3
        out.update({f"{name}_p{p}": q for p, q in zip((50, 90, 99), qs, strict=True)})
    return out


def default_trace_path(mode: str) -> Path:
    """runs/<mode>-<UTC timestamp>.jsonl under the current directory."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return Path("runs") / f"{mode}-{stamp}.jsonl"
