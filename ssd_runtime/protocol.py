"""Every message between the processes of a run, declared once.

Controller <-> target worker (a multiprocessing pipe): `(Ctl, payload)` pairs.
    controller -> target   (JOB, Job), (STOP, None)
    target -> controller   (LOADED, None) the target model is loaded; (READY, {"target": info, "draft": info|None});
                           (PROGRESS, tokens); (RESULT, JobResult); (ERROR, one line); (CONFIG_ERROR, (field, message))
    draft -> controller    (ERROR, line) / (CONFIG_ERROR, (field, message)) while it loads

Target (rank 0) <-> draft (rank 1), over transport.Channel (torch.distributed point to point):
    draft -> target   DraftHello once, after joining the group
    target -> draft   JobMsg -> JobAnswer;  AddMsg (no answer);  SpecMsg -> Reply;  StopMsg
A Key is (seq, k, t*): the sequence, the draft tokens it accepted last round (-1 before its first round) and the
bonus token t* it committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ssd_sim.plan.plan import Mode

Key = tuple[int, int, int]  # (seq, k accepted last round or -1, bonus token t*)


class Ctl(StrEnum):
    """The kinds of controller <-> worker pipe messages (see the module docstring)."""

    JOB = "job"
    STOP = "stop"
    LOADED = "loaded"
    READY = "ready"
    PROGRESS = "progress"
    RESULT = "result"
    ERROR = "error"
    CONFIG_ERROR = "config_error"


class ProbeCtl(StrEnum):
    """The controller <-> probe process commands and answers (ssd_runtime.probe), beside Ctl's READY / ERROR /
    CONFIG_ERROR / STOP."""

    TIME = "time"  # time these shapes -> TIMES
    TIMES = "times"
    LOOP = "loop"  # run this shape until anything arrives -> LOOPING at once, LOOPED (its times) at the end
    LOOPING = "looping"
    LOOPED = "looped"
    TRANSFER = "transfer"  # round trips with the other probe process -> TRANSFER (target-side ms)
    IDLE = "idle"  # time these shapes after sleeps and back to back -> IDLED
    IDLED = "idled"
    EXIT = "exit"


class Message:
    """Base of the target <-> draft messages: dataclasses whose tensors the Channel sends raw."""


@dataclass(frozen=True)
class DraftHello(Message):
    """The draft joined the group: its model (models.describe)."""

    info: dict


@dataclass(frozen=True)
class JobMsg(Message):
    """Start a job on the draft: its plan (Plan.to_dict(), the mode included), seed and model."""

    plan: dict
    seed: int
    model: Any = None  # ModelSpec of the job's draft (None: the one loaded at start-up)
    hooks: Any = None  # TestHooks (tests only)
    log_topn: int = 0  # the draft's top-N per stopping position go into each Reply (0: off)
    truncation: Any = None  # sampling.Truncation of the draft's q (None = off)

    @property
    def mode(self) -> Mode:
        return Mode(self.plan["mode"])


@dataclass(frozen=True)
class JobAnswer(Message):
    """The draft took the job (info: its model) or refused it (error: (field, message) of a ConfigError)."""

    info: dict | None = None
    error: tuple[str, str] | None = None


@dataclass(frozen=True)
class AddMsg(Message):
    """New sequences (seq, prompt ids) to prefill, after freeing the rows of the finished ones."""

    seqs: list[tuple[int, list[int]]]
    done: list[Key] = field(default_factory=list)


@dataclass(frozen=True)
class SpecMsg(Message):
    """Round `round`: one key per sequence in flight (their proposals are wanted) and the keys of those that
    finished since the last request."""

    round: int
    keys: list[Key]
    done: list[Key] = field(default_factory=list)


@dataclass(frozen=True)
class StopMsg(Message):
    """The session is over."""


@dataclass(frozen=True)
class Reply(Message):
    """The draft's answer to a SpecMsg, in key order.

    The proposal (Drafter.propose): tokens [n, K] long (None when there are no keys); q [m, K, V] for the rows
    listed in q_rows (T > 0, rows not from the fast backup: those are point masses); per row hit (served from
    the cache), lookup_hit (found in the cache, even if jit_redraft = "batch" threw it away) and backup (its
    kind); hit and backup are None outside SSD. The trace's bookkeeping (draft_trace.DraftRecorder): ranks
    {seq: bonus rank or None}, timings and prev_timings {phase: ms}, dists {seq: top-N per stopping position},
    syncs (the draft's host reads since its previous reply: the speculation after it and this reply), graphs (its
    CUDA graphs' counts, GraphCache.counts; None when it runs without graphs), warmups (its forwards since its previous
    reply that ran before their graph replayed, prefills left out; None without graphs).
    """

    tokens: Any  # torch.Tensor | None
    q: Any = None
    q_rows: list[int] = field(default_factory=list)
    hit: list[bool | None] = field(default_factory=list)
    lookup_hit: list[bool] = field(default_factory=list)
    backup: list[str | None] = field(default_factory=list)
    ranks: dict[int, int | None] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    prev_timings: dict[str, float] = field(default_factory=dict)
    dists: dict[int, list] = field(default_factory=dict)
    syncs: int | None = None  # the draft's host reads of device tensors since its last reply (syncs.SYNCS)
    graphs: dict | None = None  # the draft's GraphCache.counts() (three ints); None without CUDA graphs
    warmups: int | None = None  # the draft's graph warm-up forwards since its last reply (GraphCache.warmups)
