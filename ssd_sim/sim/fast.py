"""The event model of ssd_sim.sim.des, vectorised over rounds: equal in distribution, not bit for bit.

The direct loop (ssd_sim.sim.direct) replays the SimPy processes round by round, drawing each sequence's stream as
it is admitted (~10 us a round, ~200 us a request). This loop runs every stretch of rounds with a fixed batch (an
epoch) at once and draws the outcomes of thousands of requests together:

- Outcomes. Under the acceptance model (ModelOutcomes) a sequence's rounds are a Markov chain: round j draws
  k_j ~ accept_pmf and one uniform, which fix its tokens and whether round j + 1 hits given how round j was served
  (outcomes.py). The draws are iid, so they are drawn for CHUNK requests at once and each request's stream is
  planned for every backup it may get (`Chunk`). When the adaptive backup switches (the batch crossed b*), a
  sequence goes on under the new backup from its current round and hit, on its unused draws (`Chunk.resume`; des.py
  redraws them); a plan that ran out of draws is continued on fresh ones. Every such switch is a stopping time (it
  depends only on earlier rounds), so unused or fresh draws leave the distribution unchanged.
- Misses. Each plan adds its misses to a per-round count over the run (`MissWindow`), so a round's miss count is
  read, not summed over the batch; rounds are counted (RoundCounts) per chunk and in bulk (`Segments`).
- Time. With no admission between rounds, an SSD round's request is served at reply + max(T_v, T_p) (the
  rendezvous of des.py), so reply times are a running sum of max(T_v, T_p) + transfer + lookup + backup(misses)
  (ms); AR and SD rounds last a constant per batch size. The first round of an epoch is computed as des.py computes
  it (prefill, rendezvous). An epoch ends with the first round that ends at or after the next arrival (with room in
  the batch), with the first round that finishes a sequence, or after HORIZON rounds; it is summed round by round
  when short (PY_ROUNDS), else with numpy.

Differences from the direct loop are those of the random draws (other numbers for the same seed) and the float
rounding of sums (1e-12 relative); tests/sim/test_fast.py compares the metrics of both over fixed seeds within their
seed-to-seed spread. Supports the acceptance model (and AR, which draws nothing); replayed traces and given outcome
sources need the direct loop. No timeline is recorded.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ssd_sim.io.records import Phase
from ssd_sim.sim import fast_context
from ssd_sim.sim.outcomes import BLOCK_ROUNDS, ModelOutcomes, OutcomeTables, build_stream, hit_chain
from ssd_sim.sim.workload import draft_prefill_ms, prefill_ms

CHUNK = 4096  # requests whose outcome streams are drawn and planned at once, at most
CHUNK_DRAWS = 1 << 20  # rounds drawn for one chunk at most (fewer requests when outputs are long): ~30 MB
HORIZON = 1024  # most rounds of one epoch computed at once
PY_ROUNDS = 48  # epochs of at most this many rounds are computed round by round (fewer numpy calls)
WINDOW = 1 << 15  # rounds of miss counts kept ahead of the current round (> BLOCK_ROUNDS + HORIZON)
ROUNDS_MARGIN = 1.1  # draws per request: its expected rounds x this + 16 (a plan that runs out is continued)


def supports(sim) -> bool:
    """The fast loop can run `sim`: AR (it draws nothing), or SD / SSD drawing from the acceptance model."""
    return sim.kind == "ar" or type(sim.batch.source) is ModelOutcomes


def run(sim) -> None:
    """Run des.Simulation `sim` to the end (its counters, records and round counts as the event model defines
    them; the random draws differ from the SimPy and direct loops)."""
    FastLoop(sim).run()


def tokens_per_round(tables: OutcomeTables, backup: str | None) -> float:
    """Expected tokens a sequence commits per round in steady state (tokens): E[k + 1], on a fast-backup miss 1.

    The hit of the next round is a two-state Markov chain: P(hit | hit) = a, P(hit | miss) = m.
    """
    pmf = np.asarray(tables.accept_pmf, dtype=float)
    mean = float(pmf @ (np.arange(pmf.size) + 1))
    if backup != "fast":
        return mean
    a = float(pmf @ tables.hit_after_cache)
    m = float(tables.hit_after_fast)
    hit = m / (1.0 - a + m) if (1.0 - a + m) > 0 else 1.0  # stationary share of hits
    return hit * mean + (1.0 - hit)


class Plan:
    """The planned rounds of one sequence from global round `start`: views of a Chunk's arrays or a Stream's.

    k: tokens accepted per round (0 on fast-backup misses), hit: served from the cache (SSD, else None), tok:
    tokens committed per round (the last one capped at the output length), left: tokens still needed after the
    plan (0: it ends the sequence), next_hit: the hit of the round after it (SSD, when left > 0). chunk / slot:
    the Chunk that counts the plan's rounds (None: Segments count them); src / pos: the Chunk whose draws the plan
    uses, from flat draw `pos` (None: a Stream's own draws).
    """

    __slots__ = ("k", "hit", "tok", "rounds", "left", "next_hit", "backup", "start", "end", "chunk", "slot", "src",
                 "pos")

    def __init__(self, k, hit, tok, rounds: int, left: int, next_hit, backup, start: int, chunk=None, slot=0,
                 src=None, pos=0):
        self.k, self.hit, self.tok = k, hit, tok
        self.rounds, self.left, self.next_hit, self.backup = rounds, left, next_hit, backup
        self.start, self.end = start, start + rounds
        self.chunk, self.slot, self.src, self.pos = chunk, slot, src, pos


class Seq:
    """One admitted request. Times in ms, lengths in tokens."""

    __slots__ = ("id", "arrival_ms", "output", "first_tokens", "first_token_ms", "plan", "prev_hit", "draws_end")

    def __init__(self, id: int, arrival_ms: float, output: int, prefill_token: int):
        self.id, self.arrival_ms, self.output = id, arrival_ms, output
        self.first_tokens = prefill_token  # tokens at first_token_ms (the prefill's, else round 0's)
        self.first_token_ms = math.nan
        self.plan: Plan | None = None
        self.prev_hit: bool | None = None  # hit of the round before the plan (None: the plan starts the sequence)
        self.draws_end = 0  # end of its draws in its chunk (flat index)


class Chunk:
    """The outcome draws of CHUNK consecutive requests, drawn at once and planned for each backup they may get.

    Flat arrays hold every request's draws back to back (request i owns starts[i] .. starts[i] + n[i]). Per
    backup: the hit chain of each request from its first round (which misses), and where the chain next forgets
    its state (`coalesce`), so a request switching backup mid-way continues on its unused draws (`resume`).
    Rounds of the first plans are counted (RoundCounts) once every request has left its first plan.
    """

    def __init__(self, first: int, need: np.ndarray, n: np.ndarray, loop: FastLoop):
        """Requests first .. first + need.size - 1: tokens each still needs after its prefill, rounds to draw."""
        self.first, self.kind, self.tables = first, loop.kind, loop.tables
        self.n, self.starts = n, np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
        total = int(n.sum())
        self.k = np.searchsorted(loop.cdf, loop.rng.random(total), side="right")  # tokens accepted if drafted
        self.chain, self.after, self.coalesce, self._forced = {}, {}, {}, {}
        if self.kind == "ssd":
            u = loop.rng.random(total)
            self.after_hit = u < self.tables.hit_after_cache[self.k]
            for b in loop.backups:
                self._chain(b, u)
        self.plans = {b: self._plan(need, b) for b in loop.backups}
        self.lists = {b: [a.tolist() for a in p[3:]] for b, p in self.plans.items()}  # rounds, left, next_hit
        self.starts_list, self.ends_list = self.starts.tolist(), (self.starts + n).tolist()
        self.used = {b: np.zeros(need.size, dtype=np.int64) for b in loop.backups}
        self.pending = int(need.size)

    def _chain(self, backup: str, u: np.ndarray) -> None:
        """The hit chain of every request under `backup` (its first round misses) and its coalescing points."""
        t = self.tables
        after_miss = (u < t.hit_after_fast) if backup == "fast" else (u < t.hit_after_jit[self.k])
        fh, fm = self.after_hit.copy(), after_miss.copy()
        last = self.starts[1:] - 1
        last = last[last >= 0]
        fh[last] = fm[last] = False  # the step into a request's first round: always a miss
        self.chain[backup] = hit_chain(False, fh, fm)
        self.after[backup] = after_miss
        self._forced[backup] = fh, fm

    def coalescing(self, backup: str) -> np.ndarray:
        """Per flat step, the first step at or after it whose next hit does not depend on its hit (drawn once)."""
        if backup not in self.coalesce:
            fh, fm = self._forced.pop(backup)
            idx = np.where(fh == fm, np.arange(fh.size), fh.size)
            self.coalesce[backup] = np.minimum.accumulate(idx[::-1])[::-1]
        return self.coalesce[backup]

    def _plan(self, need: np.ndarray, backup):
        """(k, hit, tok, rounds, left, next_hit) of every request from its first round under `backup`."""
        hit = self.chain.get(backup)
        k = np.where(hit, self.k, 0) if backup == "fast" else self.k
        rounds, left, tok = _fill(k + 1, need, self.starts, self.n)
        if hit is None:
            next_hit = np.zeros(need.size, dtype=bool)
        else:
            ends = np.maximum(self.starts + self.n - 1, 0)
            nxt = np.where(hit[ends], self.after_hit[ends], self.after[backup][ends])
            next_hit = nxt & (left > 0)
        return k.astype(np.int16), hit, tok, rounds, left, next_hit

    def plan(self, i: int, backup, start: int) -> Plan:
        """Request first + i's first plan under `backup` from global round `start`."""
        k, hit, tok = self.plans[backup][:3]
        rounds, left, nxt = (v[i] for v in self.lists[backup])
        a = self.starts_list[i]
        b = a + rounds
        return Plan(k[a:b], None if hit is None else hit[a:b], tok[a:b], rounds, left, nxt, backup, start, self, i,
                    self, a)

    def resume(self, pos: int, end: int, hit: bool, need: int, backup, start: int) -> Plan | None:
        """A plan on the draws pos .. end - 1 that needs `need` more tokens under `backup`, its first round's hit
        being `hit`; None when no draw is left. The chain from `hit` equals the request's own chain under `backup`
        if that has the same hit there, else is its negation up to the next step that forgets the state."""
        if pos >= end:
            return None
        x = self.chain.get(backup)
        if x is not None:
            x = x[pos:end]
            if bool(x[0]) != hit:
                x = x.copy()
                x[: int(self.coalescing(backup)[pos]) - pos + 1] ^= True
        k = self.k[pos:end]
        if backup == "fast":
            k = np.where(x, k, 0)
        tok = k + 1
        cs = tok.cumsum()
        p = int(cs.searchsorted(need, side="left"))
        if p < tok.size:
            rounds, left, nxt = p + 1, 0, False
        else:
            rounds, left = tok.size, need - int(cs[-1])
            nxt = x is not None and bool(self.after_hit[end - 1] if x[-1] else self.after[backup][end - 1])
        tok = tok[:rounds].astype(np.int16)
        if not left:
            tok[-1] -= int(cs[rounds - 1]) - need
        return Plan(k[:rounds].astype(np.int16), None if x is None else x[:rounds], tok, rounds, left, nxt, backup,
                    start, None, 0, self, pos)

    def release(self, plan: Plan, used: int, counts) -> None:
        """`plan` was left after `used` of its rounds; count the chunk's rounds once all its requests left."""
        self.used[plan.backup][plan.slot] = used
        self.pending -= 1
        if not self.pending:
            self.count(counts)

    def count(self, counts) -> None:
        """Add the used rounds of every first plan to `counts` (metrics.RoundCounts)."""
        pos = np.arange(int(self.n.sum())) - np.repeat(self.starts, self.n)  # round within its request
        for b, (k, hit, tok, *_) in self.plans.items():
            keep = pos < np.repeat(self.used[b], self.n)
            count_rounds(counts, k, hit, tok, keep, pos == 0)
        self.plans = self.lists = {}


def _fill(tok_all: np.ndarray, need: np.ndarray, starts: np.ndarray, n: np.ndarray):
    """(rounds, left, tok) of requests whose rounds commit tok_all back to back (request i: n[i] rounds from
    starts[i]) until need[i] tokens: the rounds used, the tokens still needed after them, and tok_all as int16 with
    each finishing round capped at the need. Units: rounds, tokens."""
    ends = starts + n
    cs = np.concatenate([[0], np.cumsum(tok_all)])  # tokens before flat round i: cs[i]
    target = cs[starts] + need
    pos = np.searchsorted(cs[1:], target, side="left")  # the round at which each request reaches its need
    fin = (pos < ends) | (need == 0)
    rounds = np.where(need == 0, 0, np.where(fin, pos - starts + 1, n))
    left = np.where(fin, 0, target - cs[ends])
    tok = tok_all.astype(np.int16)
    cap = fin & (need > 0)
    tok[pos[cap]] -= (cs[pos[cap] + 1] - target[cap]).astype(np.int16)
    return rounds, left, tok


def count_rounds(counts, k, hit, tok, keep, first) -> None:
    """Add the rounds where `keep` of flat per-round arrays to RoundCounts `counts` (as RoundCounts.add does for
    one stream): k accepted, hit (SSD, else None), tok committed; `first` marks each sequence's first round, whose
    lookup cannot hit; a kept round's previous round is the one before it in the arrays."""
    kk = k[keep].astype(np.int64)
    counts.seq_rounds += int(kk.size)
    counts.accepted += int(kk.sum())
    counts.k_hist += np.bincount(kk, minlength=counts.K + 1)[: counts.K + 1]
    if hit is None:
        return
    prev = np.concatenate([[False], hit[:-1]])
    look = keep & ~first
    h, p, tk = hit[look], prev[look], tok[look].astype(np.int64)
    counts.looked += int(h.size)
    counts.hits += int(h.sum())
    counts.tokens_hit += int(tk[h].sum())
    counts.tokens_miss += int(tk[~h].sum())
    counts.after_hit[0] += int(p.sum())
    counts.after_hit[1] += int((p & h).sum())
    counts.after_miss[0] += int((~p).sum())
    counts.after_miss[1] += int((~p & h).sum())


class MissWindow:
    """Rows that miss the cache in each round (SSD), summed over the plans of the active sequences; with
    tokens=True also the tokens they commit in each round (SD / SSD: the batch's context grows by them)."""

    def __init__(self, tokens: bool = False):
        self.base = 0  # global round of counts[0]
        self.counts = np.zeros(2 * WINDOW, dtype=np.int32)
        self.tokens = np.zeros(2 * WINDOW, dtype=np.int64) if tokens else None

    def add(self, plan: Plan, lo: int = 0, sign: int = 1) -> None:
        """Add (sign 1) or remove (-1) the misses (and tokens) of plan rounds lo.. (global rounds plan.start + lo ..)."""
        if plan.rounds <= lo:
            return
        a = plan.start + lo - self.base
        if plan.hit is not None:
            seg = self.counts[a:a + plan.rounds - lo]
            if sign > 0:
                seg += ~plan.hit[lo:]
            else:
                seg -= ~plan.hit[lo:]
        if self.tokens is not None and plan.tok is not None:
            self.tokens[a:a + plan.rounds - lo] += sign * plan.tok[lo:].astype(np.int64)

    def view(self, r: int, n: int) -> np.ndarray:
        """Miss counts of global rounds r .. r + n - 1."""
        if r - self.base > WINDOW:
            s = r - self.base
            for arr in (self.counts, self.tokens) if self.tokens is not None else (self.counts,):
                arr[: arr.size - s] = arr[s:]
                arr[arr.size - s:] = 0
            self.base = r
        a = r - self.base
        return self.counts[a:a + n]

    def committed(self, r: int, n: int) -> np.ndarray:
        """Tokens committed in global rounds r .. r + n - 1 (tokens=True)."""
        self.view(r, n)  # rebases the window when it must
        a = r - self.base
        return self.tokens[a:a + n]


class FastLoop:
    """One run of des.Simulation `sim` by epochs; fills sim's counters and sim.batch's records and counts."""

    def __init__(self, sim):
        self.sim, self.kind = sim, sim.kind
        batch = sim.batch
        self.batch, self.rng, self.lat = batch, batch.rng, sim.lat
        req = batch.requests
        self.arrival = req.arrival_ms.tolist()
        self.prompt = req.prompt_tokens.tolist()
        self.output = req.output_tokens.tolist()
        self.prefill_token = (req.prompt_tokens > 0).astype(np.int64)
        self.need = req.output_tokens.astype(np.int64) - self.prefill_token
        self.n_req, self.max_batch = len(self.arrival), batch.max_batch
        self.backup_for = batch.backup_for
        if self.kind == "ssd":
            self.backups = tuple(dict.fromkeys(self.backup_for(b) for b in range(1, self.max_batch + 1)))
        else:
            self.backups = (None,)
        if self.kind != "ar":
            self.tables = batch.source.tables
            self.cdf = batch.source._cdf
            self.tpr = min(tokens_per_round(self.tables, b) for b in self.backups)
        self.now, self.free_at, self.round = 0.0, 0.0, 0
        self.next = 0  # next request to admit
        self.active: list[Seq] = []
        self.awaiting: list[Seq] = []
        self.e_min = 0  # earliest plan end among the active sequences (global round)
        self.chunk: Chunk | None = None
        self.varies = sim.lat.varies  # the latencies follow the batch's mean context (fast_context)
        self.misses = MissWindow(tokens=self.varies and self.kind != "ar")
        self.held = 0  # tokens the active rows hold in their KV caches (prompt + committed), when it varies
        self.new_prompt, self.prefill_start = 0, 0.0
        self.fresh, self.fresh_at = 0, -1  # rows admitted before round `fresh_at` (their first round)
        self._prefill: dict[int, float] = {}
        self._draft_prefill: dict[int, float] = {}
        self.epochs = 0
        self.backup = None  # SSD: the backup of every active plan at the last epoch
        self.mixed = False  # a plan for another backup was admitted since
        self.segments = Segments(self.batch.counts)
        self._tallies()

    def _tallies(self) -> None:
        """Per-batch-size constants and tallies (finish_counters turns them into sim's counters)."""
        lat, B = self.lat, self.max_batch + 1
        self.rounds_at, self.epochs_at = [0] * B, [0] * B  # rounds / epochs run at each batch size
        self.wait_ms = self.backup_ms_sum = self.draft_prefill_ms = 0.0
        self.first_saved = [0.0, 0.0]  # SD: (draft, verify) ms that rows in their first round saved (sd_phases)
        self.backup_rounds = dict.fromkeys(self.backups, 0) if self.kind == "ssd" else {}
        if self.varies:  # per-round latencies: their sums are kept per epoch instead (fast_context)
            self.sums = dict.fromkeys(("verify", "sd_draft", "glue", "primary"), 0.0)
        elif self.kind == "ar":
            self.dur = lat.ar_step
        elif self.kind == "sd":
            self.dur = [d + v for d, v in zip(lat.sd_draft, lat.verify, strict=True)]
        else:  # reply to reply without a backup (ms), backup ms by batch size and missing rows
            self.step = [max(v, p) + lat.transfer + lat.lookup for v, p in zip(lat.verify, lat.primary, strict=True)]
            # the same after a round whose reply was a jit backup of every row (RoundLatency.redrafted)
            self.step_jit = [max(v, p) + lat.transfer + lat.lookup
                             for v, p in zip(lat.verify_jit, lat.primary_jit, strict=True)]
            self.bk = {k: [self._backup_ms(k, b) for b in range(B)] for k in self.backups}
            self.bk_list = {id(a): a.tolist() for v in self.bk.values() for a in v}  # the same as lists
            self.red_at, self.red_steps_at = [0] * B, [0] * B  # redrafted rounds; those followed in their epoch
            self._bk0 = 0.0  # backup ms of the last epoch's first round
        if self.kind == "ssd":  # by backup and batch size: whether a round redrafts every row, by its missing rows
            self.red = {k: [self._redrafted(k, b) for b in range(B)] for k in self.backups}
            self.red_list = {id(a): a.tolist() for v in self.red.values() for a in v}

    def _backup_ms(self, backup: str, b: int) -> np.ndarray:
        """Backup latency (ms) of a round at batch size b by its number of missing rows (0 .. max_batch)."""
        lat, per_row = self.lat, self.sim.per_row
        return np.asarray([0.0] + [lat.fast if backup == "fast" else lat.jit[n if per_row else b]
                                   for n in range(1, self.max_batch + 1)])

    def _redrafted(self, backup: str, b: int) -> np.ndarray:
        """Whether a round at batch size b replies with a jit backup of every row, by its missing rows."""
        if not self.lat.redrafted(b, b, backup, self.sim.per_row):  # not even when every row missed
            return np.zeros(self.max_batch + 1, dtype=bool)
        return np.asarray([self.lat.redrafted(b, n, backup, self.sim.per_row) for n in range(self.max_batch + 1)])

    # ---- the run ------------------------------------------------------------------------------
    def run(self) -> None:
        """Admit and decode epoch by epoch until every request finished, then fill sim's counters."""
        if self.varies:
            step = functools.partial(fast_context.epoch_ssd if self.kind == "ssd" else fast_context.epoch_const, self)
        else:
            step = {"ar": self.epoch_const, "sd": self.epoch_const, "ssd": self.epoch_ssd}[self.kind]
        while self.next_batch():
            step()
            self.epochs += 1
            if self.sim.progress is not None and not self.epochs % 1024:
                self.sim.progress(self)
        self.batch.round = self.round
        self.segments.flush()
        self.finish_counters()

    def tokens_done(self) -> int:
        """Output tokens of finished sequences (the progress bar's measure)."""
        return self.batch.finished_tokens

    @property
    def next_arrival(self) -> float:
        """Arrival of the next request not yet admitted (ms; inf when all are)."""
        return self.arrival[self.next] if self.next < self.n_req else math.inf

    def next_batch(self) -> int:
        """Admit arrived requests (prefill blocks the target), idle until the next arrival when nothing is active;
        the active batch size, 0 when every request is done (des.Simulation.next_batch)."""
        while self.next < self.n_req or self.active:
            arrived = self.next_arrival <= self.now
            if arrived and len(self.active) < self.max_batch:
                self.admit()
            if self.active:
                return len(self.active)
            if not self.next_arrival <= self.now:
                self.now = self.next_arrival
        return 0

    def admit(self) -> None:
        """Admit arrived requests FCFS while there is room, plan their streams, prefill their prompts."""
        start, first, active = self.now, self.next, self.active
        last, room = first, first + self.max_batch - len(active)
        while last < self.n_req and last < room and self.arrival[last] <= start:
            last += 1
        self.next = last
        backup = self.backup_for(len(active) + last - first) if self.kind == "ssd" else None
        self.mixed = self.mixed or backup != self.backup
        e_min = self.e_min if active else math.inf
        prompt, new = sum(self.prompt[first:last]), []
        fresh = self.fresh if self.fresh_at == self.round else 0
        for i in range(first, last):
            s = Seq(i, self.arrival[i], self.output[i], int(self.prompt[i] > 0))
            self.held += self.prompt[i] + s.first_tokens
            p = s.plan = self.first_plan(i, backup)
            self.misses.add(p)
            if self.kind != "ar":
                s.draws_end = self.chunk.ends_list[i - self.chunk.first]
            if not s.first_tokens:
                new.append(s)  # its first token comes with its first round
                if p.rounds:
                    s.first_tokens = int(p.tok[0]) if p.tok is not None else 1  # AR: one token a round
            if p.end < e_min:
                e_min = p.end
            if p.rounds:
                fresh += 1
            active.append(s)
        t = self._prefill.get(prompt)
        if t is None:
            t = self._prefill[prompt] = self._prefill_ms(prompt)
        if t > 0:
            self.now = self.now + t
            self.sim.prefill_ms += t
        if not self.new_prompt:
            self.prefill_start = start
        self.new_prompt += prompt
        for s in active[len(active) - (last - first):]:
            s.first_token_ms = self.now  # overwritten at the first round's end for those in `new`
        self.awaiting.extend(new)
        self.fresh, self.fresh_at = fresh, self.round  # rows whose first round is the next one
        self.e_min = e_min
        if e_min <= self.round:  # one-token outputs end with their prefill
            self.retire(self.now)

    def _prefill_ms(self, prompt: int) -> float:
        """Target prefill of `prompt` new prompt tokens (ms); SD: the colocated draft prefills them too."""
        t = prefill_ms(self.sim.profile.latency, prompt)
        if self.kind == "sd":
            t += draft_prefill_ms(self.sim.profile.latency, prompt)
        return t

    # ---- plans --------------------------------------------------------------------------------
    def first_plan(self, i: int, backup) -> Plan:
        """Request i's plan from the current round (its chunk's, drawing the chunk when i starts one)."""
        if self.kind == "ar":
            need = int(self.need[i])
            return Plan(None, None, None, need, 0, None, None, self.round)
        c = self.chunk
        if c is None or i >= c.first + c.n.size:
            c = self.chunk = self._chunk(i)
        return c.plan(i - c.first, backup, self.round)

    def _chunk(self, i: int) -> Chunk:
        """The chunk of requests from i on: CHUNK of them, fewer where they would draw over CHUNK_DRAWS rounds."""
        need = self.need[i:i + CHUNK]
        n = np.minimum(need, np.minimum(BLOCK_ROUNDS, np.ceil(need / self.tpr * ROUNDS_MARGIN).astype(int) + 16))
        m = max(1, int(np.searchsorted(np.cumsum(n), CHUNK_DRAWS, side="right")))
        return Chunk(i, need[:m], n[:m], self)

    def assign(self, s: Seq, plan: Plan) -> None:
        """Give s its plan from now on and add the plan's misses to their rounds."""
        s.plan = plan
        self.misses.add(plan)

    def leave(self, s: Seq, used: int) -> None:
        """Sequence s stops using its plan after `used` rounds: its rounds are counted."""
        p = s.plan
        if p.chunk is not None:
            p.chunk.release(p, used, self.batch.counts)
        elif p.k is not None:
            if used:
                self.segments.add(p, used)
            if p.hit is not None and used and s.prev_hit is not None:
                _count_link(self.batch.counts, s.prev_hit, bool(p.hit[0]), int(p.tok[0]))
        else:  # AR: one token per round, nothing accepted
            self.batch.counts.seq_rounds += used
            self.batch.counts.k_hist[0] += used

    def replan(self, s: Seq, backup) -> None:
        """Plan s's remaining rounds anew from the current round, for another backup or past a plan that ran out of
        draws: on its chunk's unused draws, else on fresh ones (the current round's hit stays as drawn)."""
        p, r = s.plan, self.round
        used = r - p.start
        if used < p.rounds:
            h = bool(p.hit[used]) if p.hit is not None else False
            need = p.left + int(p.tok[used:].sum())
        else:
            h, need = bool(p.next_hit), p.left
        self.misses.add(p, used, -1)
        self.leave(s, used)
        if used:
            s.prev_hit = bool(p.hit[used - 1]) if p.hit is not None else None
        new = None if p.src is None else p.src.resume(p.pos + used, s.draws_end, h, need, backup, r)
        if new is None:  # no draws left: fresh ones
            block = min(BLOCK_ROUNDS, math.ceil(need / self.tpr * ROUNDS_MARGIN) + 16)
            st = build_stream(self.batch.source, self.rng, self.kind, need, seq=s.id, first_hit=h,
                              backup=backup or "jit", block=block)
            new = Plan(st.accepted, st.hit, st.committed, st.rounds, st.left, st.next_hit, backup, r)
        self.assign(s, new)

    def retire(self, now: float) -> None:
        """Finish the sequences whose final plan ends at the current round; continue those that ran out."""
        r, still, batch = self.round, [], self.batch
        for s in self.active:
            p = s.plan
            if p.end > r:
                still.append(s)
            elif p.left:
                self.replan(s, p.backup)
                still.append(s)
            else:
                self.leave(s, p.rounds)
                batch.records.append(s.arrival_ms, s.first_token_ms, now, s.output, s.output - s.first_tokens)
                batch.finished_tokens += s.output
                batch.last_finish_ms = now
                self.held -= self.prompt[s.id] + s.output
        self.active = still
        self.e_min = min((s.plan.end for s in still), default=0)

    # ---- epochs -------------------------------------------------------------------------------
    def _first_tokens(self, t: float) -> None:
        """The sequences admitted without a prefill token got their first token at t (ms): round 0's end."""
        for s in self.awaiting:
            s.first_token_ms = t
        self.awaiting.clear()

    def epoch_const(self) -> None:
        """AR / SD: rounds of a constant length at this batch size, up to a finish or the next admission."""
        b = len(self.active)
        dur = self.dur[b]
        saved = self._first_saved(b)  # the first round is this much shorter (ms)
        n = self.e_min - self.round
        t0, nxt = self.now, self.next_arrival
        if b < self.max_batch and nxt < math.inf and dur > 0:
            n = max(1, min(n, math.ceil((nxt - t0 + saved) / dur)))
        self.now = t0 + n * dur - saved
        self.rounds_at[b] += n
        self.round += n
        if self.awaiting:
            self._first_tokens(t0 + dur - saved)
        self.new_prompt = 0
        if self.round >= self.e_min:
            self.retire(self.now)

    def _first_saved(self, b: int) -> float:
        """SD: the ms the coming round saves as its rows in their request's first round need no 2-token draft step
        (RoundLatency.sd_phases; tallied in first_saved); 0 for AR and when no row is fresh."""
        if self.kind != "sd" or self.fresh_at != self.round or not self.fresh:
            return 0.0
        draft, verify = self.lat.sd_phases(b, self.fresh)
        saved = (self.lat.sd_draft[b] - draft, self.lat.verify[b] - verify)
        self.first_saved = [a + x for a, x in zip(self.first_saved, saved, strict=True)]
        return sum(saved)

    def epoch_ssd(self) -> None:
        """SSD: the rounds at this batch size up to a finish or the next admission (`_rounds`)."""
        b = len(self.active)
        backup = self.switch_backup(b)
        step, verify = self.step[b], self.lat.verify[b]
        t, r = self.now, self.round
        nxt = self.arrival[self.next] if self.next < self.n_req else math.inf
        n = min(self.e_min - r, HORIZON)
        if b < self.max_batch and nxt < math.inf:
            if step > 0:
                n = max(1, min(n, int((nxt - t) / step) + 2))
        else:
            nxt = math.inf  # no admission before a sequence finishes
        miss = self.misses.view(r, n)
        rounds = self._rounds_py if n <= PY_ROUNDS else self._rounds_np
        jit = (self.step_jit[b], self.lat.verify_jit[b])
        n, reply0, last_reply, missed, sum_bk, red = rounds(miss, self.bk[backup][b], self.red[backup][b], t,
                                                            (step, verify), jit, nxt)
        if missed:
            self.backup_ms_sum += sum_bk
            self.backup_rounds[backup] += missed
        self.wait_ms += (reply0 - t) + (sum_bk - self._bk0)
        self.rounds_at[b] += n
        self.epochs_at[b] += 1
        self.red_at[b] += red[0]
        self.red_steps_at[b] += red[0] - red[2]
        lat = self.lat
        self.free_at = last_reply + (lat.primary_jit if red[2] else lat.primary)[b]
        self.now = last_reply + (lat.verify_jit if red[2] else lat.verify)[b]
        self.round = r + n
        if self.awaiting:
            self._first_tokens(reply0 + (lat.verify_jit if red[1] else lat.verify)[b])
        self.new_prompt = 0
        if self.round >= self.e_min:
            self.retire(self.now)

    def switch_backup(self, b: int) -> str:
        """The backup at batch size b; the active plans drawn for another are replanned for it from now."""
        backup = self.backup_for(b)
        if backup != self.backup or self.mixed:
            if any(s.plan.backup != backup for s in self.active):
                for s in self.active:
                    if s.plan.backup != backup:
                        self.replan(s, backup)
                self.e_min = min(x.plan.end for x in self.active)
            self.backup, self.mixed = backup, False
        return backup

    def _rounds_np(self, miss: np.ndarray, bk: np.ndarray, red: np.ndarray, t: float, plain: tuple[float, float],
                   jit: tuple[float, float], nxt: float):
        """Up to miss.size rounds from `t`, stopping after the first that ends at or after `nxt` (ms), as one
        cumulative sum of reply times. plain / jit: (step, verify) after a round without / with a jit backup of every
        row (`red`, by missing rows). (rounds, first reply, last reply, rounds with a miss, backup ms, (redrafted
        rounds, first redrafted, last redrafted))."""
        bk, red = bk[miss], red[miss]
        bk0 = self._bk0 = float(bk[0])
        reply0 = self._first_reply(t, bk0)
        step = np.where(red, jit[0], plain[0])
        verify = np.where(red, jit[1], plain[1])
        d = np.empty(miss.size)
        d[0] = reply0
        d[1:] = bk[1:] + step[:-1]
        reply = d.cumsum()
        n = miss.size
        if nxt <= reply[-1] + verify[-1]:
            n = int((reply + verify).searchsorted(nxt, side="left")) + 1
        missed = int(np.count_nonzero(miss[:n]))
        flags = (int(np.count_nonzero(red[:n])), bool(red[0]), bool(red[n - 1]))
        return n, reply0, float(reply[n - 1]), missed, float(bk[:n].sum()) if missed else 0.0, flags

    def _rounds_py(self, miss: np.ndarray, bk: np.ndarray, red: np.ndarray, t: float, plain: tuple[float, float],
                   jit: tuple[float, float], nxt: float):
        """_rounds_np round by round, for a few rounds (stops at the cut instead of computing them all)."""
        ms, bkl, redl = miss.tolist(), self.bk_list[id(bk)], self.red_list[id(red)]
        m = ms[0]
        bk0 = self._bk0 = bkl[m]
        reply0 = reply = self._first_reply(t, bk0)
        was = first = redl[m]
        step, verify = jit if was else plain
        missed, sum_bk, n, size, reds = (1 if m else 0), bk0, 1, len(ms), int(was)
        while n < size and reply + verify < nxt:
            m = ms[n]
            if m:
                x = bkl[m]
                reply += x + step
                sum_bk += x
                missed += 1
            else:
                reply += step
            was = redl[m]
            reds += was
            step, verify = jit if was else plain
            n += 1
        return n, reply0, reply, missed, sum_bk if missed else 0.0, (reds, first, was)

    def finish_counters(self) -> None:
        """Add the per-batch-size tallies of the run to sim's counters (ms, rows, rounds) as des.py counts them."""
        sim, lat, phase = self.sim, self.lat, self.sim.phase
        at = list(enumerate(self.rounds_at))
        sim.rows += sum(n * b for b, n in at)
        if self.varies:
            fast_context.finish_counters(self)
            return
        if self.kind != "ssd":
            verify = lat.ar_step if self.kind == "ar" else lat.verify
            phase[Phase.VERIFY] += sum(n * verify[b] for b, n in at)
            if self.kind == "sd":
                phase[Phase.DRAFT_SD] += sum(n * lat.sd_draft[b] for b, n in at) - self.first_saved[0]
                phase[Phase.VERIFY] -= self.first_saved[1]
            return
        # every field at b: the rounds that were not redrafted at its plain value, the others at its jit one
        red, red_steps = self.red_at, self.red_steps_at

        def total(plain: list[float], jit: list[float]) -> float:
            return sum((n - red[b]) * plain[b] + red[b] * jit[b] for b, n in at)

        glue = [min(g, p) for g, p in zip(lat.primary_glue, lat.primary, strict=True)]
        glue_jit = [min(g, p) for g, p in zip(lat.primary_glue_jit, lat.primary_jit, strict=True)]
        phase[Phase.VERIFY] += total(lat.verify, lat.verify_jit)
        phase[Phase.TARGET_WAIT] += self.wait_ms + sum(
            (n - self.epochs_at[b] - red_steps[b]) * (self.step[b] - lat.verify[b])
            + red_steps[b] * (self.step_jit[b] - lat.verify_jit[b]) for b, n in at)
        phase[Phase.DRAFT_BACKUP] += self.backup_ms_sum
        phase[Phase.DRAFT_GLUE] += total(glue, glue_jit)
        phase[Phase.DRAFT_BRANCH] += total(lat.primary, lat.primary_jit) - total(glue, glue_jit)
        sim.busy["draft"] += (self.draft_prefill_ms + self.backup_ms_sum + sum(n * lat.lookup for b, n in at)
                              + total(lat.primary, lat.primary_jit))
        missed = sum(self.backup_rounds.values())
        sim.all_hit_rounds += sum(self.rounds_at) - missed
        for k, v in self.backup_rounds.items():
            sim.backup_rounds[k] += v

    def _first_reply(self, sent: float, backup_ms: float) -> float:
        """The draft's reply (ms) to the epoch's first request, sent at `sent` (des.Simulation.draft_ssd): it
        serves it once free, after prefilling the prompts admitted since the last round."""
        lat, prompt = self.lat, self.new_prompt
        now = ready = self.free_at if self.free_at > sent else sent
        if prompt:
            prefill = self._draft_prefill.get(prompt)
            if prefill is None:
                prefill = self._draft_prefill[prompt] = draft_prefill_ms(lat.model, prompt)
            ready = max(now, max(self.prefill_start, self.free_at) + prefill)
            self.draft_prefill_ms += prefill
        return now + (ready - now + lat.transfer + lat.lookup + backup_ms)


class Segments:
    """Used rounds of plans that are not a Chunk's (replanned and continued streams), counted in bulk.

    The lookup of a segment's first round is left out here: it is a sequence's first, or counted with the
    previous plan's last hit (_count_link).
    """

    def __init__(self, counts, most: int = 1 << 16):
        self.counts, self.most = counts, most
        self.parts: list[tuple] = []
        self.rounds = 0

    def add(self, plan: Plan, used: int) -> None:
        """Count the first `used` rounds of `plan` (soon)."""
        self.parts.append((plan.k[:used], None if plan.hit is None else plan.hit[:used], plan.tok[:used]))
        self.rounds += used
        if self.rounds >= self.most:
            self.flush()

    def flush(self) -> None:
        """Count every segment added so far."""
        if not self.parts:
            return
        k, hit, tok = (None if p[0] is None else np.concatenate(p) for p in zip(*self.parts, strict=True))
        first = np.zeros(k.size, dtype=bool)
        first[np.cumsum([0] + [p[0].size for p in self.parts[:-1]])] = True
        count_rounds(self.counts, k, hit, tok, np.ones(k.size, dtype=bool), first)
        self.parts, self.rounds = [], 0


def _count_link(counts, prev: bool, hit: bool, tok: int) -> None:
    """Count the lookup of a plan's first round, whose previous round is the last of the plan before."""
    counts.looked += 1
    counts.hits += hit
    if hit:
        counts.tokens_hit += tok
    else:
        counts.tokens_miss += tok
    pair = counts.after_hit if prev else counts.after_miss
    pair[0] += 1
    pair[1] += hit
