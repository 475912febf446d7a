"""`ssd-plan` end to end: every preset, JSON output, engine flags, plan files, one-line errors."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ssd_sim.cli.plan import main
from ssd_sim.io.host import Host
from ssd_sim.model.presets import get_preset, list_presets
from tests.helpers.profiles import calibrated_profile_file


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
    assert "binding:" in out and "SSD" in out and "\npython bench/bench.py" in out


def test_fixed_knobs_are_evaluated(capsys):
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h100", "-k", "7", "--fan-out", "3",
                       "--saguaro-c", "0.5", "--backup", "fast", "-t", "1", "--json")
    plan = json.loads(out)["plan"]
    assert plan["fan_out"] == [3] * 8 and plan["saguaro_c"] == 0.5 and plan["backup"] == "fast"


def test_emit_prints_one_command(capsys):
    code, out, _ = run(capsys, "--preset", "qwen32b-0.6b-h100", "--emit", "ssd-engine")
    lines = out.splitlines()  # the repository and version on a comment line, the command on the last
    assert lines[-1].startswith("python bench/bench.py --qwen --size 32 --draft 0.6") and lines[-2].startswith("# ")
    assert all(line.startswith("# ") for line in lines[:-1])
    code, out, _ = run(capsys, "--preset", "qwen32b-0.6b-h100", "--emit", "vllm")
    assert out.splitlines()[-1].startswith("vllm serve Qwen/Qwen3-32B") and "--speculative-config" in out


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
    (["--preset", "llama70b-1b-h100", "--horizon", "soon"], "--horizon"),
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


def test_a_profile_calibrated_from_traces_without_a_host_record_warns_in_one_line(here, capsys):
    """Traces made before ssd-run recorded hosts: their machine line is all the profile knows, which cannot be
    checked against this host (issue 26: such profiles used to carry no warning at all)."""
    assert main(["--profile", str(GRID_PROFILE), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("ssd-plan: warning: profile qwen-coder-cpu-calibrated was "
                                                   "measured on an unrecorded host (x86_64 Linux, 2 cpus")
    assert "cannot be checked against this one" in err and "ssd-run calibrate-here" in err
    assert json.loads(out)["host"]["warning"] in err


def test_a_profile_from_another_guest_of_this_host_kind_warns_to_re_time_it(monkeypatch, tmp_path, capsys):
    """One host kind's guests ran the same runs 27% apart (traces/cpu-fp32-zen4-pool40r): no host difference,
    but a profile timed on another guest gets a warning naming both boots and the probe that re-times this one."""
    prof = json.loads(Path(GRID_PROFILE).read_text())
    prof["host"] = {**HERE.to_dict(), "boot_id": "guest-there", "booted_at": "2026-12-03T07:40Z"}
    path = tmp_path / "guest.json"
    path.write_text(json.dumps(prof))
    for boot, warned in (("guest-there", False), ("guest-here", True)):
        monkeypatch.setattr("ssd_sim.plan.report.current_host", lambda b=boot: replace(HERE, boot_id=b))
        assert main(["--profile", str(path), "--json"]) == 0
        out, err = capsys.readouterr()
        assert (err != "") == warned and (json.loads(out)["host"]["warning"] is not None) == warned
    assert err.startswith("ssd-plan: warning: profile qwen-coder-cpu-calibrated was measured on another guest of this "
                          "host kind (booted 2026-12-03 07:40 UTC there, boot id guest-he here): ")
    assert err.count("\n") == 1 and "`ssd-run probe -o probe.json`, then `ssd-plan calibrate TRACES --probe" in err


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
    assert 0.0 <= u["p_ssd_beats_sd"] <= 1.0 and u["confident_from"] == 0.8
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


def test_prompt_and_output_lengths_plan_at_their_mean_decode_context(capsys, tmp_path):
    argv = ("--preset", "llama70b-1b-h100", "-b", "8", "--json")
    code, out, _ = run(capsys, *argv, "--prompt-tokens", "4000", "--tokens", "512", "-o", str(tmp_path / "p.json"))
    rep = json.loads(out)
    assert code == 0 and rep["profile"]["context"] == 4000 + 512 // 2
    assert "4256 cached tokens" in rep["context_note"] and "4000 prompt + 512 output tokens" in rep["context_note"]
    _, same, _ = run(capsys, *argv, "--context", "4256")  # the lengths name the context that --context gives
    assert json.loads(same)["predicted"] == rep["predicted"]
    growth = rep["context_growth"]  # the same plans over a context growing from 4000 to 4512 tokens
    assert (growth["prompt_tokens"], growth["output_tokens"]) == (4000, 512) and "context_growth" not in json.loads(same)
    assert growth["ar"]["tok_s"] == pytest.approx(rep["predicted"]["ar_tok_s"], rel=1e-4)  # linear: exact at the mean
    assert growth["ssd"]["tok_s"] * (1 + growth["ssd"]["mean_context_err_pct"] / 100) == pytest.approx(
        rep["predicted"]["ssd_tok_s"], rel=1e-9)
    _, table, _ = run(capsys, "--preset", "llama70b-1b-h100", "-b", "8", "--prompt-tokens", "4000", "--tokens", "512")
    assert "over the context growing from 4000 to 4512 tokens" in table
    _, own, _ = run(capsys, *argv)
    assert rep["predicted"]["ssd_tok_s"] < 0.95 * json.loads(own)["predicted"]["ssd_tok_s"]  # 10x the KV reads
    # the plan file keeps the context; new lengths replace it; the default prompt (128) fills a missing one
    _, again, _ = run(capsys, "--plan", str(tmp_path / "p.json"), "--json")
    assert json.loads(again)["predicted"] == rep["predicted"]
    _, short, _ = run(capsys, "--plan", str(tmp_path / "p.json"), "--tokens", "64", "--json")
    assert json.loads(short)["profile"]["context"] == 128 + 32


def test_lengths_rank_ssd_plans_by_their_tok_s_over_the_growing_context(capsys):
    from ssd_sim.cli.growth import growth
    from ssd_sim.plan.plan import Plan

    spec = ["--target", "Llama-3.1-70B", "--draft", "Llama-3.2-1B", "--gpu", "h200", "--tp", "4", "-b", "32", "--json"]
    _, out, _ = run(capsys, *spec, "--prompt-tokens", "256", "--tokens", "4096")
    _, at_mean, _ = run(capsys, *spec, "--context", str(256 + 4096 // 2))
    grown, mean_best = json.loads(out), json.loads(at_mean)
    source = {"spec": {"target": "Llama-3.1-70B", "draft": "Llama-3.2-1B", "gpu": "h200", "tp": 4}}
    plain = growth(source, 256, 4096, 1, Plan.from_dict(mean_best["plan"]), modes=("ssd",))["ssd"]["tok_s"]
    # late in the decode the mean-context winner's cache outgrows the verify; the ranked plan keeps more of its speed
    assert grown["context_growth"]["ssd"]["tok_s"] > 1.03 * plain
    assert grown["plan"] != mean_best["plan"]
    with pytest.raises(SystemExit):
        main(["--preset", "llama70b-1b-h100", "--tokens", "256", "--risk", "0.1"])
    assert "risk" in capsys.readouterr().err

def test_simulate_with_lengths_decodes_requests_of_them_over_the_growing_context(capsys):
    _, out, _ = run(capsys, "--preset", "llama70b-1b-h200", "-b", "8", "--prompt-tokens", "1000", "--tokens", "3000",
                    "--simulate", "4000", "--json")
    rep = json.loads(out)
    sim, growth = rep["simulated"], rep["context_growth"]
    assert (sim["requests"], sim["prompt_tokens"], sim["output_tokens"]) == (16, 1000, 3000)  # 2 batches of 8
    # each simulated round at its batch's context: the simulation lands near the analytic tok/s over the growth, below
    # it by the second batch's prefills, which stall the sequences still decoding (continuous batching)
    for mode in ("ar", "sd", "ssd"):
        assert -0.05 < sim[f"{mode}_tok_s"] / growth[mode]["tok_s"] - 1 < 0.01, mode


def test_lengths_with_context_are_refused_and_a_measured_profile_warns_they_change_nothing(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["--preset", "llama70b-1b-h100", "--tokens", "256", "--context", "300", "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and "context" in err[0] and "give one" in err[0]
    assert not (tmp_path / "p.json").exists()
    _, plain, _ = run(capsys, "--preset", "qwen-coder-1.5b-0.5b-cpu", "--json")
    code, out, err = run(capsys, "--preset", "qwen-coder-1.5b-0.5b-cpu", "--tokens", "64", "--json")
    assert code == 0 and "change nothing" in err and "context_note" not in json.loads(out)
    assert json.loads(out)["predicted"] == json.loads(plain)["predicted"]

# --- issue 30: commands that paste, numbers that agree, the host named, the batch sweep -----------------------

GRID_PROFILE = str(Path(__file__).resolve().parents[2] / "traces" / "cpu-fp32-grid" / "profile.json")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_emit_names_the_model_ids_and_the_engine_version_above_one_unwrapped_command(capsys, engine):
    code, out, _ = run(capsys, "--profile", GRID_PROFILE, "--emit", engine)
    lines = out.splitlines()
    assert code == 0 and all(line.startswith("# ") for line in lines[:-1])  # comments: the whole output pastes
    assert "github.com/" in lines[-2] and lines[-2].startswith(f"# {engine}: ")  # repository and version above it
    assert ".cache" not in lines[-1] and "Qwen/Qwen2.5-Coder-1.5B-Instruct" in lines[-1]
    assert any(line.startswith("# note: models: target Qwen/Qwen2.5-Coder-1.5B-Instruct") for line in lines)


def test_the_engine_command_in_the_table_is_one_line_under_its_repository(capsys):
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h100", "-b", "16")  # a long command (fan-out lists)
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("python bench/bench.py"))
    assert lines[i - 1].startswith("ssd-engine, github.com/tanishqkumar/ssd at commit 6ed3022") and len(lines[i]) > 120
    assert lines[i].endswith("--temp 0")  # not wrapped: the whole command on its line


def test_throughput_per_device_decides_per_device_and_shows_the_engine_runnable_plan(capsys):
    """llama70b-1b-h200 at b = 16: SSD is 1.5x SD per sequence (P ~ 1) but about even per device, and the
    reference engine's padded plan loses per device; the recommendation, its probability and the table agree."""
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h200", "--objective", "throughput-per-device", "-b", "16",
                       "--json")
    rep = json.loads(out)
    u, pr = rep["uncertainty"], rep["predicted"]
    assert u["decided_on"] == "tok/s per device" and u["p_objective"] == u["p_ssd_beats_sd_per_device"]
    assert u["p_ssd_beats_sd"] > 0.95 > u["p_ssd_beats_sd_per_device"]  # per sequence SSD wins; per device not
    best = max(("sd", "ssd"), key=lambda m: u["expected"][m])  # the highest mean per device over the draws
    assert rep["recommended_mode"] == best and u["rule"] == "highest mean over the draws"
    ref = rep["reference_engine"]
    assert ref["prediction_changed"] and ref["ssd"] == rep["engine_flags"]["ssd-engine"]["predicted_tok_s_per_device"]
    assert ref["ssd"] < pr["sd_tok_s_per_device"] and ref["recommended_mode"] == "sd"
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h200", "--objective", "throughput-per-device", "-b", "16")
    rec = next(line for line in out.splitlines() if line.startswith("recommendation"))
    assert f"recommendation under 'throughput-per-device': {rep['recommended_mode'].upper()} " in rec
    assert "SSD beats SD in tok/s per device with probability" in out.replace("\n", " ")
    assert "SSD (ssd-engine)" in out and "as ssd-engine runs it (budget" in out


