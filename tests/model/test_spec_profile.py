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


def test_each_mode_counts_the_caches_on_the_devices_that_hold_them():
    """Llama-3.1-8B's KV cache is 128 KiB a token, Llama-3.2-3B's 112 KiB. At 8192 tokens a sequence:
    AR: 2 x H100 hold (0.9 x 160 GB - 16.06 GB) / (8192 x 128 KiB) = 119 sequences;
    SD: the draft's weights (6.43 GB) and cache share those devices: (144 - 16.06 - 6.43) GB / (8192 x 240 KiB) = 60;
    SSD: the draft's own L40S (48 GB) holds (0.9 x 48 GB - 6.43 GB) / (8192 x 112 KiB) = 39, so the draft binds;
    with 16 branches of K = 4 a sequence that device holds (43.2 - 6.43) GB / ((8192 + 64) x 112 KiB) = 38, and over
    two draft devices (32 branch tokens each) still 38 (38.9 -> 38.7)."""
    prof = profile_from_specs("Llama-3.1-8B", "Llama-3.2-3B", gpu="h100", tp=2, draft_gpu="l40s", context=8192)
    t_w, d_w = 2 * 8.03e9, 2 * 3.213e9
    target = int((0.9 * 2 * 80e9 - t_w) // (8192 * 131072))
    sd = int((0.9 * 2 * 80e9 - t_w - d_w) // (8192 * (131072 + 114688)))
    draft = int((0.9 * 48e9 - d_w) // (8192 * 114688))
    branched = int((0.9 * 48e9 - d_w) // ((8192 + 16 * 4) * 114688))
    assert (target, sd, draft, branched) == (119, 60, 39, 38)
    assert prof.memory.by_mode() == {"ar": 119, "sd": 60, "ssd": 39} and prof.max_batch_size == 39
    assert prof.fits("ssd", K=4, budget=16) == 38 and prof.fits("ssd", K=4, budget=16, draft_devices=2) == 38
    assert prof.provenance["max_batch_size"].endswith("AR 119 (the target's cache on 2 x h100-sxm), SD 60 (both caches "
                                                      "and the draft's weights there), SSD 39 (the target's there; one "
                                                      "l40s holds 39 of the draft's)")


def test_branch_rows_bind_where_the_context_is_short():
    """At 64 tokens a sequence, 32 x 4 branch tokens a sequence (budget 32, K = 4) triple the draft's cache: a 3B
    draft on an L4 (0.9 x 24 GB - 6.43 GB of weights) holds 2067 sequences without them, 689 with them (the target's
    4 x H100 hold more than the 4096 counted)."""
    prof = profile_from_specs("Llama-3.1-70B", "Llama-3.2-3B", gpu="h100", draft_gpu="l4", tp=4, context=64)
    free = prof.memory.draft.free_bytes
    per_token = prof.memory.draft.token_bytes()  # Llama-3.2-3B: 28 layers x 8 KV heads x 128 x 2 x 2 bytes = 112 KiB
    assert per_token == 114688 and prof.fits("ar") == 4096
    assert prof.fits("ssd") == int(free // (64 * per_token)) == 2067
    assert prof.fits("ssd", K=4, budget=32) == int(free // ((64 + 128) * per_token)) == 689


def test_a_sliding_window_layer_counts_at_most_its_window():
    """Mistral-7B-v0.1-like: every layer slides over 4096 tokens, so 32k tokens a sequence cost what 4096 do."""
    from ssd_sim.model.architecture import Architecture
    from ssd_sim.model.hardware import get_gpu
    from ssd_sim.model.memory import KvMemory, Side

    arch = Architecture(name="m", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=14336,
                        vocab=32000, sliding_window=4096, sliding_layers=32)
    side = Side.of(arch, get_gpu("h100"), 1, "bf16")
    assert side.kv_bytes(32768) == side.kv_bytes(4096) == arch.kv_bytes(32768) == 4096 * 32 * 2 * 8 * 128 * 2
    mem = KvMemory(side, side, 32768)
    assert mem.fits("ar") == mem.fits("ar", context=4096) == int(side.free_bytes // side.kv_bytes(4096))


def test_ssd_sim_counts_the_mode_it_simulates(capsys):
    """8B + 1B on one H100 at 4096 tokens: AR's caches fit 104 sequences, SD's 79 (the draft's weights and cache on
    the target's device). -b 90 is warned for SD only; a stream of 100 requests with no batch size is batched at
    what the mode fits."""
    from ssd_sim.cli.sim import default_max_batch
    from ssd_sim.sim.workload import poisson

    pair = ["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu", "h100", "--context", "4096",
            "--tokens", "2", "--json"]
    assert sim_main([*pair, "--mode", "sd", "-b", "90"]) == 0
    assert "ssd-sim: warning: batch size 90 does not fit SD (at most 79 sequences)" in capsys.readouterr().err
    assert sim_main([*pair, "--mode", "ar", "-b", "90"]) == 0
    assert "does not fit" not in capsys.readouterr().err
    prof = profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", gpu="h100", context=4096)
    stream = poisson(rate=1.0, num_requests=100, max_batch=1, output_tokens=8)
    assert [default_max_batch(prof, stream, m)[0].max_batch for m in ("ar", "sd", "ssd-fast")] == [100, 79, 100]
    assert default_max_batch(prof, stream, "sd")[1] == "by default what SD's KV caches fit; --max-batch B chooses"


def test_a_profile_keeps_its_memory_through_its_json():
    prof = profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", gpu="h100", context=4096)
    again = Profile.from_dict(json.loads(prof.to_json()))
    assert again.memory == prof.memory and again.fits("sd") == prof.fits("sd") == 79
    bad = prof.to_dict() | {"memory": {"target": {"free_bytes": "x"}, "draft": {}}}
    with pytest.raises(ConfigError, match="^memory: memory.target.free_bytes must be a finite number >= 0"):
        Profile.from_dict(bad)
    measured = Profile(name="p", latency=prof.latency, acceptance=prof.acceptance, max_batch_size=16)
    assert "memory" not in measured.to_dict() and measured.fits("sd") == measured.fits("ssd", 4, 16) == 16


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
    mode = json.loads(out)["recommended_mode"].upper()
    assert err.count(f"ssd-plan: warning: batch size 64 does not fit {mode} (at most 3 sequences): sequences whose "
                     "KV caches at 131072 tokens") == 1
    assert mem["warning"] in err and mem["by_mode"] == {"ar": 3, "sd": 3, "ssd": 3} and "lower -b or the context" in err
    assert plan_main([*args, "-b", "2", "--batch-sizes", "1,2,4,8"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["memory"]["over"] == [4, 8] and "batch sizes 4, 8 do not fit" in err
    assert plan_main(["--preset", "llama70b-1b-h100", "-b", "64", "--json"]) == 0  # max_batch_size 16: measured range
    out, err = capsys.readouterr()
    assert json.loads(out)["memory"] == {"max_batch_size": 16, "source": None, "by_mode": None, "over": [],
                                         "warning": None}
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
    assert rep["memory"]["source"].startswith("derived: sequences whose KV caches at 120000 tokens fit")
    assert "ssd-plan: warning: batch size 4 does not fit" in err


def test_ssd_sim_counts_a_fixed_batch_at_its_last_token_and_a_stream_at_its_mean_context(capsys):
    """95k prompt + 30k output tokens of 70B on 4 x H100: at the mean decode context (110k tokens) 4 sequences fit,
    at the last token (125k) 3. A fixed batch of 4 ends at 125k (warned); a stream batched up to 4 holds requests at
    every stage of their decode (not warned)."""
    pair = ["--target", "Llama-3.1-70B", "--draft", "Llama-3.2-1B", "--gpu", "h100", "--tp", "4",
            "--prompt-tokens", "95000", "--tokens", "30000", "--json"]
    assert sim_main([*pair, "-b", "4"]) == 0
    assert "ssd-sim: warning: batch size 4 does not fit SSD (at most 3 sequences): sequences whose KV caches at " \
           "125000 tokens" in capsys.readouterr().err
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


def test_a_tp_degree_that_cannot_split_the_heads_is_refused():
    """Tensor parallelism shards attention heads: 32 heads on 3 devices is what vLLM refuses (the emitted
    --tensor-parallel-size 3 was invalid)."""
    with pytest.raises(ConfigError, match="^tp: Llama-3.1-8B has 32 attention heads, which 3 devices cannot share"):
        profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", gpu="h100", tp=3)
    assert profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", gpu="h100", tp=4).latency.target_devices == 4


def test_a_spec_flag_beside_a_preset_is_named_as_such(capsys):
    with pytest.raises(SystemExit):
        plan_main(["--preset", "llama70b-1b-h100", "--tp", "2"])
    assert "tp: --tp applies to a pair from specs (--target, --draft, --gpu), not to --preset / --profile" in \
        capsys.readouterr().err
