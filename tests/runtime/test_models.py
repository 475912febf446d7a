"""Model loading: tiny models, oneDNN-packed Linear layers, int8, directories, vocabulary checks."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from ssd_runtime.models import (
    ModelSpec,
    check_same_vocab,
    describe,
    kernel_path,
    load_model,
    resolve_path,
    tiny_model,
)
from ssd_sim.io.errors import ConfigError
from tests.helpers.runtime import TARGET

X = torch.tensor([[5, 17, 3, 88, 41, 2]])


@torch.no_grad()
def logits(model) -> torch.Tensor:
    return model(input_ids=X).logits


def test_tiny_models_are_deterministic_and_noise_makes_a_different_draft():
    a, b = tiny_model(**TARGET), tiny_model(**TARGET)
    torch.testing.assert_close(logits(a), logits(b), atol=0, rtol=0)
    d = tiny_model(**TARGET, noise=0.02)
    diff = (logits(a) - logits(d)).abs().max()
    assert 0 < diff < logits(a).abs().max()


@pytest.mark.parametrize("kernels", ["onednn", "dense"])
def test_linear_kernels_give_the_same_logits(kernels):
    ref = tiny_model(**TARGET)
    lm = load_model(ModelSpec(tiny=ModelSpec.tiny_spec(**TARGET).tiny, linear=kernels))
    assert lm.extra["linear"] == kernels
    torch.testing.assert_close(logits(lm.model), logits(ref), atol=1e-4, rtol=1e-4)


def test_auto_kernels_are_onednn_on_cpu_float32_and_dense_with_int8():
    base = ModelSpec.tiny_spec(**TARGET)
    assert load_model(base).extra["linear"] == "onednn"
    q = load_model(ModelSpec(tiny=base.tiny, quantize="int8"))
    assert q.extra["linear"] == "dense" and q.vocab_size == TARGET["vocab"]
    assert logits(q.model).shape == (1, X.shape[1], TARGET["vocab"])


def test_int8_needs_float32():
    with pytest.raises(ConfigError, match="int8"):
        load_model(ModelSpec(tiny=ModelSpec.tiny_spec(**TARGET).tiny, quantize="int8", dtype="bfloat16"))


def test_a_saved_directory_loads_with_its_vocabulary(tmp_path):
    tiny_model(**TARGET).save_pretrained(tmp_path / "m")
    lm = load_model(ModelSpec(path=str(tmp_path / "m")))
    info = describe(lm)
    assert info["vocab_size"] == TARGET["vocab"] and info["tokenizer"] is None and info["eos_token_ids"] == []
    torch.testing.assert_close(logits(lm.model), logits(tiny_model(**TARGET)), atol=1e-4, rtol=1e-4)


def test_paths_that_are_not_models_are_rejected(tmp_path):
    with pytest.raises(ConfigError, match="neither a model directory"):
        resolve_path(str(tmp_path), "target")


def test_vocabulary_mismatch_is_a_clear_error():
    t = {"vocab_size": 151936, "tokenizer": "abc"}
    with pytest.raises(ConfigError, match="151936 tokens but the draft 32000"):
        check_same_vocab(t, {"vocab_size": 32000, "tokenizer": "abc"})
    with pytest.raises(ConfigError, match="different ids"):
        check_same_vocab(t, {"vocab_size": 151936, "tokenizer": "xyz"})
    check_same_vocab(t, {"vocab_size": 151936, "tokenizer": None})  # no tokenizer on one side: sizes decide


@pytest.mark.parametrize("linear,quantize,want", [("auto", "none", "onednn-prepacked"), ("dense", "none", "dense"),
                                                  ("auto", "int8", "int8-dynamic (")])
def test_kernel_path_reports_what_the_loaded_model_runs(linear, quantize, want):
    lm = load_model(replace(ModelSpec.tiny_spec(**TARGET), linear=linear, quantize=quantize))
    assert kernel_path(lm.model).startswith(want)
    assert describe(lm)["kernels"] == kernel_path(lm.model)


def test_auto_falls_back_to_dense_kernels_without_onednn_and_the_path_shows_it(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    lm = load_model(ModelSpec.tiny_spec(**TARGET))
    assert describe(lm)["linear"] == "dense" and describe(lm)["kernels"] == "dense"
    with pytest.raises(ConfigError, match="no oneDNN"):
        load_model(replace(ModelSpec.tiny_spec(**TARGET), linear="onednn"))
