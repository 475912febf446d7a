"""The two worker processes: the target (rank 0, runs jobs sent by the controller) and the draft (rank 1,
answers the target). Each ignores SIGINT, dies with the controller, and leaves at once once done."""

from __future__ import annotations

import os
import signal
import sys
import traceback
from pathlib import Path

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import usable_cores
from ssd_sim.io.records import RoundRecord
from ssd_sim.plan.plan import Plan

from .hooks import TestHooks
from .jobs import Job, JobResult, check_job
from .models import ModelSpec
from .protocol import AddMsg, Ctl, DraftHello, JobAnswer, JobMsg, SpecMsg, StopMsg
from .runlog import TraceOut, draft_stub, job_header, job_summary


def _become_worker(name: str, controller: int) -> None:
    """Start of a worker process: ignore SIGINT (the controller handles Ctrl-C), die with the controller (Linux),
    and show `name` in ps / top.

    The worker's parent is the fork server (run.worker_context), which exits when the controller does, or the
    controller itself under spawn: the death signal follows that parent, and a worker whose parent or
    controller is already gone leaves at once."""
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
            libc.prctl(15, name.encode()[:15])  # PR_SET_NAME
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent or not _alive(controller):  # gone before the death signal took effect
        os._exit(0)


def _alive(pid: int) -> bool:
    """The process runs (PermissionError: another user's process took the pid, so the controller is gone)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


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
                  core: int | None, controller: int) -> None:
    """Rank 0: load the target, meet the draft, then run jobs sent by the controller until 'stop'."""
    _become_worker("ssd-target", controller)
    from .models import describe, load_model
    from .transport import Channel, init

    worker = None
    try:
        cores = usable_cores()  # before pinning: the cores this run has, for the trace's host record
        _use_device(target.device, core)
        models = {target: load_model(target, "target")}
        chan, draft_info = None, None
        if draft is not None:
            _send(conn, (Ctl.LOADED, None))  # from now on the controller gives the draft --draft-timeout to show up
            init(0, port, backend)
            chan = Channel(1, target.device, backend)
            draft_info = chan.recv(None).info  # DraftHello
        _send(conn, (Ctl.READY, {"target": describe(models[target]), "draft": draft_info}))
        worker = _TargetWorker(conn, models, target, draft, chan, cores)
        while True:
            try:
                kind, job = conn.recv()
            except (EOFError, OSError):  # the controller is gone
                os._exit(0)
            if kind == Ctl.STOP:
                worker.stop()
                break
            worker.run_job(job)
    except ConfigError as e:
        _send(conn, (Ctl.CONFIG_ERROR, _config_payload(e)))
    except Exception:  # noqa: BLE001 - report anything to the controller, in one line
        _send(conn, (Ctl.ERROR, _error_line()))
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
            _send(self.conn, (Ctl.CONFIG_ERROR, _config_payload(e)))
        except Exception:  # noqa: BLE001
            _send(self.conn, (Ctl.ERROR, _error_line()))
        else:
            _send(self.conn, (Ctl.RESULT, result))

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
        from .modes import decoding
        from .transport import DraftFault, ProcessLink

        if not decoding(job.mode).uses_draft:
            return None, None, None
        if not self.draft_alive:
            raise ConfigError("mode", f"{job.mode} needs the draft process, which is not running "
                                      "(no draft model, or it failed earlier); use --mode ar or restart")
        link = ProcessLink(self.chan, job.draft_timeout_s)
        msg = JobMsg(job.plan.to_dict(), job.seed, job.draft, job.hooks, job.log_topn, job.truncation)
        try:
            answer = link.job(msg)
        except DraftFault as e:
            self.draft_alive = False
            return None, None, f"job start: the draft did not take the job ({e}); finishing autoregressively"
        if answer.error is not None:
            raise ConfigError(*answer.error)
        check_same_vocab(target_info, answer.info)
        return link, answer.info, None

    def _run(self, job: Job) -> JobResult:
        from .models import describe
        from .target import Target, TargetConfig

        lm = self._model(job.target)
        target_info = describe(lm)
        check_job(job, target_info, None)
        link, draft_info, fault = self._open_draft(job, target_info)
        if draft_info is not None:
            check_job(job, target_info, draft_info)
        header = job_header(job, target_info, draft_info or draft_stub(job.draft or self.draft), self.cores)
        trace = TraceOut(job.trace_path, header) if job.trace_path else None
        rounds: list[RoundRecord] = []

        def on_round(rec: RoundRecord) -> None:
            rounds.append(rec)
            if trace:
                trace.round(rec)

        cfg = TargetConfig(job.plan, job.max_new_tokens, job.seed, () if job.ignore_eos else tuple(lm.eos_token_ids),
                           job.forced_acceptance, job.log_topn if link is not None else 0, job.truncation)
        target = Target(lm.model, cfg, link, on_round, lambda n: _send(self.conn, (Ctl.PROGRESS, n)))
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
        summary = job_summary(header, rounds, target, outputs)
        path = trace.close(summary) if trace else None
        return JobResult(outputs, summary, path, list(target.faults), rounds,
                         trace_error=trace.error if trace else None)


def draft_worker(report, draft: ModelSpec, port: int, backend: str, core: int | None, controller: int,
                 hooks: TestHooks | None = None) -> None:
    """Rank 1: load the draft (failures go to the controller over `report`), meet the target, then answer it
    until 'stop' (or until the target goes away)."""
    _become_worker("ssd-draft", controller)
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
        _send(report, (Ctl.CONFIG_ERROR, _config_payload(e)))
        os._exit(1)
    except Exception:  # noqa: BLE001 - the controller prints it in one line
        _send(report, (Ctl.ERROR, _error_line()))
        os._exit(1)
    try:
        init(1, port, backend)
        chan = Channel(0, draft.device, backend)
        chan.send(DraftHello(info))
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
    """The draft's message loop: JobMsg / AddMsg / SpecMsg until StopMsg (see protocol.py)."""
    from .draft import Drafter
    from .models import describe, load_model
    from .sampling import NO_TRUNCATION
    from .syncs import SYNCS

    SYNCS.side = "draft"  # this process's host reads are the draft's
    recorder = None
    while True:
        msg = chan.recv(None)
        if isinstance(msg, StopMsg):
            return
        if isinstance(msg, JobMsg):
            spec = msg.model or draft
            try:
                if spec not in models:
                    models[spec] = load_model(spec, "draft")
            except ConfigError as e:
                chan.send(JobAnswer(error=_config_payload(e)))
                continue
            lm = models[spec]
            drafter = Drafter(lm.model, Plan.from_dict(msg.plan), msg.seed, lm.vocab_size,
                              msg.truncation or NO_TRUNCATION)
            if msg.hooks is not None:
                msg.hooks.attach_drafter(drafter)
            recorder = recorder_cls(drafter, msg.log_topn)  # replies carry ranks, timings, dists
            chan.send(JobAnswer(info=describe(lm)))
        elif isinstance(msg, AddMsg):
            recorder.add(msg.seqs, msg.done)
        elif isinstance(msg, SpecMsg):
            chan.send(recorder.reply(msg))
            recorder.speculate()
        else:
            raise TypeError(f"unexpected message {type(msg).__name__} (see protocol.py)")


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
