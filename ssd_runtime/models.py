"""Load the target and draft models: a Hugging Face directory, a GGUF file, a fetched name, or a tiny test model.

A model is described by a small, hashable ModelSpec so worker processes can build it themselves (and
cache it across jobs). Loading applies the dtype, optional int8 dynamic quantisation (CPU only; Linear
layers; 2.5-5x faster on one core, see shared/cpu-latencies.md) and eval mode.
"""

from __future__ import annotations

import hashlib
import json
import struct
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import read_json_object

from .fetch import MODELS, converted_dir, is_converted
from .specs import DTYPE_NAMES, LINEAR, QUANTIZE, ModelSpec  # ModelSpec and the option names live in specs

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


@dataclass
class LoadedModel:
    """A model ready for inference plus what the runtime needs to know about it."""

    model: torch.nn.Module
    spec: ModelSpec
    vocab_size: int  # logits per position
    eos_token_ids: tuple[int, ...] = ()
    tokenizer_fingerprint: str | None = None  # sha256 of the sorted token->id map, None without tokenizer
    source: str = ""  # resolved path (or "tiny")
    extra: dict = field(default_factory=dict)


def resolve_path(name_or_path: str, role: str = "model") -> Path:
    """A fetched name (qwen-coder-1.5b / qwen-coder-0.5b), an HF directory or a .gguf file -> a path."""
    if name_or_path in MODELS:
        if not is_converted(name_or_path):
            raise ConfigError(role, f"{name_or_path} is not fetched yet; run `ssd-run fetch-models` "
                                    f"(downloads and converts it once into {converted_dir(name_or_path)})")
        return converted_dir(name_or_path)
    p = Path(name_or_path).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return p
    if p.is_dir() and (p / "config.json").is_file():
        return p
    if p.is_dir() and len(list(p.glob("*.gguf"))) == 1:
        return next(p.glob("*.gguf"))
    known = ", ".join(MODELS)
    raise ConfigError(role, f"{name_or_path!r} is neither a model directory with config.json, a .gguf file, "
                            f"nor a fetched model name ({known})")


def tiny_model(vocab: int = 64, seed: int = 0, hidden: int = 32, layers: int = 2, heads: int = 4,
               kv_heads: int = 2, intermediate: int = 64, init_std: float = 0.02, noise: float = 0.0,
               noise_seed: int = 1, max_positions: int = 512) -> torch.nn.Module:
    """A randomly initialised Qwen2 causal LM, deterministic in (seed, noise, noise_seed).

    init_std sets how peaked the next-token distributions are (larger = peakier). noise > 0 perturbs every
    weight by noise * N(0, 1) (its own seed), so `tiny_model(seed=s, noise=x)` is a draft that agrees with
    the target `tiny_model(seed=s)` more or less often depending on x.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=int(vocab), hidden_size=int(hidden), num_hidden_layers=int(layers),
                      num_attention_heads=int(heads), num_key_value_heads=int(kv_heads),
                      intermediate_size=int(intermediate), max_position_embeddings=int(max_positions),
                      initializer_range=float(init_std), tie_word_embeddings=False, use_sliding_window=False,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = Qwen2ForCausalLM(cfg)
    if noise:
        gen = torch.Generator().manual_seed(int(noise_seed))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(float(noise) * torch.randn(p.shape, generator=gen))
    return model.eval()


def load_model(spec: ModelSpec, role: str = "model") -> LoadedModel:
    """Build or load a model as the spec says (dtype, int8, device), in eval mode, no grad."""
    if spec.dtype not in DTYPES:
        raise ConfigError(f"{role}_dtype", f"must be one of {', '.join(DTYPES)}, got {spec.dtype!r}")
    if spec.quantize not in QUANTIZE:
        raise ConfigError(f"{role}_quantize", f"must be one of {QUANTIZE}, got {spec.quantize!r}")
    if spec.quantize == "int8" and (spec.dtype != "float32" or not spec.device.startswith("cpu")):
        raise ConfigError(f"{role}_quantize", "int8 dynamic quantisation needs --*-dtype float32 on a cpu device")
    tokenizer = None
    if spec.tiny is not None:
        model, source, eos = tiny_model(**dict(spec.tiny)), "tiny", ()
    else:
        path = resolve_path(str(spec.path), role)
        model, tokenizer = _load_hf(path, DTYPES[spec.dtype], role)
        source, eos = str(path), _eos_ids(model)
    if spec.linear not in LINEAR:
        raise ConfigError(f"{role}_linear", f"must be one of {LINEAR}, got {spec.linear!r}")
    model = model.to(dtype=DTYPES[spec.dtype]).eval()
    model.requires_grad_(False)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    params = sum(p.numel() for p in model.parameters())
    if spec.quantize == "int8":
        model = quantize_int8(model)
    model = model.to(spec.device)
    kernels = linear_kernels(spec)
    if kernels == "onednn":
        pack_linears(model)
        own_memory(model)
    return LoadedModel(model, spec, vocab, eos, fingerprint(tokenizer), source,
                       {"parameters": params, "linear": kernels, "kernels": kernel_path(model),
                        "max_positions": context_length(model.config.to_dict())})


def _load_hf(path: Path, dtype: torch.dtype, role: str = "model"):
    """Model and tokenizer from a model folder or GGUF file; any failure is a one-line ConfigError naming it."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if path.is_dir():
        model_config(path, role)  # config.json: readable JSON object
        check_weights(path, role)  # safetensors: whole files
    try:
        if path.suffix == ".gguf":
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
            model.hf_quantizer = None  # dequantised at load; see fetch.convert_gguf
        else:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - files we cannot load: one line, not the loader's traceback
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise ConfigError(role, f"cannot load the model in {path} ({type(e).__name__}: {first}); check or "
                                "fetch its files again") from e
    return model, load_tokenizer(path)


