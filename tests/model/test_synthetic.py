"""The synthetic family's per-position hit rates against Monte Carlo of the verification they describe."""

import numpy as np
import pytest

from ssd_sim.model.synthetic import _fitted_family, _greedy_sigma, _synthetic_base, _synthetic_pair, hit_rows


def _mc_sampled(acceptance: float, temperature: float, trials: int, seed: int = 7):
    """Run one verification position per (context, trial): draft s ~ q, accept w.p. min(1, p/q), else bonus ~
    residual; separately a bonus ~ p after all were accepted. Returns per-F hit rates (reject, accepted)."""
    rng = np.random.default_rng(seed)
    sigma = _fitted_family(acceptance, temperature, 1.0, "top_f")[0]
    p, q = _synthetic_pair(sigma, temperature)
    ctx = np.repeat(np.arange(p.shape[0]), trials)
    u = rng.random((3, ctx.size))
    s = (np.cumsum(q[ctx], axis=1) < u[0][:, None]).sum(axis=1)  # draft token (the draft's tokens are rank-sorted)
    rejected = u[1] >= np.minimum(1.0, p[ctx, s] / q[ctx, s])
    residual = np.maximum(0.0, p - q)
    residual /= residual.sum(axis=1, keepdims=True)
    c, s = ctx[rejected], s[rejected]
    bonus = (np.cumsum(residual[c], axis=1) < u[2][rejected][:, None]).sum(axis=1)
    plain = (np.cumsum(p[ctx], axis=1) < u[2][:, None]).sum(axis=1)
    reject, accepted = [0.0], [0.0]
    for F in range(1, 7):
        # top-F of q without s: ranks 0..F-1, or 0..F without s when s is among them
        in_cache = np.where(s < F, (bonus <= F) & (bonus != s), bonus < F)
        reject.append(float(in_cache.mean()))
        accepted.append(float((plain < F).mean()))
    return np.array(reject), np.array(accepted), int(rejected.sum())


@pytest.mark.parametrize("acceptance, temperature", [(0.8, 1.0), (0.9, 0.6)])
def test_sampled_hit_rows_match_monte_carlo_of_the_ratio_test(acceptance, temperature):
    reject, accepted = hit_rows(acceptance, temperature, 6)
    mc_reject, mc_accepted, n_rejected = _mc_sampled(acceptance, temperature, trials=400)
    assert n_rejected > 5000
    assert np.asarray(reject) == pytest.approx(mc_reject, abs=0.02)
    assert np.asarray(accepted) == pytest.approx(mc_accepted, abs=0.01)


def test_greedy_rows_match_fresh_noise_draws():
    reject, accepted = hit_rows(0.85, 0.0, 6)
    draft_logits, _ = _synthetic_base()
    noise = np.random.default_rng(11).standard_normal((64, *draft_logits.shape))
    ranks = np.argmax(draft_logits[None] + _greedy_sigma(0.85) * noise, axis=-1).ravel()
    assert accepted[1] == pytest.approx(0.85, abs=1e-3)  # one guess after all accepted = the acceptance itself
    assert float((ranks == 0).mean()) == pytest.approx(0.85, abs=0.02)
    for F in range(1, 7):
        assert accepted[F] == pytest.approx(float((ranks < F).mean()), abs=0.02)
        assert reject[F] == pytest.approx(float(((ranks >= 1) & (ranks <= F)).sum() / (ranks >= 1).sum()), abs=0.03)


def test_rows_rise_with_guesses_and_the_all_accepted_row_beats_the_rejection_row():
    for T in (0.0, 0.5, 1.0):
        reject, accepted = hit_rows(0.8, T, 16)
        assert reject[0] == accepted[0] == 0.0
        assert all(np.diff(reject) >= 0) and all(np.diff(accepted) >= 0)
        assert accepted[1] > reject[1]  # a residual sample avoids the draft's favourites; a plain sample does not
