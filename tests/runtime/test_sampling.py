"""Sampling and verification rules of ssd_runtime.sampling, checked in-process on explicit distributions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from ssd_runtime.sampling import (
    candidate_order,
    draft_token,
    point_mass,
    probs_from_logits,
    rank_of,
    residual,
    saguaro_probs,
    top_candidates,
    verify_forced,
    verify_greedy,
    verify_sample,
)
from ssd_sim.theory.saguaro import saguaro_probs as saguaro_np

ALPHA = 1e-3  # significance level of every goodness-of-fit test in the runtime suite


def _dist(v: int, seed: int, peak: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(peak * torch.randn(v, generator=g), dim=-1)


@pytest.mark.parametrize("downweight", ["top_f", "top_f_plus_1"])
@pytest.mark.parametrize("C", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("F", [0, 1, 3])
def test_saguaro_probs_matches_the_numpy_reference(F, C, downweight):
    q = torch.stack([_dist(16, s) for s in range(5)])
    got = saguaro_probs(q, F, C, downweight).double().numpy()
    want = saguaro_np(q.double().numpy(), F, C, downweight)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_saguaro_probs_takes_a_fan_out_per_row():
    q = torch.stack([_dist(16, s) for s in range(3)])
    F = torch.tensor([0, 2, 5])
    got = saguaro_probs(q, F, 0.3)
    for r in range(3):
        np.testing.assert_allclose(got[r].numpy(), saguaro_np(q[r].numpy(), int(F[r]), 0.3), rtol=1e-5, atol=1e-7)


def test_greedy_verification_accepts_the_matching_prefix_and_takes_argmax_after_it():
    logits = torch.full((3, 4, 6), -5.0)
    best = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 0], [5, 4, 3, 2]])
    logits.scatter_(2, best[..., None], 5.0)
    drafts = torch.tensor([[1, 2, 3], [1, 0, 0], [5, 4, 0]])
    accepted, bonus = verify_greedy(logits, drafts)
    assert accepted.tolist() == [3, 0, 2]
    assert bonus.tolist() == [4, 0, 3]  # all accepted: the token after K; else argmax at the mismatch


def test_residual_of_a_point_mass_is_p_without_the_token():
    p = _dist(10, 0)
    r = residual(p[None], point_mass(torch.tensor([3]), 10))[0]
    want = p.clone()
    want[3] = 0
    torch.testing.assert_close(r, want / want.sum())


def test_residual_with_no_excess_mass_falls_back_to_p():
    p = _dist(10, 1)
    torch.testing.assert_close(residual(p[None], p[None])[0], p)


@pytest.mark.parametrize("proposal", ["draft", "saguaro", "point_mass"])
def test_ratio_test_output_is_distributed_as_the_target(proposal):
    """One position: s ~ q, accept w.p. min(1, p(s)/q(s)), else bonus ~ residual. The token kept is ~ p."""
    V, n = 8, 60_000
    g = torch.Generator().manual_seed(7)
    p, q = _dist(V, 1), _dist(V, 2)
    if proposal == "saguaro":
        q = saguaro_probs(q, 2, 0.3)
    qs = q.expand(n, V)
    if proposal == "point_mass":
        drafts = torch.randint(0, V, (n,), generator=g)
        qs = point_mass(drafts, V)
    else:
        drafts = torch.multinomial(qs, 1, generator=g)[:, 0]
    pk = p.expand(n, 2, V)  # position 1 (after s) is only used when s is accepted
    accepted, bonus = verify_sample(pk, drafts[:, None], qs[:, None], g)
    first = torch.where(accepted == 1, drafts, bonus)
    counts = torch.bincount(first, minlength=V).numpy()
    assert chisquare(counts, p.double().numpy() / p.double().sum().item() * n).pvalue > ALPHA


def test_ratio_test_with_the_wrong_q_is_detected():
    """Sampling from Saguaro q_C but testing with the unscaled q biases the output: the same test rejects it."""
    V, n = 8, 60_000
    g = torch.Generator().manual_seed(7)
    p, q = _dist(V, 1), _dist(V, 2)
    qc = saguaro_probs(q, 2, 0.3)
    drafts = torch.multinomial(qc.expand(n, V), 1, generator=g)
    accepted, bonus = verify_sample(p.expand(n, 2, V), drafts, q.expand(n, 1, V), g)
    first = torch.where(accepted == 1, drafts[:, 0], bonus)
    counts = torch.bincount(first, minlength=V).numpy()
    assert chisquare(counts, p.double().numpy() / p.double().sum().item() * n).pvalue < ALPHA


def test_all_accepted_bonus_comes_from_the_position_after_the_last_draft():
    V = 5
    p = torch.zeros(1, 3, V)
    p[0, 0, 1] = p[0, 1, 2] = p[0, 2, 4] = 1.0
    q = point_mass(torch.tensor([[1, 2]]), V)
    accepted, bonus = verify_sample(p, torch.tensor([[1, 2]]), q, torch.Generator().manual_seed(0))
    assert (accepted.item(), bonus.item()) == (2, 4)


def test_draft_token_at_temperature_zero_is_greedy_and_needs_no_q():
    logits = torch.tensor([[0.1, 3.0, 0.2], [2.0, 0.0, 1.0]])
    tok, q = draft_token(logits, 0.0, 1, 0.3, "top_f", torch.Generator())
    assert tok.tolist() == [1, 0] and q is None


def test_draft_token_returns_the_distribution_it_sampled_from():
    logits = torch.randn(4, 12, generator=torch.Generator().manual_seed(3))
    tok, q = draft_token(logits, 0.7, 2, 0.3, "top_f", torch.Generator().manual_seed(1))
    torch.testing.assert_close(q, saguaro_probs(torch.softmax(logits / 0.7, -1), 2, 0.3))
    assert (q.gather(1, tok[:, None]) > 0).all()


def test_candidates_are_the_top_tokens_without_the_rejected_draft_token():
    logits = torch.tensor([0.5, 3.0, 2.0, 2.5, -1.0, 1.0])
    assert candidate_order(logits, None, 3) == [1, 3, 2]
    assert candidate_order(logits, 3, 3) == [1, 2, 5]
    assert candidate_order(logits, 3, 0) == []


@pytest.mark.parametrize("seed", range(4))
def test_batched_candidates_equal_candidate_order_at_every_row_and_position(seed):
    g = torch.Generator().manual_seed(seed)
    R, K, V, n = 3, 4, 30, 6
    logits = torch.randn(R, K + 1, V, generator=g).round(decimals=1)  # rounded: ties occur and go to the lower id
    exclude = torch.randint(0, V, (R, K), generator=g)
    got = top_candidates(logits, exclude, n).tolist()
    for r in range(R):
        for k in range(K + 1):
            ex = int(exclude[r, k]) if k < K else None
            assert got[r][k] == candidate_order(logits[r, k], ex, n), (r, k)


def test_batched_candidates_pad_with_minus_one_when_the_vocabulary_runs_out():
    logits = torch.tensor([[[1.0, 3.0, 2.0], [0.0, 1.0, 2.0]]])  # K = 1, V = 3
    assert top_candidates(logits, torch.tensor([[1]]), 3).tolist() == [[[2, 0, -1], [2, 1, 0]]]


@pytest.mark.parametrize("seed", range(5))
def test_rank_of_agrees_with_candidate_order(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(40, generator=g)
    exclude = int(torch.randint(0, 40, (1,), generator=g))
    order = candidate_order(logits, exclude, 39)
    assert [rank_of(logits, t, exclude) for t in order] == list(range(39))


def test_forced_acceptance_accepts_at_the_requested_rate():
    b, K, V = 20_000, 3, 7
    logits = torch.randn(b, K + 1, V, generator=torch.Generator().manual_seed(0))
    drafts = torch.zeros(b, K, dtype=torch.long)
    accepted, _ = verify_forced(logits, drafts, 0.6, 0.0, torch.Generator().manual_seed(1))
    counts = torch.bincount(accepted, minlength=K + 1).numpy()
    a = 0.6
    want = np.array([(1 - a), a * (1 - a), a * a * (1 - a), a ** 3]) * b
    assert chisquare(counts, want).pvalue > ALPHA


@pytest.mark.parametrize("T", [1e-19, 1e-21, 1e-38, 1e-45, 5e-324])
def test_probabilities_at_a_vanishing_temperature_are_the_argmax_limit(T):
    logits = torch.tensor([[1.0, 3.0, 2.0, 3.0 - 1e-6 * 3], [0.5, -1.0, 0.25, 0.0]])
    p = probs_from_logits(logits, T)
    assert torch.isfinite(p).all() and torch.equal(p.argmax(-1), torch.tensor([1, 0]))
    assert p[0, 1] == 1.0 and p[1, 0] == 1.0  # the runner-up 3e-6 below the maximum gets nothing
    tie = probs_from_logits(torch.tensor([[2.0, 2.0, 1.0]]), T)
    assert torch.allclose(tie, torch.tensor([[0.5, 0.5, 0.0]]))


def test_truncation_keeps_the_top_k_then_the_top_p_prefix_renormalised():
    from ssd_runtime.sampling import Truncation

    p = torch.tensor([0.05, 0.5, 0.1, 0.2, 0.15])
    close = torch.testing.assert_close
    close(Truncation(top_k=3).apply(p), torch.tensor([0, 0.5, 0, 0.2, 0.15]) / 0.85)
    close(Truncation(top_p=0.6).apply(p), torch.tensor([0, 0.5, 0, 0.2, 0]) / 0.7)  # 0.5 < 0.6: the next crosses
    close(Truncation(top_p=0.5).apply(p), torch.tensor([0, 1.0, 0, 0, 0]))  # mass before 0.2 is 0.5: not < 0.5
    close(Truncation(top_k=3, top_p=0.6).apply(p), torch.tensor([0, 0.5, 0, 0.2, 0]) / 0.7)
    close(Truncation(top_p=0.01).apply(p), torch.tensor([0, 1.0, 0, 0, 0]))  # at least one token
    assert Truncation().apply(p) is p and not Truncation().active and Truncation(top_k=2).active


@pytest.mark.parametrize(("top_k", "top_p"), [(-1, 1.0), (2.5, 1.0), (0, 0.0), (0, 1.5)])
def test_truncation_refuses_values_outside_its_range(top_k, top_p):
    from ssd_runtime.sampling import Truncation

    with pytest.raises(ValueError, match="top_k" if top_p == 1.0 else "top_p"):
        Truncation(top_k=top_k, top_p=top_p)