def model_config(path: Path, role: str = "model") -> dict | None:
    """A model folder's config.json as a dict (None for a GGUF file or a folder without one); a config.json that
    cannot be read or is not a JSON object is a one-line ConfigError."""
    cfg = path / "config.json"
    if not (path.is_dir() and cfg.exists()):
        return None
    return read_json_object(cfg, role, "save the model with save_pretrained() or fetch it again")


_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def context_length(config: dict | None) -> int | None:
    """Positions the model was built for (max_position_embeddings, GPT-2's n_positions, ...); None if unknown."""
    for key in _CONTEXT_KEYS:
        v = (config or {}).get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def check_context(prompts: list[list[int]], max_new_tokens: int, mode: str, k: int,
                  limits: dict[str, int | None]) -> None:
    """Refuse, before any work, a run whose positions do not fit a model's context (`limits`: role -> positions).

    The target verifies K draft tokens beyond the last committed one (K = 0 in AR); the SSD draft decodes
    branches up to 2K + 1 positions beyond it. Past its context a RoPE model silently degrades and a model
    with learned positions (GPT-2) fails, so neither may happen mid-run."""
    if not prompts:
        return
    n, longest = max(enumerate(prompts, start=1), key=lambda x: len(x[1]))
    extra = {"target": k if mode != "ar" else 0, "draft": {"ssd": 2 * k + 1, "sd": k}.get(mode)}
    for role, ctx in limits.items():
        if ctx is None or extra.get(role) is None:
            continue
        if len(longest) > ctx:
            raise ConfigError("prompts", f"prompt {n} has {len(longest)} tokens, more than the {role}'s context of "
                                         f"{ctx} positions (max_position_embeddings); shorten it")
        need = len(longest) + max_new_tokens + extra[role]
        if need > ctx:
            ahead = f" + {extra[role]} draft positions ahead (K = {k})" if extra[role] else ""
            raise ConfigError("max_new_tokens", f"prompt {n} ({len(longest)} tokens) + --max-new-tokens "
                                                f"{max_new_tokens}{ahead} = {need} positions, more than the {role}'s "
                                                f"context of {ctx} (max_position_embeddings); lower --max-new-tokens "
                                                f"to {max(ctx - len(longest) - extra[role], 0)} or shorten the prompt")


def check_weights(path: Path, role: str = "model") -> None:
    """Every *.safetensors file in a model folder is whole: its header parses and the tensors it lists fit in
    the file. A truncated download or copy is a one-line ConfigError naming the file (not a loader traceback)."""
    for f in sorted(path.glob("*.safetensors")):
        try:
            size = f.stat().st_size
            with f.open("rb") as fh:
                head = fh.read(8)
                n = struct.unpack("<Q", head)[0] if len(head) == 8 else None
                if n is None or n > min(size - 8, 2**27):
                    raise ConfigError(role, f"{f} is truncated or not a safetensors file ({size} bytes); "
                                            "fetch or save the model again")
                header = json.loads(fh.read(n))
        except ConfigError:
            raise
        except OSError as e:
            raise ConfigError(role, f"cannot read {f} ({e.strerror or e})") from e
        except ValueError as e:  # not JSON / not UTF-8
            raise ConfigError(role, f"{f} is not a safetensors file (its header does not parse); "
                                    "fetch or save the model again") from e
        ends = [v.get("data_offsets", [0, 0])[1] for k, v in header.items() if k != "__metadata__"
                and isinstance(v, dict)] if isinstance(header, dict) else []
        need = 8 + n + max([e for e in ends if isinstance(e, int)], default=0)
        if need > size:
            raise ConfigError(role, f"{f} is truncated: {size} of its {need} bytes are there; fetch or save the "
                                    "model again")


def load_tokenizer(path: Path):
    """The tokenizer stored with a model directory or GGUF file, or None (tiny test models have none)."""
    from transformers import AutoTokenizer

    files = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
    try:
        if path.suffix == ".gguf":
            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        if not any((path / f).is_file() for f in files):
            return None
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError, TypeError):
        return None


def _eos_ids(model) -> tuple[int, ...]:
    ids: list[int] = []
    for cfg in (getattr(model, "generation_config", None), model.config):
        v = getattr(cfg, "eos_token_id", None) if cfg is not None else None
        ids += [v] if isinstance(v, int) else list(v or [])
    return tuple(sorted(set(ids)))


