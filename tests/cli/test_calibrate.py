"""`ssd-plan calibrate`: writes a profile the planner can use; a bad trace exits 2 with one line and no file."""

import json

import pytest

from ssd_sim.cli.calibrate import main
from ssd_sim.cli.plan import main as plan_main
from ssd_sim.model.profile import load_profile_file
from ssd_sim.plan.plan import Plan
from tests.helpers.synthetic_traces import write_trace


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    plans = [Plan(mode="ar", batch_size=1), Plan(mode="sd", num_speculative_tokens=3, batch_size=1),
             Plan(mode="sd", num_speculative_tokens=2, batch_size=2),
             Plan(num_speculative_tokens=2, fan_out=(2, 1, 3), batch_size=1, backup="jit")]
    return [write_trace(d / f"t{i}.jsonl", p, rounds=300, seed=i) for i, p in enumerate(plans)]


def test_cli_writes_a_profile_usable_by_the_planner(traces, tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert main([*map(str, traces), "-o", str(out), "--name", "synthetic"]) == 0
    assert "latency fits" in capsys.readouterr().out
    prof = load_profile_file(out)
    assert prof.name == "synthetic"
    assert "calibration" in json.loads(out.read_text())
    assert plan_main(["--profile", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["predicted"]["ssd_tok_s"] > 0


@pytest.mark.parametrize("kind", ["not json", "binary", "folder"])
def test_cli_bad_trace_exits_2_and_writes_nothing(tmp_path, capsys, kind):
    bad = tmp_path / "bad.jsonl"
    if kind == "folder":
        bad.mkdir()
    elif kind == "binary":
        bad.write_bytes(bytes(range(128, 256)))
    else:
        bad.write_text("not json\n")
    out = tmp_path / "p.json"
    with pytest.raises(SystemExit) as e:
        main([str(bad), "-o", str(out)])
    assert e.value.code == 2 and not out.exists()
    assert capsys.readouterr().err.count("\n") == 1
