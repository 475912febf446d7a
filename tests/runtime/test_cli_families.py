"""`ssd-run` on saved model folders of other families: a Llama pair built here with transformers alone (not the
project's helpers, as a user would make one) and a Gemma 2 pair (alternating sliding / full layers, softcapping,
eager attention), greedy-exact against transformers' own `generate`. Each family runs ar, sd, ssd with the jit
backup and ssd with the fast backup; between them the two families cover every mode at b = 1 and at --max-batch 3
(four prompts, so a row is refilled). Every cell of the matrix for every family runs through the runtime's Session
API in test_families.py; a CLI run costs ~12 s of process start-up here, so this file covers the CLI's own part
(folders, config checks, flags, output files) once per cell. Unsupported families are refused in one line before
loading.
"""

from __future__ import annotations

import json

import pytest
import torch

from ssd_runtime.cli import main
from ssd_runtime.models import tiny_model
from ssd_runtime.specs import FAMILIES, tiny_pair
from tests.helpers.runtime import make_prompts

N_NEW = 12
MATRIX = {  # case -> flags
    "ar": ["--mode", "ar"],
    "sd": ["--mode", "sd", "-k", "3"],
    "ssd-jit": ["--mode", "ssd", "-k", "2", "--fan-out", "2,1,2", "--backup", "jit"],
    "ssd-fast": ["--mode", "ssd", "-k", "2", "--fan-out", "2,1,2", "--backup", "fast"],
}


def llama_pair(d):
    """Target 3 layers, draft 1 layer, transformers' default init: what the issue's user built."""
    from transformers import LlamaConfig, LlamaForCausalLM

    for name, layers in (("target", 3), ("draft", 1)):
        cfg = LlamaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256)
        torch.manual_seed(layers)
        LlamaForCausalLM(cfg).save_pretrained(d / name)
    return 128


def gemma_pair(d):
    target, draft = tiny_pair("gemma2")
    tiny_model(**target).save_pretrained(d / "target")
    tiny_model(**draft).save_pretrained(d / "draft")
    return target["vocab"]


@pytest.fixture(scope="module", params=["llama", "gemma2"])
def folder(request, tmp_path_factory):
    """The family, its folder (saved target and draft, a prompts file) and the greedy reference from transformers'
    generate()."""
    from transformers import AutoModelForCausalLM

    d = tmp_path_factory.mktemp(request.param)
    vocab = (llama_pair if request.param == "llama" else gemma_pair)(d)
    prompts = make_prompts([3, 8, 5, 6], vocab, seed=1)
    (d / "prompts.jsonl").write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in prompts))
    model = AutoModelForCausalLM.from_pretrained(d / "target").eval()
    reference = []
    with torch.no_grad():
        for p in prompts:
            x = torch.tensor([p])
            out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=N_NEW, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True, pad_token_id=vocab - 1)
            reference.append(out.sequences[0, len(p):].tolist())
            top2 = torch.stack(out.logits)[:, 0].topk(2).values
            assert float((top2[:, 0] - top2[:, 1]).min()) >= 1e-4  # no near-tie that float noise could flip
    return request.param, d, reference


BATCH = {("llama", "ar"): 1, ("llama", "sd"): 3, ("llama", "ssd-jit"): 3, ("llama", "ssd-fast"): 1,
         ("gemma2", "ar"): 3, ("gemma2", "sd"): 1, ("gemma2", "ssd-jit"): 1, ("gemma2", "ssd-fast"): 3}


@pytest.mark.parametrize("case", list(MATRIX))
def test_greedy_cli_runs_equal_transformers_generate(folder, case, tmp_path):
    family, d, reference = folder
    b = BATCH[family, case]
    out, trace = tmp_path / "out.jsonl", tmp_path / "trace.jsonl"
    code = main(["--target", str(d / "target"), "--draft", str(d / "draft"), "--prompts", str(d / "prompts.jsonl"),
                 "--max-new-tokens", str(N_NEW), "--max-batch", str(b), "--no-progress", "--trace", str(trace),
                 "-o", str(out), *MATRIX[case]])
    assert code == 0
    assert [json.loads(line)["generated_ids"] for line in out.read_text().splitlines()] == reference
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert records[0]["type"] == "header" and records[-1]["type"] == "summary"
    assert {r["type"] for r in records[1:-1]} == {"round"} and max(r["batch"] for r in records[1:-1]) == b


# ---- families the runtime cannot drive: one line before any weights load -----------------------------------
def test_an_unsupported_family_is_refused_in_one_line_naming_the_supported_ones(tmp_path, capfd):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "mamba",
                                                            "architectures": ["MambaForCausalLM"]}))
    (tmp_path / "m" / "model.safetensors").write_bytes(b"not read")  # a weights file that would fail to load
    (tmp_path / "p.jsonl").write_text('{"prompt_ids": [1, 2]}\n')
    with pytest.raises(SystemExit) as e:
        main(["--target", str(tmp_path / "m"), "--mode", "ar", "--prompts", str(tmp_path / "p.jsonl"),
              "--trace", str(tmp_path / "t.jsonl")])
    err = capfd.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    assert "model family 'mamba' (MambaForCausalLM)" in err and ", ".join(FAMILIES) in err
    assert not (tmp_path / "t.jsonl").exists()
