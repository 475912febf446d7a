"""Latency models: how long a forward pass takes as a function of rows (sequences) and tokens per row.

One forward of a model on its device(s), in ms, with N = rows * tokens processed tokens:

    t = fixed_ms + max(memory_ms + row_ms * rows + expert_ms * (1 - (1 - expert_share) ** N), compute_ms_per_token * N)
        + token_ms * N ** token_exponent + multi_token_ms * [N > 1]

- fixed_ms: launch / framework / collective overhead paid once per forward;
- max(memory, compute): the roofline (weights streamed once per forward vs FLOPs at achievable peak); memory
  also reads each row's KV cache (row_ms, at the context the profile was built for) and, in a mixture-of-experts
  model, the experts the N tokens touch (expert_ms = all experts, expert_share = experts per token / experts);
  row_ms and expert_ms come from specs (model.roofline) and are 0 in measured profiles;
- token_ms * N^token_exponent: per-token work not hidden under the roofline (sampling over the
  vocabulary, attention with masks, small kernels); exponent < 1 when more rows run more efficiently;
- multi_token_ms: paid once when a forward processes more than one token (on CPUs the Linear layers switch
  from matrix-vector to matrix-matrix kernels, so 2 tokens cost much more than 1 but 5 barely more than 2).
A GPU preset is mostly roofline + fixed; a CPU profile is mostly fixed + token term (see presets/).

Interference: in SSD the draft computes while the target verifies. On a CPU the two cores share memory
bandwidth, so the target's forward runs slower while the draft works: calibrated on one 2-core host, +46%
while the draft decodes one branch row per step (a matrix-vector stream of its weights) and +17% while it
decodes several rows or a multi-token glue; +1% / +5% on another host of the same kind. LatencyModel keeps the two fractions (verify_slowdown_one_row,
verify_slowdown_rows) and `overlapped_ms` turns them into the verify's duration given the draft's phases;
the draft's glue and branch decode, which only ever run beside a verify, take draft_slowdown longer than
its idle forwards (SD drafting, jit backups).

After an idle wait: on some hosts a forward that follows a sleep costs more than one that follows another forward (a
KVM guest's halted vCPU, a clock that dropped while idle). In SD each model sleeps while the other works; in SSD the
target sleeps while a late reply comes and the draft while a long verify runs. The probe times each model's one-row
forwards after sleeps of a few gaps (ssd_runtime.probe); target_after_idle / draft_after_idle keep the extra ms per
gap, and the first forward after a gap g pays wake_ms(g): linear from 0 ms at g = 0 through the probed gaps, flat
beyond the longest. On one Intel Xeon host both models paid ~35-55 ms after any sleep of 20-900 ms whatever the
forward's length (the target's 700 ms forward +5-8%, the draft's 200 ms one +17-21%: an extra time, not a fraction).
The gaps are those of a round without wake costs (first order) and of a round without a miss: an SSD round whose
reply waits for a jit backup pays the wake of its hit-round gap (the cost is flat beyond ~50 ms of sleep).

The glue after a jit backup: a jit backup decodes t*, s_1..s_{K-1} into the draft's KV cache, so when it redrafted
every row of the batch (every row missed, or jit_redraft = "batch") ssd-run's next glue feeds s_K alone: one token
per row, not K + 1 (ssd_runtime.draft.DraftWorker.glue; measured on the Zen 4 guest at b = 1 and K = 2, 142-145 ms
against 199-204 after a hit). The `after_jit` argument of the SSD methods prices that round. The reference engine
re-reads all K + 1 tokens in every round (draft_runner, seqlen_q = K + 1): jit_glue_full.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
from numpy.typing import ArrayLike

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.derived import unchecked_replace

MAX_MS = 1e7  # a forward term beyond ~3 hours is a unit error, not a latency (it made tok/s 0 and divisions fail)
_SCALARS = (int, float)  # exact types ForwardLatency.__call__ computes without numpy (numpy scalars take its path)

MS_TERMS = ("fixed_ms", "memory_ms", "compute_ms_per_token", "token_ms", "multi_token_ms", "row_ms", "expert_ms")


@dataclass(frozen=True)
class ForwardLatency:
    """Latency (ms) of one forward pass over `rows` sequences x `tokens` tokens each."""

    fixed_ms: float = 0.0  # per-forward overhead (ms)
    memory_ms: float = 0.0  # weight/KV streaming floor of the roofline (ms)
    compute_ms_per_token: float = 0.0  # FLOP time per processed token at achievable peak (ms/token)
    token_ms: float = 0.0  # per-token work outside the roofline (ms at N = 1)
    token_exponent: float = 1.0  # how that work scales with N (1 = linear)
    multi_token_ms: float = 0.0  # extra once N > 1 (CPU: matrix-matrix instead of matrix-vector kernels) (ms)
    row_ms: float = 0.0  # KV cache read per row (sequence) at the profile's context (ms)
    expert_ms: float = 0.0  # MoE: reading every routed expert of every layer (ms)
    expert_share: float = 0.0  # MoE: experts per token / experts per layer (each token touches this share)

    def __post_init__(self):
        for f in fields(ForwardLatency):  # a subclass's own fields check themselves (model.table)
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= MAX_MS):
                raise ConfigError(f.name, f"must be a number in 0..{MAX_MS:g} (ms), got {v!r}")
        if not 0.0 < self.token_exponent <= 2.0:
            raise ConfigError("token_exponent", f"must be in (0, 2], got {self.token_exponent}")
        if self.expert_share > 1.0:
            raise ConfigError("expert_share", f"must be in [0, 1] (experts per token / experts), got {self.expert_share}")

    def __call__(self, rows: ArrayLike, tokens: ArrayLike = 1):
        """Forward latency in ms (broadcasts over numpy arrays of rows and tokens)."""
        if type(rows) in _SCALARS and type(tokens) in _SCALARS:  # the planner's and the draws' many scalar calls
            return self._at(float(rows), float(tokens))
        r = np.asarray(rows, dtype=float)
        n = r * np.asarray(tokens, dtype=float)
        memory = self.memory_ms + self.row_ms * r
        if self.expert_ms:
            memory = memory + self.expert_ms * (1.0 - (1.0 - self.expert_share) ** np.maximum(n, 1.0))
        t = (
            self.fixed_ms
            + np.maximum(memory, self.compute_ms_per_token * n)
            + self.token_ms * n**self.token_exponent
            + self.multi_token_ms * (n > 1)
        )
        return float(t) if np.ndim(t) == 0 else t

    def _at(self, r: float, tokens: float) -> float:
        """__call__ on one shape in plain floats: the same operations in the same order, so the same number (there,
        a shape of scalars is numpy scalars, whose powers are the C library's, as Python's are)."""
        n = r * tokens
        memory = self.memory_ms + self.row_ms * r
        if self.expert_ms:
            memory = memory + self.expert_ms * (1.0 - (1.0 - self.expert_share) ** max(n, 1.0))
        return (self.fixed_ms + max(memory, self.compute_ms_per_token * n) + self.token_ms * n**self.token_exponent
                + (self.multi_token_ms if n > 1 else 0.0))

    @classmethod
    def roofline(
        cls,
        params_b: float,
        bytes_per_param: float,
        devices: int,
        hbm_tb_s: float,
        peak_tflops: float,
        mfu: float = 0.6,
        fixed_ms: float = 0.0,
        token_ms: float = 0.0,
        token_exponent: float = 1.0,
    ) -> ForwardLatency:
        """Roofline from specs: params (billions) split over `devices` (tensor parallel).

        memory_ms = weight bytes per device / HBM bandwidth; compute = 2 params FLOPs per token at mfu x peak.
        """
        memory_ms = params_b * 1e9 * bytes_per_param / devices / (hbm_tb_s * 1e12) * 1e3
        compute = 2.0 * params_b * 1e9 / devices / (peak_tflops * 1e12 * mfu) * 1e3
        return cls(fixed_ms, memory_ms, compute, token_ms, token_exponent)

    def scaled(self, factor: float) -> ForwardLatency:
        """This forward `factor` times slower: every ms term scaled, the exponent and the expert share kept."""
        # unchecked for a finite factor > 0 (model.derived); a subclass (model.table) builds caches in its checks
        fast = type(self) is ForwardLatency and 0.0 < factor < math.inf
        return (unchecked_replace if fast else replace)(self, **{f: getattr(self, f) * factor for f in MS_TERMS})

    def to_dict(self) -> dict:
        """The fields; the spec-only terms (row_ms, expert_ms, expert_share) only when set, so measured profiles
        keep their format."""
        d = asdict(self)
        for name in ("row_ms", "expert_ms", "expert_share"):
            if not d[name]:
                d.pop(name)
        return d


@dataclass(frozen=True)
class LatencyModel:
    """Latencies of the target and the draft devices plus per-round overheads, all in ms.

    All public methods take the batch size b (sequences) and return ms.
    """

    target: ForwardLatency
    draft: ForwardLatency
    target_devices: int = 1  # devices the target occupies (tensor parallel degree)
    round_overhead_ms: float = 0.0  # target-side sampling, ratio test, commit, scheduling per step
    transfer_ms: float = 0.0  # SSD: one request + one reply between target and draft devices
    lookup_ms: float = 0.0  # SSD: speculation-cache lookup on the draft
    fast_backup_ms: float = 0.0  # SSD: producing random backup tokens
    sd_transfer: bool = False  # SD drafts on another device/process and pays a transfer per round
    sd_transfer_ms: float | None = None  # SD's per-round request + reply when measured apart (None: transfer_ms)
    sd_extra_forward: bool = False  # SD runs K + 1 draft forwards: the last caches the K-th token (reference engine)
    verify_slowdown_one_row: float = 0.0  # SSD: target forward slower by this fraction while the draft decodes 1 row
    verify_slowdown_rows: float = 0.0  # ... while it decodes several rows per step or its multi-token glue
    draft_slowdown: float = 0.0  # SSD: the draft's glue and branch decode slower by this fraction (target busy)
    jit_glue_full: bool = False  # SSD: the glue re-reads K + 1 tokens even after a jit backup cached K (reference)
    target_after_idle: tuple[tuple[float, float], ...] = ()  # ((sleep ms, extra ms of the next forward), ...)
    draft_after_idle: tuple[tuple[float, float], ...] = ()  # the same for the draft (module docstring)

    def __post_init__(self):
        for name in ("target_after_idle", "draft_after_idle"):
            object.__setattr__(self, name, _after_idle_pairs(getattr(self, name), name))
        if int(self.target_devices) != self.target_devices or self.target_devices < 1:
            raise ConfigError("target_devices", f"must be an integer >= 1, got {self.target_devices!r}")
        for name in ("round_overhead_ms", "transfer_ms", "lookup_ms", "fast_backup_ms", "verify_slowdown_one_row",
                     "verify_slowdown_rows", "draft_slowdown"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ConfigError(name, f"must be a finite number >= 0, got {v!r}")
        v = self.sd_transfer_ms
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ConfigError("sd_transfer_ms", f"must be a finite number >= 0 or null, got {v!r}")
        for role in ("target", "draft"):
            if not isinstance(getattr(self, role), ForwardLatency):
                raise ConfigError(f"latency.{role}", "must be a forward-latency object (fixed_ms, memory_ms, ...)")
            if getattr(self, role)(1, 1) <= 0:  # a forward that takes no time predicts infinite tok/s
                raise ConfigError(f"latency.{role}", "every term is 0 ms, so a forward would take no time: "
                                  "give measured or roofline latencies (ssd-plan calibrate writes them)")

    def wake_ms(self, role: str, gap_ms: ArrayLike):
        """The extra ms of `role`'s first forward after an idle gap of gap_ms (module docstring; 0 unmeasured)."""
        pairs = self.target_after_idle if role == "target" else self.draft_after_idle
        if not pairs:
            return np.zeros_like(np.asarray(gap_ms, dtype=float))
        return np.interp(gap_ms, [0.0, *(g for g, _ in pairs)], [0.0, *(e for _, e in pairs)])

    def ar_step_ms(self, b: ArrayLike):
        """One autoregressive step of the target for b sequences (ms)."""
        return self.target(b, 1) + self.round_overhead_ms

    def verify_ms(self, b: ArrayLike, K: ArrayLike):
        """One verification forward over b sequences x (K + 1) tokens, plus the per-step overhead (ms)."""
        return self.target(b, np.asarray(K) + 1) + self.round_overhead_ms

    def sd_verify_ms(self, b: ArrayLike, K: ArrayLike, p_all_accepted: ArrayLike, fresh: ArrayLike = 0):
        """SD's verification (ms): verify_ms plus the target's wake after idling through the round's drafting
        (fresh: as sd_draft_ms)."""
        if not self.target_after_idle:
            return self.verify_ms(b, K)
        return self.verify_ms(b, K) + self.wake_ms("target", self._sd_draft_alone_ms(b, K, p_all_accepted, fresh))

    def sd_draft_ms(self, b: ArrayLike, K: ArrayLike, p_all_accepted: ArrayLike, fresh: ArrayLike = 0):
        """Synchronous SD drafting per round: K sequential draft steps over b rows (+ transfer if remote) (ms),
        the first after the draft idled through the verify (its wake).

        The first step feeds each row what its KV cache lacks: the last round's bonus, and after a round that
        accepted all K also the K-th draft token (sampled, never fed). So the batch's first step is a 2-token
        forward when any of its rows accepted all K last round, probability 1 - (1 - p_all_accepted)^(b - fresh),
        priced at its expectation (p_all_accepted = P(k = K) per row and round; fresh: rows in their request's first
        round, which follows the prefill and feeds one token). With sd_extra_forward (reference engine) a
        (K + 1)-th one-token step feeds the K-th token every round instead.
        """
        alone = self._sd_draft_alone_ms(b, K, p_all_accepted, fresh)
        if not self.draft_after_idle:
            return alone
        return alone + self.wake_ms("draft", self.verify_ms(b, K) + (self.sd_round_trip_ms if self.sd_transfer else 0.0))

    def _sd_draft_alone_ms(self, b: ArrayLike, K: ArrayLike, p_all_accepted: ArrayLike, fresh: ArrayLike = 0):
        """sd_draft_ms without the draft's wake (ms)."""
        K = np.asarray(K)
        if self.sd_extra_forward:
            steps = (K + 1) * self.draft(b, 1)
        else:
            after = np.maximum(np.asarray(b) - np.asarray(fresh), 0)  # rows whose last round may have accepted all K
            p_two = 1.0 - (1.0 - np.asarray(p_all_accepted, dtype=float)) ** after
            steps = (K - 1) * self.draft(b, 1) + (1.0 - p_two) * self.draft(b, 1) + p_two * self.draft(b, 2)
        return steps + (self.sd_round_trip_ms if self.sd_transfer else 0.0)

    @property
    def sd_round_trip_ms(self) -> float:
        """SD's request + reply per round (ms): measured on SD rounds where calibrated, else SSD's transfer_ms."""
        return self.transfer_ms if self.sd_transfer_ms is None else self.sd_transfer_ms

    def glue_ms(self, b: ArrayLike, K: ArrayLike, after_jit: bool = False):
        """SSD glue forward over b rows (ms): the draft re-reads the K + 1 tokens it just proposed, or only s_K after
        a jit backup that redrafted every row (after_jit; not with jit_glue_full: module docstring)."""
        return self.draft(b, 1 if after_jit and not self.jit_glue_full else np.asarray(K) + 1)

    def branch_ms(self, rows: ArrayLike, K: ArrayLike):
        """SSD branch decode: K draft steps over all branch rows at once (ms)."""
        return np.asarray(K) * self.draft(rows, 1)

    def primary_ms(self, b: ArrayLike, K: ArrayLike, budget: ArrayLike, draft_devices: int = 1,
                   after_jit: bool = False):
        """SSD primary speculation after replying: glue + branch decode of b x budget rows (ms), plus the draft's
        wake when it idled for the request (ssd_wakes_ms). after_jit: the reply was a jit backup of every row.

        With several draft devices each runs the glue for the whole batch and its share of branches.
        """
        alone = self._primary_alone_ms(b, K, budget, draft_devices, after_jit)
        return alone + self.ssd_wakes_ms(b, K, budget, draft_devices, after_jit)[1] if self.draft_after_idle else alone

    def _primary_alone_ms(self, b: ArrayLike, K: ArrayLike, budget: ArrayLike, draft_devices: int = 1,
                          after_jit: bool = False):
        """primary_ms without the wake (ms)."""
        rows = np.ceil(np.asarray(b) * np.asarray(budget) / draft_devices)
        alone = self.glue_ms(b, K, after_jit) + np.where(np.asarray(budget) > 0, self.branch_ms(rows, K), 0.0)
        return alone * (1.0 + self.draft_slowdown)  # it runs while the target verifies

    def ssd_wakes_ms(self, b: ArrayLike, K: ArrayLike, budget: ArrayLike, draft_devices: int = 1,
                     after_jit: bool = False):
        """(target's, draft's) wake per SSD round (ms): in a round without a miss the target waits for the reply
        max(t_p - t_v, 0) + transfer + lookup, and the draft waits for the request max(t_v - t_p, 0) + half the
        transfer before its glue (t_v, t_p: the round's verify and primary speculation without wakes)."""
        if not (self.target_after_idle or self.draft_after_idle):
            zero = np.zeros(np.broadcast(np.asarray(b), np.asarray(budget)).shape)
            return zero, zero
        return self._wakes(self._ssd_verify_alone_ms(b, K, budget, draft_devices, after_jit),
                           self._primary_alone_ms(b, K, budget, draft_devices, after_jit))

    def _wakes(self, t_v, t_p):
        """ssd_wakes_ms from the round's verify and primary speculation without wakes (ms)."""
        target = self.wake_ms("target", np.maximum(t_p - t_v, 0.0) + self.transfer_ms + self.lookup_ms)
        return target, self.wake_ms("draft", np.maximum(t_v - t_p, 0.0) + self.transfer_ms / 2)

    def ssd_phases_ms(self, b: ArrayLike, K: ArrayLike, budget: ArrayLike, draft_devices: int = 1,
                      after_jit: bool = False):
        """(ssd_verify_ms, primary_ms, the draft's wake) in one pass over the round (ms)."""
        t_v = self._ssd_verify_alone_ms(b, K, budget, draft_devices, after_jit)
        t_p = self._primary_alone_ms(b, K, budget, draft_devices, after_jit)
        if not (self.target_after_idle or self.draft_after_idle):
            return t_v, t_p, 0.0
        target, draft = self._wakes(t_v, t_p)
        return t_v + target, t_p + draft, draft

    def ssd_verify_ms(self, b: ArrayLike, K: ArrayLike, budget: ArrayLike, draft_devices: int = 1,
                      after_jit: bool = False):
        """SSD verification while the draft runs its glue, then its branch decode (ms): verify_ms slowed by
        interference for as long as the draft works (see overlapped_ms), plus the target's wake when it idled for
        the reply (ssd_wakes_ms). Equals verify_ms without interference and wakes."""
        alone = self._ssd_verify_alone_ms(b, K, budget, draft_devices, after_jit)
        return alone + self.ssd_wakes_ms(b, K, budget, draft_devices, after_jit)[0] if self.target_after_idle else alone

    def _ssd_verify_alone_ms(self, b: ArrayLike, K: ArrayLike, budget: ArrayLike, draft_devices: int = 1,
                             after_jit: bool = False):
        """ssd_verify_ms without the wake (ms)."""
        t_v = self.verify_ms(b, K)
        if not (self.verify_slowdown_one_row or self.verify_slowdown_rows):
            return t_v
        rows = np.ceil(np.asarray(b) * np.asarray(budget) / draft_devices)
        d = 1.0 + self.draft_slowdown  # the draft's phases as they run beside the verify
        branch = np.where(rows > 0, self.branch_ms(np.maximum(rows, 1), K), 0.0) * d
        s_branch = np.where(rows == 1, self.verify_slowdown_one_row, self.verify_slowdown_rows)
        # the glue slows the verify as multi-row steps do, also the one-token glue after a jit backup (an assumption:
        # the interference fit, model.interference, takes it so; it is 20-30% of the draft's work in a K = 2 round)
        glue = self.glue_ms(b, K, after_jit) * d
        return overlapped_ms(t_v, [(glue, self.verify_slowdown_rows), (branch, s_branch)])

    def jit_backup_ms(self, rows: ArrayLike, K: ArrayLike):
        """Neural just-in-time backup: the draft decodes K tokens for `rows` missed sequences (ms)."""
        return np.where(np.asarray(rows) > 0, self.branch_ms(rows, K), 0.0)

    def to_dict(self) -> dict:
        """The fields as JSON; read back with model.table.latency_from_dict (which knows probed tables)."""
        d = {**asdict(self), "target": self.target.to_dict(), "draft": self.draft.to_dict()}
        if self.sd_transfer_ms is None:  # profiles written before it was measured apart read the same
            del d["sd_transfer_ms"]
        for name in ("target_after_idle", "draft_after_idle"):  # likewise unmeasured wakes
            if not d[name]:
                del d[name]
        return d


