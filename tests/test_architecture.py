"""The architecture of docs/ARCHITECTURE.md holds: ssd_sim's layers import downwards only, no module of ssd_sim is
part of an import cycle, ssd_sim never loads torch / streamlit / the runtime, and the public API resolves."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import grimp
import pytest
from importlinter.cli import lint_imports

import ssd_sim

LAYERS = ("theory", "io", "model", "plan", "sim", "cli")


def test_import_linter_contracts_are_kept():
    """Layers cli > sim > plan > model > theory | io, and the forbidden imports (contracts in pyproject.toml)."""
    assert lint_imports(no_cache=True) == 0


def test_no_import_cycle_inside_ssd_sim():
    graph = grimp.build_graph("ssd_sim", cache_dir=None)  # every import, including those inside functions
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if chain:
                cycles.append(" -> ".join((module, *chain)))
    assert cycles == []


def test_importing_all_of_ssd_sim_loads_no_torch_streamlit_or_runtime():
    code = (
        "import importlib, pkgutil, sys, ssd_sim\n"
        "for m in pkgutil.walk_packages(ssd_sim.__path__, 'ssd_sim.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('torch', 'transformers', 'streamlit',"
        " 'ssd_runtime', 'app'))\n"
        "print(len(sys.modules), bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split(" ", 1)[1].strip() == "[]"


def test_import_ssd_sim_alone_is_light():
    code = "import sys, ssd_sim; print(sorted(m for m in ('numpy', 'scipy', 'simpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", ssd_sim.__all__)
def test_every_public_name_resolves_to_its_layer(name):
    obj = getattr(ssd_sim, name)
    assert obj.__module__.split(".")[1] in LAYERS
    assert name in dir(ssd_sim)


def test_unknown_public_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'make_plans'"):
        ssd_sim.make_plans  # noqa: B018


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_says_what_it_owns_and_may_import(layer):
    doc = importlib.import_module(f"ssd_sim.{layer}").__doc__ or ""
    assert len(doc.split()) > 40
    assert "import" in doc.lower()  # names the layers it may import (or that it imports nothing of ours)


def test_every_module_belongs_to_a_layer():
    top = [m.name for m in pkgutil.iter_modules(ssd_sim.__path__)]
    assert sorted(top) == sorted(LAYERS)
