"""Rates derived from logged top-N distributions equal the Saguaro math on the full distributions, within the
stated truncation bounds."""

from __future__ import annotations

import numpy as np
import pytest

from ssd_sim.io.trace import Trace
from ssd_sim.model.logged import logged_positions, response, truncation_share
from ssd_sim.theory.saguaro import outcome_stats
from tests.helpers.synthetic_traces import dist_pairs, dist_record
from tests.helpers.trace_samples import trace_from

V = 200


def pairs(n: int, seed: int = 0):
    return dist_pairs(n, seed, V)


def record(dist: np.ndarray, n: int) -> list:
    return dist_record(dist, n)


def trace_of(p: np.ndarray, q: np.ndarray, n: int) -> Trace:
    """One-round-per-context trace: every context logged at position 0 (accepted 0)."""
    rounds = [{"round": j, "K": 1, "seqs": [{"seq": j, "accepted": 0, "bonus": 0, "committed": 1,
                                             "dists": [record(p[j], n) + record(q[j], n)]}], "timings_ms": {}}
              for j in range(len(p))]
    return trace_from({"mode": "sd", "plan": {}, "batch_size": 1, "log_topn": n}, rounds)


def temper(d: np.ndarray, T: float) -> np.ndarray:
    if T == 0:
        return np.eye(V)[d.argmax(1)]
    x = np.log(d) / T
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def exact(p: np.ndarray, q: np.ndarray, T: float, C: float, F: int) -> tuple[float, float, float]:
    """T > 0 (greedy has its own test: one-hot q loses the draft's candidate order). (acceptance with the top-1 set, hit after a rejection with F guesses, hit when all accepted) from full dists."""
    pT, qT = temper(p, T), temper(q, T)
    C = C if T > 0 else 1.0
    acc = outcome_stats(pT, qT, 1, C).acceptance.mean()
    st = outcome_stats(pT, qT, F, C)
    w = 1 - st.acceptance
    rej = float((w * st.p_hit_excluding_draft).sum() / w.sum())
    top = np.argsort(-q, axis=1, kind="stable")[:, :F]
    all_acc = float(np.take_along_axis(pT, top, 1).sum(1).mean())
    return float(acc), rej, all_acc


@pytest.mark.parametrize("T,C", [(1.0, 1.0), (1.0, 0.4), (0.5, 0.7), (1.5, 0.8)])
def test_untruncated_logs_reproduce_the_saguaro_math_exactly(T, C):
    p, q = pairs(300, seed=1)
    r = response(logged_positions([trace_of(p, q, V)]), T, C, min_contexts=1)
    for F in (1, 3, 8):
        acc, rej, all_acc = exact(p, q, T, C, F)
        assert r.acceptance[0] == pytest.approx(acc, abs=1e-9)
        assert r.reject[0, F] == pytest.approx(rej, abs=1e-9)
        assert r.accepted[0, F] == pytest.approx(all_acc, abs=1e-9)
        pT, qT = temper(p, T), temper(q, T)
        st = outcome_stats(pT, qT, F, C)
        w = 1 - st.acceptance  # the paper's cache (top-F, rejected token included)
        assert r.reject_paper[0, F] == pytest.approx(float((w * st.p_bonus_in_cache).sum() / w.sum()), abs=1e-9)
    assert r.reject[0, 0] == 0.0 and r.accepted[0, 0] == 0.0


def test_top_n_truncation_stays_within_the_stated_bounds():
    p, q = pairs(400, seed=2)
    n = 12
    lp = logged_positions([trace_of(p, q, n)])
    r = response(lp, 1.0, 1.0, min_contexts=1)
    acc, _, _ = exact(p, q, 1.0, 1.0, 1)
    assert 0.0 <= acc - r.acceptance[0] <= r.truncation  # the proven bound at T = 1, C = 1
    p_n = np.sort(p, axis=1)[:, -n]
    for F in (1, 4, 10):
        _, _, all_acc = exact(p, q, 1.0, 1.0, F)
        assert 0.0 <= all_acc - r.accepted[0, F] <= np.minimum(lp.p_rest, F * p_n).mean()
    # elsewhere (no proof): measured errors at N = 12 of V = 200, stated in the module docstring
    for T, C in ((0.5, 1.0), (1.0, 0.5), (0.7, 0.3)):
        r = response(lp, T, C, min_contexts=1)
        for F in (1, 4):
            acc, rej, all_acc = exact(p, q, T, C, F)
            assert abs(acc - r.acceptance[0]) <= r.truncation
            assert abs(rej - r.reject[0, F]) <= 2 * r.truncation
            assert abs(all_acc - r.accepted[0, F]) <= r.truncation


