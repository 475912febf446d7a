"""Accelerator specs: the datasheet numbers a roofline needs, each with its source.

Numbers are per device, dense (no structured sparsity), at the vendor's boost clock:
    hbm_tb_s        peak memory bandwidth (TB/s)
    bf16_tflops     dense BF16 tensor throughput (TFLOPS)
    fp8_tflops      dense FP8 tensor throughput (TFLOPS; None: the device has no FP8 tensor cores)
    link_gb_s       device-to-device bandwidth per direction for tensor parallelism (GB/s): NVLink / Infinity
                    Fabric where the part has it, else PCIe
    memory_gb       device memory (GB)
What a real kernel reaches is below these; the roofline (model.roofline) applies stated efficiencies. A GPU not
built in is a JSON file of the same fields (`--gpu my-gpu.json`; gpu_from_file), its datasheet's numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import read_json_object


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator's datasheet numbers (units in the module docstring)."""

    name: str
    hbm_tb_s: float
    bf16_tflops: float
    fp8_tflops: float | None
    link_gb_s: float
    memory_gb: float
    source: str

    def peak_tflops(self, dtype: str) -> float:
        """Dense tensor peak for weights of this dtype (bf16 / fp16 -> BF16 peak; fp8 -> FP8 peak)."""
        if dtype == "fp8":
            if self.fp8_tflops is None:
                raise ConfigError("dtype", f"{self.name} has no FP8 tensor cores; use --dtype bf16")
            return self.fp8_tflops
        return self.bf16_tflops


GPUS: dict[str, GpuSpec] = {g.name: g for g in (
    GpuSpec("h100-sxm", 3.35, 989.0, 1979.0, 450.0, 80.0,
            "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 3.35 TB/s HBM3, 989 TFLOPS BF16 / 1,979 FP8 dense, "
            "NVLink 900 GB/s (450 per direction), 80 GB"),
    GpuSpec("h100-pcie", 2.0, 756.0, 1513.0, 64.0, 80.0,
            "NVIDIA H100 datasheet (PCIe): 2.0 TB/s HBM2e, 756 TFLOPS BF16 / 1,513 FP8 dense, PCIe Gen5 128 GB/s "
            "(64 per direction), 80 GB"),
    GpuSpec("h200", 4.8, 989.0, 1979.0, 450.0, 141.0,
            "NVIDIA H200 datasheet (SXM): 4.8 TB/s HBM3e, 989 TFLOPS BF16 / 1,979 FP8 dense, NVLink 900 GB/s, 141 GB"),
    GpuSpec("a100-80g", 2.04, 312.0, None, 300.0, 80.0,
            "NVIDIA A100 datasheet (80GB SXM): 2,039 GB/s HBM2e, 312 TFLOPS BF16 dense, no FP8, NVLink 600 GB/s "
            "(300 per direction), 80 GB"),
    GpuSpec("a100-40g", 1.555, 312.0, None, 300.0, 40.0,
            "NVIDIA A100 datasheet (40GB SXM): 1,555 GB/s HBM2, 312 TFLOPS BF16 dense, no FP8, NVLink 600 GB/s "
            "(300 per direction), 40 GB"),
    GpuSpec("l40s", 0.864, 362.05, 733.0, 32.0, 48.0,
            "NVIDIA L40S datasheet: 864 GB/s GDDR6, 362 TFLOPS BF16 / 733 FP8 dense (733 / 1,466 with sparsity), "
            "PCIe Gen4 x16 64 GB/s (32 per direction), no NVLink, 48 GB"),
    GpuSpec("l4", 0.3, 121.0, 242.5, 32.0, 24.0,
            "NVIDIA L4 datasheet: 300 GB/s GDDR6, 242 TFLOPS BF16 / 485 FP8 with sparsity (121 / 242.5 dense), "
            "PCIe Gen4 x16 64 GB/s (32 per direction), no NVLink, 24 GB"),
    GpuSpec("b200", 8.0, 2250.0, 4500.0, 900.0, 180.0,
            "NVIDIA DGX B200 / HGX B200 datasheet: 8 TB/s HBM3e, 2.25 PFLOPS BF16 / 4.5 FP8 dense per GPU, NVLink 5 "
            "1.8 TB/s (900 per direction), 180 GB"),
    GpuSpec("mi300x", 5.3, 1307.4, 2614.9, 448.0, 192.0,
            "AMD Instinct MI300X datasheet: 5.3 TB/s HBM3, 1,307.4 TFLOPS BF16 / 2,614.9 FP8 dense, Infinity Fabric "
            "7 links x 64 GB/s = 448 GB/s per direction, 192 GB"),
)}


