"""Emitted engine commands pass the engines' argument rules (plan.engine_rules), for every GPU preset."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ssd_sim.model.presets import get_preset, list_presets
from ssd_sim.plan.emit import FETCHED_MODELS, engine_flags, model_id, reference_plan
from ssd_sim.plan.engine_rules import check
from ssd_sim.plan.plan import Plan, engine_defaults
from ssd_sim.plan.planner import BStar, PlanRequest, make_plan
from ssd_sim.plan.predict import predict_ssd

GPU_PRESETS = ("llama70b-1b-h100", "qwen32b-0.6b-h100", "llama70b-1b-h200")


@pytest.mark.parametrize("T", [0.0, 1.0])
@pytest.mark.parametrize("b", [1, 8, 32])
@pytest.mark.parametrize("name", list_presets())
def test_every_emitted_command_passes_its_engines_rules(name, b, T):
    prof = get_preset(name)
    r = make_plan(prof, PlanRequest(batch_size=b, temperature=T, b_star=BStar.CHOSEN))
    flags = engine_flags(prof, r.plan, r.sd, r.budget_cap)
    for engine, f in flags.items():
        if f.get("supported", True):
            assert check(engine, f["args"]) == [], (engine, f["command"])
    ref = flags["ssd-engine"]
    assert ref["supported"] == (name in GPU_PRESETS)  # the reference engine runs the GPU pairs only
    if not ref["supported"]:
        return
    run = Plan.from_dict(ref["plan"])
    K, F = run.K, int(ref["args"][ref["args"].index("--f") + 1])
    assert F >= 1 and run.budget == F * (K + 1) and run.budget <= max(r.budget_cap, K + 1)
    assert ref["predicted_tok_s"] == pytest.approx(predict_ssd(prof, run).per_seq_tok_s)
    if run.budget != r.plan.budget:  # the change is said, with both predictions
        assert any(n.startswith("the reference engine needs F (K + 1) guesses with F >= 1") for n in ref["notes"])


@pytest.mark.parametrize("budget_fan_out,K,want_budget", [
    ((5, 4, 4, 6), 3, 20),      # 19 guesses at K=3: --f 5 needs 20
    ((10, 8, 17), 2, 36),       # 35 at K=2: --f 12 needs 36
    ((1, 0, 0, 2), 3, 4),       # 3 at K=3: F would round to 1 -> 4
    ((0, 0, 0, 1), 3, 4),       # 1 at K=3: F >= 1
])
def test_plans_the_engine_cannot_hold_are_padded_or_cut_to_f_times_k_plus_1(budget_fan_out, K, want_budget):
    prof = get_preset("llama70b-1b-h100")
    plan = Plan(num_speculative_tokens=K, fan_out=budget_fan_out, saguaro_c=0.7, temperature=1.0,
                **engine_defaults(prof.engine))
    run, notes = reference_plan(prof, plan)
    assert run.budget % (K + 1) == 0 and run.budget // (K + 1) >= 1
    assert run.budget in (want_budget, want_budget - (K + 1))  # the multiple below or above, the faster one
    assert notes and f"budget {plan.budget} -> {run.budget}" in notes[0]
    sd = make_plan(prof, PlanRequest(temperature=1.0, b_star=BStar.CHOSEN)).sd
    args = engine_flags(prof, plan, sd)["ssd-engine"]["args"]
    assert check("ssd-engine", args) == []


def test_above_batch_8_the_engine_keeps_the_plans_fan_out_lists():
    # bench.py at the checked commit: mask_helpers.get_custom_mask_vectorized (B > 8) takes non-uniform lists
    prof = get_preset("qwen32b-0.6b-h100")
    plan = Plan(num_speculative_tokens=3, fan_out=(4, 3, 2, 3), batch_size=16, **engine_defaults(prof.engine))
    run, notes = reference_plan(prof, plan)
    assert (run.fan_out, notes) == ((4, 3, 2, 3), [])
    sd = make_plan(prof, PlanRequest(batch_size=16, b_star=BStar.CHOSEN)).sd
    args = engine_flags(prof, plan, sd)["ssd-engine"]["args"]
    assert args[args.index("--flh") + 1:args.index("--flh") + 5] == ["4", "3", "2", "3"] and check("ssd-engine", args) == []


def test_cpu_profiles_are_not_emitted_for_the_reference_engine():
    prof = get_preset("qwen-coder-1.5b-0.5b-cpu")
    r = make_plan(prof, PlanRequest(b_star=BStar.CHOSEN))
    ref = engine_flags(prof, r.plan, r.sd)["ssd-engine"]
    assert not ref["supported"] and ref["command"] == ""
    assert "has no target Qwen/Qwen2.5-Coder-1.5B-Instruct" in ref["notes"][0]


# --- model names, not cache paths ------------------------------------------------------------------------------

def _fetched_models_of_the_runtime() -> dict[str, str]:
    """ssd_runtime/fetch.py MODELS as {name: description}, read from its source (ssd_sim never imports ssd_runtime)."""
    import ast

    tree = ast.parse((Path(__file__).resolve().parents[2] / "ssd_runtime" / "fetch.py").read_text())
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ModelSource":
            kw = {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
            out[kw["name"]] = kw["description"]
    return out


def test_the_fetched_model_table_names_what_ssd_run_fetches():
    runtime = _fetched_models_of_the_runtime()
    assert set(runtime) == set(FETCHED_MODELS) and runtime
    for name, hf_id in FETCHED_MODELS.items():  # "Qwen2.5-Coder-1.5B-Instruct Q4_K_M GGUF (target)"
        assert runtime[name].split()[0] == hf_id.split("/")[1], (name, runtime[name], hf_id)


@pytest.mark.parametrize("given, want", [
    ("/root/.cache/ssd/models/qwen-coder-1.5b/hf", "Qwen/Qwen2.5-Coder-1.5B-Instruct"),  # ssd-run's cache
    ("~/.cache/ssd/models/qwen-coder-0.5b/hf", "Qwen/Qwen2.5-Coder-0.5B-Instruct"),
    ("/data/hf/hub/models--Qwen--Qwen3-8B/snapshots/0123abcd", "Qwen/Qwen3-8B"),  # a Hugging Face cache snapshot
    ("Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF dequantised to fp32)", "Qwen/Qwen2.5-Coder-1.5B-Instruct"),  # presets
    ("Qwen2.5-Coder-0.5B-Instruct, int8 dynamic", "Qwen/Qwen2.5-Coder-0.5B-Instruct"),
    ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"),
])
def test_commands_name_models_by_their_hugging_face_id(given, want):
    got, note = model_id(given, "target")
    assert got == want
    assert (note is None) == (given == want) and (note is None or "/root" not in note and "~" not in note)


def test_a_local_directory_is_named_by_its_config_and_only_a_path_is_said_in_one_line(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text(json.dumps({"_name_or_path": "org/my-model-7b"}))
    assert model_id(str(tmp_path / "mine"), "draft")[0] == "org/my-model-7b"
    got, note = model_id(str(tmp_path / "other"), "draft")
    assert got == str(tmp_path / "other") and note.startswith("only a local path is known for the draft") and "\n" not in note


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_profile_calibrated_from_cached_models_emits_ids_not_paths(engine):
    from ssd_sim.model.profile import load_profile_file

    prof = load_profile_file(Path(__file__).resolve().parents[2] / "traces" / "cpu-fp32-grid" / "profile.json")
    assert prof.target_model.startswith("/root/.cache/")  # what the traces recorded
    r = make_plan(prof, PlanRequest(b_star=BStar.CHOSEN))
    flags = engine_flags(prof, r.plan, r.sd)
    f = flags[engine]
    assert "/" + "root" not in f["command"] and ".cache" not in f["command"]
    assert "Qwen/Qwen2.5-Coder-1.5B-Instruct" in f["args"] and check(engine, f["args"]) == []
    assert "\n" not in f["command"] and f["source"] in f["notes"] and "github.com/" in f["source"]
    assert any(n.startswith("models: target Qwen/Qwen2.5-Coder-1.5B-Instruct (the profile names ssd-run's fetched copy")
               for n in f["notes"])
    ref = flags["ssd-engine"]
    assert not ref["supported"] and ".cache" not in ref["notes"][0] and "Qwen/Qwen2.5-Coder-1.5B-Instruct" in ref["notes"][0]


def test_the_reference_engine_runs_qwen3_and_llama_3_only():
    """bench.py's --qwen selects Qwen3: a Qwen2.5 pair of a Qwen3 size must not be emitted as Qwen3."""
    prof = replace(get_preset("qwen32b-0.6b-h100"), target_model="Qwen/Qwen2.5-Coder-32B-Instruct")
    r = make_plan(prof, PlanRequest(b_star=BStar.CHOSEN))
    ref = engine_flags(prof, r.plan, r.sd)["ssd-engine"]
    assert not ref["supported"] and "no target Qwen/Qwen2.5-Coder-32B-Instruct" in ref["notes"][0]


