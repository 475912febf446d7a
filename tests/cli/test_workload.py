"""`ssd-plan workload` writes a workload profile from engine metrics; `--acceptance-from` plans with it and a plan
file remembers it."""

import json

import pytest

from ssd_sim.cli.plan import main
from tests.io.test_engine_metrics import VLLM


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def metrics(tmp_path):
    (tmp_path / "metrics.txt").write_text(VLLM)
    return tmp_path / "metrics.txt"


def test_workload_writes_counted_acceptance_and_plans_with_it(capsys, tmp_path, metrics):
    out = tmp_path / "w.json"
    code, printed, _ = run(capsys, "workload", str(metrics), "--engine", "vllm", "-t", "0", "-o", str(out))
    assert code == 0 and "0.800 [" in printed and json.loads(out.read_text())["acceptance"] == [0.8, 0.75, 0.7]
    plan = tmp_path / "plan.json"
    code, printed, _ = run(capsys, "--preset", "llama70b-1b-h100", "--acceptance-from", str(out), "--json", "-o", str(plan))
    rep = json.loads(printed)
    assert code == 0 and rep["profile"]["acceptance_from"] == str(out)
    code, again, _ = run(capsys, "--plan", str(plan), "--json")  # the plan file reloads the same source
    assert code == 0 and json.loads(again)["predicted"]["sd_tok_s"] == pytest.approx(rep["predicted"]["sd_tok_s"])


@pytest.mark.parametrize("argv,needle", [
    (["--engine", "vllm"], "temperature"),
    (["--engine", "sglang", "-t", "0"], "give -k"),
    (["--engine", "ollama", "-t", "0"], "invalid choice"),
])
def test_workload_bad_input_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, metrics, argv, needle):
    out = tmp_path / "w.json"
    with pytest.raises(SystemExit) as e:
        main(["workload", str(metrics), "-o", str(out), *argv])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and needle in err and not out.exists()
