"""Host reads per round: the runtime's own counter, checked against every host read torch sees (a function mode).

A host read of a device tensor (tolist, item, int / bool of a tensor, .cpu(), .numpy()) is a sync on a GPU. The
counter (ssd_runtime.syncs) counts the reads the runtime makes on purpose; a TorchFunctionMode counting every such
call during the same rounds proves there are no others (a hidden `if t.any()`, a per-row int()). The in-process
draft (LocalLink) shares the process, so the mode sees both sides: target + draft reads = all reads.
"""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from ssd_runtime.draft import Drafter
from ssd_runtime.draft_trace import DraftRecorder
from ssd_runtime.models import tiny_model
from ssd_runtime.syncs import SYNCS, SyncCounter, to_device, to_host
from ssd_runtime.target import Target, TargetConfig
from ssd_runtime.transport import LocalLink
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import DRAFT, TARGET, make_prompts

V = TARGET["vocab"]
READS = {"tolist", "item", "__int__", "__bool__", "__float__", "__index__", "cpu", "numpy"}


class HostReads(TorchFunctionMode):
    """Counts every call that moves a tensor's values to Python or the host."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in READS:
            self.n += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def models():
    return tiny_model(**TARGET), tiny_model(**DRAFT)


def run(models, mode: str, b: int, T: float, backup: str = "jit") -> tuple[Target, int, int]:
    """A job of b prompts x 12 tokens in-process; returns the target, the counter's reads and the mode's reads
    over the decode rounds (the prefill and the job start are outside)."""
    target_model, draft_model = models
    plan = Plan(mode=mode, num_speculative_tokens=3, fan_out=(2, 1, 1, 1), fan_out_miss=(2, 1, 1, 1),
                temperature=T, batch_size=b, backup=backup, saguaro_c=0.7)
    link = LocalLink(lambda msg: DraftRecorder(Drafter(draft_model, plan, 0, V))) if mode != "ar" else None
    if link:
        link.job(None)
    target = Target(target_model, TargetConfig(plan, 12, seed=1), link)
    counted, seen = [0], [0]
    step = target.round

    def counted_round(active, done):
        mode_ = HostReads()
        before = SYNCS.count
        with mode_:
            out = step(active, done)
        counted[0] += SYNCS.count - before
        seen[0] += mode_.n
        return out

    target.round = counted_round
    target.generate(make_prompts([5, 9, 4, 7][:b], V, seed=2))
    return target, counted[0], seen[0]


@pytest.mark.parametrize(("mode", "b", "T", "backup"), [("ar", 1, 0.0, "jit"), ("sd", 1, 0.0, "jit"),
                                                        ("ssd", 1, 0.0, "jit"), ("ssd", 4, 1.0, "jit"),
                                                        ("ssd", 4, 1.0, "fast"), ("sd", 4, 1.0, "jit")])
def test_the_counter_sees_every_host_read_of_a_round(models, mode, b, T, backup):
    target, counted, seen = run(models, mode, b, T, backup)
    assert target.rounds > 3
    assert counted == seen  # no read outside syncs.to_host / to_cpu / host_int


def test_a_round_reads_the_device_once_on_the_target_and_at_most_four_times_on_the_draft(models):
    for mode, draft_max in (("ar", None), ("sd", 1), ("ssd", 4)):
        target, _, _ = run(models, mode, 4, 1.0)
        assert set(target.syncs) == {1}, mode  # accepted, bonus and the proposal in one transfer
        if draft_max is None:
            assert target.draft_syncs == []
        else:  # SD: the drafted tokens; SSD: candidates, branch tokens, the trace's bonus ranks, + a jit backup
            assert 1 <= max(target.draft_syncs) <= draft_max, mode


def test_the_draft_reads_of_an_in_process_draft_are_counted_on_its_side():
    counter = SyncCounter()
    counter.add()
    with counter.on("draft"):
        counter.add(2)
    assert counter.counts == {"target": 1, "draft": 2} and counter.count == 3
    counter.reset()
    assert counter.count == 0


def test_to_device_and_to_host_round_trip_without_changing_values():
    t = to_device([[1, 2], [3, 4]], torch.long, torch.device("cpu"))
    assert t.dtype == torch.long and to_host(t) == [[1, 2], [3, 4]]
    assert to_device(torch.tensor([1.5]), torch.float32, torch.device("cpu")).dtype == torch.float32
