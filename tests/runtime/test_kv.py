"""BatchKV: rows of different lengths, per-row rollback, row selection and compaction give the same logits as
running each row's tokens from scratch."""

from __future__ import annotations

import pytest
import torch

from ssd_runtime.kv import BatchKV
from ssd_runtime.models import tiny_model
from tests.helpers.runtime import TARGET, make_prompts

ATOL = 1e-4  # float32 logits of magnitude ~10; summation order differs between cached and fresh runs


@pytest.fixture(scope="module")
def model():
    return tiny_model(**TARGET)


@torch.no_grad()
def fresh(model, seq: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([seq])).logits[0, -1].float()


def test_prefill_of_different_lengths_matches_each_row_alone(model):
    prompts = make_prompts([2, 9, 5], 96)
    kv = BatchKV(model, 3)
    out = kv.forward(prompts, keep=1)[:, -1]
    for r, p in enumerate(prompts):
        torch.testing.assert_close(out[r], fresh(model, p), atol=ATOL, rtol=0)
    assert kv.lengths() == [2, 9, 5] and kv.slots == 9


def test_rollback_keeps_each_rows_prefix_and_forgets_the_rest(model):
    prompts = make_prompts([3, 6, 4], 96, seed=1)
    kv = BatchKV(model, 3, compact_slack=1000)
    kv.forward(prompts)
    drafted = make_prompts([4, 4, 4], 96, seed=2)
    kv.forward(drafted, keep=4)
    kept = [0, 2, 4]  # row 0 rejects everything, row 1 keeps two tokens, row 2 all four
    committed = [p + d[:k] + [7] for p, d, k in zip(prompts, drafted, kept, strict=True)]
    pending = kv.rollback_to(committed)
    assert pending == [[7], [7], [7]]
    assert kv.lengths() == [3, 8, 8]
    out = kv.forward(pending)[:, -1]
    for r in range(3):
        torch.testing.assert_close(out[r], fresh(model, committed[r]), atol=ATOL, rtol=0)


def test_rollback_to_returns_every_token_not_cached(model):
    kv = BatchKV(model, 2)
    kv.forward([[1, 2, 3], [4, 5]])
    assert kv.rollback_to([[1, 2, 3, 9, 8], [4, 6]]) == [[9, 8], [6]]
    assert kv.toks == [[1, 2, 3], [4]]


def test_truncating_every_row_crops_the_unused_slots(model):
    kv = BatchKV(model, 2)
    kv.forward([[1, 2, 3, 4], [5, 6, 7, 8]])
    kv.truncate([2, 1])
    assert kv.slots == 2 and kv.valid.tolist() == [[True, True], [True, False]]


def test_select_repeats_rows_into_independent_copies(model):
    prompts = make_prompts([3, 5], 96, seed=3)
    kv = BatchKV(model, 2)
    kv.forward(prompts)
    branches = kv.select([1, 1, 0])
    out = branches.forward([[10], [11], [12]])[:, -1]
    for r, (src, tok) in enumerate([(1, 10), (1, 11), (0, 12)]):
        torch.testing.assert_close(out[r], fresh(model, prompts[src] + [tok]), atol=ATOL, rtol=0)
    assert kv.lengths() == [3, 5]  # the original is untouched


def test_compaction_removes_holes_without_changing_logits(model):
    prompts = make_prompts([4, 4], 96, seed=4)
    kv = BatchKV(model, 2, compact_slack=3)
    kv.forward(prompts)
    seqs = [list(p) for p in prompts]
    for step in range(6):  # row 0 always rejects its three drafted tokens, row 1 keeps them: holes pile up in row 0
        drafted = make_prompts([3, 3], 96, seed=10 + step)
        kv.forward(drafted, keep=3)
        seqs[1] += drafted[1]
        kv.rollback_to([seqs[0] + [1], seqs[1] + [2]])
        kv.forward([[1], [2]])
        seqs[0].append(1)
        seqs[1].append(2)
    out = kv.forward([[5], [6]])[:, -1]
    torch.testing.assert_close(out[0], fresh(model, seqs[0] + [5]), atol=ATOL, rtol=0)
    torch.testing.assert_close(out[1], fresh(model, seqs[1] + [6]), atol=ATOL, rtol=0)
    assert kv.slots == 29 and kv.lengths() == [11, 29]  # row 0 has 18 holes, but row 1 uses every column
    alone = kv.select([0])  # row 1 finished: now no row uses those 18 columns
    pending = alone.rollback_to([seqs[0] + [5, 9]])
    assert pending == [[9]] and alone.slots == 11  # compacted
    torch.testing.assert_close(alone.forward(pending)[0, -1], fresh(model, seqs[0] + [5, 9]), atol=ATOL, rtol=0)