# --- the encoded rules reject what the engines reject ---------------------------------------------------------

BASE = ["--llama", "--size", "70", "--draft", "1", "--gpus", "5", "--spec", "--async"]


@pytest.mark.parametrize("args,needle", [
    (["--k", "3", "--f", "5", "--flh", "5", "4", "4", "6", "--flm", "5", "4", "4", "6", "--x", "0.7"], "sums to 19"),
    (["--k", "2", "--f", "12", "--flh", "10", "8", "17", "--flm", "10", "8", "17"], "sums to 35"),
    (["--k", "3", "--f", "1", "--flh", "1", "0", "0", "2", "--flm", "1", "0", "0", "2"], "sums to 3"),
    (["--k", "3", "--f", "0", "--flh", "0", "0", "0", "1", "--flm", "0", "0", "0", "1"], "needs F >= 1"),
    (["--k", "3", "--f", "2", "--flh", "2", "2", "2"], "has 3 entries"),
    (["--k", "3", "--f", "2", "--flh", "2", "2", "2", "2", "--flm", "8", "0", "0", "1", "--b", "16"], "sums to 9"),
    (["--k", "3", "--backup", "adaptive"], "argparse"),
    (["--k", "3", "--qwen"], "mutually exclusive"),  # BASE names --llama
    (["--k", "3", "--ttemp", "1.0"], "argparse"),  # gone from bench.py at the checked commit
])
def test_reference_rules_reject_what_the_engine_rejects(args, needle):
    errs = check("ssd-engine", BASE + args)
    assert any(needle in e for e in errs), errs


