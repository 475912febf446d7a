"""Where ssd-plan and ssd-sim get their profile (ssd_sim/cli/source.py): the workload's mean decode context."""

from __future__ import annotations

import pytest

from ssd_sim.cli.source import at_workload_context, profile_of, workload_context
from ssd_sim.sim.workload import Workload


def test_the_mean_decode_context_is_the_mean_prompt_plus_half_the_mean_output():
    assert workload_context(Workload("fixed", 4, 4, output_tokens=512, prompt_tokens=128)) == 384
    per_request = Workload("fixed", 2, 2, output_tokens=100, prompt_tokens=0, output_lengths=(100, 300),
                           prompt_lengths=(1000, 3000))
    assert workload_context(per_request) == 2000 + 100  # mean prompt 2000 + mean output 200 / 2
    assert workload_context(Workload("fixed", 1, 1, output_tokens=1, prompt_tokens=0)) == 1  # at least one token


def test_a_gpu_preset_moves_to_the_workload_context_and_a_given_context_stays():
    wl = Workload("fixed", 8, 8, output_tokens=256, prompt_tokens=4000)
    source = {"preset": "llama70b-1b-h100", "path": None}
    moved, context = at_workload_context(source, profile_of(source), wl)
    assert context == 4128
    own = profile_of(source)  # the preset's own context: 400 tokens
    # the KV term per row grows with the context (roofline: context x KV bytes per token / bandwidth)
    assert moved.latency.target.row_ms == pytest.approx(own.latency.target.row_ms * 4128 / 400)
    kept, none = at_workload_context({**source, "context": 400}, own, wl)
    assert kept is own and none is None


def test_spec_pairs_move_and_measured_profiles_do_not():
    wl = Workload("fixed", 1, 1, output_tokens=64, prompt_tokens=2000)
    spec = {"spec": {"target": "Llama-3.1-8B", "draft": "Llama-3.2-1B", "gpu": "h100"}}
    moved, context = at_workload_context(spec, profile_of(spec), wl)
    assert context == 2032 and "context 2032 tokens" in moved.description
    cpu = {"preset": "qwen-coder-1.5b-0.5b-cpu", "path": None}
    profile = profile_of(cpu)
    assert at_workload_context(cpu, profile, wl) == (profile, None)  # measured: no KV term to move
