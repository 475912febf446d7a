"""Sampling and verification as plain tensor functions (one rule per function, p/q math in comments).

Notation: p = target distribution, q = the draft distribution a proposed token was *actually* sampled
from (temperature-scaled and, in SSD, Saguaro-rescaled), K = draft tokens per round, V = vocabulary.
Shapes: logits / probs [..., V]; a batch of proposals is [b, K] with q [b, K, V] and p [b, K+1, V].
At temperature 0 everything is greedy and q is not needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .syncs import host_int, to_device, to_host

TINY_T = 1e-20  # below this, logits / T would overflow float32 (inf - inf = nan): the T -> 0+ limit is computed


# ---- distributions ---------------------------------------------------------------------------------
def probs_from_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / T) in float32; T > 0. Below TINY_T every logit under the row's maximum is at least
    1e-6 / 1e-20 = 1e14 below it after scaling, so the distribution is exactly its limit: uniform over the
    maximal logits (exp underflows to 0 for the rest), computed without dividing by T."""
    x = logits.float()
    if temperature >= TINY_T:
        return torch.softmax(x / temperature, dim=-1)
    gap = x - x.amax(dim=-1, keepdim=True)
    return torch.softmax(torch.where(gap < 0, torch.full_like(gap, -torch.inf), gap), dim=-1)


@dataclass(frozen=True)
class Truncation:
    """Top-k / top-p (nucleus) sampling: the distribution a run samples from is p truncated and renormalised.

    Kept: the top_k most probable tokens (0 = all), then of those the smallest most-probable-first prefix whose
    mass reaches top_p (the token that crosses it included; at least one token). The target's p and the draft's q
    are truncated alike; the ratio test then runs on the truncated p with the q the draft really sampled from, so
    SD / SSD output follows the truncated target distribution exactly (what AR samples with the same truncation).
    Ties at the cut are broken as torch.topk breaks them (the same way in every mode)."""

    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.top_k, int) and self.top_k >= 0):
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")

    @property
    def active(self) -> bool:
        return self.top_k > 0 or self.top_p < 1.0

    def apply(self, probs: torch.Tensor) -> torch.Tensor:
        """probs [..., V] truncated and renormalised (unchanged when inactive)."""
        if not self.active:
            return probs
        V = probs.shape[-1]
        k = min(self.top_k, V) if self.top_k > 0 else V
        vals, ids = torch.topk(probs, k, dim=-1)  # most probable first
        if self.top_p < 1.0:
            mass = vals.sum(dim=-1, keepdim=True)  # the top-p cut applies to the top-k renormalised
            before = (vals.cumsum(dim=-1) - vals) / mass  # mass of the more probable tokens kept so far
            vals = torch.where(before < self.top_p, vals, torch.zeros_like(vals))
        out = torch.zeros_like(probs).scatter_(-1, ids, vals)
        return out / out.sum(dim=-1, keepdim=True)


NO_TRUNCATION = Truncation()


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """argmax over the vocabulary (ties: lowest id)."""
    return logits.argmax(dim=-1)


