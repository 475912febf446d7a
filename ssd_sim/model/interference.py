"""Interference in SSD, measured on the runs' own rounds: how much the verify and the draft slow each other.

In SSD the draft runs its glue and branch decode while the target verifies; on a CPU the two cores share memory
bandwidth. Two measurements, both from the SSD traces' logged phases at the shapes the runs used:

- the verify's slowdown (fit_interference): each round's verify against the target's forward alone at its
  (rows, K + 1) shape, the draft's glue and branch phases as the overlap (latency.overlapped_ms);
- the draft's (draft_concurrent_ratio): the rounds' glue + branch decode against the draft's forwards alone at the
  shapes the runs fed (glue_tokens: K + 1 tokens per row, one after a jit backup that redrafted every row).

Against a probe's tables (probed_interference) these are the slowdowns at the run's own shapes and moments. The
probe's loops time them at other shapes, and until 2026-12-06 timed the draft beside a 9-token verify only and
minutes after its forwards alone: on one Zen 4 guest the draft's steps ran +9-14% beside a looping 3-token verify and
+2-5% beside a 9-token one, and the same forwards alone moved +4-10% between two timings two minutes apart, so the
loops' one number is not the slowdown a K = 2 round pays (that probe said +9.9% for the draft; the SSD runs' rounds
measured 1.9-2.6% over its draft table, +0.1% beyond the runs' drift since the probe).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.records import Phase, RoundRecord
from ssd_sim.io.trace import Trace
from ssd_sim.model.drift import interleaved_with
from ssd_sim.model.latency import ForwardLatency, overlapped_ms, redrafted_every_row

MAX_FIT_ERROR = 1.0  # a median |relative error| of the SSD verifies above 100% means the traces do not fit together


def branch_rows(t: Trace, r: RoundRecord) -> int:
    """Branch rows the draft decoded during this round's verify: each sequence's budget (hit: fan_out)."""
    hit, miss = sum(t.plan.get("fan_out") or [0]), sum(t.plan.get("fan_out_miss") or t.plan.get("fan_out") or [0])
    return sum(hit if s.hit else miss for s in r.seqs)


def glue_tokens(t: Trace, r: RoundRecord) -> int:
    """Tokens per row of the draft's glue after this round's reply (the glue its record times): s_K alone when a
    jit backup redrafted every row (it cached t*, s_1..s_{K-1}; ssd_runtime.draft.DraftWorker.glue), else K + 1."""
    jit = sum(s.hit is False and s.backup == "jit" for s in r.seqs)
    return 1 if redrafted_every_row(jit, len(r.seqs), t.plan.get("jit_redraft") != "batch") else r.K + 1


def interference_samples(traces: Sequence[Trace], target: ForwardLatency) -> dict[str, np.ndarray]:
    """Per SSD round: measured verify, the idle-draft prediction, the draft's glue and branch ms, branch rows."""
    cols: dict[str, list] = {"verify": [], "alone": [], "glue": [], "branch": [], "rows": []}
    for t in traces:
        if t.mode != "ssd":
            continue
        for r in t.rounds:
            ms = r.timings_ms
            if ms[Phase.VERIFY] <= 0 or r.K == 0:
                continue
            cols["verify"].append(ms[Phase.VERIFY])
            cols["alone"].append(float(target(r.batch, r.K + 1)))
            cols["glue"].append(ms[Phase.DRAFT_GLUE])
            cols["branch"].append(ms[Phase.DRAFT_BRANCH])
            cols["rows"].append(branch_rows(t, r))
    return {k: np.asarray(v, dtype=float) for k, v in cols.items()}


def fit_interference(traces: Sequence[Trace], target: ForwardLatency, min_rounds: int = 10) -> dict:
    """The target's slowdown while the draft runs its glue and branch decode (fractions, robust least squares).

    Model per SSD round (latency.overlapped_ms): the verify measured alone (`target`) progresses at 1 / (1 + s)
    during the draft's glue (s = rows) and branch (s = one_row if one branch row per step, else rows). With
    fewer than `min_rounds` rounds of a kind its fraction is copied from the other (and said so).
    """
    return fit_interference_samples(interference_samples(traces, target), min_rounds)


