"""Load the target and draft models: a Hugging Face directory, a GGUF file, a fetched name, or a tiny test model.

A model is described by a small, hashable ModelSpec so worker processes can build it themselves (and
cache it across jobs). Loading applies the dtype, optional int8 dynamic quantisation (CPU only; Linear
layers; 2.5-5x faster on one core, see shared/cpu-latencies.md) and eval mode.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.hf import HF_ID, cache_id
from ssd_sim.io.jsonfile import read_json_object

from .families import tiny_model  # noqa: F401  (re-exported: the runtime's tests build models through here)
from .fetch import MODELS, converted_dir, is_converted
from .specs import (  # ModelSpec and option names live in specs
    COMPILE,
    DTYPE_NAMES,
    FAMILIES,
    GRAPH_MODES,
    INDUCTOR_GRAPHS,
    LINEAR,
    QUANTIZE,
    ModelSpec,
)

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
    if not p.exists() and HF_ID.match(name_or_path):
        p = hf_cached(name_or_path, role)
    if p.is_file() and p.suffix == ".gguf":
        return p
    if p.is_dir() and (p / "config.json").is_file():
        return p
    if p.is_dir() and len(list(p.glob("*.gguf"))) == 1:
        return next(p.glob("*.gguf"))
    known = ", ".join(MODELS)
    raise ConfigError(role, f"{name_or_path!r} is neither a model directory with config.json, a .gguf file, "
                            f"a Hugging Face id in the local cache, nor a fetched model name ({known})")


def hf_cache_dir() -> Path:
    """The local Hugging Face hub cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    return Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser() / "hub"


def hf_cached(repo_id: str, role: str = "model") -> Path:
    """The cached snapshot of a Hugging Face model id, offline: the revision `main` points to, else the only
    snapshot there is. Never downloads; a model not in the cache is a one-line ConfigError saying how to get it."""
    from huggingface_hub import snapshot_download

    cache = hf_cache_dir()
    try:
        return Path(snapshot_download(repo_id, cache_dir=str(cache), local_files_only=True))
    except Exception:  # not cached under `main` (or no refs): look at the snapshots themselves
        snaps = sorted((cache / f"models--{repo_id.replace('/', '--')}" / "snapshots").glob("*"))
        if len(snaps) == 1:
            return snaps[0]
    raise ConfigError(role, f"{repo_id} is not in the local Hugging Face cache ({cache}; set HF_HUB_CACHE or "
                            f"HF_HOME to use another) and ssd-run never downloads: run `huggingface-cli download "
                            f"{repo_id}` where the Hub is reachable, or give the model's directory")


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
    if spec.compile not in COMPILE:
        raise ConfigError(f"{role}_compile", f"must be one of {', '.join(COMPILE)}, got {spec.compile!r}")
    if spec.compile in GRAPH_MODES and not spec.device.startswith("cuda"):
        raise ConfigError(f"{role}_compile", f"{spec.compile} needs a CUDA device, not {spec.device}; use off")
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
    path = kernel_path(model)
    path += compile_forward(model, spec.compile, "cuda")
    return LoadedModel(model, spec, vocab, eos, fingerprint(tokenizer), source,
                       {"parameters": params, "linear": kernels, "kernels": path, "hf_id": cache_id(source),
                        "max_positions": context_length(model.config.get_text_config().to_dict())})


def compile_forward(model: torch.nn.Module, mode: str, graphs: str = "cuda") -> str:
    """Set up how `model`'s forward runs for COMPILE `mode`; returns what the kernel path adds (", CUDA graphs").

    cuda-graphs: StaticKV captures its decode-sized forwards in CUDA graphs (ssd_runtime.graphs; `graphs` names
    the GraphCache backend, "emulate" in the CPU tests). inductor-graphs: each decoder layer is torch.compile'd
    (Inductor, no CUDA graphs of its own) and StaticKV captures the forward the same way, so the graph replays
    Inductor's fused norms, rotary and activations instead of the eager path's ~40 small kernels per layer. The
    layers share one compiled code (regional compilation: a compile costs one layer's, not the model's, and Dynamo
    recompiles a layer only per size class it specialises); embeddings and the output head stay eager. Any other
    mode but off: torch.compile of the whole forward with that mode (dynamic shapes)."""
    if mode == "off":
        return ""
    if mode not in GRAPH_MODES:
        model.forward = torch.compile(model.forward, mode=mode, dynamic=True)
        return f", torch.compile {mode}"
    model._ssd_graphs = graphs
    if mode != INDUCTOR_GRAPHS:
        return ", CUDA graphs"
    _allow_recompiles()
    model._ssd_regional = True  # StaticKV's slot writes and masks run eagerly between the compiled parts
    layers = decoder_layers(model)
    for layer in layers:  # regional compilation: every layer runs the one compiled code (same code, same guards)
        layer.compile(mode="default")
    return f", torch.compile (Inductor) of its {len(layers)} decoder layers in CUDA graphs"


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The model's stack of decoder layers: the ModuleList of identically typed modules holding the most parameters
    (model.layers in Llama / Qwen, gpt_neox.layers, transformer.h in Falcon), found without naming the family."""
    stacks = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 0
              and len({type(x) for x in m}) == 1]
    if not stacks:
        raise ValueError(f"{type(model).__name__} has no stack of decoder layers to compile")
    return max(stacks, key=lambda m: sum(p.numel() for p in m.parameters()))


def _allow_recompiles(limit: int = 64) -> None:
    """Dynamo recompiles a forward per size class it specialises (rows or tokens 1 vs many, logits kept): raise
    its limit from 8, past which new shapes would silently run eager."""
    import torch._dynamo

    config = torch._dynamo.config
    config.allow_unspec_int_on_nn_module = True  # layer_idx is an input, not a constant per layer
    for name in ("recompile_limit", "cache_size_limit"):  # the name since torch 2.6 and the older one
        if hasattr(config, name):
            setattr(config, name, max(limit, getattr(config, name)))
            return


def _load_hf(path: Path, dtype: torch.dtype, role: str = "model"):
    """Model and tokenizer from a model folder or GGUF file; any failure is a one-line ConfigError naming it."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    check_family(path, role)  # before any weights: a family the runtime drives
    if path.is_dir():
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