def saguaro_probs(q: torch.Tensor, F: int | torch.Tensor, C: float, downweight: str = "top_f") -> torch.Tensor:
    """Saguaro sampling sigma_{F,C}(q) (paper Def. 14): C q on the top set, q elsewhere, renormalised.

    Torch twin of ssd_sim.theory.saguaro.saguaro_probs. The top set is the F most probable tokens ("top_f",
    the paper) or F + 1 ("top_f_plus_1", the reference engine). F may be a tensor broadcast over the
    leading axes (per row). C = 1 or an empty top set returns q unchanged.
    """
    extra = 1 if downweight == "top_f_plus_1" else 0
    if isinstance(F, int):  # the runtime's case: one F per call, known on the host (no device tensor, no sync)
        n = n_max = F + extra
    else:
        n = torch.as_tensor(F, device=q.device) + extra
        n_max = host_int(n.max()) if n.numel() else 0
        n = n[..., None]
    if C >= 1.0 or n_max <= 0:
        return q
    top = torch.topk(q, min(n_max, q.shape[-1]), dim=-1).indices  # [..., n_max], most probable first
    in_set = torch.arange(top.shape[-1], device=q.device) < n  # first n of them per row
    mask = torch.zeros_like(q, dtype=torch.bool).scatter_(-1, top, in_set.expand(top.shape))
    w = torch.where(mask, C * q, q)
    total = w.sum(dim=-1, keepdim=True)
    # C = 0 with all mass on the top set leaves nothing: fall back to q (there is nothing to push elsewhere).
    return torch.where(total > 0, w / total.clamp_min(1e-30), q)


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row from probs [..., V] (need not sum to 1), by inverse CDF: the first token whose cumulative
    mass exceeds u ~ U[0, total). The cumulative sums are float64 (error ~1e-11 of the mass at V = 152k) and a
    zero-probability token is never returned. One uniform per row: 4x faster than torch.multinomial on a CPU at
    V = 152k (0.55 vs 2.4 ms per row), which matters for SSD's many branch rows."""
    flat = probs.reshape(-1, probs.shape[-1])
    cdf = flat.to(torch.float64).cumsum(dim=-1)
    u = torch.rand(flat.shape[0], 1, generator=generator, dtype=torch.float64, device=flat.device) * cdf[:, -1:]
    idx = torch.searchsorted(cdf, u, right=True).clamp_(max=flat.shape[-1] - 1)
    return idx.reshape(probs.shape[:-1])