def fit_interference_samples(x: dict[str, np.ndarray], min_rounds: int = 10, say_copied: bool = True) -> dict:
    """fit_interference on the columns of interference_samples; say_copied=False leaves out the note that a kind with
    fewer than `min_rounds` rounds copies the other (for a caller that fills that kind itself)."""
    from scipy.optimize import least_squares

    one = x["rows"] == 1
    n_one, n_rows = int(one.sum()), int((~one).sum())
    if n_one + n_rows < min_rounds:
        return {"one_row": 0.0, "rows": 0.0, "source": f"assumed 0: only {n_one + n_rows} SSD rounds"}

    both = min(n_one, n_rows) >= min_rounds  # else one fraction serves both kinds

    def fractions(p) -> tuple[float, float]:
        return (p[0], p[1]) if both else (p[0], p[0])

    def residuals(p):
        return (modelled_verify(x, *fractions(p)) - x["verify"]) / x["verify"]

    fit = least_squares(residuals, x0=[0.1, 0.1], bounds=([0.0, 0.0], [3.0, 3.0]), loss="soft_l1", f_scale=0.05)
    s_one, s_rows = fractions(fit.x)
    shift = interference_level(x, s_one, s_rows)
    s_one, s_rows = s_one + shift, s_rows + shift
    note = (f"measured on {n_one + n_rows} SSD rounds: verify +{s_one:.0%} while the draft decodes one branch row per "
            f"step ({n_one} rounds), +{s_rows:.0%} during its glue and multi-row steps ({n_rows} rounds); levelled "
            f"{shift:+.1%} so the modelled verifies sum to the measured ones")
    if not both and say_copied:
        note += f"; the kind with fewer than {min_rounds} rounds copies the other"
    err = float(np.median(np.abs(residuals(fit.x))))
    if err > MAX_FIT_ERROR:
        raise ConfigError("traces", f"the SSD traces' verify timings are {err:.0%} (median) off what the AR / SD traces' "
                                    "target fit and a slowdown predict: are all traces from one setup and host?")
    return {"one_row": float(s_one), "rows": float(s_rows), "source": note, "samples": n_one + n_rows,
            "median_abs_rel_err": err}


def modelled_verify(x: dict[str, np.ndarray], s_one: float, s_rows: float) -> np.ndarray:
    """The samples' verifies (ms) as latency.overlapped_ms models them at slowdowns s_one and s_rows (fractions): s_one
    during one-row branch steps, s_rows during the glue (any shape) and multi-row steps."""
    one = x["rows"] == 1
    return overlapped_ms(x["alone"], [(x["glue"], s_rows), (x["branch"], np.where(one, s_one, s_rows))])


def interference_level(x: dict[str, np.ndarray], s_one: float, s_rows: float) -> float:
    """The shift added to both fitted slowdowns (fractions) that makes the modelled SSD verifies of the samples
    (interference_samples) sum to the measured ones: the robust fit sits at the typical round, but tok/s pays the
    mean verify, outliers included (latency.total_level's argument). Kept within [-min(s_one, s_rows), 3]."""
    from scipy.optimize import brentq

    def gap(d: float) -> float:
        return float(modelled_verify(x, s_one + d, s_rows + d).sum() - x["verify"].sum())

    lo, hi = -min(s_one, s_rows), 3.0 - max(s_one, s_rows)
    if gap(lo) >= 0 or gap(hi) <= 0:  # the total is out of reach of a shift: the nearest end
        return lo if gap(lo) >= 0 else hi
    return float(brentq(gap, lo, hi, xtol=1e-6))