def fingerprint(tokenizer) -> str | None:
    """A short hash of the token->id map, to check that target and draft share one vocabulary."""
    if tokenizer is None:
        return None
    items = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256("\n".join(f"{i}\t{t}" for t, i in items).encode()).hexdigest()[:16]


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Dynamic int8 quantisation of every nn.Linear (weights int8, activations quantised on the fly)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def linear_kernels(spec: ModelSpec) -> str:
    """The Linear kernels a spec gets: onednn (prepacked) for plain float32 on CPU under 'auto', when this
    torch build has oneDNN (otherwise auto falls back to dense, and kernel_path() shows it)."""
    plain_cpu = spec.device == "cpu" and spec.dtype == "float32" and spec.quantize == "none"
    if spec.linear == "onednn" and not plain_cpu:
        raise ConfigError("linear", "onednn kernels need a cpu device, float32 and no int8 quantisation")
    if spec.linear == "onednn" and not torch.backends.mkldnn.is_available():
        raise ConfigError("linear", "this torch build has no oneDNN (mkldnn); use --*-linear dense or auto")
    if spec.linear == "auto":
        return "onednn" if plain_cpu and torch.backends.mkldnn.is_available() else "dense"
    return spec.linear


def kernel_path(model: torch.nn.Module) -> str:
    """The Linear kernels the loaded model really runs, read off its modules (not the flags that asked for
    them): onednn-prepacked, int8-dynamic (<quantized engine>), dense (torch's default, MKL on CPU) or cuda;
    several kinds are joined with '+' (e.g. an lm_head left dense)."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    kinds: list[str] = []
    for m in model.modules():
        if isinstance(m, PackedLinear):
            kind = "onednn-prepacked"
        elif isinstance(m, DynamicInt8Linear):
            kind = f"int8-dynamic ({torch.backends.quantized.engine})"
        elif type(m) is torch.nn.Linear:
            kind = "cuda" if m.weight.is_cuda else "dense"
        else:
            continue
        if kind not in kinds:
            kinds.append(kind)
    return "+".join(kinds) or "none"


class PackedLinear(torch.nn.Module):
    """nn.Linear with its weight prepacked for oneDNN (CPU, float32), same math.

    torch's default fp32 path (MKL sgemm) costs about one matrix-vector product *per row* for 2-4 rows, so a
    5-token verification cost 2-3x a 1-token step on these CPUs; the prepacked oneDNN kernel reads the
    weight once for all rows (measured on the 1.5B target, one core: 1 token 374 ms, 2 tokens 490 ms, 5 tokens
    578 ms, versus 377 / 812 / 926 ms dense). Logits differ from the dense kernel by ~1e-4 (summation order).
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        bias = linear.bias.detach() if linear.bias is not None else torch.zeros(linear.out_features)
        self.register_buffer("weight", linear.weight.detach().to_mkldnn(), persistent=False)
        self.register_buffer("bias", bias.float().to_mkldnn(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = torch._C._nn.mkldnn_linear(x.reshape(-1, self.in_features).contiguous().to_mkldnn(), self.weight,
                                       self.bias)
        return y.to_dense().reshape(*lead, self.out_features)


def pack_linears(module: torch.nn.Module) -> None:
    """Replace every nn.Linear below `module` by a PackedLinear (in place)."""
    for name, child in module.named_children():
        if type(child) is torch.nn.Linear:
            setattr(module, name, PackedLinear(child))
        else:
            pack_linears(child)


def own_memory(model: torch.nn.Module) -> None:
    """Copy the remaining dense tensors out of the memory-mapped checkpoint, so the mapping (and the resident
    pages of the weights PackedLinear replaced) is released: resident memory ~ one copy of the model."""
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.layout == torch.strided:
                t.data = t.data.clone()


def check_same_vocab(target: dict, draft: dict) -> None:
    """Target and draft must score the same token ids. Arguments are LoadedModel.describe() dicts."""
    if target["vocab_size"] != draft["vocab_size"]:
        raise ConfigError("draft", f"vocabulary mismatch: the target scores {target['vocab_size']} tokens but "
                                   f"the draft {draft['vocab_size']}; use a draft with the target's tokenizer")
    ft, fd = target.get("tokenizer"), draft.get("tokenizer")
    if ft and fd and ft != fd:
        raise ConfigError("draft", f"vocabulary mismatch: target and draft tokenizers map tokens to different "
                                   f"ids (fingerprints {ft} vs {fd}); use a draft from the target's model family")


def describe(m: LoadedModel) -> dict:
    """What a worker reports about its model (picklable)."""
    return {"label": m.spec.label, "source": m.source, "vocab_size": m.vocab_size, "tokenizer": m.tokenizer_fingerprint,
            "eos_token_ids": list(m.eos_token_ids), "dtype": m.spec.dtype,
            "quantize": None if m.spec.quantize == "none" else m.spec.quantize, "device": m.spec.device,
            **m.extra}