# GGUF's architecture names where they differ from transformers' model_type (llama.cpp spelling)
_GGUF_FAMILY = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gemma3": "gemma3_text"}


def model_family(path: Path, role: str = "model") -> str | None:
    """The model's family without loading weights: config.json's model_type, or a GGUF file's
    general.architecture in transformers' spelling; None when neither says."""
    if path.suffix == ".gguf" and path.is_file():
        try:
            from gguf import GGUFReader

            field = GGUFReader(str(path)).fields.get("general.architecture")
            arch = bytes(field.parts[field.data[0]]).decode() if field is not None else None
        except ImportError:
            return None  # the loader says the same (gguf is part of the runtime extra)
        except Exception as e:  # noqa: BLE001 - a broken file: one line
            raise ConfigError(role, f"{path} is not a readable GGUF file ({type(e).__name__}: {e}"[:300] + ")") from e
        return _GGUF_FAMILY.get(arch, arch)
    family = (model_config(path, role) or {}).get("model_type")
    return family if isinstance(family, str) else None


def check_family(path: Path, role: str = "model") -> str | None:
    """The model's family if the runtime drives it (specs.FAMILIES); a one-line ConfigError naming the family and
    the supported list otherwise (and for bidirectional models). Reads no weights."""
    family = model_family(path, role)
    cfg = model_config(path, role) or {}
    if family not in FAMILIES:
        arch = ", ".join(a for a in cfg.get("architectures") or [] if isinstance(a, str)) or (
            "GGUF general.architecture" if path.suffix == ".gguf" else "no architectures listed")
        what = f"model family {family!r} ({arch})" if family else "a model whose family its config does not name"
        raise ConfigError(role, f"{path} is {what}, which the runtime cannot drive; supported families "
                                f"(config.json model_type): {', '.join(FAMILIES)}")
    if family == "falcon" and config_field(cfg, "alibi"):
        raise ConfigError(role, f"{path} is a Falcon model with ALiBi position biases (Falcon-RW), which the runtime "
                                "cannot drive; Falcon 7B / 40B / 180B (rotary) are supported")
    if config_field(cfg, "is_causal") is False or config_field(cfg, "use_bidirectional_attention"):
        raise ConfigError(role, f"{path} is a bidirectional {family} model (an embedding model), not a causal LM; "
                                "use a text-generation checkpoint")
    return family


def config_field(config: dict | None, key: str):
    """config.json's `key`, or its text_config's (multimodal checkpoints such as Gemma 3 4B keep the language
    model's fields there); None if neither has it."""
    config = config or {}
    text = config.get("text_config")
    return config.get(key, text.get(key) if isinstance(text, dict) else None)


_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def context_length(config: dict | None) -> int | None:
    """Positions the model was built for (max_position_embeddings, GPT-2's n_positions, ...; a multimodal config's
    text_config); None if unknown."""
    for key in _CONTEXT_KEYS:
        v = config_field(config, key)
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
    from .modes import decoding

    extra = decoding(mode).reach(k)
    for role, ctx in limits.items():
        if ctx is None or extra.get(role) is None:
            continue
        if len(longest) > ctx:
            raise ConfigError("prompts", f"prompt {n} has {len(longest)} tokens, more than the {role}'s context of "
                                         f"{ctx} positions (max_position_embeddings); shorten it")
        need = len(longest) + max_new_tokens + extra[role]
        if need > ctx:
            ahead = f" + {extra[role]} draft positions ahead (K = {k})" if extra[role] else ""
            room = ctx - len(longest) - extra[role]  # the most new tokens that fit
            fix = (f"lower --max-new-tokens to {room} or shorten the prompt" if room >= 1 else
                   f"shorten the prompt by at least {1 - room} tokens" + (" or lower K" if extra[role] else ""))
            raise ConfigError("max_new_tokens", f"prompt {n} ({len(longest)} tokens) + --max-new-tokens "
                                                f"{max_new_tokens}{ahead} = {need} positions, more than the {role}'s "
                                                f"context of {ctx} (max_position_embeddings); {fix}")


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
    torch build has oneDNN (otherwise auto falls back to dense, and kernel_path() shows it). A compiled forward
    gets dense: torch.compile cannot trace the prepacked (opaque) weights."""
    plain_cpu = spec.device == "cpu" and spec.dtype == "float32" and spec.quantize == "none"
    if spec.linear == "onednn" and not plain_cpu:
        raise ConfigError("linear", "onednn kernels need a cpu device, float32 and no int8 quantisation")
    if spec.linear == "onednn" and spec.compile != "off":
        raise ConfigError("linear", "onednn kernels cannot be compiled; use --*-linear dense or auto with --*-compile")
    if spec.compile != "off" and spec.linear == "auto":
        return "dense"
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
