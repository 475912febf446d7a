"""sim.workload: arrivals files with per-request prompt lengths, and the simulator prefilling them as given."""

from __future__ import annotations

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError


def test_an_arrivals_file_gives_each_request_its_own_prompt_length(tmp_path):
    import json

    from ssd_sim.sim.workload import read_arrivals

    path = tmp_path / "a.json"
    path.write_text(json.dumps({"arrival_ms": [0, 5, 9], "output_tokens": [4, 8, 2], "prompt_tokens": [10, 0, 700]}))
    req = read_arrivals(str(path), 2).requests(np.random.default_rng(0))
    assert req.prompt_tokens.tolist() == [10, 0, 700] and req.output_tokens.tolist() == [4, 8, 2]
    assert read_arrivals(str(path), 2, prompt_tokens=64, file_prompts=False).requests(
        np.random.default_rng(0)).prompt_tokens.tolist() == [64, 64, 64]
    path.write_text(json.dumps({"arrival_ms": [0, 5], "prompt_tokens": 300}))
    wl = read_arrivals(str(path), 2)
    assert (wl.prompt_tokens, wl.prompt_lengths) == (300, ())
    path.write_text(json.dumps({"arrival_ms": [0, 5], "prompt_tokens": [1, 2, 3]}))
    with pytest.raises(ConfigError, match="prompt_tokens must be one integer or 2"):
        read_arrivals(str(path), 2)


def test_per_request_prompts_are_prefilled_as_given():
    """Two requests at t = 0 decoded together: the prefill forward covers both prompts (model.latency), so a long
    second prompt delays both first tokens by the same prefill and the run with short prompts is faster."""
    from ssd_sim.model.presets import get_preset
    from ssd_sim.plan.plan import Plan
    from ssd_sim.sim.des import simulate
    from ssd_sim.sim.workload import arrivals

    profile = get_preset("llama70b-1b-h100")
    short = arrivals([0.0, 0.0], 2, prompt_lengths=[16, 16], output_lengths=[8, 8])
    long = arrivals([0.0, 0.0], 2, prompt_lengths=[16, 4000], output_lengths=[8, 8])
    ttft = [simulate(profile, Plan(mode="ar"), mode="ar", workload=w).records.ttft_ms for w in (short, long)]
    assert ttft[1][0] == ttft[1][1] > ttft[0][0] == ttft[0][1]
