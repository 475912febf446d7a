"""The controller: spawn the target and draft processes, run jobs on them, supervise both, stop them.

The pieces live beside it, one job each: `jobs` (Job, JobResult and the checks against the loaded models),
`workers` (the two processes' entry points and loops), `runlog` (a job's trace: header, round records, summary
and its request metrics).

    with Session(ModelSpec(path=...), ModelSpec(path=...)) as s:     # loads each model once
        result = s.run(Job(plan, prompts, max_new_tokens=64, trace_path="runs/x.jsonl"))   # mode: plan.mode

Processes: this one (the controller: prompts, progress, results) <-pipe-> target (rank 0) <-torch.distributed->
draft (rank 1); the draft also has a one-way pipe to the controller for its start-up report. Both workers are
forked from a fork server that imported torch and transformers once (worker_context), so every Session after
the first in a process starts in about a second. On CPU the target
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
import signal
import threading
import time
from collections.abc import Callable, Iterator

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.outputs import claim_outputs

from .hooks import TestHooks
from .jobs import Job, JobResult, WorkerError  # noqa: F401  (the runtime's API: Session runs Jobs)
from .models import ModelSpec
from .protocol import Ctl
from .runlog import default_trace_path, request_percentiles  # noqa: F401  (re-exported for the CLI and tests)
from .workers import draft_worker, target_worker

# What the fork server imports once, so that each worker starts from a copy instead of importing torch and
# transformers again (~5-8 s per worker on a CPU host; measured 9.0 s -> see bench/session_start.py).
PRELOAD = ["torch", "transformers", "transformers.modeling_utils", "ssd_runtime.workers", "ssd_runtime.models",
           "ssd_runtime.target", "ssd_runtime.draft", "ssd_runtime.draft_trace", "ssd_runtime.transport"]


def worker_context():
    """The multiprocessing context the workers start from: a fork server that has imported PRELOAD (it never
    touches a GPU, so CUDA is as safe as with spawn; it exits when this process does), or spawn where the
    platform has no fork server. SSD_START_METHOD=spawn forces spawn."""
    method = os.environ.get("SSD_START_METHOD", "forkserver")
    if method not in mp.get_all_start_methods():
        method = "spawn"
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


STOP_GRACE_S = 10.0  # close(): how long a healthy worker gets to leave on its own before it is killed


class Session:
    """A target process and (optionally) a draft process, kept alive across jobs (see the module docstring)."""

    def __init__(self, target: ModelSpec, draft: ModelSpec | None = None, pin: bool = True,
                 start_timeout_s: float = 1800.0, draft_timeout_s: float | None = 120.0,
                 hooks: TestHooks | None = None):
        from .transport import backend_for, free_port

        ctx = worker_context()
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
        WorkerError if the target process dies or fails. The job's trace is claimed for the run (another process
        writing the same trace is ConfigError; ssd_sim.io.outputs)."""
        with claim_outputs({"trace": job.trace_path}):
            return self._run(job, on_progress)

    def _run(self, job: Job, on_progress: Callable[[int], None] | None) -> JobResult:
        try:
            self.conn.send((Ctl.JOB, job))
        except (BrokenPipeError, OSError):
            raise self._target_died() from None
        while True:
            kind, payload = self._recv()
            if kind == Ctl.PROGRESS:
                if on_progress:
                    on_progress(payload)
            elif kind == Ctl.RESULT:
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
                if kind == Ctl.READY:
                    return payload
                if kind == Ctl.LOADED:
                    loaded_at = time.monotonic()
                    continue
                if kind == Ctl.ERROR:  # at start-up, often the draft's death seen from the target: say that
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
        if kind == Ctl.CONFIG_ERROR:
            raise ConfigError(*payload)
        raise WorkerError(f"the {role} process failed: {payload}")

    def _stop_gracefully(self) -> None:
        if self.tproc.pid is not None and self.tproc.is_alive():
            try:
                self.conn.send((Ctl.STOP, None))
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