def _after_idle_pairs(pairs, name: str) -> tuple[tuple[float, float], ...]:
    """((sleep ms, extra ms), ...) checked: sleeps > 0 ascending, extra ms finite (a profile's JSON lists become
    tuples)."""
    try:
        out = tuple((float(g), float(e)) for g, e in pairs)
    except (TypeError, ValueError):
        raise ConfigError(name, f"must be [[sleep ms, extra ms], ...], got {pairs!r}") from None
    gaps = [g for g, _ in out]
    if any(not (math.isfinite(g) and math.isfinite(e) and g > 0) for g, e in out) or gaps != sorted(set(gaps)):
        raise ConfigError(name, f"must be [[sleep ms, extra ms], ...] with sleeps > 0 ascending and finite ms, got "
                                f"{pairs!r}")
    return out


def redrafted_every_row(jit_rows: int, rows: int, per_row: bool) -> bool:
    """Whether a round's jit backup of `jit_rows` missed rows (of `rows`) redrafted every row, so that the glue after
    it feeds one token per row (LatencyModel.glue_ms after_jit): all rows missed, or any did without per-row redraft
    (jit_redraft = "batch")."""
    return jit_rows > 0 and (jit_rows == rows or not per_row)


def overlapped_ms(work_ms: ArrayLike, phases: Sequence[tuple[ArrayLike, ArrayLike]]):
    """How long `work_ms` of computation (measured alone) takes while the other device runs `phases`.

    phases: (duration ms, slowdown s) in order from the start; during a phase the work progresses at rate
    1 / (1 + s), after the last phase at full rate. Vectorised over arrays. Example: 300 ms of verify during
    a 100 ms glue at s = 0.05 then a 250 ms branch at s = 0.4 ends at 100 + 250 + (300 - 95.2 - 178.6) ms.
    """
    left = np.asarray(work_ms, dtype=float)
    elapsed = np.zeros_like(left)
    for dur, s in phases:
        dur, rate = np.asarray(dur, dtype=float), 1.0 / (1.0 + np.asarray(s, dtype=float))
        done_here = np.minimum(left, dur * rate)
        elapsed = elapsed + np.where(left > dur * rate, dur, left / rate)
        left = left - done_here
    return elapsed + left


