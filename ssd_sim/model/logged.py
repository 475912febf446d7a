"""Acceptance and cache-hit rates derived from the token distributions logged in traces (ssd-run --log-topn).

Every logged stopping position holds the target's and the draft's N most probable next tokens at T = 1
(ids, log-probs) and the mass of the rest. Everything SSD's model needs at that position is a function of the
two distributions p (target) and q (draft), at any temperature T and Saguaro C:

  acceptance       alpha(T, C)   = sum_x min(p_T, q_{T,C})       (q_{T,C}: Saguaro-rescaled with the top-1 set, as
                                                                  AcceptancePoint.acceptance assumes everywhere)
  rejection hit    hit_rej(F)    = P(bonus in the cache of F | rejected here): the bonus is drawn from the residual
                                   max(0, p_T - q_{T,C,F}), the cache is the draft's top-F without the rejected token
                                   (saguaro.outcome_stats' engine cache; Response.reject_paper has the paper's
                                   top-F cache), averaged over contexts weighted by their rejection probability
  all-accepted hit hit_acc(F)    = P(bonus in the draft's top-F) with the bonus drawn from p_T itself (the round
                                   accepted every draft token; also the hit after a fast backup's random tokens)

averaged per position i over the logged contexts at i. Contexts are those the traced runs reached (at their
own temperature and C): the response at another (T, C) re-weighs each context's outcome, not which contexts
occur, so a derived model takes the rates at T from the contexts of the runs made nearest to T
(`LoggedPositions.nearest_runs`: sampled text is harder to draft than greedy text).

Truncation (top-N): tokens outside a model's top-N are unknown. They count as 0 here and each side's rest mass
is a separate lump that never matches the other side or a cached guess, so every rate is a lower bound. At
T = 1 and C = 1 the acceptance error is at most p_rest + q_rest per context, and hit_acc(F)'s at most
min(p_rest, F p_N) (p_N the smallest listed target probability); `Response.truncation` reports the mean
acceptance bound. tests/model/test_logged.py checks both bounds against full distributions, and the error at
other temperatures and C.

Truncation correction (measured, within the bound): where runs at T > 0 verified a draft token at a logged context,
their counted acceptance is an unbiased realisation of the full-distribution rate at that context, so
share = sum(counted - derived) / sum(bound), clipped to [0, 1], is the part of the bound the truncation really costs
(`truncation_share`; derived and bound at each run's own T, C and downweight set). Every context's acceptance at
(T, C) then gains share x its own bound at T (p's and q's rest lumps at T: 0 at T = 0, where the argmax is always
listed). Hit rates stay lower bounds. Runs sampled with top-k / top-p or forced acceptance, rounds a fast backup may
have served and the bonus position (no draft token) count nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.trace import Trace
from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitTable
from ssd_sim.model.mix import RequestMix, request_weights

RESPONSE_T = (0.0, 0.25, 0.5, 0.75, 1.0)  # temperatures of the derived grid (a profile's points)
RESPONSE_C = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)  # Saguaro C values of the grid (= planner.C_GRID)
MIN_CONTEXTS = 30  # a position needs this many logged contexts to get its own row


@dataclass(frozen=True)
class LoggedPositions:
    """Logged contexts as aligned arrays. Columns 0..N-1 are the draft's top-N in its order (so the draft's
    top-F is columns 0..F-1); columns N.. hold target-listed tokens the draft did not list; -inf = not listed."""

    position: np.ndarray  # [n] stopping position i within its round (0 = before the first draft token)
    p_lp: np.ndarray  # [n, W] target log-probs at T = 1
    q_lp: np.ndarray  # [n, W] draft log-probs at T = 1
    p_rest: np.ndarray  # [n] target mass outside its top-N
    q_rest: np.ndarray  # [n]
    group: np.ndarray  # [n] index of the (trace, sequence) the context came from (for per-prompt spreads)
    n_top: int  # N
    run_temperature: np.ndarray | None = None  # [n] temperature of the run that reached the context
    counted: np.ndarray | None = None  # [n] 1 / 0: the draft token verified here was accepted / rejected; nan: none
    run_c: np.ndarray | None = None  # [n] Saguaro C of the run that reached the context
    run_extra: np.ndarray | None = None  # [n] 1 where that run down-weighted the top-(F+1) set, else 0
    group_tags: tuple[str, ...] | None = None  # per group index: the class of that request's prompt ("" = none)

    @property
    def size(self) -> int:
        return int(self.position.size)

    def subset(self, mask: np.ndarray) -> LoggedPositions:
        """The contexts where mask is True."""
        def cut(a):
            return None if a is None else a[mask]

        return LoggedPositions(self.position[mask], self.p_lp[mask], self.q_lp[mask], self.p_rest[mask],
                               self.q_rest[mask], self.group[mask], self.n_top, cut(self.run_temperature),
                               cut(self.counted), cut(self.run_c), cut(self.run_extra), self.group_tags)

    def nearest_runs(self, temperature: float) -> LoggedPositions:
        """The contexts reached by the runs whose temperature is nearest `temperature` (ties: all of them).

        Text sampled at T = 1 is harder to draft than greedy text, so rates at T come from the contexts of runs
        made closest to T; with runs at one temperature only, all contexts serve every T (and calibrate warns).
        """
        if self.run_temperature is None:
            return self
        gap = np.abs(self.run_temperature - temperature)
        return self.subset(gap <= gap.min() + 1e-9)


def logged_positions(traces: Sequence[Trace]) -> LoggedPositions | None:
    """Every logged context with both distributions, from all traces; None when no trace logged any."""
    rows, groups, tags, run, counted, n_top = [], {}, [], [], [], None
    for ti, t in enumerate(traces):
        plain = _plain_sampling(t)
        own = (float(t.plan.get("temperature", 0.0)), float(t.plan.get("saguaro_c", 1.0)),
               1.0 if t.plan.get("downweight") == "top_f_plus_1" else 0.0)
        for r in t.rounds:
            for s in r.seqs:
                drafted = plain and (t.plan.get("backup", "jit") == "jit" or s.hit is not False)
                for i, d in enumerate(s.dists or []):
                    if d[3] is None:
                        continue
                    n = min(len(d[0]), len(d[3]))
                    n_top = n if n_top is None else min(n_top, n)
                    if (ti, s.seq) not in groups:
                        groups[(ti, s.seq)] = len(groups)
                        tags.append(t.tag(s.seq))
                    rows.append((i, d, groups[(ti, s.seq)]))
                    run.append(own)
                    counted.append(float(i < s.accepted) if drafted and i < r.K else np.nan)
    if not rows:
        return None
    lp = _align(rows, n_top)
    temps, cs, extra = (np.array(c) for c in zip(*run, strict=True))
    return LoggedPositions(lp.position, lp.p_lp, lp.q_lp, lp.p_rest, lp.q_rest, lp.group, n_top, temps,
                           np.array(counted), cs, extra, tuple(tags))


def _plain_sampling(trace: Trace) -> bool:
    """The run drew its draft tokens from the plain softmax the logged distributions describe (no top-k / top-p,
    no forced acceptance), so its counted acceptance measures the same rate."""
    x = trace.header.extra
    return not x.get("top_k", 0) and x.get("top_p", 1.0) >= 1.0 and x.get("forced_acceptance") is None


def _align(rows: list, n: int) -> LoggedPositions:
    """Put each context's two top-N lists on shared columns (the draft's order first)."""
    W = 2 * n
    p_lp = np.full((len(rows), W), -np.inf)
    q_lp = np.full((len(rows), W), -np.inf)
    p_rest, q_rest = np.empty(len(rows)), np.empty(len(rows))
    for j, (_, d, _) in enumerate(rows):
        t_ids, t_lp, d_ids, d_lp = d[0][:n], d[1][:n], d[3][:n], d[4][:n]
        col = {tok: c for c, tok in enumerate(d_ids)}
        q_lp[j, :len(d_lp)] = d_lp
        extra = n
        for tok, v in zip(t_ids, t_lp, strict=True):
            c = col.get(tok)
            if c is None:
                c, extra = extra, extra + 1
            p_lp[j, c] = v
        # rests re-derived from the kept lists (a trace may list more than the common N)
        p_rest[j] = max(0.0, 1.0 - float(np.exp(t_lp).sum()))
        q_rest[j] = max(0.0, 1.0 - float(np.exp(d_lp).sum()))
    return LoggedPositions(np.array([i for i, _, _ in rows]), p_lp, q_lp, p_rest, q_rest,
                           np.array([g for _, _, g in rows]), n)


def _at_temperature(lp: np.ndarray, rest: np.ndarray, T: float) -> np.ndarray:
    """[n, W + 1] probabilities at temperature T: listed tokens, then the rest as one lump (T = 0: argmax)."""
    if T == 0:
        out = np.zeros((lp.shape[0], lp.shape[1] + 1))
        out[np.arange(lp.shape[0]), np.argmax(lp, axis=1)] = 1.0
        return out
    logits = np.concatenate([lp, np.log(np.maximum(rest, 1e-300))[:, None]], axis=1) / T
    logits -= logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def _saguaro(q: np.ndarray, n_down: int, C: float) -> np.ndarray:
    """q with its first n_down columns (the draft's top set) scaled by C, renormalised (q unchanged if empty)."""
    if C >= 1.0 or n_down <= 0:
        return q
    w = q.copy()
    w[:, :n_down] *= C
    total = w.sum(axis=1, keepdims=True)
    return np.where(total > 0, w / np.where(total > 0, total, 1.0), q)


@dataclass(frozen=True)
class Response:
    """Per-position rates at one (T, C) over the logged contexts (rows: positions with >= MIN_CONTEXTS)."""

    temperature: float
    saguaro_c: float
    acceptance: np.ndarray  # [P] alpha_i
    reject: np.ndarray  # [P, F_max + 1] hit_rej_i(F), F = 0..F_max
    accepted: np.ndarray  # [P, F_max + 1] hit_acc_i(F)
    contexts: np.ndarray  # [P] logged contexts per position
    truncation: float  # mean upper bound of the acceptance error from top-N truncation (T = 1, C = 1)
    reject_paper: np.ndarray | None = None  # [P, F_max + 1] hit_rej_i(F) for the paper's cache: the draft's top-F


def response(lp: LoggedPositions, temperature: float, saguaro_c: float = 1.0, downweight: str = "top_f",
              f_max: int | None = None, min_contexts: int = MIN_CONTEXTS, share: float | None = None,
              weights: np.ndarray | None = None) -> Response:
    """Acceptance and hit tables per stopping position at (temperature, C) (see the module docstring).

    F_max defaults to N - 1 (a cache of F guesses without the rejected token needs the draft's top F + 1). share: the
    truncation share to add back (default truncation_share(lp); a caller scanning C at one T passes it once).
    weights: [n] per context (model.mix.request_weights: a workload mix), default 1 each; contexts of weight 0 count
    nowhere, also not towards a position's MIN_CONTEXTS.
    """
    if temperature < 0 or not 0.0 <= saguaro_c <= 1.0:
        raise ConfigError("temperature", f"need T >= 0 and C in [0, 1], got T={temperature}, C={saguaro_c}")
    f_max = lp.n_top - 1 if f_max is None else min(f_max, lp.n_top - 1)
    extra = 1 if downweight == "top_f_plus_1" else 0
    C = saguaro_c if temperature > 0 else 1.0  # greedy drafting ignores C
    P, Q = _pq(lp, temperature)
    acc = np.minimum(P, _saguaro(Q, 1 + extra, C)).sum(axis=1)
    share = truncation_share(lp) if share is None else share
    if share:
        acc = np.minimum(1.0, acc + share * _lumps(P, Q))
    cum_p = np.cumsum(P, axis=1)
    hit_acc = np.concatenate([np.zeros((P.shape[0], 1)), cum_p[:, :f_max]], axis=1)  # [n, F_max + 1]
    hit_rej_num = np.zeros((P.shape[0], f_max + 1))
    paper_num = np.zeros((P.shape[0], f_max + 1))
    rej_w = np.zeros((P.shape[0], f_max + 1))
    for F in range(1, f_max + 1):
        num, w, paper = _reject_hit(P, _saguaro(Q, F + extra, C), F)
        hit_rej_num[:, F], rej_w[:, F], paper_num[:, F] = num, w, paper
    rej_w[:, 0] = 1.0 - np.minimum(P, _saguaro(Q, extra, C)).sum(axis=1)
    weights = np.ones(lp.size) if weights is None else np.asarray(weights, dtype=float)
    positions = _positions(lp.position[weights > 0], min_contexts)
    out_acc, out_rej, out_paper, out_all, counts = [], [], [], [], []
    for i in positions:
        m = (lp.position == i) & (weights > 0)
        wi = weights[m][:, None]
        counts.append(int(m.sum()))
        out_acc.append(np.average(acc[m], weights=wi[:, 0]))
        out_all.append(np.average(hit_acc[m], axis=0, weights=wi[:, 0]))
        w = (rej_w[m] * wi).sum(axis=0)
        safe = np.where(w > 0, w, 1.0)
        out_rej.append(np.where(w > 0, (hit_rej_num[m] * wi).sum(axis=0) / safe, 0.0))
        out_paper.append(np.where(w > 0, (paper_num[m] * wi).sum(axis=0) / safe, 0.0))
    trunc = float((lp.p_rest + lp.q_rest).mean())
    return Response(temperature, saguaro_c, np.array(out_acc), _monotone(np.array(out_rej)),
                    _monotone(np.array(out_all)), np.array(counts), trunc, _monotone(np.array(out_paper)))


def _pq(lp: LoggedPositions, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """[n, W + 2] target and draft probabilities at T on shared columns: the listed tokens, then p's rest lump (q has
    0 there), then q's rest lump (p has 0 there), so neither lump ever matches the other side."""
    P = _at_temperature(lp.p_lp, lp.p_rest, temperature)
    Q = _at_temperature(lp.q_lp, lp.q_rest, temperature)
    Q = np.concatenate([Q[:, :-1], np.zeros((Q.shape[0], 1)), Q[:, -1:]], axis=1)
    P = np.concatenate([P, np.zeros((P.shape[0], 1))], axis=1)
    return P, Q


def _lumps(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """[n] each context's truncation bound on acceptance at the T of P and Q: p's rest lump + q's rest lump."""
    return P[:, -2] + Q[:, -1]


def truncation_share(lp: LoggedPositions) -> float:
    """The share (0..1) of the top-N truncation bound that the counted acceptance of the runs at T > 0 shows:
    sum(counted - derived) / sum(bound) over the contexts where they verified a draft token, each derived at its run's
    own T, C and downweight set (module docstring); 0 without such contexts."""
    if lp.counted is None or lp.run_temperature is None:
        return 0.0
    use = ~np.isnan(lp.counted) & (lp.run_temperature > 0)
    gap = bound = 0.0
    for T, C, extra in {(float(a), float(b), int(c)) for a, b, c in
                        zip(lp.run_temperature[use], lp.run_c[use], lp.run_extra[use], strict=True)}:
        own = lp.subset(use & (lp.run_temperature == T) & (lp.run_c == C) & (lp.run_extra == extra))
        P, Q = _pq(own, T)
        gap += float((own.counted - np.minimum(P, _saguaro(Q, 1 + extra, C)).sum(axis=1)).sum())
        bound += float(_lumps(P, Q).sum())
    return float(np.clip(gap / bound, 0.0, 1.0)) if bound > 0 else 0.0


def _reject_hit(P: np.ndarray, Qs: np.ndarray, F: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per context: (P(reject and the bonus is cached), P(reject), the same as the first for the paper's cache
    of the draft's top-F, rejected token included) for a cache of F guesses.

    The rejected token s has joint probability max(0, q_C(s) - p(s)); the bonus then comes from the residual
    max(0, p - q_C) / its mass, and the cache is the draft's top-F (s outside it) or top-(F+1) without s.
    """
    excess = np.maximum(0.0, P - Qs)
    mass = excess.sum(axis=1)
    residual = excess / np.where(mass > 0, mass, 1.0)[:, None]
    in_f, in_f1 = residual[:, :F].sum(axis=1), residual[:, :F + 1].sum(axis=1)
    reject_at = np.maximum(0.0, Qs - P)
    w_all, w_in = reject_at.sum(axis=1), reject_at[:, :F].sum(axis=1)
    return (w_all - w_in) * in_f + w_in * in_f1, w_all, w_all * in_f


def _positions(position: np.ndarray, min_contexts: int) -> list[int]:
    """Positions 0..last with at least min_contexts contexts each (position 0 always kept)."""
    out = [0]
    while (position == out[-1] + 1).sum() >= min_contexts:
        out.append(out[-1] + 1)
    return out


def _monotone(table: np.ndarray) -> np.ndarray:
    """Rates non-decreasing in F (guards float noise; a larger cache never hits less)."""
    return np.clip(np.maximum.accumulate(table, axis=1), 0.0, 1.0)


def derived_model(lp: LoggedPositions, downweight: str = "top_f", temperatures: Sequence[float] = RESPONSE_T,
                  cs: Sequence[float] = RESPONSE_C, mix: RequestMix | None = None) -> tuple[AcceptanceModel, dict]:
    """An AcceptanceModel (response "logged") over the grid temperatures x C, and a summary for the report.

    Each point: per-position acceptance, the primary HitTable (rejection and all-accepted rows) and the backup
    HitTable (after a fast backup's random tokens the bonus is a plain target sample at position 0: the
    all-accepted row 0 at every position). Greedy drafting ignores C, so T = 0 repeats one point over C.
    mix: the requests of each temperature's runs weighted to these class shares (model.mix).
    """
    points = []
    for T in temperatures:
        base, near = None, lp.nearest_runs(T)
        share = truncation_share(near)  # one per temperature: the same contexts at every C
        w = request_weights(mix, near.group, near.group_tags or (), f"the runs nearest T = {T:g}")
        for C in cs:
            r = base if (T == 0 and base is not None) else response(near, T, C, downweight, share=share, weights=w)
            base = r
            backup = HitTable(reject=(tuple(r.accepted[0]),), accepted=(tuple(r.accepted[0]),))
            points.append(AcceptancePoint(T, tuple(float(a) for a in r.acceptance),
                                          HitTable(reject=tuple(map(tuple, r.reject)), accepted=tuple(map(tuple, r.accepted))),
                                          backup, C, "derived", hit_source="derived"))
    counted = 0 if lp.counted is None else int((~np.isnan(lp.counted) & (lp.run_temperature > 0)).sum())
    summary = {"contexts": lp.size, "positions": [int(c) for c in base.contexts], "top_n": lp.n_top,
               "truncation_bound": base.truncation, "truncation_share": truncation_share(lp),
               "truncation_counted": counted, "temperatures": list(temperatures), "saguaro_c": list(cs),
               "run_temperatures": sorted({float(t) for t in lp.run_temperature}) if lp.run_temperature is not None else [],
               **({"mix": mix.describe()} if mix is not None else {})}
    return AcceptanceModel(tuple(points), downweight, response="logged"), summary
