"""bench/acceptance_parts.py: a sampled run's acceptance split into its text (its contexts' derived rates against the
other runs') and its luck (its counted accepts against its own contexts' derived rates)."""

import numpy as np
import pytest

from ssd_sim.io.trace import Trace
from tests.helpers.bench import load_bench
from tests.helpers.synthetic_traces import dist_pairs, dist_record
from tests.helpers.trace_samples import trace_from

BENCH = load_bench("acceptance_parts")
N_TOP = 8
SEQS = 60


def sampled_run(p: np.ndarray, q: np.ndarray, accept: np.ndarray, mode: str = "sd", T: float = 1.0) -> Trace:
    """K = 1 rounds, one context each (position 0), SEQS sequences; accept[j]: the round's draft token was accepted
    (the stopping position is then 1, logged with the same pair)."""
    rounds = []
    for j, a in enumerate(accept):
        dists = [dist_record(p[j], N_TOP) + dist_record(q[j], N_TOP)] * (1 + int(a))
        rounds.append({"round": j, "K": 1, "seqs": [{"seq": j % SEQS, "accepted": int(a), "bonus": 0,
                                                     "committed": 1 + int(a), "dists": dists}], "timings_ms": {}})
    return trace_from({"mode": mode, "plan": {"temperature": T, "num_speculative_tokens": 1}, "batch_size": 1,
                       "log_topn": N_TOP}, rounds)


def honest(n: int, seed: int, mode: str = "sd") -> Trace:
    """A run whose accepts are drawn at each context's true rate sum_x min(p, q) (full distributions)."""
    p, q = dist_pairs(n, seed)
    accept = np.random.default_rng(seed + 100).random(n) < np.minimum(p, q).sum(axis=1)
    return sampled_run(p, q, accept, mode)


def test_the_mean_acceptance_length_counts_the_bonus_and_each_reached_position():
    assert BENCH.accept_len(np.array([0.5, 0.5]), 2) == pytest.approx(1.75)
    assert BENCH.accept_len(np.array([0.8, 0.5, 0.9]), 2) == pytest.approx(1 + 0.8 + 0.4)


def test_runs_on_text_from_one_distribution_differ_by_chance_only():
    parts = BENCH.run_parts(honest(1200, 1, "ssd"), [honest(1200, 2)], np.random.default_rng(0))
    assert abs(parts["text_z"]) < 3 and abs(parts["luck_z"]) < 3
    assert parts["counted"] == pytest.approx(parts["measured"])
    assert abs(parts["text"]) < 0.03 and abs(parts["luck"]) < 0.03


def test_a_run_that_accepts_every_draft_token_shows_luck_not_text():
    p, q = dist_pairs(1200, 1)
    parts = BENCH.run_parts(sampled_run(p, q, np.ones(1200, bool)), [honest(1200, 2)], np.random.default_rng(0))
    assert parts["counted"] == pytest.approx(2.0)
    assert parts["luck"] > 0.1 and parts["luck_z"] > 5
    assert abs(parts["text_z"]) < 3


def test_a_run_on_easier_text_shows_text_not_luck():
    # its draft equals its target: every context's derived acceptance is 1 less what the top-8 truncation hides
    p, _ = dist_pairs(1200, 1)
    parts = BENCH.run_parts(sampled_run(p, p, np.ones(1200, bool)), [honest(1200, 2)], np.random.default_rng(0))
    assert parts["text"] > 0.1 and parts["text_z"] > 5


def test_a_run_with_no_other_run_at_its_temperature_has_no_baseline():
    p, q = dist_pairs(200, 2)
    greedy_text = sampled_run(p, q, np.ones(200, bool), T=0.5)
    assert BENCH.run_parts(honest(200, 1), [greedy_text], np.random.default_rng(0)) is None
