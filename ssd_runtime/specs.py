"""What to load, without loading anything: ModelSpec and the names of the model options (no torch import).

`ssd-run` builds its flags and specs from this module alone, so it imports torch only once its signal handling
is in place (a Ctrl-C while torch loads then ends in one line too). ssd_runtime.models re-exports all of it.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_NAMES = ("float32", "bfloat16", "float16")
QUANTIZE = ("none", "int8")
LINEAR = ("auto", "onednn", "dense")  # matmul kernels of nn.Linear on CPU float32 (see models.PackedLinear)
# The tiny greedy pair (tiny_model kwargs): vocab 96, the draft is the target plus N(0, 0.02^2) noise on every weight,
# so it agrees often but not always. The runtime tests and the benches' tiny smoke runs use it.
TINY_TARGET = {"vocab": 96, "seed": 3, "hidden": 32, "init_std": 0.5}
TINY_DRAFT = {**TINY_TARGET, "noise": 0.02}


@dataclass(frozen=True)
class ModelSpec:
    """What to load. `path` is a directory, a .gguf file or a fetched name; `tiny` builds a test model."""

    path: str | None = None
    tiny: tuple[tuple[str, float], ...] | None = None  # sorted kwargs of tiny_model()
    dtype: str = "float32"
    quantize: str = "none"
    device: str = "cpu"
    linear: str = "auto"  # auto = onednn on a cpu device with float32 weights and no int8, else dense

    @classmethod
    def tiny_spec(cls, **kwargs) -> ModelSpec:
        return cls(tiny=tuple(sorted(kwargs.items())))

    @property
    def label(self) -> str:
        if self.tiny is not None:
            return "tiny(" + ",".join(f"{k}={v}" for k, v in self.tiny) + ")"
        return str(self.path)