def test_greedy_rates_count_argmax_agreement_and_the_target_argmax_rank():
    p, q = pairs(200, seed=3)
    r = response(logged_positions([trace_of(p, q, 10)]), 0.0, min_contexts=1)
    agree = p.argmax(1) == q.argmax(1)
    rank = (q > q[np.arange(len(q)), p.argmax(1)][:, None]).sum(1)  # the target's argmax in the draft's order
    assert r.acceptance[0] == pytest.approx(agree.mean())
    for F in (1, 2, 5):
        assert r.reject[0, F] == pytest.approx((rank[~agree] <= F).mean())  # top-(F+1) minus the rejected argmax
        assert r.accepted[0, F] == pytest.approx((rank < F).mean())


def test_positions_with_few_contexts_share_the_last_row():
    p, q = pairs(40, seed=4)
    t = trace_of(p, q, 8)
    for j, rnd in enumerate(t.rounds[:10]):  # ten contexts also logged at position 1
        s = rnd.seqs[0]
        s.accepted, s.dists = 1, s.dists + [record(p[-1 - j], 8) + record(q[-1 - j], 8)]
    assert response(logged_positions([t]), 1.0, min_contexts=30).acceptance.shape == (1,)
    assert response(logged_positions([t]), 1.0, min_contexts=10).acceptance.shape == (2,)


def sampled_run(p: np.ndarray, q: np.ndarray, n: int, seed: int, **head) -> Trace:
    """A T = 1 run over the contexts (K = 1): each verified draft token accepted with the full distributions'
    probability sum(min(p, q)), as the runtime's ratio test does; logged at top-n."""
    ok = np.random.default_rng(seed).random(len(p)) < np.minimum(p, q).sum(1)
    rounds = [{"round": j, "K": 1, "seqs": [{"seq": j, "accepted": int(a), "bonus": 0, "committed": 1 + int(a),
                                             "dists": [record(p[j], n) + record(q[j], n)] * (1 + int(a))}],
               "timings_ms": {}} for j, a in enumerate(ok)]
    return trace_from({"mode": "sd", "plan": {"temperature": 1.0}, "batch_size": 1, "log_topn": n, **head}, rounds)


def test_counted_acceptance_of_t1_runs_corrects_the_truncation_within_its_bound():
    p, q = pairs(4000, seed=5)
    truth, _, _ = exact(p, q, 1.0, 1.0, 1)
    lp = logged_positions([sampled_run(p, q, 4, seed=6)])  # top-4 of 200: a large bound
    share = truncation_share(lp)
    plain = response(logged_positions([trace_of(p, q, 4)]), 1.0, min_contexts=1)  # no counted acceptance
    fixed = response(lp, 1.0, min_contexts=1)
    assert 0.0 < share < 1.0 and truth - plain.acceptance[0] > 0.02  # the lower bound misses by > 2 points
    se = np.sqrt(truth * (1 - truth) / len(p))
    assert abs(fixed.acceptance[0] - truth) < 3 * se  # the counted outcomes put it back, within their noise
    assert plain.acceptance[0] < fixed.acceptance[0] <= plain.acceptance[0] + plain.truncation
    # greedy rates are exact (the argmax is always listed): nothing to correct
    assert response(lp, 0.0, min_contexts=1).acceptance[0] == pytest.approx(plain_greedy(p, q))


def plain_greedy(p: np.ndarray, q: np.ndarray) -> float:
    return float((p.argmax(1) == q.argmax(1)).mean())


def test_runs_that_did_not_sample_the_logged_distributions_count_nothing():
    p, q = pairs(500, seed=7)
    assert truncation_share(logged_positions([sampled_run(p, q, 4, seed=8, top_k=20)])) == 0.0
    assert truncation_share(logged_positions([trace_of(p, q, 4)])) == 0.0  # T = 0 runs: exact, nothing measured
