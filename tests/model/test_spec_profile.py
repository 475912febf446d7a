"""A profile for any pair on any GPU from specs: latencies that know batch and context, stated assumptions."""

from __future__ import annotations

import json

import pytest

from ssd_sim.cli.plan import main as plan_main
from ssd_sim.cli.sim import main as sim_main
from ssd_sim.io.errors import ConfigError
from ssd_sim.model.profile import Profile
from ssd_sim.model.spec_profile import profile_from_specs
from ssd_sim.plan.planner import PlanRequest, make_plan


@pytest.fixture(scope="module")
def llama8b_l40s() -> Profile:
    return profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", gpu="l40s")


def test_predictions_fall_with_batch_as_kv_reads_grow(llama8b_l40s):
    ar = [make_plan(llama8b_l40s, PlanRequest(batch_size=b)).ar.per_seq_tok_s for b in (1, 8, 32)]
    sd = [make_plan(llama8b_l40s, PlanRequest(batch_size=b)).sd.per_seq_tok_s for b in (1, 8, 32)]
    assert ar[0] > ar[1] > ar[2] and sd[0] > sd[1] > sd[2]
    # AR at b = 1 by hand: one forward = 0.3 + 32 x 0.015 ms floor + 15.0 GB / (0.864 TB/s x 0.8) + one row's KV,
    # plus the 0.3 ms round overhead
    assert 1e3 / ar[0] == pytest.approx(0.3 + 0.48 + 15.01e9 / 0.6912e12 * 1e3 + 0.19 + 0.3, rel=0.01)


