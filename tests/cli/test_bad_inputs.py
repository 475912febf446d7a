"""Bad input through ssd-plan, its subcommands (calibrate, holdout, workload, capacity) and ssd-sim, in-process: exit status 2, exactly one line on
stderr, no traceback, no file created or changed. The named cases are bench/bad_inputs.py's CASES (which runs
them as real processes and prints the table); hypothesis adds generated flag values and malformed JSON files."""

from __future__ import annotations

import json
import shlex
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssd_sim.cli.calibrate import main as calibrate_main
from ssd_sim.cli.capacity import main as capacity_main
from ssd_sim.cli.holdout import main as holdout_main
from ssd_sim.cli.plan import main as plan_main
from ssd_sim.cli.sim import main as sim_main
from ssd_sim.cli.workload import main as workload_main
from tests.helpers.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]
bad = load_bench("bad_inputs")

MAINS = {"ssd-plan": plan_main, "ssd-sim": sim_main, "ssd-plan calibrate": calibrate_main,
         "ssd-plan workload": workload_main, "ssd-plan capacity": capacity_main,
         "ssd-plan holdout": holdout_main}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    return d, bad.make_files(d)


def run_in_process(capsys, cmd: str, argv: list[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        MAINS[cmd](argv + (["--no-progress"] if cmd == "ssd-sim" else []))
        raise SystemExit(0)
    return e.value.code, capsys.readouterr().err


def assert_one_line_error(code, err, what):
    assert code == 2, (what, code, err)
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, (what, err)
    assert ": error: " in err, (what, err)


@pytest.mark.parametrize("name,cmd,args", bad.CASES, ids=[c[0] for c in bad.CASES])
def test_named_bad_input_is_one_line_exit_2_and_touches_nothing(capsys, files, name, cmd, args):
    d, f = files
    before = bad.snapshot(d)
    code, err = run_in_process(capsys, cmd, bad.argv_of(args, f))
    assert_one_line_error(code, err, name)
    assert bad.snapshot(d) == before


@pytest.mark.parametrize("name,cmd,args,needle", bad.WARN_CASES, ids=[c[0] for c in bad.WARN_CASES])
def test_valid_input_almost_certainly_not_meant_warns_in_one_line_and_changes_no_input(capsys, files, name, cmd,
                                                                                        args, needle):
    d, f = files
    before = bad.snapshot(d)
    code, err = run_in_process(capsys, cmd, bad.argv_of(args, f))
    warnings = [x for x in err.splitlines() if ": warning: " in x]
    assert code == 0 and "Traceback" not in err and any(needle in x for x in warnings), (name, err)
    assert all(before[k] == v for k, v in bad.snapshot(d).items() if k in before), name  # inputs unchanged


@pytest.mark.parametrize("name,cmd,args", bad.OK_CASES, ids=[c[0] for c in bad.OK_CASES])
def test_valid_numeric_extremes_run_quietly(capsys, files, name, cmd, args):
    d, f = files
    code, err = run_in_process(capsys, cmd, bad.argv_of(args, f))
    assert code == 0 and err == "", (name, err)


INT_FLAGS = {"ssd-plan": ["-k", "-b", "--max-k", "--budget-cap", "--draft-devices", "--simulate", "--seed"],
             "ssd-sim": ["-k", "-b", "--tokens", "--num-requests", "--max-batch", "--seed", "--prompt-tokens"]}
BAD_INTS = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32, max_value=10**400),
                     st.floats(allow_nan=True, allow_infinity=True).map(repr),
                     st.text(string.ascii_letters + ".,-+ e", min_size=0, max_size=12))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cmd=st.sampled_from(sorted(INT_FLAGS)), data=st.data())
def test_generated_bad_integer_flags_are_one_line_exit_2(capsys, tmp_path, cmd, data):
    flag = data.draw(st.sampled_from(INT_FLAGS[cmd]))
    value = str(data.draw(BAD_INTS))
    out = tmp_path / "out.json"  # an output that must not appear: the flags are refused before any work
    extra = ["-o", str(out)] if cmd == "ssd-plan" else ["--chrome-trace", str(out)]
    code, err = run_in_process(capsys, cmd, ["--preset", "llama70b-1b-h100", f"{flag}={value}", *extra])
    assert_one_line_error(code, err, (cmd, flag, value))
    assert list(tmp_path.iterdir()) == []


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=12)
PLAN_KEYS = ["num_speculative_tokens", "fan_out", "fan_out_miss", "saguaro_c", "backup", "batch_size", "temperature"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(JSON, st.dictionaries(st.sampled_from(PLAN_KEYS), JSON, min_size=1)))
def test_generated_malformed_plan_files_are_one_line_exit_2(capsys, tmp_path, body):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"schema": "ssd-plan/1", "plan": body}, allow_nan=True))
    code, err = run_in_process(capsys, "ssd-plan", ["--preset", "llama70b-1b-h100", "--plan", str(path)])
    if code == 0:  # a generated body can be a valid plan; then it was evaluated and nothing is on stderr
        assert err == ""
        return
    assert_one_line_error(code, err, body)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(section=st.sampled_from(["latency", "acceptance", "uncertainty", "host", "max_batch_size"]), value=JSON)
def test_generated_malformed_profiles_are_one_line_exit_2(capsys, tmp_path, section, value):
    from ssd_sim.model.presets import get_preset

    prof = get_preset("llama70b-1b-h100").to_dict()
    prof[section] = value
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(prof, allow_nan=True))
    code, err = run_in_process(capsys, "ssd-plan", ["--profile", str(path)])
    if code == 0:  # None is a valid host or uncertainty; then the profile was planned with
        assert "Traceback" not in err and "error" not in err
        return
    assert_one_line_error(code, err, (section, value))


def test_a_closed_stdout_ends_quietly():
    import subprocess

    cmd = f"{shlex.quote(str(ROOT / '.venv' / 'bin' / 'ssd-plan'))} --preset llama70b-1b-h100 --json | head -c 300"
    p = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd} >/dev/null"], capture_output=True, text=True,
                       timeout=120)
    assert p.stderr == "" and p.returncode in (0, 141)