def point_mass(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """q = delta(token): the proposal distribution of a token chosen without the draft model (fast backup)."""
    return torch.nn.functional.one_hot(tokens, vocab).float()


def top_logprobs(logits: torch.Tensor, n: int) -> list[list]:
    """Per row of logits [rows, V]: [ids, log-probs, rest] of its n most probable tokens at T = 1.

    ids descend in probability; log-probs are natural logs rounded to 4 decimals (relative error in p
    below 5e-5); rest = 1 - the n probabilities (the mass of the other V - n tokens), rounded to 6 decimals.
    This is the trace's compact distribution record (ssd_sim.io.trace, "dists").
    """
    lp = torch.log_softmax(logits.float(), dim=-1)
    vals, ids = torch.topk(lp, min(n, lp.shape[-1]), dim=-1)
    rest = (1.0 - vals.exp().sum(dim=-1)).clamp_min(0.0)
    return [[i, [round(v, 4) for v in row], round(r, 6)]
            for i, row, r in zip(ids.tolist(), vals.tolist(), rest.tolist(), strict=True)]


# ---- draft side --------------------------------------------------------------------------------------
def draft_token(logits: torch.Tensor, temperature: float, F: int | torch.Tensor, C: float, downweight: str,
                generator: torch.Generator, truncation: Truncation = NO_TRUNCATION,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Draft one token per row: greedy at T = 0 (q not needed), else sample from
    q = sigma_{F,C}(truncate(softmax(z/T))).

    Returns (tokens [rows], q [rows, V] or None). The q returned is exactly the distribution sampled from.
    """
    if temperature == 0:
        return greedy(logits), None
    q = saguaro_probs(truncation.apply(probs_from_logits(logits, temperature)), F, C, downweight)
    return sample(q, generator), q


def candidate_order(logits: torch.Tensor, exclude: int | None, n: int) -> list[int]:
    """The draft's bonus-token guesses at one stopping position: its n best tokens, `exclude` removed.

    Order: logits descending, ties by lower id (the same order rank_of() counts in). `exclude` is the
    draft token proposed at this position (rejected if the bonus lands here, so it can never be the bonus).
    Reference implementation (a full stable sort); the runtime uses top_candidates().
    """
    if n <= 0:
        return []
    order = torch.sort(logits, descending=True, stable=True).indices[:n + 1].tolist()
    return [t for t in order if t != exclude][:n]


def top_candidates(logits: torch.Tensor, exclude: torch.Tensor, n: int) -> torch.Tensor:
    """candidate_order() for every row and stopping position at once: one top-k, no per-row loop.

    logits [R, K+1, V], exclude [R, K] (the proposal: s_{k+1} is excluded at position k < K, nothing at K)
    -> [R, K+1, n] token ids, best first (logits descending, ties by lower id), -1 where fewer than n exist.
    """
    ids, cut = _top_ids(logits, n)
    if host_int(cut.any()):
        ids[cut] = _full_order(logits[cut], ids.shape[-1])
    return _without(ids, exclude, n)


def candidate_table(logits: torch.Tensor, exclude: torch.Tensor, n: int) -> torch.Tensor:
    """[R, W n + W]: per row, the n candidates of each of the W = K + 1 stopping positions (top_candidates before
    any tie repair), then a flag per position whose top-k boundary cut a tie group. Device arithmetic only (the
    draft replays it from a CUDA graph: graphs.GraphedFn)."""
    ids, cut = _top_ids(logits, n)
    R, W, _ = ids.shape
    return torch.cat([_without(ids, exclude, n).reshape(R, W * n), cut.long()], dim=1)


def candidate_lists(logits: torch.Tensor, exclude: torch.Tensor, n: int,
                    table: Callable[..., torch.Tensor] = candidate_table) -> list:
    """top_candidates() as host lists [R][K+1][n], read in one transfer: the ids and the rows whose top-k
    boundary cut a tie group travel together (`table`: candidate_table or a graphed copy of it); only when such
    a (rare) row exists is it redone and read again."""
    W = logits.shape[1]
    both = to_host(table(logits, exclude, n=n))
    cands = [[row[k * n:(k + 1) * n] for k in range(W)] for row in both]
    tied = [(r, k) for r, row in enumerate(both) for k, c in enumerate(row[W * n:]) if c]
    if tied:
        exact = to_host(top_candidates(logits, exclude, n))
        for r, k in tied:
            cands[r][k] = exact[r][k]
    return cands


def _top_ids(logits: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The n + 1 best ids per row [R, W, n + 1] (logits descending, ties by lower id) and `cut` [R, W]: rows where
    a tie group straddles the top-k boundary, so the ids kept may not be the lowest of the group."""
    V = logits.shape[-1]
    vals, ids = torch.topk(logits, min(n + 1, V), dim=-1)  # one spare for the excluded token
    ids, order = ids.sort(dim=-1, stable=True)  # ties by lower id: sort by id, then stably by value
    vals = vals.gather(-1, order)
    vals, order = vals.sort(dim=-1, descending=True, stable=True)
    ids = ids.gather(-1, order)
    edge = vals[..., -1:]
    return ids, (logits == edge).sum(-1) > (vals == edge).sum(-1)


def _full_order(logits: torch.Tensor, m: int) -> torch.Tensor:
    """The m best ids of each row by a full stable sort (ties keep the lowest ids)."""
    return torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :m]


def _without(ids: torch.Tensor, exclude: torch.Tensor, n: int) -> torch.Tensor:
    """ids [R, W, n + 1] with s_{k+1} (exclude [R, W - 1]) removed at each position k < K, cut to n; -1 pads."""
    R, W, _ = ids.shape
    skip = torch.full((R, W), -1, dtype=ids.dtype, device=ids.device)
    skip[:, :W - 1] = exclude
    keep = ids != skip[..., None]
    rank = keep.long().cumsum(-1) - 1  # position among the kept ids
    out = torch.full((R, W, n + 1), -1, dtype=ids.dtype, device=ids.device)
    out.scatter_(-1, torch.where(keep & (rank < n), rank, n), ids)  # dropped ids land in the spare column
    return out[..., :n]


def rank_of(logits: torch.Tensor, token: int, exclude: int | None) -> int:
    """Index of `token` in the full candidate order of candidate_order() (0 = best guess)."""
    return ranks_of(logits[None], [token], [exclude])[0]


def ranks_of(logits: torch.Tensor, tokens: list[int], excludes: list[int | None]) -> list[int]:
    """rank_of() for many rows at once, read in one transfer: logits [m, V], one token and exclude per row."""
    if not tokens:
        return []
    dev = logits.device
    t = to_device(tokens, torch.long, dev)[:, None]
    e = to_device([-1 if x is None else x for x in excludes], torch.long, dev)[:, None]
    v = logits.gather(1, t)
    ids = torch.arange(logits.shape[-1], device=dev)
    before = (logits > v) | ((logits == v) & (ids < t))
    skipped = (e >= 0) & (e != t) & before.gather(1, e.clamp(min=0))  # the excluded token is not a candidate
    return to_host(before.sum(dim=1) - skipped[:, 0].long())


# ---- verification (target side) ----------------------------------------------------------------------
def leading_true(ok: torch.Tensor) -> torch.Tensor:
    """Per row, how many entries are True before the first False ([b, K] bool -> [b] long)."""
    return ok.long().cumprod(dim=1).sum(dim=1)


def verify_greedy(target_logits: torch.Tensor, drafts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """T = 0: accept s_i while s_i == argmax p_i; the bonus is argmax p at the first mismatch (or at K+1).

    target_logits [b, K+1, V], drafts [b, K] -> (accepted [b] in 0..K, bonus [b]).
    """
    best = greedy(target_logits)  # [b, K+1]
    accepted = leading_true(drafts == best[:, :-1])
    return accepted, best.gather(1, accepted[:, None])[:, 0]


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Bonus distribution after a rejection: r(x) = max(0, p(x) - q(x)) / sum_x' max(0, p(x') - q(x')).

    With q = delta(s) (a point-mass proposal) this is p with s removed, renormalised. If p == q there is
    no residual mass (a rejection then has probability 0); return p so the result is still a distribution.
    """
    excess = (p - q).clamp_min(0.0)
    mass = excess.sum(dim=-1, keepdim=True)
    return torch.where(mass > 0, excess / mass.clamp_min(1e-30), p)


def accept_mask(p_tok: torch.Tensor, q_tok: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Accept each s_i with probability min(1, p(s_i) / q(s_i)): u ~ U[0,1), accept iff u q(s_i) < p(s_i)."""
    u = torch.rand(p_tok.shape, generator=generator, device=p_tok.device)
    return u * q_tok < p_tok


def verify_sample(p: torch.Tensor, drafts: torch.Tensor, q: torch.Tensor,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """T > 0: the speculative-sampling ratio test (lossless: output ~ p exactly).

    p [b, K+1, V] (target, temperature-scaled), drafts [b, K], q [b, K, V] (what each s_i was sampled
    from). Accept s_1.. while accept_mask; at the first rejection i sample the bonus from
    residual(p_i, q_i); if all K are accepted sample it from p_{K+1}. -> (accepted [b], bonus [b]).
    """
    b, K = drafts.shape
    if K == 0:
        return torch.zeros(b, dtype=torch.long, device=p.device), sample(p[:, 0], generator)
    p_tok = p[:, :K].gather(2, drafts[..., None])[..., 0]
    q_tok = q.gather(2, drafts[..., None])[..., 0]
    accepted = leading_true(accept_mask(p_tok, q_tok, generator))
    rows = torch.arange(b, device=p.device)
    at = accepted.clamp(max=K - 1)
    bonus_dist = torch.where((accepted < K)[:, None], residual(p[rows, at], q[rows, at]), p[rows, accepted])
    return accepted, sample(bonus_dist, generator)


def verify_forced(target_logits: torch.Tensor, drafts: torch.Tensor, rate: float, temperature: float,
                  generator: torch.Generator, truncation: Truncation = NO_TRUNCATION,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic acceptance (not exact, for pipeline tests): accept each position with probability `rate`.

    The bonus is the target's own choice at the stopping position (argmax at T = 0, a sample from p
    otherwise), so the committed text stays plausible while acceptance follows the chosen rate.
    """
    b, K = drafts.shape
    ok = torch.rand(b, K, generator=generator, device=drafts.device) < rate
    accepted = leading_true(ok) if K else torch.zeros(b, dtype=torch.long, device=drafts.device)
    rows = torch.arange(b, device=drafts.device)
    at = target_logits[rows, accepted]
    bonus = greedy(at) if temperature == 0 else sample(truncation.apply(probs_from_logits(at, temperature)), generator)
    return accepted, bonus
