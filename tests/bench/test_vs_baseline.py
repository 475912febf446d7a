"""bench/vs_baseline.py's pure helpers: validity of a run, medians over valid timed runs only, tok/s formulas, the
output-identity check, ratios and goals, the table, strict JSON, flag checks and the SD plan (Saguaro C = 1).
No model runs here (the script itself is run by hand: see its docstring)."""

import json
import math

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.records import RoundRecord
from tests.helpers.bench import load_bench

VB = load_bench("vs_baseline")


def rec(mode="ar", rep=0, outputs=None, e2e_s=2.0, prefill_s=0.5, **kw):
    r = VB.RunRecord(mode, rep, [[1, 2, 3, 4]] * 2 if outputs is None else outputs, e2e_s, prefill_s, **kw)
    r.invalid = VB.invalid_reason(r, 2, 4)
    return r


def test_a_clean_run_is_valid():
    assert rec().invalid is None


@pytest.mark.parametrize("kw, why", [
    ({"faults": ["round 3: draft timeout; finishing autoregressively"]}, "fault: round 3"),
    ({"fallback_rounds": 2}, "2 round(s) fell back to AR"),
    ({"error": "ConfigError: mode: sd needs the draft process"}, "failed: ConfigError"),
    ({"outputs": [[1, 2, 3, 4]]}, "1 outputs for 2 prompts"),
    ({"outputs": [[1, 2, 3, 4], [1, 2]]}, "prompt 1 got 2 tokens, not 4"),
])
def test_faults_fallbacks_errors_and_short_outputs_make_a_run_invalid(kw, why):
    assert why in rec(**kw).invalid


def test_fallback_rounds_counts_rounds_marked_fallback():
    rounds = [RoundRecord(i, 0, 1, [], fallback=f) for i, f in enumerate((None, "ar", "ar"))]
    assert VB.fallback_rounds(rounds) == 2
    assert VB.fallback_rounds([]) == 0


def test_tok_s_formulas_end_to_end_and_decode_only():
    r = rec(e2e_s=2.0, prefill_s=0.5)  # 8 tokens, 2 prompts
    assert VB.e2e_tok_s(r) == pytest.approx(8 / 2.0)
    assert VB.decode_tok_s(r) == pytest.approx((8 - 2) / 1.5)  # the first token of each prompt is prefill's
    assert math.isnan(VB.tok_s(5, 0.0))


def test_median_of_nothing_is_nan():
    assert VB.median([3.0, 1.0, 2.0]) == 2.0
    assert math.isnan(VB.median([]))


def test_stats_use_valid_timed_runs_only():
    records = [rec(rep=-1, e2e_s=100.0),  # warm-up: never counted
               rec(rep=0, e2e_s=2.0), rec(rep=1, e2e_s=4.0), rec(rep=2, e2e_s=1.0, faults=["x"]),
               rec(mode="sd", rep=0, faults=["x"])]
    s = VB.mode_stats(records, ("ar", "sd"))
    assert (s["ar"]["runs"], s["ar"]["valid"]) == (3, 2)
    assert s["ar"]["e2e_tok_s"] == pytest.approx(VB.median([8 / 2.0, 8 / 4.0]))
    assert s["ar"]["invalid"] == ["rep 2: fault: x"]
    assert s["sd"]["valid"] == 0 and math.isnan(s["sd"]["e2e_tok_s"])


def test_ratios_are_against_hf_assisted_and_goals_read_them():
    records = [rec(mode="hf-assisted", e2e_s=4.0), rec(mode="sd", e2e_s=4.0), rec(mode="ssd", e2e_s=2.0)]
    s = VB.mode_stats(records, ("hf-assisted", "sd", "ssd"))
    VB.add_ratios(s)
    assert s["hf-assisted"]["e2e_tok_s_vs_ref"] == pytest.approx(1.0)
    assert s["ssd"]["e2e_tok_s_vs_ref"] == pytest.approx(2.0)
    goals = {m: (x, g, ok) for m, x, g, ok in VB.goal_lines(s)}
    assert goals["sd"] == (pytest.approx(1.0), 1.0, True) and goals["ssd"][2] is True


