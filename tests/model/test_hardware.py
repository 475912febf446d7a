"""GPUs: the built-in datasheets and a user's own GPU as a JSON file of the same numbers."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ssd_sim.cli.plan import main as plan_main
from ssd_sim.io.errors import ConfigError
from ssd_sim.model.hardware import GPUS, get_gpu
from ssd_sim.model.spec_profile import profile_from_specs
from ssd_sim.plan.planner import PlanRequest, make_plan

NUMBERS = {"hbm_tb_s": 3.35, "bf16_tflops": 989.0, "fp8_tflops": 1979.0, "link_gb_s": 450.0, "memory_gb": 80.0}


def test_a_gpu_file_with_a_builtins_numbers_plans_exactly_as_the_builtin(tmp_path):
    path = tmp_path / "my-h100.json"
    path.write_text(json.dumps({**NUMBERS, "source": "copied from the H100 SXM datasheet"}))
    mine = get_gpu(str(path))
    assert mine.name == "my-h100" and mine.source == "copied from the H100 SXM datasheet"
    assert dataclasses.replace(mine, name="h100-sxm", source=GPUS["h100-sxm"].source) == GPUS["h100-sxm"]
    a = make_plan(profile_from_specs("Llama-3.1-70B", "Llama-3.2-1B", str(path), tp=4), PlanRequest(batch_size=4))
    b = make_plan(profile_from_specs("Llama-3.1-70B", "Llama-3.2-1B", "h100-sxm", tp=4), PlanRequest(batch_size=4))
    assert a.plan == b.plan and a.ssd.per_seq_tok_s == pytest.approx(b.ssd.per_seq_tok_s, rel=1e-12)


def test_an_a100_40g_holds_half_the_sequences_an_80g_does_and_an_l4_has_fp8():
    """8B on one card at context 4096 (512 MiB of KV a sequence): (0.9 x 40 GB - 16.06 GB) / 0.537 GB = 37 on the
    40 GB A100, (0.9 x 80 GB - 16.06 GB) / 0.537 GB = 104 on the 80 GB one; the draft (1B on the same kind) binds
    neither."""
    small = profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", "a100-40g", context=4096)
    large = profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", "a100-80g", context=4096)
    assert (small.max_batch_size, large.max_batch_size) == (37, 104)
    assert GPUS["l4"].peak_tflops("fp8") == 242.5 and GPUS["a100-40g"].fp8_tflops is None


def test_a_gpu_file_without_fp8_refuses_fp8_and_ssd_plan_takes_it_for_the_draft(tmp_path, capsys):
    path = tmp_path / "a10g.json"
    path.write_text(json.dumps({"name": "a10g", "hbm_tb_s": 0.6, "bf16_tflops": 70, "fp8_tflops": None,
                                "link_gb_s": 32, "memory_gb": 24}))
    with pytest.raises(ConfigError, match="a10g has no FP8 tensor cores"):
        profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", str(path), dtype="fp8")
    assert plan_main(["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu", "h100", "--draft-gpu",
                      str(path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["profile"]["spec"]["draft_gpu"] == str(path)  # a plan file names the file, and reloads it


@pytest.mark.parametrize("content, needle", [
    ({**NUMBERS, "memory_gb": 0}, "memory_gb must be a positive number"),
    ({**NUMBERS, "hbm_tb_s": "fast"}, "hbm_tb_s must be a positive number"),
    ({**NUMBERS, "bf16_tflops": True}, "bf16_tflops must be a positive number"),
    ({k: v for k, v in NUMBERS.items() if k != "link_gb_s"}, "link_gb_s must be a positive number (units in "
                                                             "ssd_sim/model/hardware.py), and is missing"),
    ({**NUMBERS, "hbm_gb_s": 3350}, "unknown field 'hbm_gb_s'"),
    ({**NUMBERS, "name": ""}, "name must be a non-empty string"),
    ({**NUMBERS, "bf16_tflops": 1e-308}, "bf16_tflops = 1e-308 TFLOPS is outside 0.01..1e+06 TFLOPS, beyond any real "
                                         "device: check its units"),
    ({**NUMBERS, "hbm_tb_s": 3350}, "hbm_tb_s = 3350 TB/s is outside 0.001..1000 TB/s"),  # GB/s given as TB/s
    ({**NUMBERS, "memory_gb": 1e9}, "memory_gb = 1e+09 GB is outside"),
    ([1, 2], "must hold a JSON object"),
])
def test_a_bad_gpu_file_is_one_line_naming_the_field(tmp_path, capsys, content, needle):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(SystemExit) as e:
        plan_main(["--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu", str(path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("ssd-plan: error: gpu: ") and needle in err


def test_a_missing_gpu_file_and_an_unknown_name_say_how_to_give_one(tmp_path):
    with pytest.raises(ConfigError, match="gpu: .*nope.json"):
        get_gpu(str(tmp_path / "nope.json"))
    with pytest.raises(ConfigError, match="or give a JSON file of its datasheet numbers"):
        get_gpu("rtx-9090")