def test_a_longer_context_is_slower_and_fits_fewer_sequences():
    short = profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", gpu="h100", context=1024)
    long = profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", gpu="h100", context=32768)
    assert long.latency.verify_ms(8, 4) > short.latency.verify_ms(8, 4)
    assert long.max_batch_size < short.max_batch_size  # (0.9 x 80 GB - 16 GB) / KV per sequence
    assert short.max_batch_size == int((0.9 * 80e9 - 2 * 8.03e9) // (1024 * 131072))


def test_the_draft_device_holds_every_sequence_too_and_can_bind_the_batch():
    """Llama-3.1-8B's KV cache is 128 KiB a token, Llama-3.2-3B's 112 KiB: on 2 x H100 the target holds
    (0.9 x 160 GB - 16.06 GB) / (8192 x 128 KiB) = 119 sequences of 8192 tokens, its 3B draft on one L40S (48 GB)
    (0.9 x 48 GB - 6.43 GB) / (8192 x 112 KiB) = 39: the draft binds."""
    prof = profile_from_specs("Llama-3.1-8B", "Llama-3.2-3B", gpu="h100", tp=2, draft_gpu="l40s", context=8192)
    target = int((0.9 * 2 * 80e9 - 2 * 8.03e9) // (8192 * 131072))
    draft = int((0.9 * 48e9 - 2 * 3.213e9) // (8192 * 114688))
    assert (target, draft) == (119, 39) and prof.max_batch_size == 39
    assert prof.provenance["max_batch_size"].endswith("119 on the target's 2 x h100-sxm, 39 on the draft's l40s (SD's "
                                                      "draft, on the target's devices, is not counted)")


def test_a_batch_whose_kv_caches_do_not_fit_is_a_warning_in_the_report_and_on_stderr(capsys):
    """70B at 128k tokens: 42 GB of KV a sequence, so 4 x H100 hold 3 sequences; -b 64 is planned, with one warning
    line (stderr, and the report's memory) naming the fit and the fix. A preset's max_batch_size is the range it was
    measured over, not memory: no warning above it."""
    args = ["--target", "Llama-3.1-70B", "--draft", "Llama-3.2-1B", "--gpu", "h100", "--tp", "4",
            "--context", "131072", "--json"]
    assert plan_main([*args, "-b", "64"]) == 0
    out, err = capsys.readouterr()
    mem = json.loads(out)["memory"]
    assert mem["max_batch_size"] == 3 and mem["over"] == [64]
    assert err.count("ssd-plan: warning: batch size 64 does not fit: sequences whose KV cache at 131072 tokens") == 1
    assert mem["warning"] in err and "so at most 3 sequences" in err and "lower -b or the context" in err
    assert plan_main([*args, "-b", "2", "--batch-sizes", "1,2,4,8"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["memory"]["over"] == [4, 8] and "batch sizes 4, 8 do not fit" in err
    assert plan_main(["--preset", "llama70b-1b-h100", "-b", "64", "--json"]) == 0  # max_batch_size 16: measured range
    out, err = capsys.readouterr()
    assert json.loads(out)["memory"] == {"max_batch_size": 16, "source": None, "over": [], "warning": None}
    assert "does not fit" not in err
    assert sim_main(["--target", "Llama-3.1-70B", "--draft", "Llama-3.2-1B", "--gpu", "h100", "--tp", "4",
                     "--context", "131072", "-b", "4", "--tokens", "4", "--json"]) == 0  # ssd-sim says so too
    assert "ssd-sim: warning: batch size 4 does not fit" in capsys.readouterr().err


def test_with_prompt_and_output_lengths_the_batch_must_fit_at_its_last_token(capsys):
    """--prompt-tokens 60000 --tokens 60000: the latencies are taken at the mean decode context (90000 tokens, where
    (0.9 x 320 GB - 141 GB) / 29.5 GB = 4 sequences of 70B fit on 4 x H100), but a fixed batch's caches all hold
    120000 tokens at its end (39.3 GB each: 3 fit), so b = 4 is warned."""
    assert plan_main(["--target", "Llama-3.1-70B", "--draft", "Llama-3.2-1B", "--gpu", "h100", "--tp", "4",
                      "--prompt-tokens", "60000", "--tokens", "60000", "-b", "4", "--json"]) == 0
    out, err = capsys.readouterr()
    rep = json.loads(out)
    assert "latencies at 90000 cached tokens" in rep["context_note"]
    assert rep["memory"]["max_batch_size"] == 3 and rep["memory"]["over"] == [4]
    assert rep["memory"]["source"].startswith("derived: sequences whose KV cache at 120000 tokens fits")
    assert "ssd-plan: warning: batch size 4 does not fit" in err


def test_ssd_sim_counts_a_fixed_batch_at_its_last_token_and_a_stream_at_its_mean_context(capsys):
    """95k prompt + 30k output tokens of 70B on 4 x H100: at the mean decode context (110k tokens) 4 sequences fit,
    at the last token (125k) 3. A fixed batch of 4 ends at 125k (warned); a stream batched up to 4 holds requests at
    every stage of their decode (not warned)."""
    pair = ["--target", "Llama-3.1-70B", "--draft", "Llama-3.2-1B", "--gpu", "h100", "--tp", "4",
            "--prompt-tokens", "95000", "--tokens", "30000", "--json"]
    assert sim_main([*pair, "-b", "4"]) == 0
    assert "ssd-sim: warning: batch size 4 does not fit: sequences whose KV cache at 125000 tokens" in \
        capsys.readouterr().err
    assert sim_main([*pair, "--workload", "poisson", "--rate", "0.5", "--num-requests", "4", "--max-batch", "4"]) == 0
    assert "does not fit" not in capsys.readouterr().err


def test_the_provenance_marks_what_is_assumed(llama8b_l40s):
    prov = llama8b_l40s.provenance
    assert prov["acceptance"].startswith("assumed: the acceptance and hit curves of llama70b-1b-h100")
    assert prov["roofline"].startswith("assumed: bw_efficiency 0.8 (assumed in 0.65..0.9)")
    assert prov["target.latency"].startswith("derived from specs")
    assert llama8b_l40s.host is None and 0.05 < llama8b_l40s.uncertainty.latency_run_sd < 0.5


@pytest.mark.parametrize("kw, field", [
    (dict(target="Llama-3.1-8B", draft="Qwen3-0.6B", gpu="h100"), "draft"),  # different vocabularies
    (dict(target="Llama-3.1-70B", draft="Llama-3.2-1B", gpu="l40s", tp=1), "tp"),  # 141 GB on one 48 GB card
    (dict(target="Llama-3.1-8B", draft="Llama-3.2-1B", gpu="a100", dtype="fp8"), "dtype"),
    (dict(target="Llama-3.1-8B", draft="Llama-3.1-70B", gpu="h100", tp=4), "draft_gpu"),  # draft on one 80 GB card
    (dict(target="Llama-3.1-70B", draft="Llama-3.2-1B", gpu="h100", tp=4, context=1_000_000), "context"),  # 328 GB
    (dict(target="Llama-3.1-8B", draft="Llama-3.2-1B", gpu="h100", acceptance_from="nope"), "acceptance_from"),
])
def test_impossible_setups_are_one_line_naming_the_field(kw, field):
    with pytest.raises(ConfigError) as e:
        profile_from_specs(**kw)
    assert e.value.field == field


def test_ssd_plan_plans_a_pair_from_config_files_and_the_plan_file_reloads_it(tmp_path, capsys):
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps(cfg))
    args = ["--target", str(tmp_path / "t"), "--draft", "Llama-3.2-1B", "--gpu", "h200", "--tp", "2",
            "--context", "4096", "-b", "8"]
    assert plan_main([*args, "--json", "-o", str(tmp_path / "p.json")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["profile"]["spec"]["gpu"] == "h200" and report["profile"]["spec"]["tp"] == 2
    assert report["predicted"]["ssd_tok_s"] > report["predicted"]["ar_tok_s"] > 0
    assert plan_main(["--plan", str(tmp_path / "p.json"), "--json"]) == 0  # the plan file names its source
    again = json.loads(capsys.readouterr().out)
    assert again["ssd"]["per_seq_tok_s"] == pytest.approx(report["ssd"]["per_seq_tok_s"])
    assert sim_main([*args, "--tokens", "64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["sequences"] == 8


@pytest.mark.parametrize("argv, needle", [
    (["--target", "Llama-3.1-8B", "--gpu", "h100"], "draft: planning from specs needs --target, --draft and --gpu"),
    (["--preset", "llama70b-1b-h100", "--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu", "h100"],
     "profile: give either --preset / --profile or --target/--draft/--gpu, not both"),
    (["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu", "h900"], "gpu: unknown GPU 'h900'"),
])
def test_bad_spec_flags_are_one_line_and_exit_2(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        plan_main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_the_advice_for_a_spec_profile_is_to_time_the_pair_not_to_repeat_runs(llama8b_l40s):
    from ssd_sim.plan.intervals import decide, sample

    res = make_plan(llama8b_l40s, PlanRequest(batch_size=4))
    d = decide(llama8b_l40s, res.plan, res.sd.num_speculative_tokens,
               sample(llama8b_l40s, res.plan, res.sd.num_speculative_tokens, 50, seed=0))
    assert d.dominant == "latency" and d.settle.startswith("time the pair on this hardware")
