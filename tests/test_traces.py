"""The layout of traces/ (traces/README.md): one folder per setup, each with a README.md and a manifest.json
(schema ssd-traces-manifest/1) that lists exactly the folder's files; every trace parses and agrees with it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ssd_sim.io.host import Host, host_differences
from ssd_sim.io.trace import read_trace

TRACES = Path(__file__).resolve().parents[1] / "traces"
SCHEMA = "ssd-traces-manifest/1"
KINDS = {"trace", "profile", "plan", "bench-table", "grid", "probe"}
OWN = {"README.md", "manifest.json"}
FOLDERS = sorted(p for p in TRACES.iterdir() if p.is_dir())


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def test_top_level_holds_only_folders_and_the_index_readme():
    loose = sorted(p.name for p in TRACES.iterdir() if p.is_file() and p.name != "README.md")
    assert loose == [], f"files at the top of traces/: {loose}"
    assert (TRACES / "README.md").is_file()
    assert FOLDERS


def test_index_readme_has_one_line_per_folder():
    index = (TRACES / "README.md").read_text()
    for folder in FOLDERS:
        assert f"[`{folder.name}/`]({folder.name}/README.md)" in index, folder.name


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_folder_has_a_readme_and_a_manifest_in_the_schema(folder):
    assert (folder / "README.md").is_file()
    m = manifest(folder)
    assert m["schema"] == SCHEMA
    setup = m["setup"]
    for key in ("machine", "target", "draft"):
        assert isinstance(setup[key], str) and setup[key]
    assert set(setup["quantize"]) == {"target", "draft"}
    assert set(setup["versions"]) == {"python", "torch", "transformers", "ssd"}
    assert isinstance(m["files"], dict) and m["files"]
    for name, entry in m["files"].items():
        assert entry["kind"] in KINDS, name
        assert isinstance(entry["made_by"], str) and entry["made_by"], name
        assert isinstance(entry["role"], str) and entry["role"], name
        assert ("mode" in entry) == (entry["kind"] == "trace"), name
    traces = {n for n, e in m["files"].items() if e["kind"] == "trace"}
    for split in ("calibrate", "holdout"):
        assert set(m.get(split, [])) <= traces, split
    assert not set(m.get("calibrate", [])) & set(m.get("holdout", []))


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_manifest_lists_exactly_the_files_of_the_folder(folder):
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - OWN
    listed = set(manifest(folder)["files"])
    assert sorted(present - listed) == [], "files not in manifest.json"
    assert sorted(listed - present) == [], "manifest.json lists missing files"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_every_trace_parses_and_matches_the_manifest(folder):
    m = manifest(folder)
    for path in sorted(folder.rglob("*.jsonl")):
        entry = m["files"][path.relative_to(folder).as_posix()]
        assert entry["kind"] == "trace", path.name
        h = read_trace(path).header
        assert h.mode == entry["mode"], path.name
        assert h.versions == m["setup"]["versions"], path.name
        assert h.quantize["target"] == m["setup"]["quantize"]["target"], path.name
        if h.models["draft"] is not None:  # AR runs load no draft
            assert h.quantize["draft"] == m["setup"]["quantize"]["draft"], path.name


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_json_files_parse(folder):
    for path in sorted(folder.rglob("*.json")):
        assert isinstance(json.loads(path.read_text()), dict), path.name


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_a_folder_holds_one_host(folder):
    """Traces that record their host (ssd-run since 2026-12) all name the same one: one folder per machine."""
    hosts = [Host.from_dict(h) for p in sorted(folder.rglob("*.jsonl")) if (h := read_trace(p).header.host)]
    for h in hosts[1:]:  # kernels may differ between runs of one host (e.g. an AR run loads no draft)
        assert host_differences(replace(hosts[0], kernels={}), replace(h, kernels={})) == []
