"""Ops the host launches one by one: on a GPU each is a kernel launch and a trip through torch's dispatcher.

A forward replayed from a CUDA graph is one launch however many kernels it holds; everything else a round runs
(copies into the graph's inputs, sampling, the bonus tokens, messages' tensors) is launched op by op from Python,
and that host time, ~10-15 us per op, is most of a round's overhead beyond the forwards on a GPU (an H200 paid
6.1 ms per SSD round with graphs at b = 1 while the round launched 262 ops outside its replays). Counting them needs
no GPU: the same code launches the same ops on the CPU, and an emulated replay (ssd_runtime.graphs, backend
"emulate") is left out as a real one would be. View ops (reshape, slicing, unsqueeze) launch nothing and are not
counted. bench/gpu_check.py reports the count per round next to its overhead; tests/runtime/test_opcount.py bounds it.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

from .graphs import REPLAYING


class LaunchCounter(TorchDispatchMode):
    """Within `with LaunchCounter() as c:`, c.count is the number of non-view aten ops run outside graph replays."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not REPLAYING.depth and not func.is_view:
            self.count += 1
        return func(*args, **(kwargs or {}))
