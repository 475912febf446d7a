"""A model's shape, read from its Hugging Face config.json (or a built-in name): what a roofline needs.

From the config: layers, hidden size, attention heads and KV heads (head_dim), MLP width (gated or not), vocabulary,
tied embeddings, and for mixture-of-experts models the experts, experts per token and the expert MLP width.
Derived (per forward of the whole model, before tensor parallelism):
    params              every weight (embeddings included)
    weight_bytes(N)     bytes of weights read by a forward over N tokens: every dense weight, and of the experts
                        the expected number that N tokens touch, E (1 - (1 - k/E)^N) per layer (uniform routing)
    active_params       weights a token multiplies (the lm_head included, the input embedding a lookup): FLOPs / 2
    kv_bytes_per_token  K and V of one token over all layers
    attn_flops(c)       attention FLOPs of one new token over a context of c tokens: 4 x layers x heads x head_dim x c
Units: parameters (count), bytes, FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import read_json_object

BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp32": 4.0}


@dataclass(frozen=True)
class Architecture:
    """The shape of a decoder-only transformer (see the module docstring)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # MLP width of a dense layer (of one expert when experts > 0: expert_intermediate)
    vocab: int
    tied_embeddings: bool = False
    gated_mlp: bool = True  # SwiGLU / GeGLU: 3 matrices (gate, up, down); else 2
    experts: int = 0  # routed experts per MoE layer (0 = dense)
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0  # Qwen-MoE style always-on expert

    @property
    def attn_params(self) -> int:
        """Q, K, V and output projections of one layer."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.hidden * (q + 2 * kv) + q * self.hidden

    def _mlp(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * width

    @property
    def dense_layer_params(self) -> int:
        """Weights every token of a layer uses: attention, norms, a dense MLP or the shared expert and router."""
        norms = 2 * self.hidden
        if not self.experts:
            return self.attn_params + self._mlp(self.intermediate) + norms
        router = self.hidden * self.experts
        return self.attn_params + self._mlp(self.shared_expert_intermediate) + router + norms

    @property
    def expert_params(self) -> int:
        return self._mlp(self.expert_intermediate) if self.experts else 0

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        return self.layers * (self.dense_layer_params + self.experts * self.expert_params) + self.embedding_params

    @property
    def active_params(self) -> int:
        """Weights one token multiplies (lm_head included; the input embedding is a lookup)."""
        per_layer = self.dense_layer_params + self.experts_per_token * self.expert_params
        return self.layers * per_layer + self.vocab * self.hidden

    def experts_touched(self, tokens: float) -> float:
        """Expected distinct experts per layer that `tokens` routed tokens use (uniform routing)."""
        if not self.experts:
            return 0.0
        k, e = self.experts_per_token, self.experts
        return e * (1.0 - (1.0 - k / e) ** max(tokens, 1.0))

    def dense_bytes(self, dtype: str = "bf16") -> float:
        """Bytes every forward reads: each layer's dense weights and the lm_head (tied: the embedding, read once)."""
        return BYTES[dtype] * (self.layers * self.dense_layer_params + self.vocab * self.hidden)

    def expert_bytes(self, dtype: str = "bf16") -> float:
        """Bytes of every routed expert of every layer (0 for a dense model)."""
        return BYTES[dtype] * self.layers * self.experts * self.expert_params

    def weight_bytes(self, tokens: float, dtype: str = "bf16") -> float:
        """Bytes of weights one forward over `tokens` tokens reads (the input embedding: one row per token)."""
        touched = self.experts_touched(tokens) / self.experts if self.experts else 0.0
        return self.dense_bytes(dtype) + touched * self.expert_bytes(dtype) + BYTES[dtype] * tokens * self.hidden

    def kv_bytes_per_token(self, dtype: str = "bf16") -> float:
        return 2.0 * self.layers * self.kv_heads * self.head_dim * BYTES[dtype]

    def attn_flops(self, context: float) -> float:
        """FLOPs of one new token attending to `context` tokens (QK^T and PV) over all layers."""
        return 4.0 * self.layers * self.heads * self.head_dim * context

    @classmethod
    def from_config(cls, cfg: dict, name: str = "model") -> Architecture:
        """From a Hugging Face config.json dict (multimodal configs: their text_config)."""
        cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg

        def need(*keys: str) -> int:
            for k in keys:
                if isinstance(cfg.get(k), int) and cfg[k] > 0:
                    return cfg[k]
            raise ConfigError(keys[0], f"{name}: config.json lacks {' / '.join(keys)} (a positive integer); "
                                       "is it a decoder-only transformer's config?")

        hidden, heads = need("hidden_size", "n_embd", "d_model"), need("num_attention_heads", "n_head")
        experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0)
        inter = int(cfg.get("intermediate_size") or cfg.get("n_inner") or 4 * hidden)
        return cls(
            name=name, layers=need("num_hidden_layers", "n_layer"), hidden=hidden, heads=heads,
            kv_heads=int(cfg.get("num_key_value_heads") or heads), head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate=inter, vocab=need("vocab_size"), tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            gated_mlp=cfg.get("model_type") not in ("gpt2", "gpt_neox", "opt", "bloom", "falcon"),
            experts=experts, experts_per_token=int(cfg.get("num_experts_per_tok") or (2 if experts else 0)),
            expert_intermediate=int(cfg.get("moe_intermediate_size") or (inter if experts else 0)),
            shared_expert_intermediate=int(cfg.get("shared_expert_intermediate_size") or 0),
        )


