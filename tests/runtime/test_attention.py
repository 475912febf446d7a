"""ssd_runtime.attention: each layer's mask follows its own window, the model's own implementation does the math,
and outside StaticKV's forwards the model is left exactly as loaded."""

from __future__ import annotations

import pytest
import torch

from ssd_runtime.attention import NAME, StaticAttention, Visibility, _attention
from ssd_runtime.kv import StaticKV
from ssd_runtime.models import tiny_model
from tests.helpers.runtime import TARGET, make_prompts


def one_row(n: int) -> Visibility:
    """A causal forward of n tokens in one row (slot = position, no scratch)."""
    pos = torch.arange(n)[None, :]
    vis = pos[:, :, None] >= torch.arange(n)[None, None, :]
    return Visibility(vis, pos, torch.arange(n)[None, None, :], torch.zeros_like(vis))


def test_a_window_of_w_keeps_the_last_w_positions_up_to_the_query():
    m = one_row(6).mask(3, None)[0, 0]
    assert m.shape == (6, 6)
    assert m[5].tolist() == [False, False, False, True, True, True]  # q = 5 sees 3, 4, 5: q - k < 3
    assert m[1].tolist() == [True, True, False, False, False, False]
    assert one_row(6).mask(None, None)[0, 0].sum() == 21  # full causal: 1 + 2 + ... + 6


def test_additive_masks_are_zero_where_seen_and_the_dtype_minimum_elsewhere():
    add = one_row(3).mask(None, torch.bfloat16)[0, 0]
    assert add.dtype == torch.bfloat16 and add[0, 0] == 0 and add[0, 1] == torch.finfo(torch.bfloat16).min


def test_padding_queries_see_only_their_own_slot_under_any_window():
    vis = torch.zeros(1, 2, 4, dtype=torch.bool)
    own = torch.zeros_like(vis)
    own[0, :, 0] = True
    seen = Visibility(vis, torch.zeros(1, 2, dtype=torch.long), torch.arange(4)[None, None, :], own)
    assert seen.mask(1, None)[0, 0].tolist() == [[True, False, False, False]] * 2  # never an empty row


def test_the_model_is_untouched_outside_a_static_forward():
    model, ref = tiny_model(**TARGET, family="gemma2", window=4), tiny_model(**TARGET, family="gemma2", window=4)
    impl = model.config._attn_implementation
    kv = StaticKV(model, 1)
    kv.add_rows(1)
    kv.append([[1, 2, 3, 4, 5, 6]])
    assert model.config._attn_implementation == impl != NAME
    x = torch.tensor([[1, 2, 3, 4, 5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=x).logits, ref(input_ids=x).logits, atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="outside a StaticKV forward"):
        _attention(model, x, x, x, None)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_either_implementation_the_model_was_loaded_with_gives_transformers_own_logits(impl):
    from transformers import AutoModelForCausalLM

    from ssd_runtime.families import tiny_config

    cfg = tiny_config("llama", **{k: v for k, v in TARGET.items() if k != "seed"})
    torch.manual_seed(TARGET["seed"])
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=impl).eval()
    assert StaticAttention(model).base == impl
    prompts = make_prompts([3, 7], TARGET["vocab"], seed=2)
    kv = StaticKV(model, 2)
    kv.add_rows(2)
    out = kv.append(prompts)[:, -1]
    with torch.no_grad():
        for r, p in enumerate(prompts):
            torch.testing.assert_close(out[r], model(input_ids=torch.tensor([p])).logits[0, -1], atol=1e-4, rtol=0)


@pytest.mark.parametrize(("heads", "kv_heads", "P"), [(4, 2, 1), (4, 2, 3), (6, 2, 5), (4, 4, 3), (8, 1, 2)])
def test_grouped_sdpa_equals_attention_over_repeated_kv_heads(heads, kv_heads, P):
    from transformers.integrations.sdpa_attention import repeat_kv

    from ssd_runtime.attention import grouped_sdpa

    gen = torch.Generator().manual_seed(heads * 10 + P)
    R, W, D = 3, 9, 8
    q = torch.randn(R, heads, P, D, generator=gen)
    k, v = (torch.randn(R, kv_heads, W, D, generator=gen) for _ in range(2))
    mask = torch.rand(R, 1, P, W, generator=gen) < 0.6
    mask[..., 0] = True  # every query sees something
    want = torch.nn.functional.scaled_dot_product_attention(
        q, repeat_kv(k, heads // kv_heads), repeat_kv(v, heads // kv_heads), attn_mask=mask, scale=0.3)
    got, _ = grouped_sdpa(q, k, v, mask, scaling=0.3)
    assert got.shape == (R, P, heads, D)
    torch.testing.assert_close(got, want.transpose(1, 2), atol=1e-6, rtol=1e-5)
    pre = Visibility(mask[:, 0], torch.zeros(R, P, dtype=torch.long), torch.zeros(R, 1, W, dtype=torch.long),
                     torch.zeros(R, P, W, dtype=torch.bool)).mask(None, None, heads // kv_heads)
    torch.testing.assert_close(grouped_sdpa(q, k, v, pre, scaling=0.3)[0], got, atol=0, rtol=0)  # pre-repeated
