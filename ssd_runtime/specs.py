"""What to load, without loading anything: ModelSpec and the names of the model options (no torch import).

`ssd-run` builds its flags and specs from this module alone, so it imports torch only once its signal handling
is in place (a Ctrl-C while torch loads then ends in one line too). ssd_runtime.models re-exports all of it.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_NAMES = ("float32", "bfloat16", "float16")
# The decoder families the runtime drives (config.json's model_type -> what it covers). Each one is built tiny and
# run through AR, SD and SSD by the tests (tests/runtime/test_families.py; the ten up to phi3 through every case in
# CI, the others through a greedy SSD run there and every case under -m slow); others are refused before loading.
FAMILIES = {
    "llama": "Llama 2 / 3.x (also DeepSeek-R1-Distill-Llama, SmolLM, TinyLlama)",
    "mistral": "Mistral / Ministral (sliding window)",
    "mixtral": "Mixtral (mixture of experts)",
    "qwen2": "Qwen2 / Qwen2.5 (also Qwen2.5-Coder, DeepSeek-R1-Distill-Qwen)",
    "qwen3": "Qwen3 dense",
    "qwen3_moe": "Qwen3 mixture of experts",
    "gemma2": "Gemma 2 (alternating sliding / full layers, softcapping)",
    "gemma3_text": "Gemma 3 text models (1B, 270M; alternating sliding / full layers)",
    "gemma3": "Gemma 3 4B-27B (multimodal checkpoints, decoded text-only)",
    "phi3": "Phi-3 / Phi-3.5 / Phi-4-mini",
    "olmo": "OLMo (1)",
    "olmo2": "OLMo 2",
    "olmo3": "OLMo 3 (sliding / full layers)",
    "olmoe": "OLMoE (mixture of experts)",
    "granite": "IBM Granite 3.x dense",
    "granitemoe": "IBM Granite 3.x mixture of experts",
    "cohere": "Cohere Command-R / Aya",
    "cohere2": "Cohere Command-R7B / Command A (sliding / full layers)",
    "glm": "GLM-4 (2024)",
    "glm4": "GLM-4-0414",
    "smollm3": "SmolLM3",
    "helium": "Kyutai Helium",
    "stablelm": "StableLM 2 / 3B",
    "exaone4": "EXAONE 4.0 (sliding / full layers)",
    "ernie4_5": "ERNIE 4.5 dense",
    "seed_oss": "Seed-OSS",
    "arcee": "Arcee AFM",
    "apertus": "Swiss AI Apertus",
    "starcoder2": "StarCoder2 (sliding window)",
    "qwen2_moe": "Qwen1.5-MoE / Qwen2-MoE",
    "phimoe": "Phi-3.5-MoE (sliding window)",
    "gpt_oss": "gpt-oss 20B / 120B (attention sinks, sliding / full layers)",
    "phi": "Phi-1 / Phi-1.5 / Phi-2",
    "gpt_neox": "GPT-NeoX / Pythia",
    "falcon": "Falcon 7B / 40B / 180B (not the ALiBi Falcon-RW)",
}
QUANTIZE = ("none", "int8")
# How the model's forward runs: off (eager: on CPU compiled forwards of the tiny pair measured no faster, 11.1 vs
# 9.8 ms, after ~60 s of compiling), cuda-graphs (CUDA only: decode-sized forwards captured once per static shape
# and replayed, ssd_runtime.graphs; 3-9x the eager tok/s on an H200), inductor-graphs (CUDA only: the same graphs
# of a torch.compile'd forward, whose Inductor kernels fuse the norms, rotary and masks that cuda-graphs replays one
# small kernel each) or a torch.compile mode (dynamic shapes). ssd-run's default, auto, is cuda-graphs on a CUDA
# device and off elsewhere.
COMPILE = ("off", "cuda-graphs", "default", "reduce-overhead", "max-autotune", "inductor-graphs")
CUDA_GRAPHS = "cuda-graphs"
INDUCTOR_GRAPHS = "inductor-graphs"
GRAPH_MODES = (CUDA_GRAPHS, INDUCTOR_GRAPHS)  # the modes StaticKV replays from its own CUDA graphs


def compile_mode(asked: str, device: str) -> str:
    """The COMPILE mode of a model on `device` for ssd-run's --*-compile (auto: cuda-graphs on CUDA, else off)."""
    if asked != "auto":
        return asked
    return CUDA_GRAPHS if str(device).startswith("cuda") else "off"
LINEAR = ("auto", "onednn", "dense")  # matmul kernels of nn.Linear on CPU float32 (see models.PackedLinear)
# The tiny greedy pair (tiny_model kwargs): vocab 96, the draft is the target plus N(0, 0.02^2) noise on every weight,
# so it agrees often but not always. The runtime tests and the benches' tiny smoke runs use it.
TINY_TARGET = {"vocab": 96, "seed": 3, "hidden": 32, "init_std": 0.5}
TINY_DRAFT = {**TINY_TARGET, "noise": 0.02}
# Every family at that size (tests/runtime/test_families.py, bench/gpu_smoke.py): 3 layers with a sliding window of
# 5 tokens where the family has one, so contexts outgrow it. Draft noise such that its greedy choice agrees with
# the target's about 30-70% of the time (Gemma's scaled embeddings and softcaps make it less sensitive to noise).
TINY_WINDOW = 5
_FAMILY_DRAFT_NOISE = {"gemma2": 0.05, "gemma3_text": 0.2, "gemma3": 0.1, "phi": 0.05, "olmo3": 0.05,
                      "apertus": 0.05}


def tiny_pair(family: str, base: dict | None = None) -> tuple[dict, dict]:
    """tiny_model kwargs of a target of `family` (at `base`'s size, default TINY_TARGET) and of its draft."""
    target = {**(base or TINY_TARGET), "family": family, "window": TINY_WINDOW, "layers": 3}
    return target, {**target, "noise": _FAMILY_DRAFT_NOISE.get(family, 0.02)}


def canonical_device(device: str) -> str:
    """'cuda' means cuda:0 (torch.cuda.set_device, NCCL and the one-process-per-device check need an index)."""
    return "cuda:0" if device == "cuda" else device


@dataclass(frozen=True)
class ModelSpec:
    """What to load. `path` is a directory, a .gguf file or a fetched name; `tiny` builds a test model."""

    path: str | None = None
    tiny: tuple[tuple[str, float], ...] | None = None  # sorted kwargs of tiny_model()
    dtype: str = "float32"
    quantize: str = "none"
    device: str = "cpu"
    linear: str = "auto"  # auto = onednn on a cpu device with float32 weights and no int8, else dense
    compile: str = "off"  # COMPILE: off = eager, cuda-graphs, inductor-graphs or a torch.compile mode

    def __post_init__(self):
        object.__setattr__(self, "device", canonical_device(self.device))

    @classmethod
    def tiny_spec(cls, **kwargs) -> ModelSpec:
        return cls(tiny=tuple(sorted(kwargs.items())))

    @property
    def label(self) -> str:
        if self.tiny is not None:
            return "tiny(" + ",".join(f"{k}={v}" for k, v in self.tiny) + ")"
        return str(self.path)
