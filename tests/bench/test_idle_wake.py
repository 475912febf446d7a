"""bench/idle_wake.py: the cases are interleaved block by block, each forward after its own kind of gap."""

import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.bench import load_bench

BENCH = load_bench("idle_wake")
ROOT = Path(__file__).resolve().parents[2]


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


def test_the_peer_wait_is_a_fourth_case_in_each_block():
    clock, waits = _Clock(), []

    def wait():  # a stand-in peer: the reply comes 20 ms after the request
        waits.append(len(clock.calls))
        time.sleep(0.02)

    out = BENCH.measure(clock, ("append", 1, 3), gap_s=0.0, blocks=2, per_block=2, wait_for_peer=wait)
    assert {k: len(v) for k, v in out.items()} == {"back to back": 4, "after a sleep": 4, "after a busy wait": 4,
                                                   "after a gloo receive": 4}
    # one untimed wait before the warm-up, then the last two forwards of each block of 8 follow a wait each
    assert waits == [0, 9, 10, 17, 18] and out["after a gloo receive"] == [10.0, 11.0, 18.0, 19.0]
    assert all(gap >= 19 for i, (_, gap) in enumerate(clock.calls) if i in (9, 10, 17, 18))


def test_the_gloo_peer_replies_after_its_gap():
    # a real gloo pair through the runtime's channel, in its own process (a process group is per process)
    code = ("import time, sys; sys.path.insert(0, 'bench'); import idle_wake\n"
            "peer = idle_wake.GlooPeer(0.05); peer()\n"
            "t = time.perf_counter(); [peer() for _ in range(3)]; print((time.perf_counter() - t) / 3); peer.close()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert 0.05 <= float(done.stdout.split()[-1]) < 1.0  # each wait lasts the peer's 50 ms of work, plus the transfer