# Built-in shapes of common targets and drafts (their config.json values), so a plan needs no download.
BUILTIN: dict[str, dict] = {
    "meta-llama/Llama-3.1-8B": dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                                    num_key_value_heads=8, intermediate_size=14336, vocab_size=128256),
    "meta-llama/Llama-3.1-70B": dict(num_hidden_layers=80, hidden_size=8192, num_attention_heads=64,
                                     num_key_value_heads=8, intermediate_size=28672, vocab_size=128256),
    "meta-llama/Llama-3.2-1B": dict(num_hidden_layers=16, hidden_size=2048, num_attention_heads=32,
                                    num_key_value_heads=8, intermediate_size=8192, vocab_size=128256, head_dim=64,
                                    tie_word_embeddings=True),
    "meta-llama/Llama-3.2-3B": dict(num_hidden_layers=28, hidden_size=3072, num_attention_heads=24,
                                    num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                                    head_dim=128, tie_word_embeddings=True),
    "Qwen/Qwen3-0.6B": dict(num_hidden_layers=28, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8,
                            head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True),
    "Qwen/Qwen3-8B": dict(num_hidden_layers=36, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                          head_dim=128, intermediate_size=12288, vocab_size=151936),
    "Qwen/Qwen3-32B": dict(num_hidden_layers=64, hidden_size=5120, num_attention_heads=64, num_key_value_heads=8,
                           head_dim=128, intermediate_size=25600, vocab_size=151936),
    "Qwen/Qwen2.5-Coder-1.5B-Instruct": dict(num_hidden_layers=28, hidden_size=1536, num_attention_heads=12,
                                             num_key_value_heads=2, intermediate_size=8960, vocab_size=151936,
                                             tie_word_embeddings=True),
    "Qwen/Qwen2.5-Coder-0.5B-Instruct": dict(num_hidden_layers=24, hidden_size=896, num_attention_heads=14,
                                             num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                                             tie_word_embeddings=True),
    "Qwen/Qwen3-30B-A3B": dict(model_type="qwen3_moe", num_hidden_layers=48, hidden_size=2048,
                               num_attention_heads=32, num_key_value_heads=4, head_dim=128, intermediate_size=6144,
                               moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, vocab_size=151936),
}


def load_architecture(name_or_path: str) -> Architecture:
    """A built-in name (BUILTIN, case-insensitive, with or without the org), a config.json, or a folder holding one."""
    p = Path(name_or_path)
    if p.is_dir():
        p = p / "config.json"
    if p.suffix == ".json" or p.exists():
        cfg = read_json_object(p, "model", "give a Hugging Face config.json (or a folder holding one)")
        return Architecture.from_config(cfg, cfg.get("_name_or_path") or p.parent.name or p.stem)
    by_short = {k.lower(): k for k in BUILTIN} | {k.split("/")[-1].lower(): k for k in BUILTIN}
    key = by_short.get(name_or_path.lower())
    if key is None:
        raise ConfigError("model", f"{name_or_path!r} is neither a config.json, a folder with one, nor a built-in "
                                   f"model ({', '.join(k.split('/')[-1] for k in BUILTIN)})")
    return Architecture.from_config(BUILTIN[key], key)


def describe(a: Architecture) -> str:
    """One line: params, layers, attention shape, KV bytes per token (bf16)."""
    moe = f", {a.experts} experts x {a.expert_intermediate} (top {a.experts_per_token})" if a.experts else ""
    return (f"{a.name}: {a.params / 1e9:.2f}B params ({a.active_params / 1e9:.2f}B active), {a.layers} layers, "
            f"{a.heads} heads / {a.kv_heads} KV x {a.head_dim}{moe}, KV {a.kv_bytes_per_token() / 1024:.0f} KiB/token")

