"""`ssd-sim`: every preset runs, --json and --chrome-trace are valid, bad input exits 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ssd_sim.cli.sim import main
from ssd_sim.io.jsonfile import save_json_atomic
from ssd_sim.io.records import Header
from ssd_sim.io.trace import TraceWriter
from ssd_sim.model.presets import list_presets
from ssd_sim.plan.plan import Plan, PlanFile
from tests.helpers.profiles import calibrated_profile_file
from tests.helpers.trace_samples import EMPTY_SUMMARY


def run_json(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_simulates_and_prints_valid_json(capsys, preset):
    out = run_json(capsys, "--preset", preset, "--tokens", "64", "--json")
    m = out["metrics"]
    assert out["profile"] == preset and out["mode"] == "ssd"
    assert m["output_tokens"] == 64 and m["per_seq_tok_s"] > 0
    assert 0 <= m["hit_rate"] <= 1
    assert out["predicted"]["mode"] == "ssd"


@pytest.mark.parametrize("mode", ["ar", "sd", "ssd-fast", "ssd-adaptive"])
def test_every_mode_runs(capsys, mode):
    out = run_json(capsys, "--preset", "qwen32b-0.6b-h100", "-b", "4", "--tokens", "128", "--mode", mode, "--json")
    assert out["mode"] == mode and out["metrics"]["sequences"] == 4
    if mode == "ssd-fast":
        assert out["plan"]["backup"] == "fast"
    if mode == "ssd-adaptive":
        assert out["plan"]["backup"] == "adaptive" and out["plan"]["backup_threshold"] >= 1


def test_table_output_shows_simulated_and_analytic_columns(capsys):
    assert main(["--preset", "llama70b-1b-h100", "--tokens", "256"]) == 0
    text = capsys.readouterr().out
    assert "tok/s per sequence" in text and "analytic" in text and "cache hit rate" in text


def test_chrome_trace_is_valid_trace_event_json(tmp_path, capsys):
    path = tmp_path / "trace.json"
    assert main(["--preset", "llama70b-1b-h100", "-b", "2", "--tokens", "64", "--chrome-trace", str(path)]) == 0
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    names = {e["name"] for e in spans}
    assert {"verify", "glue", "branch", "lookup", "wait", "prefill"} <= names
    assert all(isinstance(e["ts"], (int, float)) and e["dur"] > 0 for e in spans)
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} == {"target (TP=4)", "draft"}


def test_plan_file_is_read_and_knob_flags_override_it(tmp_path, capsys):
    plan = Plan(num_speculative_tokens=3, fan_out=(2, 2, 1, 3), batch_size=2)
    path = tmp_path / "plan.json"
    save_json_atomic(path, PlanFile(plan).to_json())
    out = run_json(capsys, "--preset", "llama70b-1b-h100", "--plan", str(path), "--tokens", "64", "--json")
    assert out["plan"]["fan_out"] == [2, 2, 1, 3] and out["metrics"]["sequences"] == 2
    out = run_json(capsys, "--preset", "llama70b-1b-h100", "--plan", str(path), "--backup", "fast",
                   "--fan-out", "1", "--tokens", "64", "--json")
    assert out["plan"]["backup"] == "fast" and out["plan"]["fan_out"] == [1, 1, 1, 1]


def test_poisson_workload_flags(capsys):
    out = run_json(capsys, "--preset", "llama70b-1b-h100", "--workload", "poisson", "--rate", "5",
                   "--num-requests", "40", "--max-batch", "4", "--tokens", "64", "--json")
    assert out["workload"]["kind"] == "poisson" and out["metrics"]["sequences"] == 40
    assert out["plan"]["batch_size"] == 4 and out["metrics"]["mean_batch"] <= 4


def test_replay_of_a_trace(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    w = TraceWriter(path, Header.build(**{"mode": "ssd", "plan": Plan(num_speculative_tokens=4).to_dict(), "batch_size": 1}))
    for i in range(50):
        seq = {"seq": 0, "accepted": 3, "bonus": 7, "committed": 4, "hit": i > 0, "backup": None,
               "fan_out": 1, "bonus_rank": 0}
        w.write({"type": "round", "round": i, "K": 4, "batch": 1, "seqs": [seq], "timings_ms": {"round": 20.0}})
    w.close(EMPTY_SUMMARY)
    out = run_json(capsys, "--preset", "llama70b-1b-h100", "-k", "4", "--fan-out", "1", "--fan-out-miss", "1,1,1,1,1",
                   "--replay", str(path), "--tokens", "401", "--json")
    m = out["metrics"]
    assert m["mean_accept_len"] == 4.0  # every replayed round accepts 3 (+ the bonus)
    assert m["hit_rate"] == 1.0  # bonus rank 0 < fan-out 1: every lookup after the first hits


BAD = [
    (["--preset", "nope"], "preset"),
    (["--preset", "llama70b-1b-h100", "-k", "4", "--fan-out", "1,2"], "fan_out"),
    (["--preset", "llama70b-1b-h100", "--workload", "poisson"], "rate"),
    (["--preset", "llama70b-1b-h100", "--rate", "3"], "rate"),
    (["--preset", "llama70b-1b-h100", "--mode", "turbo"], "--mode"),
    (["--preset", "llama70b-1b-h100", "--tokens", "0"], "--tokens"),
    (["--preset", "llama70b-1b-h100", "--plan", "missing-plan.json"], "plan file"),
    (["--preset", "llama70b-1b-h100", "--replay", "missing-trace.jsonl"], "trace"),
    (["--preset", "llama70b-1b-h100", "--prompt-tokens", "-3"], "--prompt-tokens: -3 is outside 0..2097152"),
    (["--preset", "llama70b-1b-h100", "--tokens", "10000000000"],
     "--tokens: 10000000000 is outside 1..2097152 (output tokens per sequence)"),
    (["--preset", "llama70b-1b-h100", "--tokens", "1e10"], "invalid integer '1e10' (write it out as an integer)"),
    (["--preset", "llama70b-1b-h100", "--workload", "poisson", "--rate", "1", "--num-requests", "1000000000"],
     "--num-requests: 1000000000 is outside 1..1000000 (requests)"),
    (["--preset", "llama70b-1b-h100", "--seed=-1"], "--seed: -1 is outside 0..4294967295 (random seed)"),
    (["--preset", "llama70b-1b-h100", "--seed", "9" * 5000], "--seed: invalid integer"),
    (["--preset", "llama70b-1b-h100", "--prompt-tokens", "9" * 5000], "--prompt-tokens: invalid integer"),
    (["--preset", "llama70b-1b-h100", "--workload", "poisson", "--max-batch", "5000", "--rate", "1"],
     "--max-batch: 5000 is outside 1..4096 (sequences)"),
    (["--preset", "llama70b-1b-h100", "--workload", "poisson", "--rate", "1e-9"], "rate: a poisson workload needs"),
    (["--preset", "llama70b-1b-h100", "--workload", "arrivals"],
     "arrivals: --workload arrivals needs --arrivals FILE"),
    (["--preset", "llama70b-1b-h100", "--arrivals", "a.json"], "--arrivals FILE needs --workload arrivals"),
    ([], "profile"),
]


@pytest.mark.parametrize("argv, field", BAD)
def test_bad_input_exits_2_with_one_line_and_writes_no_trace(tmp_path, capsys, argv, field):
    out_file = tmp_path / "trace.json"
    with pytest.raises(SystemExit) as e:
        main([*argv, "--chrome-trace", str(out_file)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ssd-sim: error:") and field in err
    assert not out_file.exists()


def test_console_script_is_installed():
    exe = Path(sys.executable).with_name("ssd-sim")
    res = subprocess.run([str(exe), "--preset", "llama70b-1b-h100", "--tokens", "32", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["metrics"]["output_tokens"] == 32


def test_help_states_the_limits():
    from ssd_sim.cli.sim import build_parser

    text = " ".join(build_parser().format_help().split())
    for limit in ("1..2097152, default 512", "1..1000000; fixed", "1..4096); default -b, else the plan file's batch size, else the number of requests",
                  "0..2097152; 0 = no prefill", "random seed (0..4294967295)", "1e-06..1e+06"):
        assert limit in text


@pytest.mark.parametrize("argv", [
    ["--preset", "llama70b-1b-h100", "--tokens", "1", "--num-requests", "2"],
    ["--preset", "qwen32b-0.6b-h100", "--workload", "poisson", "--rate", "20", "--num-requests", "1000",
     "--max-batch", "16", "--tokens", "16", "--output-dist", "geometric"],
])
def test_one_token_requests_in_a_queue_simulate(capsys, argv):
    # The two commands of issue 12 that ended in "ValueError: Negative delay".
    m = run_json(capsys, *argv, "--json")["metrics"]
    assert (m["sequences"], m["output_tokens"]) in ((2, 2), (1000, 16039))


def test_arrivals_workload_reads_the_file(tmp_path, capsys):
    path = tmp_path / "arrivals.json"
    path.write_text('{"arrival_ms": [0, 100, 5000], "output_tokens": [32, 1, 64]}')
    out = run_json(capsys, "--preset", "llama70b-1b-h100", "--workload", "arrivals", "--arrivals", str(path),
                   "--max-batch", "2", "--json")
    assert out["workload"]["kind"] == "arrivals" and out["workload"]["arrival_ms"] == [0.0, 100.0, 5000.0]
    assert out["metrics"]["sequences"] == 3 and out["metrics"]["output_tokens"] == 97


def ar_trace(path: Path) -> Path:
    w = TraceWriter(path, Header.build(**{"mode": "ar", "plan": Plan(mode="ar").to_dict(), "batch_size": 1}))
    for i in range(20):
        seq = {"seq": 0, "accepted": 0, "bonus": 7, "committed": 1}
        w.write({"type": "round", "round": i, "K": 0, "batch": 1, "seqs": [seq], "timings_ms": {"round": 20.0}})
    w.close(EMPTY_SUMMARY)
    return path


def bad_exit(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    return err.strip()


def test_replay_of_an_ar_trace_into_an_ssd_plan_is_refused(tmp_path, capsys):
    path = ar_trace(tmp_path / "ar.jsonl")
    err = bad_exit(capsys, "--preset", "llama70b-1b-h100", "-k", "2", "--fan-out", "1", "--replay", str(path))
    assert err == (f"ssd-sim: error: replay: trace {path} is an ar run: it has no accepted counts to replay into "
                   "an ssd plan; replay an sd or ssd trace")


def test_replay_of_accepted_above_k_is_refused_with_file_line_and_field(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    w = TraceWriter(path, Header.build(**{"mode": "ssd", "plan": Plan(num_speculative_tokens=2).to_dict(), "batch_size": 1}))
    for i in range(3):
        seq = {"seq": 0, "accepted": 7 if i == 2 else 1, "bonus": 7, "committed": 2, "hit": i > 0, "bonus_rank": 0}
        w.write({"type": "round", "round": i, "K": 2, "batch": 1, "seqs": [seq], "timings_ms": {"round": 20.0}})
    w.close(EMPTY_SUMMARY)
    err = bad_exit(capsys, "--preset", "llama70b-1b-h100", "-k", "2", "--fan-out", "1", "--replay", str(path))
    assert err.startswith(f"ssd-sim: error: accepted: {path} line 4: seqs[0].accepted = 7 must be an integer in "
                          "0..K = 0..2")


def test_an_unwritable_chrome_trace_fails_before_the_simulation(tmp_path, capsys, monkeypatch):
    import ssd_sim.cli.sim as cli

    def no_simulation(*a, **k):
        raise AssertionError("simulated before checking --chrome-trace")

    monkeypatch.setattr(cli, "simulate", no_simulation)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    err = bad_exit(capsys, "--preset", "llama70b-1b-h100", "--chrome-trace", str(blocker / "t.json"))
    assert err.startswith("ssd-sim: error: chrome_trace:") and "a-file" in err
    assert bad_exit(capsys, "--preset", "llama70b-1b-h100", "--chrome-trace", str(tmp_path)).endswith(
        "is a folder; give a file name")
    assert blocker.read_text() == "x"


def test_chrome_trace_onto_a_symlink_writes_through_it(tmp_path, capsys):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert main(["--preset", "llama70b-1b-h100", "--tokens", "16", "--chrome-trace", str(link), "--json"]) == 0
    assert link.is_symlink() and "traceEvents" in json.loads(target.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]  # no temp file left


# ---- valid but almost certainly not meant: one warning line each, before the run, exit 0 (ssd_sim.io.sanity) ----
def test_a_rate_of_days_warns_with_the_span_and_still_simulates(capsys):
    assert main(["--preset", "llama70b-1b-h100", "--workload", "poisson", "--rate", "1e-6", "--num-requests", "8",
                 "--tokens", "16", "--json"]) == 0
    out = capsys.readouterr()
    assert out.err == ("ssd-sim: warning: --rate 1e-06 requests/s spaces 8 requests over ~93 days of simulated "
                       "waiting, against ~0.62 s of decoding them one after another; --rate is in requests per second\n")  # b <= 8 plan
    assert json.loads(out.out)["metrics"]["sequences"] == 8


def test_a_busy_poisson_stream_does_not_warn(capsys):
    assert main(["--preset", "llama70b-1b-h100", "--workload", "poisson", "--rate", "5", "--num-requests", "20",
                 "--tokens", "16", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_arrivals_in_epoch_ms_warn_and_past_2_42_ms_are_refused(tmp_path, capsys):
    (tmp_path / "epoch.json").write_text('{"arrival_ms": [0, 1.7e12]}')
    (tmp_path / "far.json").write_text('{"arrival_ms": [0, 1e308]}')
    base = ["--preset", "llama70b-1b-h100", "--workload", "arrivals", "--tokens", "16", "--json", "--arrivals"]
    assert main(base + [str(tmp_path / "epoch.json")]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"ssd-sim: warning: {tmp_path / 'epoch.json'}: arrival_ms spans ~54 years of simulated "
                          "waiting for 2 requests") and err.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        main(base + [str(tmp_path / "far.json")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "arrival_ms[1] = 1e+308 ms is past 2**42 ms" in err


GRID = Path(__file__).resolve().parents[2] / "traces" / "cpu-fp32-grid"


def test_replaying_another_setup_s_trace_warns_with_the_dashboard_s_line(capsys):
    from ssd_sim.io.trace import read_trace
    from ssd_sim.model.presets import get_preset
    from ssd_sim.model.tracematch import mismatch_line

    trace = GRID / "ssd-k2-f001-b1-t0.jsonl"
    assert main(["--preset", "llama70b-1b-h100", "-k", "2", "--fan-out", "0,0,1", "--replay", str(trace),
                 "--tokens", "16", "--json"]) == 0
    line = mismatch_line(read_trace(trace), get_preset("llama70b-1b-h100"))
    assert line.endswith("but this trace ran qwen-coder-1.5b + qwen-coder-0.5b on CPU: its predictions are for "
                         "another setup")
    assert capsys.readouterr().err == f"ssd-sim: warning: {line}\n"
    assert main(["--profile", str(GRID / "profile.json"), "-k", "2", "--fan-out", "0,0,1", "--replay", str(trace),
                 "--tokens", "16", "--json"]) == 0
    err = capsys.readouterr().err  # its own setup: no mismatch, only the host line its unrecorded host gets
    assert err.count("\n") == 1 and "this trace ran" not in err
    assert err.startswith("ssd-sim: warning: profile qwen-coder-cpu-calibrated was measured on an unrecorded host")


def test_a_refused_replay_of_another_setup_is_one_line_without_the_warning(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--preset", "llama70b-1b-h100", "-k", "2", "--replay", str(GRID / "ar-b1-t0.jsonl")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "is an ar run" in err and "warning" not in err


def test_a_stream_beyond_the_replica_s_capacity_warns_that_it_is_overloaded(capsys):
    from ssd_sim.model.presets import get_preset
    from ssd_sim.plan.plan import Plan
    from ssd_sim.plan.predict import predict
    from ssd_sim.sim.capacity import Load
    from ssd_sim.sim.workload import poisson

    argv = ["--preset", "qwen32b-0.6b-h100", "--workload", "poisson", "--rate", "20", "--max-batch", "16",
            "--tokens", "512", "--num-requests", "200", "--mode", "sd", "-k", "3", "--json"]
    assert main(argv) == 0
    out = capsys.readouterr()
    (line,) = [x for x in out.err.splitlines() if "overloaded" in x]
    offered = Load.of(poisson(rate=20, num_requests=200, max_batch=16, output_tokens=512)).offered_tok_s
    plan = json.loads(out.out)["plan"]
    at = get_preset("qwen32b-0.6b-h100", context=128 + 512 // 2)  # the default prompt + half the output: the mean decode context
    cap = predict(at, Plan.from_dict(plan).replace(batch_size=16), "sd").total_tok_s
    assert line == (f"ssd-sim: warning: overloaded: the load offers {offered:,.0f} output tok/s where this replica "
                    f"(b <= 16) can deliver at most {cap:,.0f}; the queue grows for the whole run, so TTFT grows with "
                    "the run's length (add replicas, raise the batch cap or lower the rate)")
    assert json.loads(out.out)["metrics"]["ttft_ms_p99"] > 10_000  # the queue did grow


def test_a_stream_within_capacity_is_not_called_overloaded(capsys):
    assert main(["--preset", "qwen32b-0.6b-h100", "--workload", "poisson", "--rate", "2", "--max-batch", "16",
                 "--tokens", "512", "--num-requests", "50", "--json"]) == 0
    assert "overloaded" not in capsys.readouterr().err


def test_an_arrivals_file_is_summarised_as_it_is_and_batched_by_default(tmp_path, capsys):
    """issue 30: per-request lengths were summarised as '5 sequences x 512 tokens' and decoded one at a time."""
    path = tmp_path / "arrivals.json"
    path.write_text('{"arrival_ms": [0, 12.5, 30, 31, 80], "output_tokens": [512, 80, 200, 64, 300], '
                    '"prompt_tokens": [100, 900, 40, 300, 128]}')
    argv = ["--preset", "llama70b-1b-h100", "--workload", "arrivals", "--arrivals", str(path), "--tokens", "16"]
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("workload: "))
    assert line == ("workload: 5 requests x 64-512 output tokens (median 200), prompts 40-900 tokens (median 128) "
                    "(the file's, per request); arrivals over 80 ms, batch <= 5 (by default every request; "
                    "--max-batch B chooses)")
    out = run_json(capsys, *argv, "--json")
    assert out["workload"]["max_batch"] == 5 and out["workload"]["prompt_lengths"] == [100, 900, 40, 300, 128]
    assert out["plan"]["batch_size"] == 5
    out = run_json(capsys, *argv, "--max-batch", "2", "--prompt-tokens", "50", "--json")  # flags still choose
    assert (out["workload"]["max_batch"], out["workload"]["prompt_tokens"], out["workload"]["prompt_lengths"]) == (
        2, 50, [])


def test_the_default_batch_cap_is_at_most_the_profiles(capsys):
    out = run_json(capsys, "--preset", "llama70b-1b-h100", "--workload", "poisson", "--rate", "4", "--tokens", "8",
                   "--num-requests", "40", "--json")
    assert out["workload"]["max_batch"] == 16  # the preset's max_batch_size, not 1


def test_bad_prompt_lengths_in_an_arrivals_file_are_one_line(tmp_path, capsys):
    path = tmp_path / "arrivals.json"
    path.write_text('{"arrival_ms": [0, 1], "prompt_tokens": [1, 2, 3]}')
    with pytest.raises(SystemExit) as e:
        main(["--preset", "llama70b-1b-h100", "--workload", "arrivals", "--arrivals", str(path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "prompt_tokens" in err


def test_a_gpu_preset_is_simulated_at_the_workloads_mean_decode_context(capsys):
    base = ["--preset", "llama70b-1b-h100", "-b", "8", "--tokens", "256", "--json"]
    runs = {}
    for extra in (["--prompt-tokens", "4000"], ["--prompt-tokens", "4000", "--context", "400"], ["--prompt-tokens", "200"]):
        assert main(base + extra) == 0
        runs[" ".join(extra)] = json.loads(capsys.readouterr().out)
    long, own, short = runs.values()
    assert long["context_note"].startswith("simulated rounds at their batch's mean cached tokens per sequence")
    assert "the analytic column at 4128," in long["context_note"]  # 4000 + 256 / 2
    assert "the analytic column at 328," in short["context_note"]
    assert "context_note" not in own  # --context: the latencies at the context given
    # every row's KV read grows ~10x from 400 to 4128 tokens: per-sequence decode slower at b = 8
    assert long["metrics"]["per_seq_tok_s"] < 0.95 * own["metrics"]["per_seq_tok_s"]
    # the growth check: the simulated plan's analytic round over 4000 -> 4256 tokens against the mean context
    g = long["context_growth"]
    assert (g["prompt_tokens"], g["output_tokens"]) == (4000, 256) and "context_growth" not in own
    assert g["ssd"]["tok_s"] * (1 + g["ssd"]["mean_context_err_pct"] / 100) == pytest.approx(
        long["predicted"]["per_seq_tok_s"], rel=1e-6)
    # the simulated rounds follow the growing context: the simulation lands on the analytic tok/s over the growth
    assert long["metrics"]["per_seq_tok_s"] == pytest.approx(g["ssd"]["tok_s"], rel=0.03)


def test_the_growth_line_says_how_much_slower_the_growing_context_is(capsys):
    assert main(["--preset", "qwen32b-0.6b-h100", "-b", "32", "--prompt-tokens", "256", "--tokens", "512"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("over a context growing"))
    assert "from 256 to 768 tokens" in line and "SSD round at b = 32" in line and "charges each round at its batch's context" in line
    assert float(line.split("is on average ")[1].split("%")[0]) > 1.0  # the draft's tree decode binds late


def test_a_measured_profile_keeps_its_latencies_whatever_the_prompts(capsys):
    assert main(["--preset", "qwen-coder-1.5b-0.5b-cpu", "--tokens", "16", "--prompt-tokens", "3000", "--json"]) == 0
    assert "context_note" not in json.loads(capsys.readouterr().out)  # CPU latencies were measured, no KV term


def test_horizon_session_narrows_the_simulated_runs_interval(capsys, tmp_path):
    path = str(calibrated_profile_file(tmp_path))
    later, session = (run_json(capsys, "--profile", path, "--mode", "ar", "--tokens", "32", "--horizon", h, "--json")
                      for h in ("later", "session"))
    assert later["metrics"] == session["metrics"]  # the same simulation; only the spread around it differs
    (lo_l, hi_l), (lo_s, hi_s) = (r["interval_90"]["per_seq_tok_s"] for r in (later, session))
    # 0.63x: the next run's drift 5.2% within the hour against 10.0% later (model.drift, Student's t)
    assert lo_l < lo_s < hi_s < hi_l and 0.55 * (hi_l - lo_l) < hi_s - lo_s < 0.7 * (hi_l - lo_l)
