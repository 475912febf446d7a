"""Model shapes from config.json, GPU specs and the roofline forward latency, against hand-computed cases."""

from __future__ import annotations

import json
import re

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.architecture import Architecture, load_architecture
from ssd_sim.model.hardware import GPUS, get_gpu
from ssd_sim.model.roofline import RooflineAssumptions, forward_latency

# Published parameter counts (model cards): the shapes must reproduce them.
PARAMS = {"Llama-3.1-8B": 8.03e9, "Llama-3.1-70B": 70.55e9, "Llama-3.2-1B": 1.24e9, "Qwen3-0.6B": 0.596e9,
          "Qwen3-32B": 32.8e9, "Qwen3-30B-A3B": 30.5e9, "Qwen2.5-Coder-1.5B-Instruct": 1.54e9,
          "DeepSeek-V3": 671e9, "gpt-oss-120b": 116.8e9, "gpt-oss-20b": 20.9e9, "Mixtral-8x7B-v0.1": 46.7e9,
          "Mistral-7B-v0.1": 7.24e9, "gemma-2-9b": 9.24e9, "gemma-2-2b": 2.61e9}
# Published active parameters per token (model cards; the input embedding, a lookup, left out where they leave it in)
ACTIVE = {"DeepSeek-V3": 37e9, "gpt-oss-120b": 5.13e9, "gpt-oss-20b": 3.61e9,
          "Mixtral-8x7B-v0.1": 12.9e9 - 32000 * 4096}


@pytest.mark.parametrize("name, params", PARAMS.items())
def test_builtin_shapes_give_the_published_parameter_counts(name, params):
    assert load_architecture(name).params == pytest.approx(params, rel=0.01)


@pytest.mark.parametrize("name, active", ACTIVE.items())
def test_mixture_of_experts_shapes_give_the_published_active_parameters(name, active):
    assert load_architecture(name).active_params == pytest.approx(active, rel=0.015)


def test_multi_head_latent_attention_caches_one_latent_per_token_and_layer():
    a = load_architecture("DeepSeek-V3")  # 61 layers x (512 latent + 64 RoPE key) x 2 bytes, not 2 x 128 heads x 192
    assert a.kv_bytes_per_token("bf16") == 61 * (512 + 64) * 2 == 70272
    assert a.attn_flops(1000) == 2 * 128 * (2 * 512 + 64) * 61 * 1000  # absorbed: QK over 576, PV over 512 per head
    assert (a.dense_layers, a.moe_layers, a.shared_expert_intermediate) == (3, 58, 2048)


def test_sliding_window_layers_read_at_most_their_window():
    a = load_architecture("gemma-2-9b")  # 21 of 42 layers slide over 4096 tokens
    per_layer_token = 2 * 8 * 256 * 2
    assert a.kv_bytes(2048) == 42 * 2048 * per_layer_token
    assert a.kv_bytes(10_000) == (21 * 10_000 + 21 * 4096) * per_layer_token
    assert a.attn_flops(10_000) == 4 * 16 * 256 * (21 * 10_000 + 21 * 4096)
    f = forward_latency(a, get_gpu("l40s"), context=10_000)
    assert f.row_ms == pytest.approx(a.kv_bytes(10_000) / (0.864e12 * 0.8) * 1e3)


