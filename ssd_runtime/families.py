"""Tiny random models of every supported family, built in-process (no downloads), for tests and smoke runs.

One table: a family's config class and the few fields that differ from the shared ones (head size, Gemma's
query scale and softcaps, how a family spells a sliding window). The runtime itself has no per-family code:
ssd_runtime.attention reads each layer's window from the layer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .specs import FAMILIES


def _no_window(window: int | None) -> dict:
    return {}


def _window_every_layer(window: int | None) -> dict:
    return {"sliding_window": window}


def _qwen_window(window: int | None) -> dict:
    # Qwen2 / Qwen3: sliding layers from max_window_layers on, full attention below (mixed layer types)
    return {"use_sliding_window": window is not None, "sliding_window": window, "max_window_layers": 1}


def _gemma_window(window: int | None) -> dict:
    # Gemma 2 / 3 (also OLMo 3, Cohere 2, EXAONE 4, gpt-oss) mix sliding and full layers; their windows cannot be
    # turned off
    return {"sliding_window": window or 4096}


def _gemma3_multimodal(text_kwargs: dict):
    """Gemma 3 4B-27B checkpoints are Gemma3ForConditionalGeneration: the text model above plus a vision tower
    (tiny SigLIP here) that text-only decoding never runs. Image tokens take the vocabulary's top three ids.
    Embeddings untied as in the other tiny models (tied, a random tiny Gemma only repeats its last token)."""
    import transformers

    vocab = text_kwargs["vocab_size"]
    text = transformers.Gemma3TextConfig(**text_kwargs).to_dict()
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    return transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                     image_token_index=vocab - 1, boi_token_index=vocab - 3,
                                     eoi_token_index=vocab - 2, tie_word_embeddings=False,
                                     initializer_range=text_kwargs["initializer_range"])


# family -> (config class name or builder, extra config fields given the head size, window fields given the window)
_TABLE: dict[str, tuple[str | Callable, Callable[[int], dict], Callable[[int | None], dict]]] = {
    "llama": ("LlamaConfig", lambda hd: {"head_dim": hd}, lambda w: {}),
    "mistral": ("MistralConfig", lambda hd: {"head_dim": hd}, _window_every_layer),
    "mixtral": ("MixtralConfig", lambda hd: {"head_dim": hd, "num_local_experts": 4, "num_experts_per_tok": 2},
                _window_every_layer),
    "qwen2": ("Qwen2Config", lambda hd: {}, _qwen_window),
    "qwen3": ("Qwen3Config", lambda hd: {"head_dim": hd}, _qwen_window),
    "qwen3_moe": ("Qwen3MoeConfig", lambda hd: {"head_dim": hd, "num_experts": 4, "num_experts_per_tok": 2,
                                                "moe_intermediate_size": 32, "decoder_sparse_step": 1},
                  _qwen_window),
    "gemma2": ("Gemma2Config", lambda hd: {"head_dim": hd, "query_pre_attn_scalar": hd,
                                           "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
               _gemma_window),
    "gemma3_text": ("Gemma3TextConfig", lambda hd: {"head_dim": hd, "query_pre_attn_scalar": hd,
                                                    "sliding_window_pattern": 2}, _gemma_window),
    "gemma3": (_gemma3_multimodal, lambda hd: {"head_dim": hd, "query_pre_attn_scalar": hd,
                                               "sliding_window_pattern": 2}, _gemma_window),
    "phi3": ("Phi3Config", lambda hd: {}, _window_every_layer),
    # families added 2026-12-05: the same runtime, no per-family code (see ssd_runtime.attention.layer_window)
    "olmo": ("OlmoConfig", lambda hd: {}, _no_window),
    "olmo2": ("Olmo2Config", lambda hd: {}, _no_window),
    "olmo3": ("Olmo3Config", lambda hd: {}, _gemma_window),  # sliding except every 4th layer
    "olmoe": ("OlmoeConfig", lambda hd: {"num_experts": 4, "num_experts_per_tok": 2}, _no_window),
    "granite": ("GraniteConfig", lambda hd: {}, _no_window),
    "granitemoe": ("GraniteMoeConfig", lambda hd: {"num_local_experts": 4, "num_experts_per_tok": 2}, _no_window),
    "cohere": ("CohereConfig", lambda hd: {"logit_scale": 1.0}, _no_window),  # 0.0625 makes near-ties
    "cohere2": ("Cohere2Config", lambda hd: {"sliding_window_pattern": 2, "logit_scale": 1.0}, _gemma_window),
    "glm": ("GlmConfig", lambda hd: {"head_dim": hd}, _no_window),
    "glm4": ("Glm4Config", lambda hd: {"head_dim": hd}, _no_window),
    "smollm3": ("SmolLM3Config", lambda hd: {}, _no_window),
    "helium": ("HeliumConfig", lambda hd: {"head_dim": hd}, _no_window),
    "stablelm": ("StableLmConfig", lambda hd: {}, _no_window),
    "exaone4": ("Exaone4Config", lambda hd: {"sliding_window_pattern": 2}, _gemma_window),
    "ernie4_5": ("Ernie4_5Config", lambda hd: {"head_dim": hd}, _no_window),
    "seed_oss": ("SeedOssConfig", lambda hd: {"head_dim": hd}, _no_window),
    "arcee": ("ArceeConfig", lambda hd: {"head_dim": hd}, _no_window),
    "apertus": ("ApertusConfig", lambda hd: {"head_dim": hd}, _no_window),
    "starcoder2": ("Starcoder2Config", lambda hd: {}, _window_every_layer),
    "qwen2_moe": ("Qwen2MoeConfig", lambda hd: {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                                "shared_expert_intermediate_size": 32}, _qwen_window),
    "phimoe": ("PhimoeConfig", lambda hd: {"num_local_experts": 4, "num_experts_per_tok": 2}, _window_every_layer),
    "gpt_oss": ("GptOssConfig", lambda hd: {"head_dim": hd, "num_local_experts": 4, "num_experts_per_tok": 2},
                _gemma_window),  # attention sinks: the family's eager attention (gpt-oss has no sdpa)
    "phi": ("PhiConfig", lambda hd: {}, _no_window),
    # multi-head (GPT-NeoX) and multi-query (Falcon 7B) attention: no num_key_value_heads
    "gpt_neox": ("GPTNeoXConfig", lambda hd: {"num_key_value_heads": None}, _no_window),
    "falcon": ("FalconConfig", lambda hd: {"num_key_value_heads": None}, _no_window),
}
assert set(_TABLE) == set(FAMILIES), "every supported family has a tiny model (and only those)"


def tiny_config(family: str = "qwen2", vocab: int = 64, hidden: int = 32, layers: int = 2, heads: int = 4,
                kv_heads: int = 2, intermediate: int = 64, init_std: float = 0.02, max_positions: int = 512,
                window: int | None = None):
    """A transformers config of `family` at tiny size. `window` (tokens) sets a sliding window where the family
    has one (Gemma's always slides: 4096 when None). No special tokens, untied embeddings where optional."""
    import transformers

    if family not in _TABLE:
        raise ValueError(f"no tiny model of family {family!r}; families: {', '.join(_TABLE)}")
    config_cls, extra, windowing = _TABLE[family]
    head_dim = int(hidden) // int(heads)
    kwargs = dict(vocab_size=int(vocab), hidden_size=int(hidden), num_hidden_layers=int(layers),
                  num_attention_heads=int(heads), num_key_value_heads=int(kv_heads),
                  intermediate_size=int(intermediate), max_position_embeddings=int(max_positions),
                  initializer_range=float(init_std), tie_word_embeddings=False, bos_token_id=None,
                  eos_token_id=None, pad_token_id=None)
    kwargs |= extra(head_dim) | windowing(None if window is None else int(window))
    if isinstance(config_cls, str):
        return getattr(transformers, config_cls)(**kwargs)
    return config_cls(kwargs)


def tiny_model(family: str = "qwen2", seed: int = 0, noise: float = 0.0, noise_seed: int = 1,
               **config) -> torch.nn.Module:
    """A randomly initialised causal LM of `family`, deterministic in (family, config, seed, noise, noise_seed).

    init_std (a config field) sets how peaked the next-token distributions are (larger = peakier). noise > 0
    perturbs every weight by noise * N(0, 1) (its own seed), so `tiny_model(seed=s, noise=x)` is a draft that
    agrees with the target `tiny_model(seed=s)` more or less often depending on x.
    """
    from transformers import AutoModelForCausalLM

    cfg = tiny_config(family, **config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = AutoModelForCausalLM.from_config(cfg)
    if noise:
        gen = torch.Generator().manual_seed(int(noise_seed))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(float(noise) * torch.randn(p.shape, generator=gen))
    return model.eval()