# A workload is what one measured time covered: a list of (rows, tokens, repeats) forwards.
Workload = Sequence[tuple[float, float, float]]


def workload_ms(model: ForwardLatency, workload: Workload) -> float:
    """Predicted total ms of a workload under a forward-latency model."""
    return float(sum(c * model(r, t) for r, t, c in workload))


class FlatWorkloads:
    """Many workloads as their distinct forward shapes plus, per forward, its shape and count: a fit evaluates
    hundreds of workloads at every step, but they hold a few dozen shapes."""

    def __init__(self, workloads: Sequence[Workload]):
        shapes: dict[tuple[float, float], int] = {}
        index, counts = [], []
        for w in workloads:
            for r, t, c in w:
                index.append(shapes.setdefault((r, t), len(shapes)))
                counts.append(c)
        self.shapes = list(shapes)
        self.index = np.array(index, dtype=int)
        self.counts = np.array(counts, dtype=float)
        # column j holds each workload's j-th forward (or the zero slot past its end): summing column after column
        # adds each workload's forwards in order, as workload_ms does (a round holds one or two forwards)
        lengths = [len(w) for w in workloads]
        starts = np.cumsum([0, *lengths], dtype=int)[:-1]
        width = max(lengths, default=0)
        cols = np.arange(width)
        self.columns = np.where(cols < np.array(lengths)[:, None], starts[:, None] + cols, len(index)).T

    def sizes(self) -> tuple[float, ...]:
        """The distinct forward sizes n = rows x tokens among the shapes, ascending."""
        return tuple(sorted({r * t for r, t in self.shapes}))

    def ms(self, model: ForwardLatency) -> np.ndarray:
        """workload_ms of every workload, bit for bit: the model once per shape (called as workload_ms calls it:
        numpy's vectorised power rounds differently from its scalar one), then each workload's forwards summed in
        order as workload_ms sums them."""
        total = np.zeros(self.columns.shape[1])
        if not self.shapes:
            return total
        per_shape = np.array([model(r, t) for r, t in self.shapes], dtype=float)
        per = np.append(self.counts * per_shape[self.index], 0.0)
        for column in self.columns:
            total = total + per[column]
        return total


