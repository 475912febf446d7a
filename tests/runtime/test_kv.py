"""StaticKV: rows of different lengths, index rollback, row ranges, row removal, tree steps and growth give the
same logits as running each row's tokens from scratch (transformers' own forward and masks), for every supported
model family; rollback and removal never copy more than one row."""

from __future__ import annotations

import pytest
import torch

from ssd_runtime.kv import SCRATCH, StaticKV
from ssd_runtime.models import tiny_model
from ssd_runtime.specs import FAMILIES, TINY_WINDOW
from ssd_sim.model.architecture import Architecture
from tests.helpers.runtime import TARGET, make_prompts

# float32 logits: summation order differs between cached and fresh runs and between CPUs' kernels, so the error
# scales with the logit (a granitemoe logit of 2.5 differed by 1.0013e-4 on a Zen 4 host, past an absolute 1e-4);
# a masking or slot bug moves logits by 0.1 or more
ATOL, RTOL = 1e-4, 1e-4


def assert_logits_close(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)


@pytest.fixture(scope="module", params=["qwen2-full", *FAMILIES])
def model(request):
    """The default tiny Qwen2 (full attention), and every family with a sliding window of TINY_WINDOW tokens where
    it has one (the contexts below reach ~20 tokens, so windowed layers drop keys; a full-attention mask fails)."""
    if request.param == "qwen2-full":
        return tiny_model(**TARGET)
    return tiny_model(**TARGET, family=request.param, window=TINY_WINDOW, layers=3)


@torch.no_grad()
def fresh(model, seq: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([seq])).logits[0, -1].float()


def filled(model, prompts: list[list[int]], rows: int | None = None, capacity: int = 256) -> StaticKV:
    kv = StaticKV(model, rows or len(prompts), capacity)
    kv.add_rows(len(prompts))
    kv.append(prompts)
    return kv


def test_prefill_of_different_lengths_matches_each_row_alone(model):
    prompts = make_prompts([2, 9, 5], 96)
    kv = StaticKV(model, 3)
    kv.add_rows(3)
    out = kv.append(prompts, keep=1)[:, -1]
    for r, p in enumerate(prompts):
        assert_logits_close(out[r], fresh(model, p))
    assert kv.lengths == [2, 9, 5]


def test_resume_rolls_back_by_length_and_returns_the_rest(model):
    prompts = make_prompts([3, 6, 4], 96, seed=1)
    kv = filled(model, prompts)
    drafted = make_prompts([4, 4, 4], 96, seed=2)
    kv.append(drafted, keep=4)
    kept = [0, 2, 4]  # row 0 rejects everything, row 1 keeps two tokens, row 2 all four
    committed = [p + d[:k] + [7] for p, d, k in zip(prompts, drafted, kept, strict=True)]
    pending = kv.resume(committed)
    assert pending == [[7], [7], [7]]
    assert kv.lengths == [3, 8, 8]
    out = kv.append(pending)[:, -1]
    for r in range(3):
        assert_logits_close(out[r], fresh(model, committed[r]))


def test_rows_without_input_are_left_alone(model):
    prompts = make_prompts([3, 5], 96, seed=3)
    kv = filled(model, prompts)
    out = kv.append([[], [11, 12]])[:, -1]
    assert_logits_close(out[1], fresh(model, prompts[1] + [11, 12]))
    assert kv.lengths == [3, 7]
    out = kv.append([[13], []])[:, -1]
    assert_logits_close(out[0], fresh(model, prompts[0] + [13]))


def test_a_row_range_is_prefilled_without_touching_the_others(model):
    prompts = make_prompts([4, 6], 96, seed=4)
    kv = filled(model, prompts, rows=4)
    new = make_prompts([5, 2], 96, seed=5)
    rows = kv.add_rows(2)
    assert rows == range(2, 4)
    out = kv.append(new, rows=rows)[:, -1]
    for i, p in enumerate(new):
        assert_logits_close(out[i], fresh(model, p))
    out = kv.append([[1], [2], [3], [4]])[:, -1]
    for r, (p, t) in enumerate(zip(prompts + new, [1, 2, 3, 4], strict=True)):
        assert_logits_close(out[r], fresh(model, p + [t]))
    with pytest.raises(ValueError, match="do not fit"):
        kv.add_rows(1)


