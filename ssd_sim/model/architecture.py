"""A model's shape, read from its Hugging Face config.json (or a built-in name): what a roofline needs.

From the config: layers, hidden size, attention heads and KV heads (head_dim), MLP width (gated or not), vocabulary,
tied embeddings; for mixture-of-experts models the experts, experts per token, the expert MLP width, shared experts
and the layers that stay dense (DeepSeek's first_k_dense_replace, Llama 4's interleave_moe_layer_step, Qwen-MoE's
decoder_sparse_step / mlp_only_layers); multi-head latent attention (DeepSeek-V2 /
V3, Kimi K2: the cache holds one kv_lora_rank + qk_rope_head_dim latent per token and layer); sliding-window
layers (Mistral's sliding_window, Gemma 2's every other layer, Gemma 3's sliding_window_pattern, Llama 4's chunked
RoPE layers, any config's layer_types), whose attention reads at most the last sliding_window tokens; and hybrids whose layer_types name
linear-attention layers (Qwen3-Next), which keep a fixed-size state instead of a KV cache (their weights are counted
as an attention layer's: an approximation).
Derived (per forward of the whole model, before tensor parallelism):
    params              every weight (embeddings included)
    weight_bytes(N)     bytes of weights read by a forward over N tokens: every dense weight, and of the experts
                        the expected number that N tokens touch, E (1 - (1 - k/E)^N) per MoE layer (uniform routing)
    active_params       weights a token multiplies (the lm_head included, the input embedding a lookup): FLOPs / 2
    kv_bytes_per_token  the cache one token adds over all layers (K and V; MLA: the latent)
    kv_bytes(c)         the cache one sequence at context c holds and a decode step reads: full layers c tokens,
                        sliding layers min(c, window)
    attn_flops(c)       attention FLOPs of one new token over a context of c tokens: 4 x heads x head_dim per
                        attended token and layer (MLA, absorbed as decode kernels run it: 2 x heads x (2 x
                        kv_lora_rank + qk_rope_head_dim))
Units: parameters (count), bytes, FLOPs, tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import read_json_object

BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp32": 4.0}
TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3", "gemma3_text")  # config classes whose tie_word_embeddings defaults to True
# two-matrix MLPs (no gate): also Phi-1/2, StarCoder2, Arcee (ReLU^2), Apertus (xIELU), Nemotron
UNGATED = ("gpt2", "gpt_neox", "opt", "bloom", "falcon", "phi", "starcoder2", "arcee", "apertus", "nemotron")


@dataclass(frozen=True)
class Architecture:
    """The shape of a decoder-only transformer (see the module docstring)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int  # per head of Q and K (MLA: qk_nope_head_dim + qk_rope_head_dim)
    intermediate: int  # MLP width of a dense layer (of one expert when experts > 0: expert_intermediate)
    vocab: int
    tied_embeddings: bool = False
    gated_mlp: bool = True  # SwiGLU / GeGLU: 3 matrices (gate, up, down); else 2
    experts: int = 0  # routed experts per MoE layer (0 = dense)
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0  # always-on expert width (Qwen-MoE; DeepSeek: n_shared_experts x expert width)
    dense_layers: int = 0  # MoE models: the first layers that keep a dense MLP of `intermediate` width
    kv_lora_rank: int = 0  # MLA: the compressed KV width (0 = ordinary multi-head / grouped attention)
    qk_rope_head_dim: int = 0  # MLA: the decoupled RoPE key width, cached beside the latent
    q_lora_rank: int = 0  # MLA: the compressed query width (0 = a full query projection)
    v_head_dim: int = 0  # MLA: value width per head
    sliding_window: int = 0  # tokens a sliding-window layer attends to (0 = none)
    sliding_layers: int = 0  # layers that attend only to the last sliding_window tokens
    kv_layers: int = 0  # layers with a KV cache (0 = every layer; hybrids' linear-attention / SSM layers keep a state)

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attn_params(self) -> int:
        """Q, K, V and output projections of one layer (MLA: the low-rank projections)."""
        if self.mla:
            h, rope, v = self.heads, self.qk_rope_head_dim, self.v_head_dim
            q = (self.hidden * self.q_lora_rank + self.q_lora_rank * h * self.head_dim if self.q_lora_rank
                 else self.hidden * h * self.head_dim)
            kv = self.hidden * (self.kv_lora_rank + rope) + self.kv_lora_rank * h * (self.head_dim - rope + v)
            return q + kv + h * v * self.hidden
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return self.hidden * (q + 2 * kv) + q * self.hidden

    def _mlp(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * width

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts."""
        return self.layers - self.dense_layers if self.experts else 0

    @property
    def dense_layer_params(self) -> int:
        """Weights every token of a layer uses: attention, norms, a dense MLP (a MoE layer: its shared expert and
        router instead)."""
        norms = 2 * self.hidden
        if not self.experts:
            return self.attn_params + self._mlp(self.intermediate) + norms
        router = self.hidden * self.experts
        return self.attn_params + self._mlp(self.shared_expert_intermediate) + router + norms

    @property
    def always_params(self) -> int:
        """Weights of all layers that every token multiplies (routed experts and embeddings aside)."""
        dense = self.attn_params + self._mlp(self.intermediate) + 2 * self.hidden
        return (self.layers - self.moe_layers) * dense + self.moe_layers * self.dense_layer_params

    @property
    def expert_params(self) -> int:
        return self._mlp(self.expert_intermediate) if self.experts else 0

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        return self.always_params + self.moe_layers * self.experts * self.expert_params + self.embedding_params

    @property
    def active_params(self) -> int:
        """Weights one token multiplies (lm_head included; the input embedding is a lookup)."""
        return (self.always_params + self.moe_layers * self.experts_per_token * self.expert_params
                + self.vocab * self.hidden)

    def experts_touched(self, tokens: float) -> float:
        """Expected distinct experts per MoE layer that `tokens` routed tokens use (uniform routing)."""
        if not self.experts:
            return 0.0
        k, e = self.experts_per_token, self.experts
        return e * (1.0 - (1.0 - k / e) ** max(tokens, 1.0))

    def dense_bytes(self, dtype: str = "bf16") -> float:
        """Bytes every forward reads: each layer's dense weights and the lm_head (tied: the embedding, read once)."""
        return BYTES[dtype] * (self.always_params + self.vocab * self.hidden)

    def expert_bytes(self, dtype: str = "bf16") -> float:
        """Bytes of every routed expert of every MoE layer (0 for a dense model)."""
        return BYTES[dtype] * self.moe_layers * self.experts * self.expert_params

    def weight_bytes(self, tokens: float, dtype: str = "bf16") -> float:
        """Bytes of weights one forward over `tokens` tokens reads (the input embedding: one row per token)."""
        touched = self.experts_touched(tokens) / self.experts if self.experts else 0.0
        return self.dense_bytes(dtype) + touched * self.expert_bytes(dtype) + BYTES[dtype] * tokens * self.hidden

    @property
    def kv_width(self) -> int:
        """Cache elements one token adds to one layer: K and V of the KV heads, or MLA's latent and RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim if self.mla else 2 * self.kv_heads * self.head_dim

    def kv_bytes_per_token(self, dtype: str = "bf16") -> float:
        """The cache one token adds over all layers (bytes)."""
        return (self.kv_layers or self.layers) * self.kv_width * BYTES[dtype]

    def attended(self, context: float) -> float:
        """Tokens attended summed over the layers at `context` tokens: sliding layers see at most their window,
        layers without a KV cache (a hybrid's linear attention) none."""
        window = min(context, self.sliding_window) if self.sliding_window else context
        return ((self.kv_layers or self.layers) - self.sliding_layers) * context + self.sliding_layers * window

    def kv_bytes(self, context: float, dtype: str = "bf16") -> float:
        """The cache a sequence at `context` tokens holds, and a decode step of it reads (bytes)."""
        return self.attended(context) * self.kv_width * BYTES[dtype]

    def attn_flops(self, context: float) -> float:
        """FLOPs of one new token attending to `context` tokens (QK^T and PV) over all layers."""
        per = (2.0 * self.heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim) if self.mla
               else 4.0 * self.heads * self.head_dim)
        return per * self.attended(context)

    @classmethod
    def from_config(cls, cfg: dict, name: str = "model") -> Architecture:
        """From a Hugging Face config.json dict (multimodal configs: their text_config)."""
        cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
        kind = cfg.get("model_type")
        if cfg.get("is_encoder_decoder"):
            raise ConfigError("model", f"{name}: an encoder-decoder model ({kind}); speculative decoding here plans "
                                       "decoder-only language models")
        if kind in NO_ATTENTION:
            raise ConfigError("model", f"{name}: a {kind} model has no attention layers or KV cache; the roofline "
                                       "plans decoder-only transformers (hybrids with some attention layers included)")

        _check_numbers(cfg, name)

        def need(*keys: str) -> int:
            for k in keys:
                if isinstance(cfg.get(k), int) and cfg[k] > 0:
                    return cfg[k]
            raise ConfigError(keys[0], f"{name}: config.json lacks {' / '.join(keys)} (a positive integer); "
                                       "is it a decoder-only transformer's config?")

        hidden, heads = need("hidden_size", "n_embd", "d_model"), need("num_attention_heads", "n_head")
        layers = need("num_hidden_layers", "n_layer")
        experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts") or 0)
        # Falcon's MLP width is ffn_hidden_size (a re-saved Falcon config may also carry an unused intermediate_size)
        inter = int(cfg.get("ffn_hidden_size") or cfg.get("intermediate_size") or cfg.get("n_inner") or cfg.get("ffn_dim")
                    or 4 * hidden)
        moe_inter = int(cfg.get("moe_intermediate_size") or (inter if experts else 0))
        kind = str(cfg.get("model_type") or "")
        shared = int(cfg.get("shared_expert_intermediate_size") or int(cfg.get("n_shared_experts") or 0) * moe_inter)
        if kind.startswith("llama4") and experts:  # intermediate_size is the expert's width; one shared expert
            inter, shared = int(cfg.get("intermediate_size_mlp") or inter), moe_inter
        mla = int(cfg.get("kv_lora_rank") or 0)
        head_dim = (int(cfg.get("qk_nope_head_dim") or 0) + int(cfg.get("qk_rope_head_dim") or 0) if mla
                    else int(cfg.get("head_dim") or hidden // heads))
        window, sliding = _sliding(cfg, layers)
        return cls(
            name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=_kv_heads(cfg, heads), head_dim=head_dim,
            intermediate=inter, vocab=need("vocab_size"),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", kind in TIED_BY_DEFAULT)),
            gated_mlp=kind not in UNGATED, experts=experts,
            experts_per_token=int(cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or (2 if experts else 0)),
            expert_intermediate=moe_inter,
            shared_expert_intermediate=shared, dense_layers=_dense_layers(cfg, layers) if experts else 0,
            kv_lora_rank=mla, qk_rope_head_dim=int(cfg.get("qk_rope_head_dim") or 0) if mla else 0,
            q_lora_rank=int(cfg.get("q_lora_rank") or 0) if mla else 0,
            v_head_dim=int(cfg.get("v_head_dim") or head_dim) if mla else 0,
            sliding_window=window, sliding_layers=sliding, kv_layers=_kv_layers(cfg, layers),
        )


# every config.json key from_config reads as a whole number (0 or absent: not set)
INT_KEYS = ("hidden_size", "n_embd", "d_model", "num_attention_heads", "n_head", "num_hidden_layers", "n_layer",
            "vocab_size", "num_local_experts", "num_experts", "n_routed_experts", "ffn_hidden_size", "intermediate_size",
            "n_inner", "ffn_dim", "moe_intermediate_size", "shared_expert_intermediate_size", "n_shared_experts",
            "intermediate_size_mlp", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "head_dim",
            "num_experts_per_tok", "experts_per_token", "q_lora_rank", "v_head_dim", "num_key_value_heads",
            "num_kv_heads", "interleave_moe_layer_step", "decoder_sparse_step", "first_k_dense_replace",
            "max_window_layers", "sliding_window", "attention_chunk_size", "sliding_window_pattern")
MAX_SIZE = 2**40  # larger than any real model's dimension or count


def _check_numbers(cfg: dict, name: str) -> None:
    """A one-line ConfigError naming the first config.json key from_config reads as a whole number whose value is
    not one in 0..MAX_SIZE (a string, a list, a fraction, a negative or an absurd number: these were tracebacks or
    silent truncations), or whose list (mlp_only_layers, layer_types, no_rope_layers) is not a list."""
    for key in INT_KEYS:
        v = cfg.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SIZE:
            raise ConfigError(key, f"{name}: config.json's {key} must be a whole number in 0..{MAX_SIZE}, got "
                                   f"{v!r:.40}")
    for key in ("mlp_only_layers", "layer_types", "no_rope_layers"):
        if cfg.get(key) is not None and not isinstance(cfg[key], list):
            raise ConfigError(key, f"{name}: config.json's {key} must be a list, got {cfg[key]!r:.40}")


def _dense_layers(cfg: dict, layers: int) -> int:
    """MoE models' layers without routed experts: DeepSeek's first_k_dense_replace, Qwen-MoE's mlp_only_layers, and
    those between every interleave_moe_layer_step-th (Llama 4) or decoder_sparse_step-th (Qwen-MoE) layer."""
    step = int(cfg.get("interleave_moe_layer_step") or cfg.get("decoder_sparse_step") or 1)
    moe = [(i + 1) % step == 0 for i in range(layers)]
    for i in cfg.get("mlp_only_layers") or []:
        if isinstance(i, int) and 0 <= i < layers:
            moe[i] = False
    for i in range(min(int(cfg.get("first_k_dense_replace") or 0), layers)):
        moe[i] = False
    return layers - sum(moe)


def _kv_heads(cfg: dict, heads: int) -> int:
    """KV heads: 1 with multi_query (Falcon 7B, GPTBigCode; Falcon ignores num_kv_heads then, which a re-saved
    config sets to every head), else num_key_value_heads (Falcon 40B / 180B: num_kv_heads), else every head."""
    if cfg.get("multi_query") and not cfg.get("new_decoder_architecture"):
        return 1
    n = cfg.get("num_key_value_heads") or cfg.get("num_kv_heads")
    return int(n) if n else heads


ATTENTION_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "attention")


def _kv_layers(cfg: dict, layers: int) -> int:
    """Layers with a KV cache: those of an attention type in layer_types (hybrids such as Qwen3-Next list
    linear_attention layers, which keep a fixed-size state), else every layer."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types and any(t not in ATTENTION_TYPES for t in types):
        return max(1, min(layers, sum(t in ATTENTION_TYPES for t in types)))
    return layers


def _sliding(cfg: dict, layers: int) -> tuple[int, int]:
    """(window tokens, layers using it) of a config: layer_types where given, else Gemma 2 (every other layer from the
    first), Gemma 3 (sliding_window_pattern: all but every pattern-th), Qwen2-style use_sliding_window (the layers
    from max_window_layers on), else every layer when sliding_window is set (Mistral, Phi-3); (0, 0) without one."""
    chunked = cfg.get("attention_chunk_size")
    if isinstance(chunked, int) and chunked > 0 and isinstance(cfg.get("no_rope_layers"), list):
        return chunked, min(layers, sum(1 for x in cfg["no_rope_layers"] if x))  # Llama 4: RoPE layers are chunked
    window = cfg.get("sliding_window")
    if not isinstance(window, int) or window <= 0 or cfg.get("use_sliding_window") is False:
        return 0, 0
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        return window, min(layers, sum(t in ("sliding_attention", "chunked_attention") for t in types))
    kind = str(cfg.get("model_type") or "")
    if kind == "gemma2":
        return window, (layers + 1) // 2
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:
        return window, layers - layers // pattern
    if cfg.get("use_sliding_window"):
        return window, max(0, layers - int(cfg.get("max_window_layers") or 0))
    return window, layers


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
    "deepseek-ai/DeepSeek-V3": dict(model_type="deepseek_v3", num_hidden_layers=61, hidden_size=7168,
                                    num_attention_heads=128, num_key_value_heads=128, intermediate_size=18432,
                                    moe_intermediate_size=2048, n_routed_experts=256, n_shared_experts=1,
                                    num_experts_per_tok=8, first_k_dense_replace=3, kv_lora_rank=512, q_lora_rank=1536,
                                    qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=129280),
    "openai/gpt-oss-120b": dict(model_type="gpt_oss", num_hidden_layers=36, hidden_size=2880, num_attention_heads=64,
                                num_key_value_heads=8, head_dim=64, intermediate_size=2880, num_local_experts=128,
                                num_experts_per_tok=4, vocab_size=201088, sliding_window=128,
                                layer_types=["sliding_attention", "full_attention"] * 18),
    "openai/gpt-oss-20b": dict(model_type="gpt_oss", num_hidden_layers=24, hidden_size=2880, num_attention_heads=64,
                               num_key_value_heads=8, head_dim=64, intermediate_size=2880, num_local_experts=32,
                               num_experts_per_tok=4, vocab_size=201088, sliding_window=128,
                               layer_types=["sliding_attention", "full_attention"] * 12),
    "mistralai/Mixtral-8x7B-v0.1": dict(model_type="mixtral", num_hidden_layers=32, hidden_size=4096,
                                        num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                                        num_local_experts=8, num_experts_per_tok=2, vocab_size=32000),
    "mistralai/Mistral-7B-v0.1": dict(model_type="mistral", num_hidden_layers=32, hidden_size=4096,
                                      num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                                      vocab_size=32000, sliding_window=4096),
    "google/gemma-2-9b": dict(model_type="gemma2", num_hidden_layers=42, hidden_size=3584, num_attention_heads=16,
                              num_key_value_heads=8, head_dim=256, intermediate_size=14336, vocab_size=256000,
                              sliding_window=4096),
    "google/gemma-2-2b": dict(model_type="gemma2", num_hidden_layers=26, hidden_size=2304, num_attention_heads=8,
                              num_key_value_heads=4, head_dim=256, intermediate_size=9216, vocab_size=256000,
                              sliding_window=4096),
    "Qwen/Qwen3-30B-A3B": dict(model_type="qwen3_moe", num_hidden_layers=48, hidden_size=2048,
                               num_attention_heads=32, num_key_value_heads=4, head_dim=128, intermediate_size=6144,
                               moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8, vocab_size=151936),
}


NO_ATTENTION = ("mamba", "mamba2", "rwkv", "rwkv5", "rwkv6", "xlstm")  # model_types without a KV cache


def load_architecture(name_or_path: str) -> Architecture:
    """A built-in name (BUILTIN, case-insensitive, with or without the org), a config.json, or a folder holding one."""
    p = Path(name_or_path)
    if p.is_dir():
        p = p / "config.json"
    if p.suffix == ".json" or p.exists():
        cfg = read_json_object(p, "model", "give a Hugging Face config.json (or a folder holding one)")
        own = p.parent.name if p.name == "config.json" else p.stem  # a model folder's name, else the file's
        return Architecture.from_config(cfg, str(cfg.get("_name_or_path") or "") or own or p.stem)
    by_short = {k.lower(): k for k in BUILTIN} | {k.split("/")[-1].lower(): k for k in BUILTIN}
    key = by_short.get(name_or_path.lower())
    if key is None:
        raise ConfigError("model", f"{name_or_path!r} is neither a config.json, a folder with one, nor a built-in "
                                   f"model ({', '.join(k.split('/')[-1] for k in BUILTIN)})")
    return Architecture.from_config(BUILTIN[key], key)


def describe(a: Architecture) -> str:
    """One line: params, layers, attention shape, KV bytes per token (bf16)."""
    moe = f", {a.experts} experts x {a.expert_intermediate} (top {a.experts_per_token})" if a.experts else ""
    attn = (f"{a.heads} heads, MLA latent {a.kv_lora_rank} + {a.qk_rope_head_dim}" if a.mla
            else f"{a.heads} heads / {a.kv_heads} KV x {a.head_dim}")
    window = (f", {a.sliding_layers} of {a.layers} layers attend to the last {a.sliding_window} tokens"
              if a.sliding_layers else "")
    return (f"{a.name}: {a.params / 1e9:.2f}B params ({a.active_params / 1e9:.2f}B active), {a.layers} layers, "
            f"{attn}{moe}, KV {a.kv_bytes_per_token() / 1024:.0f} KiB/token{window}")

