"""model.tracematch: a trace's setup against a profile's, and the profile of a trace's own setup (real headers)."""

from __future__ import annotations

from pathlib import Path

from ssd_sim.io.trace import read_trace
from ssd_sim.model import tracematch
from ssd_sim.model.presets import get_preset, list_presets
from ssd_sim.model.profile import load_profile_file

TRACES = Path(__file__).resolve().parents[2] / "traces"


def candidates() -> list[tuple[str, object]]:
    out = [(f"preset:{n}", get_preset(n)) for n in list_presets()]
    for p in sorted(TRACES.rglob("*profile*.json")):
        out.append((f"file:{p}", load_profile_file(p)))
    return out


def test_model_keys_read_ids_and_paths_alike():
    assert tracematch.model_key("/root/.cache/ssd/models/qwen-coder-1.5b/hf") == ("qwen", "1.5b")
    assert tracematch.model_key("Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF dequantised to fp32)") == ("qwen", "1.5b")
    assert tracematch.model_key("meta-llama/Llama-3.1-70B-Instruct") == ("llama", "70b")
    assert tracematch.model_key("Qwen/Qwen3-0.6B") == ("qwen", "0.6b")
    assert tracematch.model_key("tiny-random") is None
    assert tracematch.short_model("/root/.cache/ssd/models/qwen-coder-0.5b/hf") == "qwen-coder-0.5b"


def test_setups_of_traces_and_profiles():
    t = tracematch.trace_setup(read_trace(TRACES / "cpu-int8-bench" / "ssd-b1.jsonl"))
    assert (t.devices, t.quantize) == ("CPU", ("int8", "int8"))
    assert tracematch.profile_setup(get_preset("llama70b-1b-h100")).devices == "GPU"
    assert tracematch.profile_setup(get_preset("qwen-coder-1.5b-0.5b-cpu-int8")).quantize == ("int8", "int8")
    assert tracematch.profile_setup(load_profile_file(TRACES / "cpu-fp32-grid" / "profile.json")).devices == "CPU"


def test_the_own_profile_of_each_setup():
    cands = candidates()

    def own(rel: str):
        path = TRACES / rel
        return tracematch.own_profile(read_trace(path), path, cands)

    c = own("cpu-fp32-grid/ssd-k2-f112-b1-t1.jsonl")
    assert (c.profile.name, c.why) == ("qwen-coder-cpu-calibrated", "shipped beside the trace")
    c = own("cpu-fp32-bench/ar-b1.jsonl")  # no profile beside it: the one fitted to its folder's traces
    assert (c.source.endswith("superseded/cpu-fp32-profile.json"), c.why) == (True,
                                                                             "calibrated from the traces of cpu-fp32-bench/")
    c = own("cpu-int8-bench/ssd-b1.jsonl")  # none fitted to it: the preset of the same models, devices and weights
    assert c.profile.name == "qwen-coder-1.5b-0.5b-cpu-int8" and c.why.startswith("a preset for the same models")


def test_mismatch_lines():
    trace = read_trace(TRACES / "cpu-fp32-bench" / "ar-b1.jsonl")
    assert tracematch.mismatch_line(trace, get_preset("qwen-coder-1.5b-0.5b-cpu")) is None
    line = tracematch.mismatch_line(trace, get_preset("llama70b-1b-h100"))
    assert line == ("profile llama70b-1b-h100 is for Llama-3.1-70B-Instruct + Llama-3.2-1B-Instruct on GPU, but this "
                    "trace ran qwen-coder-1.5b on CPU: its predictions are for another setup")
    int8 = read_trace(TRACES / "cpu-int8-bench" / "ssd-b1.jsonl")
    assert tracematch.mismatch_line(int8, get_preset("qwen-coder-1.5b-0.5b-cpu")) == (
        "profile qwen-coder-1.5b-0.5b-cpu is for Qwen2.5-Coder-1.5B-Instruct + Qwen2.5-Coder-0.5B-Instruct with "
        "unquantised weights, but this trace ran with int8 weights: its predictions are for another setup")


def test_a_trace_naming_no_known_model_gets_no_setup_profile(tmp_path):
    from tests.helpers.trace_samples import write_trace

    trace = read_trace(write_trace(tmp_path / "t.jsonl", "ssd", rounds=3))  # models "t" and "d" on cpu
    assert tracematch.own_profile(trace, tmp_path / "t.jsonl", candidates()) is None
    assert "on GPU, but this trace ran on CPU" in tracematch.mismatch_line(trace, get_preset("llama70b-1b-h100"))
