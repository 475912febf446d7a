"""The fast loop's epochs when the latencies follow the batch's mean KV context (round_latency.ContextLatency).

Within an epoch the batch is fixed, so its mean context in round j is what the rows held at the epoch's start plus
the tokens they commit in its rounds before j, over b (AR: one token per row and round; SD / SSD: the plans' tokens,
summed per round in the MissWindow). Every phase is then an array over the epoch's rounds, interpolated between the
context nodes as ContextLatency does for one round, and the SSD recurrence of fast.FastLoop.epoch_ssd runs on those
arrays: round j's request is served at reply[j-1] + max(T_v[j-1], T_p[j-1]) + transfer + lookup + backup[j] (the
verify and the speculation that follow reply j-1 both belong to round j-1). Phase sums are kept per epoch
(finish_counters), not per batch size. The epoch functions below take the FastLoop (fast.FastLoop.run calls them with it).
"""

from __future__ import annotations

import numpy as np

from ssd_sim.io.records import Phase

HORIZON = 1024  # most rounds of one epoch computed at once (as fast.HORIZON)


def _contexts(loop, b: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(mean context per round, tokens committed per round) of the next n rounds at batch size b (tokens)."""
    if loop.kind == "ar":
        added = np.full(n, b, dtype=np.int64)
    else:
        added = loop.misses.committed(loop.round, n)
    before = loop.held + np.concatenate([[0], np.cumsum(added[:-1])])
    return before / b, added


def _phase(loop, b: int, name: str, context: np.ndarray) -> np.ndarray:
    """One phase (ms) at b rows in each round, at each round's mean context."""
    lat = loop.lat
    return np.interp(context, lat.nodes, lat.at_nodes(b, name))


def _after_jit(loop, b: int, name: str, context: np.ndarray, red: np.ndarray, plain: np.ndarray) -> np.ndarray:
    """`plain` (the phase per round, _phase) with the rounds whose reply was a jit backup of every row (`red`,
    RoundLatency.redrafted) at the phase's value after it."""
    if not red.any():
        return plain
    lat = loop.lat
    return np.where(red, np.interp(context, lat.nodes, lat.at_nodes(b, name, after_jit=True)), plain)


def epoch_const(loop) -> None:
    """AR / SD: rounds one after another on the target, up to a finish, the next admission or HORIZON rounds."""
    b = len(loop.active)
    n = min(loop.e_min - loop.round, HORIZON)
    context, added = _contexts(loop, b, n)
    if loop.kind == "ar":
        verify, draft = _phase(loop, b, "step", context), np.zeros(n)
    else:
        verify, draft = _phase(loop, b, "verify", context), _phase(loop, b, "sd_draft", context)
        if loop.fresh_at == loop.round and loop.fresh:  # rows in their first round (RoundLatency.sd_phases)
            draft[0], verify[0] = loop.lat.sd_phases(b, loop.fresh, float(context[0]))
    t0, nxt = loop.now, loop.next_arrival
    ends = t0 + np.cumsum(verify + draft)
    if b < loop.max_batch and nxt <= ends[-1]:
        n = int(ends.searchsorted(nxt, side="left")) + 1
    loop.sums["verify"] += float(verify[:n].sum())
    loop.sums["sd_draft"] += float(draft[:n].sum())
    _advance(loop, b, n, int(added[:n].sum()), float(ends[n - 1]), float(ends[0]))


def epoch_ssd(loop) -> None:
    """SSD: the rounds at this batch size up to a finish, the next admission or HORIZON rounds (fast.FastLoop.epoch_ssd
    with per-round phases)."""
    b = len(loop.active)
    backup = loop.switch_backup(b)
    lat, t, r = loop.lat, loop.now, loop.round
    nxt = loop.next_arrival
    n = min(loop.e_min - r, HORIZON)
    context, added = _contexts(loop, b, n)
    verify, primary = _phase(loop, b, "verify", context), _phase(loop, b, "primary", context)
    if b < loop.max_batch and nxt < np.inf:  # the rounds up to the arrival at most (steps grow with the context)
        n = max(1, min(n, int((nxt - t) / (max(verify[0], primary[0]) + lat.transfer + lat.lookup)) + 2))
        context, added, verify, primary = context[:n], added[:n], verify[:n], primary[:n]
    miss = loop.misses.view(r, n)
    red = loop.red[backup][b][miss]
    verify, primary = (_after_jit(loop, b, f, context, red, v) for f, v in (("verify", verify), ("primary", primary)))
    glue = np.minimum(_after_jit(loop, b, "primary_glue", context, red, _phase(loop, b, "primary_glue", context)),
                      primary)
    step = np.maximum(verify, primary) + lat.transfer + lat.lookup  # from round j's reply to round j + 1's request
    bk = _backup_ms(loop, backup, b, miss, context)
    reply0 = loop._first_reply(t, float(bk[0]))
    d = np.empty(n)
    d[0] = reply0
    d[1:] = step[:-1] + bk[1:]
    reply = d.cumsum()
    if b < loop.max_batch and nxt <= reply[-1] + verify[-1]:
        n = int((reply + verify).searchsorted(nxt, side="left")) + 1
    missed = int(np.count_nonzero(miss[:n]))
    if missed:
        loop.backup_ms_sum += float(bk[:n].sum())
        loop.backup_rounds[backup] += missed
    loop.wait_ms += (reply0 - t) + float((bk[1:n] + step[:n - 1] - verify[:n - 1]).sum())
    loop.sums["verify"] += float(verify[:n].sum())
    loop.sums["glue"] += float(glue[:n].sum())
    loop.sums["primary"] += float(primary[:n].sum())
    loop.free_at = float(reply[n - 1] + primary[n - 1])
    _advance(loop, b, n, int(added[:n].sum()), float(reply[n - 1] + verify[n - 1]), float(reply0 + verify[0]))


def _backup_ms(loop, backup: str, b: int, miss: np.ndarray, context: np.ndarray) -> np.ndarray:
    """Each round's backup (ms): 0 without a miss, the fast backup's constant, or a jit redraft of the missing rows
    (or of the batch) at the round's context."""
    lat = loop.lat
    if backup == "fast":
        return np.where(miss > 0, lat.fast, 0.0)
    rows = miss if loop.sim.per_row else np.where(miss > 0, b, 0)
    return lat.jit_ms_each(rows, context)


def _advance(loop, b: int, n: int, added: int, now: float, first_end: float) -> None:
    """n rounds at batch size b ran, the rows committed `added` tokens, the last ended at `now` (ms)."""
    loop.now = now
    loop.rounds_at[b] += n
    loop.round += n
    loop.held += added
    if loop.awaiting:
        loop._first_tokens(first_end)
    loop.new_prompt = 0
    if loop.round >= loop.e_min:
        loop.retire(loop.now)


def finish_counters(loop) -> None:
    """sim's phase counters from the sums kept per epoch (FastLoop.finish_counters has added the rows)."""
    sim, lat, phase, sums = loop.sim, loop.lat, loop.sim.phase, loop.sums
    phase[Phase.VERIFY] += sums["verify"]
    if loop.kind == "sd":
        phase[Phase.DRAFT_SD] += sums["sd_draft"]
    if loop.kind != "ssd":
        return
    rounds = sum(loop.rounds_at)
    phase[Phase.TARGET_WAIT] += loop.wait_ms
    phase[Phase.DRAFT_BACKUP] += loop.backup_ms_sum
    phase[Phase.DRAFT_GLUE] += sums["glue"]
    phase[Phase.DRAFT_BRANCH] += sums["primary"] - sums["glue"]
    sim.busy["draft"] += loop.draft_prefill_ms + loop.backup_ms_sum + rounds * lat.lookup + sums["primary"]
    missed = sum(loop.backup_rounds.values())
    sim.all_hit_rounds += rounds - missed
    for k, v in loop.backup_rounds.items():
        sim.backup_rounds[k] += v
