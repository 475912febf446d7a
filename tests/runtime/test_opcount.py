"""ssd_runtime.opcount: the ops a round launches one by one (kernel launches on a GPU), counted on the CPU.

With graphs (emulated here: the same static-buffer path as CUDA graphs, replays left out of the count as a real
replay's kernels would be), a round launches only the copies into its graphs, sampling and the bonus tokens: the
positions, slots and masks of every forward are built inside the graph, and so are the draft's bonus-token
candidates. Before they were (H200, 2026-12-04), an SSD
round at b = 1 launched 262 ops outside its replays and paid 6.1 ms of overhead beyond the forwards.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from ssd_runtime.draft import Drafter
from ssd_runtime.models import tiny_model
from ssd_runtime.opcount import LaunchCounter
from ssd_runtime.target import Target, TargetConfig
from ssd_runtime.transport import LocalLink
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import DRAFT, TARGET, make_prompts

PLANS = {
    "ar": Plan(num_speculative_tokens=4, batch_size=1, mode="ar"),
    "sd": Plan(num_speculative_tokens=4, batch_size=1, mode="sd"),
    "ssd": Plan(num_speculative_tokens=4, fan_out=(2, 2, 1, 1, 1), batch_size=1, mode="ssd", backup="fast"),
}


def launches_per_round(mode: str, graphs: bool, rows: int = 1) -> float:
    """Median launches per round (the first round left out) of the tiny pair at forced acceptance 0.7."""
    target, draft = tiny_model(**TARGET), tiny_model(**DRAFT)
    if graphs:
        target._ssd_graphs = draft._ssd_graphs = "emulate"
    plan = PLANS[mode].replace(batch_size=rows)
    link = None
    if mode != "ar":
        link = LocalLink(lambda msg: Drafter(draft, plan, 0, TARGET["vocab"]))
        link.job({})
    runner = Target(target, TargetConfig(plan, 24, seed=0, forced_acceptance=None if mode == "ar" else 0.7), link)
    counts, round_fn = [], runner.round

    def counted(*args):
        with LaunchCounter() as c:
            out = round_fn(*args)
        counts.append(c.count)
        return out

    runner.round = counted
    prompts = make_prompts([12 + 3 * i for i in range(rows)], TARGET["vocab"], seed=1)
    runner.generate(prompts)  # warm-up: every shape captured
    counts.clear()
    runner.generate(prompts)
    return statistics.median(counts[1:])


def test_views_and_replays_are_not_launches():
    x = torch.ones(4)
    with LaunchCounter() as c:
        y = (x + 1).view(2, 2)[0].unsqueeze(0) * 3  # add, mul; view, select, unsqueeze launch nothing
    assert c.count == 2 and y.shape == (1, 2)


@pytest.mark.parametrize("mode, bound", [("ar", 12), ("sd", 35), ("ssd", 50)])
def test_with_graphs_a_round_launches_only_copies_sampling_and_bonus_tokens(mode, bound):
    """Measured at this commit: AR 12, SD 31, SSD 46.5 launches per round at b = 1 (K = 4; SSD fan-out 2, 2, 1, 1, 1;
    69.5 before the bonus-token candidates were replayed from a graph too, graphs.GraphedFn).
    The eager path launches every op of every forward as well (~400 per forward of the 2-layer tiny model)."""
    replayed = launches_per_round(mode, graphs=True)
    eager = launches_per_round(mode, graphs=False)
    assert replayed <= bound, replayed
    assert eager > 5 * replayed, (eager, replayed)


def test_more_rows_launch_no_more_ops_per_round():
    """Launches are per forward, not per row: b = 4 costs what b = 1 does, within the sampling of a few more rows."""
    assert launches_per_round("sd", graphs=True, rows=4) <= launches_per_round("sd", graphs=True) + 4
