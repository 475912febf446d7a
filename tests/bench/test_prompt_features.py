"""bench/prompt_features.py: what the pair shows on a prompt's tokens, and whether a feature narrows half B's miss."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from ssd_sim.io.trace import read_trace
from tests.helpers.bench import load_bench

BENCH = load_bench("prompt_features")
GRID_SSD = str(Path(__file__).resolve().parents[2] / "traces/cpu-fp32-grid/ssd-k2-f112-b1-t1.jsonl")


def test_a_draft_equal_to_its_target_agrees_everywhere_and_a_disjoint_one_nowhere():
    logits = torch.randn(5, 11, generator=torch.Generator().manual_seed(0))
    same = BENCH.pair_scores(logits, torch.cat([logits, torch.zeros(5, 3)], dim=1))  # extra draft rows dropped
    assert same["min_pq"] == pytest.approx(1.0) and same["argmax_agree"] == 1.0 == same["argmax_last"]
    p = logits.log_softmax(-1)
    assert same["target_entropy"] == pytest.approx(float(-(p.exp() * p).sum(-1).mean()))
    peaked = torch.full((5, 11), -1e4)
    peaked[:, 0], other = 0.0, torch.full((5, 11), -1e4)
    other[:, 1] = 0.0
    apart = BENCH.pair_scores(peaked, other)  # each certain of a different token
    assert apart["min_pq"] == pytest.approx(0.0, abs=1e-6) and apart["argmax_agree"] == 0.0 == apart["argmax_last"]


def test_a_requests_acceptance_is_its_tokens_per_round():
    acc = BENCH.request_acceptance(GRID_SSD)
    rounds = read_trace(GRID_SSD).rounds
    seq = min(acc)
    mine = [s.accepted + 1 for r in rounds for s in r.seqs if s.seq == seq]
    assert acc[seq] == pytest.approx(sum(mine) / len(mine)) and 1.0 <= acc[seq] <= 3.0  # K = 2


def test_a_feature_that_is_the_within_class_deviation_removes_half_bs_miss_and_noise_does_not():
    rng = np.random.default_rng(1)
    tags = ["code"] * 24 + ["chat"] * 24
    dev = rng.normal(0, 0.3, 48)
    y = np.where(np.array(tags) == "code", 2.6, 2.1) + dev
    plain, exact = BENCH.halves_error(y, dev, tags, draws=50)
    _, noise = BENCH.halves_error(y, rng.normal(0, 1, 48), tags, draws=50)
    med = [float(x.split("%")[0]) for x in (plain, exact, noise)]
    assert med[0] > 1.0 and med[1] < 1e-6 and math.isclose(med[2], med[0], rel_tol=0.35)