def fit_forward_latency(
    workloads: Sequence[Workload],
    measured_ms: ArrayLike,
    fixed: dict | None = None,
    free: Sequence[str] = ("fixed_ms", "token_ms", "token_exponent"),
    concurrent: Sequence[bool] | None = None,
):
    """Least-squares fit of a ForwardLatency to measured times of workloads (scipy.optimize.least_squares).

    `fixed` pins parameters (e.g. a roofline memory_ms from specs); `free` are fitted, all >= 0.
    Relative residuals, so a 20 ms and a 2 s measurement weigh alike, with a robust (soft L1) loss.
    `concurrent` flags measurements made while the other device computed: with both kinds present they are
    modelled as (1 + concurrent_slowdown) x the returned (idle) model, and the fraction is fitted too
    (FitReport.params["concurrent_slowdown"]). Returns (model, FitReport).
    """
    from scipy.optimize import least_squares

    flat = FlatWorkloads(workloads)
    free, pinned = identifiable(free, flat)
    fixed = {**pinned, **dict(fixed or {})}
    y = np.asarray(measured_ms, dtype=float)
    flags = np.zeros(len(y), dtype=bool) if concurrent is None else np.asarray(concurrent, dtype=bool)
    names = list(free) + (["concurrent_slowdown"] if flags.any() and not flags.all() else [])
    upper = {"token_exponent": 1.5, "concurrent_slowdown": 3.0}
    lo = [0.05 if n == "token_exponent" else 0.0 for n in names]
    hi = [upper.get(n, np.inf) for n in names]
    start = {"fixed_ms": max(float(y.min()) * 0.3, 1e-3), "token_ms": max(float(y.min()) * 0.1, 1e-3),
             "token_exponent": 1.0, "memory_ms": float(y.min()) * 0.3, "compute_ms_per_token": 1e-3,
             "multi_token_ms": float(y.min()) * 0.05, "concurrent_slowdown": 0.1}
    x0 = [start[n] for n in names]

    def build(x):
        return ForwardLatency(**{**fixed, **{n: float(v) for n, v in zip(free, np.maximum(x[:len(free)], 0.0), strict=True)}})

    def predicted(x):
        slow = 1.0 + flags * (x[-1] if len(names) > len(free) else 0.0)
        return flat.ms(build(x)) * slow

    # soft_l1: a few outlier rounds (a page fault, another process on the core) must not drag the curve's shape
    sol = least_squares(lambda x: predicted(x) / y - 1.0, x0, bounds=(lo, hi), method="trf", loss="soft_l1",
                        f_scale=0.05)
    level = total_level(y, predicted(sol.x))
    rep = FitReport.from_prediction(y, level * predicted(sol.x), names, sol, lo, hi)
    return build(sol.x).scaled(level), replace(rep, pinned=tuple(pinned), sizes=flat.sizes(), level=level)