def gpu_key(name: str) -> str:
    """The GPUS key a name stands for (case-insensitive; 'h100' = 'h100-sxm', 'a100' = 'a100-80g'); not checked."""
    return {"h100": "h100-sxm", "a100": "a100-80g"}.get(name.lower(), name.lower())


def get_gpu(name: str | dict) -> GpuSpec:
    """The spec of a GPU by name (case-insensitive; 'h100' = 'h100-sxm', 'a100' = 'a100-80g'), from a JSON file of
    its datasheet numbers (a name ending in .json, or an existing file: gpu_from_file), or from those numbers as a
    dict (gpu_from_dict: an upload, or a plan file that recorded them)."""
    if isinstance(name, dict):
        return gpu_from_dict(name, "the GPU's numbers", "gpu")
    if not isinstance(name, str):
        raise ConfigError("gpu", f"a GPU is a name ({', '.join(GPUS)}), a JSON file or its numbers, got {name!r:.60}")
    key = gpu_key(name)
    if key in GPUS:
        return GPUS[key]
    if name.lower().endswith(".json") or Path(name).is_file():
        return gpu_from_file(name)
    raise ConfigError("gpu", f"unknown GPU {name!r}; choose one of: {', '.join(GPUS)}, or give a JSON file of its "
                             f"datasheet numbers ({', '.join(NUMBERS)})")


NUMBERS = ("hbm_tb_s", "bf16_tflops", "fp8_tflops", "link_gb_s", "memory_gb")  # a GPU file's fields (module docstring)
# What a GPU file's number may be: generous bounds around real devices (a 2-core CPU: ~0.05 TB/s, ~1 TFLOPS; a B200:
# 8 TB/s, 4,500 FP8 TFLOPS). A number outside is a unit slip (GB/s given as TB/s) or a typo, which would otherwise
# surface only as an inf or 0 ms in a derived field.
RANGES = {"hbm_tb_s": (1e-3, 1e3, "TB/s"), "bf16_tflops": (1e-2, 1e6, "TFLOPS"), "fp8_tflops": (1e-2, 1e6, "TFLOPS"),
          "link_gb_s": (1e-2, 1e6, "GB/s"), "memory_gb": (1e-2, 1e6, "GB")}
GPU_FILE_HINT = ('write {"name": "a10g", "hbm_tb_s": 0.6, "bf16_tflops": 70, "fp8_tflops": null, "link_gb_s": 32, '
                 '"memory_gb": 24, "source": "its datasheet"} (units in ssd_sim/model/hardware.py)')


def gpu_from_file(path: str | Path) -> GpuSpec:
    """A GpuSpec from a JSON file (gpu_from_dict; its name defaults to the file's stem)."""
    return gpu_from_dict(read_json_object(path, "gpu", GPU_FILE_HINT), str(path), Path(path).stem)


def gpu_from_dict(data: dict, where: str, default_name: str = "gpu") -> GpuSpec:
    """A GpuSpec from NUMBERS (fp8_tflops may be null: no FP8 tensor cores), an optional "name" (default
    `default_name`) and "source" (where the numbers come from; default: `where`). Every problem is a one-line
    ConfigError naming `where` and the field."""
    unknown = sorted(set(data) - {f.name for f in fields(GpuSpec)})
    if unknown:
        raise ConfigError("gpu", f"{where}: unknown field {unknown[0]!r}; a GPU file holds name, source and "
                                 f"{', '.join(NUMBERS)}")
    values = {}
    for key in NUMBERS:
        v = data.get(key)
        if key == "fp8_tflops" and v is None:
            values[key] = None
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise ConfigError("gpu", f"{where}: {key} must be a positive number (units in ssd_sim/model/hardware.py)"
                                     + ("" if key in data else ", and is missing"))
        lo, hi, unit = RANGES[key]
        if not lo <= v <= hi:
            raise ConfigError("gpu", f"{where}: {key} = {v:g} {unit} is outside {lo:g}..{hi:g} {unit}, beyond any real "
                                     "device: check its units (ssd_sim/model/hardware.py)")
        values[key] = float(v)
    name, source = data.get("name", default_name), data.get("source", f"the user's GPU numbers ({where})")
    for key, v in (("name", name), ("source", source)):
        if not isinstance(v, str) or not v.strip() or len(v) > 500:
            raise ConfigError("gpu", f"{where}: {key} must be a non-empty string of at most 500 characters")
    return GpuSpec(name=name, source=source, **values)