@pytest.mark.parametrize("args, needle", [
    (["--size", "32", "--draft", "1"], "Size 32 not available for Llama models"),  # Llama is the default family
    (["--qwen", "--size", "70", "--draft", "0.6"], "Size 70 not available for Qwen models"),
    (["--qwen", "--size", "32", "--draft", "1"], "no Qwen draft of that size"),
])
def test_reference_rules_know_each_familys_sizes(args, needle):
    errs = check("ssd-engine", args + ["--gpus", "5", "--spec", "--async", "--k", "3", "--f", "1"])
    assert any(needle in e for e in errs), errs


def test_reference_rules_accept_the_engines_own_default_run():
    assert check("ssd-engine", BASE + ["--k", "7", "--f", "3", "--backup", "jit", "--b", "1", "--temp", "0"]) == []


def test_vllm_rules():
    ok = {"method": "draft_model", "model": "d", "num_speculative_tokens": 4, "draft_tensor_parallel_size": 4}
    good = ["serve", "t", "--tensor-parallel-size", "4", "--speculative-config", json.dumps(ok)]
    assert check("vllm", good) == []
    for change, needle in (({"num_speculative_tokens": 0}, "int > 0"), ({"method": "draft"}, "is not one of"),
                           ({"draft_tensor_parallel_size": 2}, "1 or the target"), ({"k": 1}, "unknown"),
                           ({"tensor_parallel_size": 1}, "draft_tensor_parallel_size"),
                           # the draft-model proposer rejects a draft TP other than the target's (vLLM 9b849b1)
                           ({"draft_tensor_parallel_size": 1}, "must be the same. Got 1 and 4"),
                           ({"disable_padded_drafter_batch": True}, "padded drafter batch")):
        bad = good[:-1] + [json.dumps({**ok, **change})]
        assert any(needle in e for e in check("vllm", bad)), change


def test_emitted_vllm_and_sglang_commands_name_the_engine_version_and_shard_the_draft_like_the_target():
    prof = get_preset("llama70b-1b-h100")
    r = make_plan(prof, PlanRequest(b_star=BStar.CHOSEN))
    flags = engine_flags(prof, r.plan, r.sd)
    cfg = json.loads(flags["vllm"]["args"][-1])
    assert cfg["draft_tensor_parallel_size"] == 4 == prof.latency.target_devices
    assert "vllm-project/vllm at 9b849b1" in flags["vllm"]["source"] and flags["vllm"]["source"] in flags["vllm"]["notes"]
    assert "sgl-project/sglang" in flags["sglang"]["source"]
    assert "tanishqkumar/ssd at commit 6ed3022" in flags["ssd-engine"]["source"]


def test_sglang_rules():
    good = ["--model-path", "t", "--tp-size", "4", "--speculative-algorithm", "STANDALONE",
            "--speculative-draft-model-path", "d", "--speculative-num-steps", "4", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "5"]
    assert check("sglang", good) == []
    assert any("rewritten" in e for e in check("sglang", good[:-1] + ["7"]))
    assert any("all three" in e for e in check("sglang", good[:-4]))
    assert any("argparse" in e for e in check("sglang", [*good[:5], "MEDUSA", *good[6:]]))
