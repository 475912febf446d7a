"""The interference SSD's rounds measure: the verify's slowdown beside the draft, and the draft's beside the verify."""

from types import SimpleNamespace

import numpy as np
import pytest

from ssd_sim.io.trace import read_trace
from ssd_sim.model.interference import (
    draft_concurrent_ratio,
    glue_tokens,
    idle_verify_ratio,
    interference_level,
    probed_interference,
)
from ssd_sim.model.latency import overlapped_ms
from ssd_sim.plan.plan import Plan
from tests.helpers.synthetic_traces import DRAFT, TARGET, write_trace

LOOPS = {"one_row": 0.25, "rows": 0.30}  # a probe's loop values, far from what the rounds measure


GRID = {"started_at": "2026-12-03T12:00:00Z", "interleave": 12}  # one interleaved grid (bench/trace_grid.py)


def grid(folder, ssd_header: dict | None = None, **ssd) -> tuple:
    """(the AR run, the SSD run) of one grid in `folder`: 4 branch rows per step, the verify +12% beside the draft
    and the draft +4% beside the verify (or `ssd`'s), both timed on the generating curves."""
    folder.mkdir(exist_ok=True)
    kw = {"interference": (0.0, 0.12), "draft_slowdown": 0.04, **ssd}
    plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 2))
    return (read_trace(write_trace(folder / "ar.jsonl", Plan(mode="ar"), rounds=60, header=GRID)),
            read_trace(write_trace(folder / "ssd.jsonl", plan, rounds=200, header=ssd_header or GRID, **kw)))


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    return grid(tmp_path_factory.mktemp("interference") / "g")


def test_interference_is_levelled_so_the_modelled_verifies_sum_to_the_measured_ones():
    # 100 SSD rounds: a 300 ms verify alone beside 100 ms of glue (s = rows) and 200 ms of one-row branch steps;
    # measured at s = 0.2 for both, and every 10th round 50% slower (the outliers a robust fit looks past)
    n = 100
    x = {"alone": np.full(n, 300.0), "glue": np.full(n, 100.0), "branch": np.full(n, 200.0),
         "rows": np.where(np.arange(n) % 2 == 0, 1, 4)}
    typical = overlapped_ms(x["alone"], [(x["glue"], 0.2), (x["branch"], 0.2)])
    x["verify"] = typical * np.where(np.arange(n) % 10 == 0, 1.5, 1.0)
    shift = interference_level(x, 0.2, 0.2)
    levelled = overlapped_ms(x["alone"], [(x["glue"], 0.2 + shift), (x["branch"], 0.2 + shift)])
    assert shift > 0.05 and levelled.sum() == pytest.approx(x["verify"].sum(), rel=1e-6)
    assert interference_level({**x, "verify": typical}, 0.2, 0.2) == pytest.approx(0.0, abs=1e-5)
    assert interference_level({**x, "verify": x["alone"] * 0.9}, 0.05, 0.2) == -0.05  # faster than alone: no slowdown



def test_the_draft_ratio_is_the_rounds_glue_and_branch_over_the_forwards_alone(rounds):
    ratio, n = draft_concurrent_ratio(rounds, DRAFT)
    assert n == 200 and ratio == pytest.approx(1.04, abs=0.005)
    assert draft_concurrent_ratio(rounds, DRAFT.scaled(1.04))[0] == pytest.approx(1.0, abs=0.005)


def test_rounds_against_the_tables_give_the_slowdowns_at_the_runs_shapes(rounds):
    slow = probed_interference(rounds, TARGET, DRAFT, 1.0, LOOPS)
    assert slow["rows"] == pytest.approx(0.12, abs=0.01) and slow["draft"] == pytest.approx(0.04, abs=0.005)
    assert slow["one_row"] == 0.25  # no one-row branch steps in these rounds: the probe's loops keep that kind
    assert "one-row steps: the probe's loops (+25.0%" in slow["source"] and "copies" not in slow["source"]
    assert slow["draft_source"].startswith("measured on 200 SSD rounds: glue and branch decode 1.04")


def test_drift_since_the_probe_is_not_counted_as_interference(tmp_path):
    # the host 5% slower than at the probe for both runs: their verifies and the draft's phases are all 1.05x the
    # tables, the AR runs' verifies measure it, and the slowdowns are measured against the tables x 1.05
    ar, ssd = grid(tmp_path / "slow", draft_slowdown=1.04 * 1.05 - 1)
    slow = probed_interference([ar, ssd], TARGET.scaled(1 / 1.05), DRAFT, 1.05, LOOPS)
    assert slow["rows"] == pytest.approx(0.12, abs=0.01) and slow["draft"] == pytest.approx(0.04, abs=0.005)
    assert "the table x 1.050" in slow["source"] and "the table x 1.050" in slow["draft_source"]


def test_runs_not_interleaved_with_the_ar_runs_leave_the_probes_loops(tmp_path):
    # the SSD run timed an hour after the AR run, or not in chunks among it: a drift between them is not separable
    later = grid(tmp_path / "later", {**GRID, "started_at": "2026-12-03T13:30:00Z"})
    apart = grid(tmp_path / "apart", {"started_at": "2026-12-03T12:00:00Z"})
    assert probed_interference(later, TARGET, DRAFT, 1.0, LOOPS) is None
    assert probed_interference(apart, TARGET, DRAFT, 1.0, LOOPS) is None
    assert probed_interference(later[1:], TARGET, DRAFT, None, LOOPS) is None  # no AR run at all


def test_a_draft_faster_than_the_table_is_no_negative_slowdown(rounds):
    assert probed_interference(rounds, TARGET, DRAFT.scaled(1.2), 1.0, LOOPS)["draft"] == 0.0


def test_too_few_ssd_rounds_leave_the_probes_loops(tmp_path):
    ar, _ = grid(tmp_path / "few")
    few = read_trace(write_trace(tmp_path / "few" / "few.jsonl", Plan(num_speculative_tokens=2, fan_out=(1, 1, 2)),
                                 rounds=5, header=GRID))
    assert probed_interference([ar, few], TARGET, DRAFT, 1.0, LOOPS) is None


def test_the_idle_ratio_is_the_ar_traces_median(rounds):
    ar = [type("T", (), {"mode": "ar", "path": p})() for p in ("a", "b", "c")]
    assert idle_verify_ratio({"a": 1.0, "b": 1.1, "c": 1.3, "sd": 2.0}, ar) == 1.1
    assert idle_verify_ratio({"x": 1.0}, rounds[1:]) is None


def test_the_glue_feeds_one_token_per_row_only_after_a_jit_backup_of_every_row():
    def tokens(redraft: str, *seqs: tuple) -> int:
        r = SimpleNamespace(K=2, seqs=[SimpleNamespace(hit=h, backup=b) for h, b in seqs])
        return glue_tokens(SimpleNamespace(plan={"jit_redraft": redraft}), r)

    hit, jit, fast, first = (True, None), (False, "jit"), (False, "fast"), (False, "jit")
    assert tokens("rows", jit) == tokens("rows", first) == 1  # a new sequence's first round is a jit backup too
    assert tokens("rows", hit) == tokens("rows", fast) == 3  # after a hit or random tokens: t*, s_1, s_2
    assert tokens("rows", jit, jit) == 1 and tokens("rows", jit, hit) == 3  # a row that hit pads the batch to 3
    assert tokens("batch", jit, hit) == 1  # the whole batch was redrafted