def total_level(measured_ms: np.ndarray, fitted_ms: np.ndarray) -> float:
    """The factor that makes a robust fit's times sum to the measured ones: sum(measured) / sum(fitted).

    A robust loss on relative residuals sets a curve's shape near the typical (median) forward, but tok/s is
    tokens over the *total* time, outlier rounds included, and they recur in the runs predicted: on the pool
    traces a run's mean verify was 1-6% above its median. So the level is the ratio of totals."""
    total = float(np.sum(fitted_ms))
    return float(np.sum(measured_ms)) / total if total > 0 else 1.0


# The order in which a curve's parameters become identifiable: a line (fixed + per token) needs two distinct forward
# sizes, its curvature a third, the step from one token to several a fourth. Unidentified ones are pinned here.
IDENTIFY_ORDER = ("fixed_ms", "token_ms", "token_exponent", "multi_token_ms")
PINNED_AT = {"token_exponent": 1.0, "multi_token_ms": 0.0}


def identifiable(free: Sequence[str], flat: FlatWorkloads) -> tuple[list[str], dict[str, float]]:
    """(the free parameters the timed forward sizes can pin, {parameter: pinned value} for the others).

    The curve depends on a forward's size n = rows x tokens only, so measurements at d distinct sizes pin at most
    d parameters: fitting more leaves a valley of exactly equal cost whose end point depends on the solver's
    rounding (two CPU kinds fitted the same traces to exponent 1.34 and 0.40, fixed 322 and 242 ms, equally well).
    """
    room = len(flat.sizes())
    ranked = [n for n in IDENTIFY_ORDER if n in free]
    keep = set(ranked[:max(room, 1)]) | {n for n in free if n not in IDENTIFY_ORDER}
    pinned = {n: PINNED_AT[n] for n in ranked if n not in keep and n in PINNED_AT}
    return [n for n in free if n in keep or n not in PINNED_AT], pinned