def test_removing_a_row_moves_the_last_row_into_it(model):
    prompts = make_prompts([3, 7, 5], 96, seed=6)
    kv = filled(model, prompts)
    assert kv.remove_row(0) == 2 and kv.lengths == [5, 7]
    out = kv.append([[9], [8]])[:, -1]
    assert_logits_close(out[0], fresh(model, prompts[2] + [9]))
    assert_logits_close(out[1], fresh(model, prompts[1] + [8]))
    assert kv.remove_row(1) == 1 and kv.lengths == [6]


def test_tree_step_branches_share_the_prefix_and_see_only_their_own_tokens(model):
    prompts = make_prompts([6, 4], 96, seed=7)
    kv = filled(model, prompts)
    before = list(kv.lengths)
    # row 0: branches stopping after 6, 4 and 5 tokens; row 1: two branches after 4 and 2, one padding column
    prefix = torch.tensor([[6, 4, 5], [4, 2, 0]])
    real = torch.tensor([[True, True, True], [True, True, False]])
    tokens = torch.tensor([[10, 11, 12], [13, 14, 0]])
    history = [[[t] for t in row] for row in tokens.tolist()]
    for step in range(3):
        out = kv.tree_step(tokens, real, prefix, step)
        for r in range(2):
            for j in range(3):
                if real[r, j]:
                    context = prompts[r][:int(prefix[r, j])] + history[r][j]
                    assert_logits_close(out[r, j], fresh(model, context))
        tokens = out.argmax(-1)
        for r in range(2):
            for j in range(3):
                history[r][j].append(int(tokens[r, j]))
    assert kv.lengths == before  # branch tokens live past the rows' lengths: nothing to roll back


def test_the_tree_steps_of_one_branch_decode_share_one_copy_of_the_lengths(model):
    """On a GPU every host -> device copy is a launch: the K steps copy the rows' lengths once, not K times."""
    kv = filled(model, make_prompts([6, 4], 96, seed=7))
    real, prefix = torch.ones(2, 2, dtype=torch.bool), torch.tensor([[6, 5], [4, 3]])
    kv.tree_step(torch.tensor([[1, 2], [3, 4]]), real, prefix, 0)
    first = kv._lengths_on_device()
    kv.tree_step(torch.tensor([[5, 6], [7, 8]]), real, prefix, 1)
    assert kv._lengths_on_device() is first and first.tolist() == [6, 4]
    kv.append([[9], [9]])
    assert kv._lengths_on_device().tolist() == [7, 5]


def test_buffers_grow_when_a_row_outgrows_them(model):
    prompts = make_prompts([5, 3], 96, seed=8)
    kv = filled(model, prompts, capacity=8)
    first = kv.capacity
    more = make_prompts([9, 9], 96, seed=9)
    out = kv.append(more)[:, -1]
    assert kv.capacity >= SCRATCH + 14 and kv.capacity >= 2 * first
    for r in range(2):
        assert_logits_close(out[r], fresh(model, prompts[r] + more[r]))


def test_memory_is_rows_times_capacity_and_fixed_after_the_first_forward(model):
    kv = filled(model, make_prompts([4, 4], 96, seed=10), rows=3, capacity=64)
    # the planner's cache bytes per token (ssd_sim: KV heads of GQA, multi-head GPT-NeoX, multi-query Falcon)
    per_slot = Architecture.from_config(model.config.to_dict()).kv_bytes_per_token("fp32")
    assert kv.nbytes() == 3 * 64 * per_slot
    for _ in range(10):
        kv.append([[1, 2, 3], [4, 5, 6]])
        kv.truncate([4, 4])
    assert kv.nbytes() == 3 * 64 * per_slot
