"""Trace records, phase names and process messages are declared once (ssd_sim/io/records.py, ssd_runtime/protocol.py,
ssd_runtime/modes.py): no other module builds a record as a dict literal, lists phase names, defines a message or
tests a mode string. (Knobs: tests/plan/test_knobs.py.)"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from ssd_sim.io.records import PHASES, Header, RequestRecord, RoundRecord, SeqRecord

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {p: ast.parse(p.read_text()) for d in ("ssd_sim", "ssd_runtime", "app", "bench") for p in (ROOT / d).rglob("*.py")}
RECORDS, PROTOCOL = ROOT / "ssd_sim/io/records.py", ROOT / "ssd_runtime/protocol.py"
# Two keys that only a record of this kind has together: a dict literal holding both declares the record again.
SIGNATURES = {
    "SeqRecord": {"accepted", "committed"},
    "RoundRecord": {"seqs", "timings_ms"},
    "Header": {"prompt_source", "num_prompts"},
    "RequestRecord": {"arrival_ms", "first_token_ms"},
    "a target <-> draft message": {"op"},
}


def dict_keys(node: ast.Dict) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def test_the_signatures_are_fields_of_the_records():
    for cls in (SeqRecord, RoundRecord, Header, RequestRecord):
        assert SIGNATURES[cls.__name__] <= {f.name for f in fields(cls)}, cls


@pytest.mark.parametrize("record", list(SIGNATURES))
def test_no_module_builds_a_record_as_a_dict(record):
    found = [f"{p.relative_to(ROOT)}:{n.lineno}" for p, tree in SOURCES.items() if p != RECORDS
             for n in ast.walk(tree) if isinstance(n, ast.Dict) and SIGNATURES[record] <= dict_keys(n)]
    assert found == [], f"{record} declared again at {found}"


def test_phase_names_are_listed_only_in_records():
    """A tuple, list or set naming three or more phases is a second phase list."""
    found = []
    for p, tree in SOURCES.items():
        for n in ast.walk(tree):
            if p != RECORDS and isinstance(n, (ast.Tuple, ast.List, ast.Set)):
                names = {e.value for e in n.elts if isinstance(e, ast.Constant)} & set(PHASES)
                if len(names) >= 3:  # two can be table labels ("round", "verify")
                    found.append(f"{p.relative_to(ROOT)}:{n.lineno} {sorted(names)}")
    assert found == []


def test_messages_are_defined_only_in_the_protocol_module():
    found = [f"{p.relative_to(ROOT)}:{n.lineno} {n.name}" for p, tree in SOURCES.items() if p != PROTOCOL
             for n in ast.walk(tree) if isinstance(n, ast.ClassDef)
             and any(getattr(b, "id", None) == "Message" for b in n.bases)]
    assert found == []
    kinds = {"job", "stop", "loaded", "ready", "progress", "result", "error", "config_error"}
    pipe = [f"{p.relative_to(ROOT)}:{n.lineno}" for p, tree in SOURCES.items() if "ssd_runtime" in p.parts
            for n in ast.walk(tree) if isinstance(n, ast.Tuple) and len(n.elts) == 2
            and isinstance(n.elts[0], ast.Constant) and n.elts[0].value in kinds]
    assert pipe == [], "pipe messages as (string, payload) tuples: use protocol.Ctl"


@pytest.mark.parametrize("module", ["target.py", "draft.py", "draft_trace.py", "workers.py", "runlog.py"])
def test_the_runtime_asks_the_mode_strategy_instead_of_testing_mode_strings(module):
    tree = SOURCES[ROOT / "ssd_runtime" / module]
    tests = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Compare)
             and any(isinstance(c, ast.Constant) and c.value in ("ar", "sd", "ssd") for c in [n.left, *n.comparators])]
    assert tests == [], f"{module} tests a mode string at lines {tests}: use modes.decoding(mode)"


def test_one_validator_refuses_impossible_traces():
    where = [p.relative_to(ROOT) for p in SOURCES if "the trace is corrupt" in p.read_text()]
    assert where == [Path("ssd_sim/io/records.py")]