def test_latency_objective_keeps_its_per_sequence_decision(capsys):
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h100", "--json")
    u = json.loads(out)["uncertainty"]
    assert u["decided_on"] == "tok/s per sequence" and u["p_objective"] == u["p_ssd_beats_sd"]


def test_explain_names_the_host_a_trace_calibrated_profile_was_measured_on(capsys):
    code, out, err = run(capsys, "--profile", GRID_PROFILE, "--explain")
    line = " ".join(out.split("measured on: ")[1].split())
    assert not line.startswith("not host-specific")
    assert line.startswith("an unrecorded host (x86_64 Linux, 2 cpus, torch threads 1 per process")
    assert json.loads(run(capsys, "--profile", GRID_PROFILE, "--json")[1])["host"]["measured_on"]["note"].startswith(
        "x86_64 Linux, 2 cpus")
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h100", "--explain")
    assert "measured on: not host-specific (datasheets, published numbers)" in out


def test_batch_sizes_prints_one_row_per_batch_size_from_the_planner(capsys, tmp_path):
    from ssd_sim.plan.planner import BStar, PlanRequest, make_plan

    f = tmp_path / "plan.json"
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h100", "--batch-sizes", "16,1,4", "-o", str(f))
    rows = [line for line in out.splitlines() if line.startswith("│ ") and line.split("│")[1].strip().isdigit()]
    assert code == 0 and [int(r.split("│")[1]) for r in rows] == [1, 4, 16]
    sweep = json.loads(f.read_text())["batch_sweep"]
    assert [r["batch_size"] for r in sweep] == [1, 4, 16]
    prof = get_preset("llama70b-1b-h100")
    for r in sweep:  # the planner's numbers, not another search
        res = make_plan(prof, PlanRequest(batch_size=r["batch_size"], b_star=BStar.CHOSEN))
        assert r["ssd"]["per_seq_tok_s"] == pytest.approx(res.ssd.per_seq_tok_s)
        assert (r["ssd"]["K"], r["ssd"]["fan_out"], r["sd"]["K"]) == (res.plan.K, list(res.plan.fan_out),
                                                                       res.sd.num_speculative_tokens)
        assert r["ar"]["total_tok_s"] == pytest.approx(res.ar.total_tok_s)
        assert f"{r['ssd']['total_tok_s']:.1f} / {r['ssd']['per_seq_tok_s']:.1f}" in out
    code, out, _ = run(capsys, "--preset", "llama70b-1b-h100", "--batch-sizes", "2,8", "-k", "4", "--json")
    assert [r["ssd"]["K"] for r in json.loads(out)["batch_sweep"]] == [4, 4]  # fixed knobs hold in every row


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "", "1,,4", "x", "4097"])
def test_bad_batch_sizes_are_one_line_exit_2_and_write_nothing(capsys, tmp_path, value):
    f = tmp_path / "plan.json"
    with pytest.raises(SystemExit) as e:
        main(["--preset", "llama70b-1b-h100", f"--batch-sizes={value}", "-o", str(f)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "--batch-sizes" in err and not f.exists()


def test_batch_sizes_with_emit_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--preset", "llama70b-1b-h100", "--batch-sizes", "1,2", "--emit", "vllm"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "--batch-sizes" in err and "--emit" in err


def test_horizon_session_narrows_a_calibrated_profiles_intervals_and_says_for_which_run(capsys, tmp_path):
    path = calibrated_profile_file(tmp_path)
    reports = {}
    for horizon in ("later", "session"):
        code, out, _ = run(capsys, "--profile", str(path), "--horizon", horizon, "--json")
        reports[horizon] = json.loads(out)["uncertainty"]
        assert code == 0 and reports[horizon]["horizon"] == horizon
        assert reports[horizon]["timed_at"] == ["2026-12-01T14:50:14Z", "2026-12-01T15:09:29Z"]
    width = {h: u["ar"]["high"] - u["ar"]["low"] for h, u in reports.items()}
    # AR's width is its latency spread alone (its 1-token forwards extrapolate nothing): 6.1% within the hour against
    # 11.3% later, 0.51x (the runs' 3.2% around the fit with the next run's drift, 4.8% and 10.8%: model.drift's 4.5%
    # and 10.1% by Student's t); 0.61x measured over the 200 draws before the Zen 5 repeat (4.8% and 9.8% then)
    assert 0.55 * width["later"] < width["session"] < 0.75 * width["later"]
    _, out, _ = run(capsys, "--profile", str(path), "--horizon", "session")
    assert "intervals for a run within the hour of the profile's timed forwards (timed 2026-12-01T14:50:14Z" in out
    _, out, _ = run(capsys, "--preset", "llama70b-1b-h100")
    assert "within the hour" not in out  # a preset measured no session spread: nothing to choose between


@pytest.mark.parametrize("profile, needle", [
    ({"spec": {"target": "Llama-3.1-8B", "draft": "Llama-3.2-1B", "gpu": 5}},
     "plan: the plan file's profile.spec.gpu must be a string or an object, got 5"),
    ({"spec": {"target": ["Llama-3.1-8B"], "draft": "Llama-3.2-1B", "gpu": "h100"}},
     "profile.spec.target must be a string"),
    ({"spec": {"target": "Llama-3.1-8B", "draft": "Llama-3.2-1B", "gpu": "h100", "tp": True}},
     "profile.spec.tp must be an integer"),
    ({"spec": {"target": "Llama-3.1-8B", "draft": "Llama-3.2-1B", "gpu": "h100", "bogus": 1}},
     "profile.spec has an unknown key 'bogus'"),
    ({"spec": {"target": "Llama-3.1-8B", "gpu": "h100"}}, "profile.spec lacks draft"),
    ({"spec": {"target": "Llama-3.1-8B", "draft": "Llama-3.2-1B", "gpu": {"hbm_tb_s": 1}}},
     "gpu: the GPU's numbers: bf16_tflops must be a positive number"),
    ({"path": [1]}, "the plan file's profile.path must be a string, got [1]"),
    ("llama70b-1b-h100", "the plan file's profile must be an object"),
])
def test_a_plan_files_recorded_profile_is_checked_before_use(tmp_path, capsys, profile, needle):
    """A hand-edited plan file's profile source is one line naming the key, in ssd-plan and ssd-sim alike (these
    were tracebacks: an int has no .lower(), a list is not a path)."""
    from ssd_sim.cli.sim import main as sim_main

    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": 2}, "profile": profile}))
    for cli, args in ((main, []), (sim_main, ["--tokens", "8"])):
        with pytest.raises(SystemExit) as e:
            cli(["--plan", str(path), *args])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and needle in err, err


def test_a_plan_file_may_record_a_gpus_numbers_and_plans_as_the_named_gpu(tmp_path, capsys):
    numbers = {"hbm_tb_s": 3.35, "bf16_tflops": 989.0, "fp8_tflops": 1979.0, "link_gb_s": 450.0, "memory_gb": 80.0}
    path = tmp_path / "plan.json"
    spec = {"target": "Llama-3.1-8B", "draft": "Llama-3.2-1B"}
    path.write_text(json.dumps({"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": 2},
                                "profile": {"spec": {**spec, "gpu": {"name": "mine", **numbers}}}}))
    assert main(["--plan", str(path), "--json"]) == 0
    mine = json.loads(capsys.readouterr().out)["predicted"]
    assert main(["--plan", str(path), "--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu", "h100",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["predicted"] == pytest.approx(mine, rel=1e-12)


def test_a_plan_file_reads_its_profile_beside_it_from_any_folder(tmp_path, monkeypatch, capsys):
    """ssd-plan -o records the profile's path relative to the plan file, so the plan reads the same profile from
    another folder; a shipped plan does too."""
    import shutil

    (tmp_path / "sub").mkdir()
    shutil.copy(GRID_PROFILE, tmp_path / "sub" / "profile.json")
    monkeypatch.chdir(tmp_path)
    assert main(["--profile", "sub/profile.json", "-o", "plans/plan.json"]) == 0
    assert json.loads((tmp_path / "plans" / "plan.json").read_text())["profile"]["path"] == "../sub/profile.json"
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    capsys.readouterr()
    assert main(["--plan", "../plans/plan.json", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile"]["name"] == "qwen-coder-cpu-calibrated"
    shipped = Path(GRID_PROFILE).parent / "plan-b1-t0.json"
    assert main(["--plan", str(shipped), "--json"]) == 0


def test_a_spec_pairs_gpu_and_config_files_are_recorded_beside_the_plan_file(tmp_path, monkeypatch, capsys):
    """A spec pair's --gpu FILE and --target CONFIG are recorded relative to the plan file, as a profile's path is,
    so the plan reloads from another folder; built-in names stay names; and no -o may overwrite those files."""
    (tmp_path / "hw").mkdir()
    gpu = {"hbm_tb_s": 3.35, "bf16_tflops": 989.0, "fp8_tflops": 1979.0, "link_gb_s": 450.0, "memory_gb": 80.0}
    (tmp_path / "hw" / "my-gpu.json").write_text(json.dumps(gpu))
    monkeypatch.chdir(tmp_path)
    assert main(["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu", "hw/my-gpu.json", "--draft-gpu", "l4",
                 "-o", "plans/plan.json", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["predicted"]
    spec = json.loads((tmp_path / "plans" / "plan.json").read_text())["profile"]["spec"]
    assert (spec["gpu"], spec["draft_gpu"], spec["target"]) == ("../hw/my-gpu.json", "l4", "Llama-3.1-8B")
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    assert main(["--plan", "../plans/plan.json", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["predicted"] == first
    assert _exit(main, ["--plan", "../plans/plan.json", "-o", "../hw/my-gpu.json"]) == 2
    assert "the plan's profile.spec.gpu input of this command" in capsys.readouterr().err


def test_a_recorded_path_that_names_two_files_or_none_is_one_line(tmp_path, monkeypatch, capsys):
    import shutil

    for d in ("a", "b/a"):
        (tmp_path / d).mkdir(parents=True)
    shutil.copy(GRID_PROFILE, tmp_path / "a" / "profile.json")
    shutil.copy(GRID_PROFILE, tmp_path / "b" / "a" / "profile.json")
    plan = {"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": 2}, "profile": {"path": "a/profile.json"}}
    (tmp_path / "b" / "plan.json").write_text(json.dumps(plan))
    monkeypatch.chdir(tmp_path)
    assert _exit(main, ["--plan", "b/plan.json"]) == 2
    assert "the plan file's profile.path 'a/profile.json' names two files" in capsys.readouterr().err
    (tmp_path / "b" / "a" / "profile.json").unlink()
    assert _exit(main, ["--plan", "b/plan.json", "--json"]) == 0  # only the one here: read
    monkeypatch.chdir(tmp_path / "b")
    assert _exit(main, ["--plan", "plan.json"]) == 2
    assert "is neither beside the plan file" in capsys.readouterr().err


def test_no_output_overwrites_the_profile_a_plan_file_names(tmp_path, monkeypatch, capsys):
    """-o (ssd-plan) and --chrome-trace (ssd-sim) over the profile the --plan file records are refused before any
    work, and the profile is kept."""
    import shutil

    from ssd_sim.cli.sim import main as sim_main

    shutil.copy(GRID_PROFILE, tmp_path / "profile.json")
    monkeypatch.chdir(tmp_path)
    assert main(["--profile", "profile.json", "-o", "plan.json"]) == 0
    before = (tmp_path / "profile.json").read_bytes()
    capsys.readouterr()
    assert _exit(main, ["--plan", "plan.json", "-o", "profile.json"]) == 2
    assert "output: profile.json is the plan's profile.path input" in capsys.readouterr().err
    assert _exit(sim_main, ["--plan", "plan.json", "--tokens", "4", "--chrome-trace", "./profile.json"]) == 2
    assert "chrome_trace: ./profile.json is the same file as profile.json, the plan's profile.path input" in \
        capsys.readouterr().err
    assert (tmp_path / "profile.json").read_bytes() == before


def _exit(cli, argv: list[str]) -> int:
    """A CLI's exit status, whether it returns it or exits with it."""
    try:
        return cli(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("flag", ["-o", "--plan", "--profile"])
def test_a_path_too_long_for_the_file_system_is_one_line(flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = ["--preset", "llama70b-1b-h100"] if flag != "--profile" else []
    assert _exit(main, [*args, flag, "a" * 300 + ".json"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "(305 bytes) is a name too long for the file system" in err or "cannot be read (File name too long)" in err
    assert list(tmp_path.iterdir()) == []