def fit_scaled_latency(shape: ForwardLatency, workloads: Sequence[Workload], measured_ms: ArrayLike):
    """ForwardLatency = scale x `shape` (every ms term scaled, the exponent kept), scale = the level of the totals
    (total_level: sum measured / sum of `shape`'s times; the robust least-squares solve only reports its error). For
    a model timed at too few shapes to fit its own curve: e.g. a draft seen only one token per row (SD traces)
    borrows the target's measured multi-token scaling on the same host. Returns (model, FitReport with params
    {"scale"})."""
    from scipy.optimize import least_squares

    y = np.asarray(measured_ms, dtype=float)
    base = FlatWorkloads(workloads).ms(shape)
    sol = least_squares(lambda x: x[0] * base / y - 1.0, [float(np.median(y / base))], bounds=([1e-6], [np.inf]),
                        loss="soft_l1", f_scale=0.05)
    k = total_level(y, base)
    rep = FitReport.from_prediction(y, k * base, ["scale"], sol)
    return shape.scaled(k), replace(rep, params={**rep.params, "scale": k})


@dataclass(frozen=True)
class FitReport:
    """Fit quality: R^2 on ms, relative residuals, parameter standard errors (from the Jacobian)."""

    r2: float
    max_abs_rel_err: float
    rel_residuals: tuple[float, ...]
    params: dict
    stderr: dict
    at_bound: tuple[str, ...] = ()  # fitted parameters that ended on a bound: the data do not pin them
    pinned: tuple[str, ...] = ()  # parameters too few distinct forward sizes could pin (held at PINNED_AT)
    sizes: tuple[float, ...] = ()  # the distinct forward sizes (rows x tokens) the fit saw
    level: float = 1.0  # the factor the robust fit's ms terms were scaled by so the fitted times sum to the measured

    @classmethod
    def from_prediction(cls, y, pred, names, sol, lower=None, upper=None) -> FitReport:
        ss_res = float(((y - pred) ** 2).sum())
        ss_tot = float(((y - y.mean()) ** 2).sum())
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res < 1e-12 else 0.0)
        rel = (pred - y) / y
        dof = max(len(y) - len(names), 1)
        try:
            cov = np.linalg.pinv(sol.jac.T @ sol.jac) * float((sol.fun**2).sum()) / dof
            se = np.sqrt(np.clip(np.diag(cov), 0, None))
        except np.linalg.LinAlgError:
            se = np.full(len(names), np.nan)
        return cls(
            r2=r2,
            max_abs_rel_err=float(np.abs(rel).max()),
            rel_residuals=tuple(float(v) for v in rel),
            params={n: float(v) for n, v in zip(names, sol.x, strict=True)},
            stderr={n: float(v) for n, v in zip(names, se, strict=True)},
            at_bound=_at_bound(names, sol.x, lower, upper),
        )