def test_first_difference():
    assert VB.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert VB.first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert VB.first_difference([1, 2], [1, 2, 3]) == 2


def test_outputs_are_compared_per_prompt_against_hf_ar_ignoring_invalid_runs():
    same = [[1, 2, 3, 4], [5, 6, 7, 8]]
    records = [rec(mode="hf-ar", outputs=same), rec(mode="ssd", outputs=same),
               rec(mode="sd", outputs=[[1, 2, 3, 4], [5, 6, 0, 8]]),
               rec(mode="ar", outputs=[[9, 9, 9, 9], [9, 9, 9, 9]], faults=["x"])]  # invalid: not compared
    ref, lines = VB.output_mismatches(records)
    assert ref == same
    assert lines == ["sd rep 0 prompt 1: differs from hf-ar rep 0 at token 2"]


def test_table_has_the_command_one_row_per_mode_and_the_notes():
    s = VB.mode_stats([rec(mode="hf-assisted"), rec(mode="ssd")], ("hf-assisted", "ssd"))
    VB.add_ratios(s)
    text = VB.format_table(s, {"ssd": {"engine": "ssd-run ssd K=3", "threads": "1+1", "kernels": "onednn"}},
                           "python bench/vs_baseline.py --tiny", ["a note"])
    lines = text.splitlines()
    assert lines[0] == "command: `python bench/vs_baseline.py --tiny`"
    rows = [ln for ln in lines if ln.startswith("| ")]
    assert len(rows) == 3 and rows[2].startswith("| ssd | ssd-run ssd K=3 | 1+1 | onednn | 1/1 | 4.000 |")
    assert lines[-1] == "- a note"


def test_json_safe_makes_strict_json():
    text = json.dumps(VB.json_safe({"a": math.nan, "b": [math.inf, 1.0], "c": (2, "x")}), allow_nan=False)
    assert json.loads(text) == {"a": None, "b": [None, 1.0], "c": [2, "x"]}


@pytest.mark.parametrize("argv, field", [
    (["--prompts", "0"], "prompts"), (["--prompts", "999"], "prompts"), (["--repeats", "0"], "repeats"),
    (["--max-new-tokens", "0"], "max_new_tokens"), (["--hf-threads", "0"], "hf_threads"),
    (["--draft-timeout", "0"], "draft_timeout"), (["--preset", "x", "--profile", "y"], "profile"),
    (["--quantize", "int8", "--hf-linear", "onednn"], "linear"), (["--hf-assistant-tokens", "0"], "hf_assistant_tokens"),
])
def test_bad_flags_are_one_config_error_naming_the_flag(argv, field):
    args = VB.build_parser().parse_args(argv)
    with pytest.raises(ConfigError) as e:
        VB.check_args(args)
    assert e.value.field == field


def test_default_out_per_setup():
    p = VB.build_parser()
    assert VB.default_out(p.parse_args([])) == "traces/cpu-fp32-vs-baseline/vs-baseline.json"
    assert VB.default_out(p.parse_args(["--quantize", "int8"])) == "traces/cpu-int8-vs-baseline/vs-baseline.json"
    assert VB.default_out(p.parse_args(["--tiny"])) == "runs/vs-baseline-tiny.json"


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_sd_plan_never_applies_saguaro_c_and_both_plans_are_b1_greedy(quantize):
    sd, ssd, pred = VB.plans_for(VB.build_parser().parse_args(["--quantize", quantize]))
    assert sd.mode == "sd" and sd.saguaro_c == 1.0 and sd.saguaro_c_list == ()
    assert sd.K == pred["sd_K"] and ssd.K == pred["ssd_K"]
    for plan in (sd, ssd):
        assert plan.batch_size == 1 and plan.temperature == 0.0
    assert ssd.mode == "ssd" and pred["profile"] == VB.PRESETS[quantize]