@pytest.mark.parametrize("extra, window, sliding", [
    ({"sliding_window": 4096}, 4096, 32),  # Mistral, Phi-3: every layer
    ({"sliding_window": None}, 0, 0),
    ({"sliding_window": 32768, "use_sliding_window": False, "max_window_layers": 28}, 0, 0),  # Qwen2: off
    ({"sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 28}, 4096, 4),  # Qwen2: from layer 28
    ({"sliding_window": 1024, "sliding_window_pattern": 6}, 1024, 27),  # Gemma 3: 5 of every 6 (32 // 6 = 5 global)
    ({"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 16}, 128, 16),
    ({"sliding_window": 4096, "model_type": "gemma2"}, 4096, 16),
])
def test_sliding_windows_are_read_from_every_config_style(extra, window, sliding):
    cfg = {"num_hidden_layers": 32, "hidden_size": 256, "num_attention_heads": 4, "vocab_size": 1000, **extra}
    a = Architecture.from_config(cfg)
    assert (a.sliding_window, a.sliding_layers) == (window, sliding)


LLAMA4_SCOUT = dict(model_type="llama4_text", num_hidden_layers=48, hidden_size=5120, num_attention_heads=40,
                    num_key_value_heads=8, head_dim=128, intermediate_size=8192, intermediate_size_mlp=16384,
                    num_local_experts=16, num_experts_per_tok=1, interleave_moe_layer_step=1, vocab_size=202048,
                    attention_chunk_size=8192, no_rope_layers=[1, 1, 1, 0] * 12)


def test_llama_4_interleaves_moe_layers_with_a_shared_expert_and_chunks_three_layers_in_four():
    # Maverick: every other layer routes to 128 experts; published 400B total, 17B active (input embedding included)
    maverick = Architecture.from_config({"model_type": "llama4", "text_config": {**LLAMA4_SCOUT, "num_local_experts": 128,
                                                                                 "interleave_moe_layer_step": 2}})
    assert (maverick.dense_layers, maverick.moe_layers, maverick.intermediate) == (24, 24, 16384)
    assert maverick.params == pytest.approx(400e9, rel=0.015)
    assert maverick.active_params + maverick.vocab * maverick.hidden == pytest.approx(17e9, rel=0.015)
    scout = Architecture.from_config(LLAMA4_SCOUT)  # 109B with its vision encoder; the text model alone ~108B
    assert scout.moe_layers == 48 and scout.params == pytest.approx(107.8e9, rel=0.005)
    assert (scout.sliding_window, scout.sliding_layers) == (8192, 36)


def test_qwen_moe_keeps_its_mlp_only_and_sparse_step_layers_dense():
    cfg = {"model_type": "qwen2_moe", "num_hidden_layers": 24, "hidden_size": 64, "num_attention_heads": 4,
           "vocab_size": 100, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
           "decoder_sparse_step": 2, "mlp_only_layers": [1, 2]}
    a = Architecture.from_config(cfg)  # MoE at layers 1, 3, 5, ..., 23 but not layer 1
    assert (a.moe_layers, a.dense_layers) == (11, 13)


def test_a_hybrids_linear_attention_layers_hold_no_kv_cache():
    types = ["linear_attention"] * 3 + ["full_attention"]  # Qwen3-Next: one attention layer in four
    cfg = {"num_hidden_layers": 48, "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 2,
           "head_dim": 256, "vocab_size": 1000, "layer_types": types * 12}
    a = Architecture.from_config(cfg)
    assert a.kv_layers == 12 and a.kv_bytes_per_token() == 12 * 2 * 2 * 256 * 2
    assert a.kv_bytes(1000) == 1000 * a.kv_bytes_per_token() and a.attn_flops(10) == 4 * 16 * 256 * 12 * 10
    assert Architecture.from_config({**cfg, "layer_types": ["full_attention"] * 48}).kv_layers == 48


def test_falcon_multi_query_and_gemma_tied_embeddings_follow_their_config_classes():
    base = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 8, "vocab_size": 100}
    assert Architecture.from_config({**base, "model_type": "falcon", "multi_query": True}).kv_heads == 1
    assert Architecture.from_config({**base, "model_type": "falcon", "num_kv_heads": 2}).kv_heads == 2
    # a Falcon 7B config re-saved by transformers also holds num_kv_heads = every head, which multi_query overrides
    resaved = {**base, "model_type": "falcon", "multi_query": True, "num_kv_heads": 8}
    assert Architecture.from_config(resaved).kv_heads == 1
    assert Architecture.from_config({**resaved, "new_decoder_architecture": True}).kv_heads == 8
    assert Architecture.from_config({**base, "model_type": "gemma2"}).tied_embeddings
    assert not Architecture.from_config({**base, "model_type": "llama"}).tied_embeddings


def test_kv_bytes_per_token_of_llama_8b_is_128_kib_in_bf16():
    a = load_architecture("Llama-3.1-8B")  # 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes
    assert a.kv_bytes_per_token("bf16") == 2 * 32 * 8 * 128 * 2 == 131072


def test_a_config_json_is_read_like_the_builtin_entry(tmp_path):
    cfg = {"model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256,
           "tie_word_embeddings": True, "_name_or_path": "my-1b"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    mine, builtin = load_architecture(str(tmp_path)), load_architecture("Llama-3.2-1B")
    assert mine.params == builtin.params and mine.name == "my-1b"


def test_a_multimodal_config_uses_its_text_config(tmp_path):
    text = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
            "vocab_size": 1000}
    (tmp_path / "c.json").write_text(json.dumps({"model_type": "gemma3", "text_config": text}))
    assert load_architecture(str(tmp_path / "c.json")).layers == 2


@pytest.mark.parametrize("bad, field", [({"hidden_size": 64}, "num_attention_heads"), ({}, "hidden_size")])
def test_a_config_without_a_transformer_shape_is_one_line(tmp_path, bad, field):
    (tmp_path / "config.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError) as e:
        load_architecture(str(tmp_path / "config.json"))
    assert e.value.field == field


def test_unknown_names_are_one_line_listing_what_is_built_in():
    with pytest.raises(ConfigError, match="neither a config.json.*Llama-3.1-8B"):
        load_architecture("no-such-model")
    with pytest.raises(ConfigError, match="unknown GPU 'h900'; choose one of: h100-sxm"):
        get_gpu("h900")


@pytest.mark.parametrize("cfg, needle", [
    ({"model_type": "t5", "is_encoder_decoder": True, "d_model": 512, "num_heads": 8, "num_layers": 6},
     "t5-small: an encoder-decoder model (t5)"),
    ({"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280},
     "t5-small: a mamba model has no attention layers or KV cache"),
])
def test_models_the_roofline_cannot_plan_are_named_as_such(tmp_path, cfg, needle):
    (tmp_path / "t5-small").mkdir()
    (tmp_path / "t5-small" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_architecture(str(tmp_path / "t5-small"))


def test_a_config_file_is_named_by_its_model_folder_or_else_its_own_name(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_attention_heads": 8,
           "num_hidden_layers": 4, "vocab_size": 1000}
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "my-draft.json").write_text(json.dumps(cfg))
    assert load_architecture(str(tmp_path / "my-model")).name == "my-model"
    assert load_architecture(str(tmp_path / "my-draft.json")).name == "my-draft"
    (tmp_path / "named.json").write_text(json.dumps({**cfg, "_name_or_path": "org/Named-1B"}))
    assert load_architecture(str(tmp_path / "named.json")).name == "org/Named-1B"


def test_every_gpu_names_its_source_and_the_aliases_resolve():
    assert {"h100-sxm", "h100-pcie", "h200", "a100-80g", "l40s", "b200", "mi300x"} <= set(GPUS)
    assert all(g.source and g.hbm_tb_s > 0 and g.bf16_tflops > 0 for g in GPUS.values())
    assert get_gpu("H100") is GPUS["h100-sxm"] and get_gpu("a100") is GPUS["a100-80g"]
    with pytest.raises(ConfigError, match="a100-80g has no FP8"):
        GPUS["a100-80g"].peak_tflops("fp8")


def test_llama_8b_decode_step_on_one_h100_by_hand():
    """b = 1, one token, context 1024, the stated assumptions (bw 0.8, mfu 0.6, floor 0.3 ms + 15 us/layer)."""
    a = load_architecture("Llama-3.1-8B")
    f = forward_latency(a, get_gpu("h100-sxm"), tp=1, context=1024)
    bw = 3.35e12 * 0.8
    weights = 2 * (32 * a.dense_layer_params + 128256 * 4096)  # every layer + lm_head; the embedding is a lookup
    assert f.memory_ms == pytest.approx(weights / bw * 1e3)
    assert f.memory_ms == pytest.approx(5.60, abs=0.01)  # 15.0 GB at 2.68 TB/s
    assert f.row_ms == pytest.approx(1024 * 131072 / bw * 1e3)  # 128 MiB of KV per sequence: 0.050 ms
    assert f.fixed_ms == pytest.approx(0.3 + 32 * 0.015)
    assert f(1, 1) == pytest.approx(0.78 + 5.60 + 0.05, abs=0.01)


def test_tensor_parallel_splits_weights_and_kv_and_adds_two_all_reduces_per_layer():
    a, g = load_architecture("Llama-3.1-70B"), get_gpu("h100-sxm")
    one, four = forward_latency(a, g, 1), forward_latency(a, g, 4)
    assert four.memory_ms == pytest.approx(one.memory_ms / 4) and four.row_ms == pytest.approx(one.row_ms / 4)
    assert four.fixed_ms - one.fixed_ms == pytest.approx(2 * 80 * 0.010)  # 160 all-reduces of 10 us
    per_token = 2 * 80 * 8192 * 2 * 2 * 3 / 4 / (450e9 * 0.7) * 1e3  # ring all-reduce bytes per token
    assert four.token_ms == pytest.approx(per_token)


def test_latency_grows_with_batch_and_context_as_the_kv_reads_say():
    a, g = load_architecture("Llama-3.1-8B"), get_gpu("h100-sxm")
    short, long = forward_latency(a, g, context=1024), forward_latency(a, g, context=32768)
    assert short(16, 1) - short(1, 1) == pytest.approx(15 * short.row_ms)  # memory-bound: KV per row
    assert long(16, 1) - short(16, 1) == pytest.approx(16 * (long.row_ms - short.row_ms))
    assert long.row_ms == pytest.approx(32 * short.row_ms)
    assert short(512, 8) > short(512, 1) * 3  # 4096 tokens: compute-bound, FLOPs grow with tokens


def test_moe_reads_the_experts_its_tokens_touch():
    a = load_architecture("Qwen3-30B-A3B")
    assert a.active_params == pytest.approx(3.04e9, rel=0.02)  # published: 3.3B with the input embedding
    assert a.experts_touched(1) == pytest.approx(8) and a.experts_touched(10_000) == pytest.approx(128)
    f = forward_latency(a, get_gpu("h100-sxm"))
    one, many = f(1, 1), f(64, 1)
    expert_ms = a.layers * a.experts * a.expert_params * 2 / (3.35e12 * 0.8) * 1e3
    assert f.expert_ms == pytest.approx(expert_ms)
    assert many - one == pytest.approx(expert_ms * ((1 - (1 - 1 / 16) ** 64) - 1 / 16) + 63 * f.row_ms, rel=1e-6)


def test_the_assumptions_name_their_intervals():
    text = RooflineAssumptions().describe()
    assert "bw_efficiency 0.8 (assumed in 0.65..0.9)" in text and "layer_floor_us 15 (assumed in 5..40)" in text


def test_a_dense_architecture_touches_no_experts():
    a = Architecture("x", 2, 64, 4, 4, 16, 128, 100)
    assert a.experts_touched(100) == 0 and a.weight_bytes(100) == a.weight_bytes(1) + 99 * 64 * 2


@pytest.mark.parametrize("key,value", [("num_key_value_heads", "x"), ("num_key_value_heads", [8]),
                                       ("intermediate_size", "8192"), ("head_dim", -64), ("num_key_value_heads", 2.5),
                                       ("hidden_size", 10**401), ("num_experts", True), ("mlp_only_layers", 5)])
def test_a_config_value_of_the_wrong_kind_is_one_line_naming_its_key(key, value):
    """Each of these was a traceback (int('x'), a list, 'int' not iterable, an overflow) or silently truncated."""
    cfg = {"model_type": "qwen2_moe", "num_hidden_layers": 16, "hidden_size": 2048, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256, key: value}
    with pytest.raises(ConfigError, match=rf"^{key}: cfg: config.json's {key} must be a "):
        Architecture.from_config(cfg, "cfg")