def _at_bound(names, x, lower, upper) -> tuple[str, ...]:
    """Names of the parameters within 1e-6 (relative) of a bound they were fitted under, other than a 0 lower bound
    (an ms term or a slowdown may vanish): an exponent on 0.05 or 1.5 is not identified by the data."""
    if lower is None:
        return ()

    def near(v: float, b: float) -> bool:
        return math.isfinite(b) and abs(v - b) <= 1e-6 * max(1.0, abs(b))

    return tuple(n for n, v, lo, hi in zip(names, x, lower, upper, strict=True)
                 if (near(v, lo) and lo > 0) or near(v, hi))


def fit_warnings(role: str, rep, probed: str | None = None) -> list[str]:
    """A warning for every fitted latency parameter that ended on a bound of its fit (the data do not pin it), and
    one for the parameters too few distinct forward sizes left unfitted (latency.identifiable). `probed`: the
    probed range when the fit is the curve a probe's table extrapolates with (it serves only outside the table)."""
    out = []
    if rep.pinned:
        held = ", ".join(f"{n} at {PINNED_AT[n]:g}" for n in rep.pinned)
        sizes = ", ".join(f"{s:g}" for s in rep.sizes)
        verb = "is" if len(rep.pinned) == 1 else "are"
        source, fix = (("the traces time", "record runs at more K or batch sizes") if probed is None else
                       ("the probe's table holds", "probe more shapes"))
        out.append(f"{role} latency: {source} {len(rep.sizes)} distinct forward sizes (rows x tokens: {sizes}), too "
                   f"few to fit every parameter, so {held} {verb} held, not fitted; predictions at other sizes follow "
                   f"that assumption: {fix} to fit them")
    for name in rep.at_bound:
        if probed is None:
            out.append(f"{role} latency: {name} = {rep.params[name]:.4g} sits at a bound of its fit, so the "
                       f"traces do not pin it; predictions at shapes the traces did not time (rows x tokens) "
                       f"are extrapolated: record runs at more K and batch sizes")
        else:
            out.append(f"{role} latency outside the probed shapes ({probed}): the curve fitted to the probe's table "
                       f"has {name} = {rep.params[name]:.4g} at a bound of its fit, so shapes beyond the table are "
                       "extrapolated on a curve the table does not pin (ssd-plan flags such plans): probe them")
    return out
