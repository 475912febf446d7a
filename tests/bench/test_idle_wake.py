"""bench/idle_wake.py: the three cases are interleaved block by block, each forward after its own kind of gap."""

import time

from tests.helpers.bench import load_bench

BENCH = load_bench("idle_wake")


class _Clock:
    """A stand-in bench: each forward records when it ran and how long since the previous one ended (ms)."""

    def __init__(self):
        self.calls, self.last = [], time.perf_counter()

    def forward(self, shape):
        start = time.perf_counter()
        self.calls.append((shape, (start - self.last) * 1e3))
        self.last = time.perf_counter()
        return float(len(self.calls))


def test_each_case_runs_after_its_gap_in_interleaved_blocks():
    clock = _Clock()
    out = BENCH.measure(clock, ("append", 1, 3), gap_s=0.02, blocks=2, per_block=2)
    assert {k: len(v) for k, v in out.items()} == {"back to back": 4, "after a sleep": 4, "after a busy wait": 4}
    gaps = [g for _, g in clock.calls[3:]]  # after 3 warm-up forwards: per block 2 back to back, 2 slept, 2 spun
    assert len(gaps) == 12 and all(s == ("append", 1, 3) for s, _ in clock.calls)
    for block in (gaps[:6], gaps[6:]):
        assert all(g < 10 for g in block[:2]) and all(g >= 19 for g in block[2:])
    # the values are the forwards' own returns, in call order: block 1's sleeps are calls 6-7, block 2's 12-13
    assert out["after a sleep"] == [6.0, 7.0, 12.0, 13.0]
