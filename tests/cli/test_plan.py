"""`ssd-plan` end to end: every preset, JSON output, engine flags, plan files, one-line errors."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from ssd_sim.cli.plan import main
from ssd_sim.io.host import Host
from ssd_sim.model.presets import get_preset, list_presets


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_gives_valid_json_with_flags(capsys, name):
    code, out, _ = run(capsys, "--preset", name, "--json")
    assert code == 0
    rep = json.loads(out)
    for key in ("ar_tok_s", "sd_tok_s", "ssd_tok_s", "p_hit"):
        assert rep["predicted"][key] > 0
    assert rep["plan"]["num_speculative_tokens"] >= 1
    flags = rep["engine_flags"]
    if name.endswith(("h100", "h200")):  # GPU pairs the reference engine runs
        assert "--k" in flags["ssd-engine"]["args"] and "--backup" in flags["ssd-engine"]["args"]
    else:
        assert not flags["ssd-engine"]["supported"] and "has no target" in flags["ssd-engine"]["notes"][0]
    spec = json.loads(flags["vllm"]["args"][flags["vllm"]["args"].index("--speculative-config") + 1])
    assert spec["method"] == "draft_model" and spec["num_speculative_tokens"] == rep["predicted"]["sd_num_speculative_tokens"]
    assert "--speculative-num-steps" in flags["sglang"]["args"]


def test_table_output_names_the_binding_constraint(capsys):
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h100")
    assert code == 0
    assert "binding:" in out and "SSD" in out and "ssd-engine: python bench/bench.py" in out


def test_fixed_knobs_are_evaluated(capsys):
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h100", "-k", "7", "--fan-out", "3",
                       "--saguaro-c", "0.5", "--backup", "fast", "-t", "1", "--json")
    plan = json.loads(out)["plan"]
    assert plan["fan_out"] == [3] * 8 and plan["saguaro_c"] == 0.5 and plan["backup"] == "fast"


def test_emit_prints_one_command(capsys):
    code, out, _ = run(capsys, "--preset", "qwen32b-0.6b-h100", "--emit", "ssd-engine")
    assert out.count("\n") == 1 and out.startswith("python bench/bench.py --qwen --size 32 --draft 0.6")
    code, out, _ = run(capsys, "--preset", "qwen32b-0.6b-h100", "--emit", "vllm")
    assert out.startswith("vllm serve Qwen/Qwen3-32B") and "--speculative-config" in out


def test_emit_for_an_engine_that_cannot_run_the_pair_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--preset", "qwen-coder-1.5b-0.5b-cpu", "--emit", "ssd-engine"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "has no target" in err and "choose vllm or sglang" in err


def test_plan_file_round_trip_and_reevaluation(capsys, tmp_path):
    f = tmp_path / "plan.json"
    run(capsys, "--preset", "llama70b-1b-h100", "-b", "4", "-t", "1", "-o", str(f), "--json")
    saved = json.loads(f.read_text())
    assert saved["schema"] == "ssd-plan/1" and saved["profile"]["preset"] == "llama70b-1b-h100"
    code, out, _ = run(capsys, "--plan", str(f), "--json")
    again = json.loads(out)
    assert again["plan"] == saved["plan"]
    assert again["predicted"]["ssd_tok_s"] == pytest.approx(saved["predicted"]["ssd_tok_s"])


@pytest.mark.parametrize("argv,needle", [
    (["--preset", "nope"], "preset"),
    (["--preset", "llama70b-1b-h100", "--fan-out", "x"], "--fan-out"),
    (["--preset", "llama70b-1b-h100", "-k", "3", "--fan-out", "1,1"], "fan_out"),
    (["--preset", "llama70b-1b-h100", "--saguaro-c", "2"], "--saguaro-c"),
    (["--preset", "llama70b-1b-h100", "--backup", "slow"], "--backup"),
    (["--preset", "llama70b-1b-h100", "-k", "3", "--fan-out", "1000000"], "--fan-out: invalid fan-out '1000000': at most 1024"),
    (["--preset", "llama70b-1b-h100", "-k", "3", "--fan-out", "300"], "fan_out: caches 1200 guesses"),
    (["--preset", "llama70b-1b-h100", "--fan-out", "0,0,0,5000"], "at most 1024"),
    ([], "profile"),
    (["--profile", "traces/cpu-fp32-grid/profile.json", "--context", "100"], "--context re-derives a preset"),
    (["--preset", "llama70b-1b-h100", "--context", "0"], "--context"),
])
def test_bad_flags_exit_2_with_one_line(capsys, argv, needle):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


@pytest.mark.parametrize("content,needle", [
    ("{not json", "not valid JSON"),
    ('{"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": 3, "fan_out": [1, 1]}}', "fan_out"),
    ('{"schema": "ssd-plan/9", "plan": {}}', "schema"),
    ('{"schema": "ssd-plan/1", "plan": {"saguaro_c": "high"}}', "saguaro_c"),
])
def test_bad_plan_files_exit_2_and_write_nothing(capsys, tmp_path, content, needle):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit) as e:
        main(["--plan", str(bad), "--preset", "llama70b-1b-h100", "-o", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err
    assert not out.exists()


def test_console_script_runs_and_help_documents_units():
    res = subprocess.run([sys.executable, "-m", "ssd_sim.cli.plan", "--help"], capture_output=True, text=True)
    assert res.returncode == 0
    for flag in ("--num-speculative-tokens", "--fan-out", "--saguaro-c", "--backup", "--batch-size",
                 "--temperature", "--objective", "--draft-devices", "--emit", "--json"):
        assert flag in res.stdout
    assert "tokens" in res.stdout and "sequences" in res.stdout
    bad = subprocess.run([sys.executable, "-m", "ssd_sim.cli.plan", "--preset", "x"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_simulate_reports_simulated_numbers_close_to_analytic(capsys):
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h100", "-b", "4", "--simulate", "5000", "--json")
    rep = json.loads(out)
    sim = rep["simulated"]
    assert sim["tokens_per_sequence"] == 5000 and len(sim["candidates"]) >= 2
    assert sim["ar_tok_s"] == pytest.approx(rep["predicted"]["ar_tok_s"], rel=1e-6)
    assert sim["ssd_tok_s"] == pytest.approx(rep["predicted"]["ssd_tok_s"], rel=0.05)


# ---- the host a profile was measured on ---------------------------------------------------------------
HERE = Host(cpu="AMD EPYC", cpu_id="AuthenticAMD family 26 model 2 stepping 1", isa=("avx2", "avx512f"), cores=2,
            memory_gib=23.5, torch="2.13.0+cpu")


@pytest.fixture
def here(monkeypatch):
    monkeypatch.setattr("ssd_sim.plan.report.current_host", lambda: HERE)
    return HERE


def test_cpu_preset_of_an_unrecorded_host_warns_in_one_line(here, capsys):
    assert main(["--preset", "qwen-coder-1.5b-0.5b-cpu", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("ssd-plan: warning: profile qwen-coder-1.5b-0.5b-cpu was measured")
    assert "CPU model and ISA not recorded" in err and "ssd-run calibrate-here" in err
    rep = json.loads(out)["host"]
    assert rep["warning"] in err and rep["here"]["cpu_id"] == HERE.cpu_id and rep["measured_on"]["cores"] == 2


def test_gpu_preset_is_not_host_specific(here, capsys):
    assert main(["--preset", "llama70b-1b-h100", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and json.loads(out)["host"]["measured_on"] is None


@pytest.mark.parametrize("measured,warns", [(HERE, False), (replace(HERE, cpu_id="AuthenticAMD family 25 model 1 "
                                                                      "stepping 1", isa=("avx2",)), True)])
def test_calibrated_profile_warns_only_on_another_host(here, tmp_path, capsys, measured, warns):
    path = tmp_path / "profile.json"
    path.write_text(replace(get_preset("qwen-coder-1.5b-0.5b-cpu"), host=measured).to_json())
    assert main(["--profile", str(path)]) == 0
    err = capsys.readouterr().err
    assert bool(err) == warns
    if warns:
        assert "another host (CPU AMD EPYC [AuthenticAMD family 25 model 1 stepping 1] there" in err
        assert "ISA avx512f only here" in err


@pytest.mark.parametrize("kind,needle", [("binary", "is not a text file"), ("folder", "is a folder")])
def test_unreadable_plan_files_exit_2_with_one_line(capsys, tmp_path, kind, needle):
    bad = tmp_path / "bad.json"
    if kind == "binary":
        bad.write_bytes(bytes(range(128, 256)))
    else:
        bad.mkdir()
    with pytest.raises(SystemExit) as e:
        main(["--plan", str(bad)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and f"plan file: {bad} {needle}" in err


def test_json_report_has_intervals_and_the_probability_that_ssd_beats_sd(capsys):
    code, out, _ = run(capsys, "--preset", "qwen-coder-1.5b-0.5b-cpu", "--json")
    u = json.loads(out)["uncertainty"]
    for mode in ("ar", "sd", "ssd", "p_hit", "round_ms"):
        assert u[mode]["low"] <= u[mode]["p50"] <= u[mode]["high"] and u[mode]["level"] == 0.9
    assert 0.0 <= u["p_ssd_beats_sd"] <= 1.0 and u["threshold"] == 0.8
    assert json.loads(out)["recommended_mode"] == u["recommended_mode"]
    assert u["settle"] and u["dominant_uncertainty"] in ("workload", "latency", "extrapolation", "interference",
                                                         "hit", "saguaro")


def test_risk_must_be_a_low_quantile(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--preset", "llama70b-1b-h100", "--risk", "0.7"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--risk" in err[0]
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h100", "-t", "1", "--risk", "0.1", "--json")
    assert code == 0 and json.loads(out)["plan"]["num_speculative_tokens"] >= 1


def test_context_re_derives_a_preset_and_the_plan_file_keeps_it(capsys, tmp_path):
    code, short, _ = run(capsys, "--preset", "llama70b-1b-h100", "-b", "8", "--json")
    code2, long, _ = run(capsys, "--preset", "llama70b-1b-h100", "-b", "8", "--context", "32768", "--json",
                         "-o", str(tmp_path / "p.json"))
    assert code == code2 == 0
    assert json.loads(long)["predicted"]["sd_tok_s"] < json.loads(short)["predicted"]["sd_tok_s"]  # longer KV reads
    assert json.loads((tmp_path / "p.json").read_text())["profile"]["context"] == 32768
    code3, again, _ = run(capsys, "--plan", str(tmp_path / "p.json"), "--json")
    assert code3 == 0 and json.loads(again)["predicted"] == json.loads(long)["predicted"]