def draft_concurrent_ratio(traces: Sequence[Trace], draft: ForwardLatency) -> tuple[float, int] | None:
    """(the SSD rounds' glue + branch decode ms over the draft's forwards alone at their shapes, rounds): the sums'
    ratio (tok/s pays the mean); None without SSD rounds that time the draft's phases."""
    measured = alone = 0.0
    n = 0
    for t in traces:
        if t.mode != "ssd":
            continue
        for r in t.rounds:
            ms, rows = r.timings_ms, branch_rows(t, r)
            if r.K == 0 or ms[Phase.DRAFT_GLUE] <= 0:
                continue
            measured += ms[Phase.DRAFT_GLUE] + ms[Phase.DRAFT_BRANCH]
            alone += float(draft(r.batch, glue_tokens(t, r))) + (r.K * float(draft(rows, 1)) if rows else 0.0)
            n += 1
    return (measured / alone, n) if n else None


def probed_interference(traces: Sequence[Trace], target: ForwardLatency, draft: ForwardLatency,
                        idle_ratio: float | None, loops: dict[str, float], min_rounds: int = 10) -> dict | None:
    """The slowdowns (fractions) the SSD traces' rounds measure against a probe's tables `target` and `draft`, as
    model.latency's interference entry {"one_row", "rows", "draft", "source", "draft_source", ...}; None unless every
    SSD trace was timed chunk by chunk among the AR traces (model.drift.interleaved_with), with at least `min_rounds`
    SSD rounds whose verifies fit the table (MAX_FIT_ERROR).

    idle_ratio: the AR traces' median verify over the table, the drift between the probe and the runs (not
    interference), shared by runs timed among each other: the verifies are compared with the table times it, and so
    is the draft's glue and branch decode, the drift taken as the host's, both cores alike (an assumption: the draft
    has no phase timed with the target idle and no wait before it). Runs not interleaved with the AR runs may have
    drifted apart from them (a host 10% slower 20 minutes later), which no ratio separates from interference. A draft
    ratio under 1 (the glue ran faster than the probe's draft append) is floored at 0. A kind of verify no `min_rounds`
    rounds time (one-row or multi-row branch steps) keeps the probe's loop value (`loops`: "one_row", "rows")."""
    ssd, ar = [t for t in traces if t.mode == "ssd"], [t for t in traces if t.mode == "ar"]
    if not ssd or not ar or idle_ratio is None or not all(interleaved_with(t, ar) for t in ssd):
        return None
    ratio = draft_concurrent_ratio(ssd, draft)
    x = interference_samples(ssd, target.scaled(idle_ratio))
    if ratio is None or ratio[1] < min_rounds or x["verify"].size < min_rounds:
        return None
    try:
        verify = fit_interference_samples(x, min_rounds, say_copied=False)
    except ConfigError:
        return None
    one = x["rows"] == 1
    kept = [k for k, n in (("one_row", int(one.sum())), ("rows", int((~one).sum()))) if n < min_rounds]
    note = verify["source"] + "".join(f"; {k.replace('_', '-')} steps: the probe's loops (+{loops[k]:.1%}; fewer "
                                      f"than {min_rounds} rounds time them)" for k in kept)
    level = f"the table x {idle_ratio:.3f} (the interleaved AR runs' verifies over the table: the drift since the probe)"
    slow = max(ratio[0] / idle_ratio - 1.0, 0.0)
    return {**verify, **{k: float(loops[k]) for k in kept}, "draft": slow, "source": f"{note}; against {level}",
            "draft_source": f"measured on {ratio[1]} SSD rounds: glue and branch decode {ratio[0]:.3f}x the probe's "
                            f"draft table at their shapes, against the table x {idle_ratio:.3f}: {slow:+.1%} (floored "
                            "at 0)"}


def idle_verify_ratio(ratios: dict[str, float], traces: Sequence[Trace]) -> float | None:
    """The median over the AR traces of their verify-to-table ratios (`ratios`: {path: ratio}); None without one."""
    ar = [ratios[t.path] for t in traces if t.mode == "ar" and t.path in ratios]
    return float(statistics.median(ar)) if ar else None
