"""A sampled run's acceptance, split into its text and its luck: why one SD / SSD run at T > 0 accepts more or less than
the rates derived from all of its grid's runs predict.

    .venv/bin/python bench/acceptance_parts.py [FOLDER ...]   # default: the grids with SD and SSD runs at T = 1

Per run at T > 0 (SD or SSD, b = 1, the tokens drawn from the plain softmax), the mean acceptance length
1 + a_0 + a_0 a_1 + ... (tokens per round; a_i the acceptance at stopping position i, model.logged.response) from
  others    the logged contexts of the folder's other runs at the same T: what a calibration on them predicts;
  own       the run's own contexts, the same derivation (with the others' truncation share): how hard its text was;
  counted   the run's counted acceptances at its own contexts: what its sampled draft tokens drew;
  measured  its mean acceptance length (io.trace.summarize; a request's last round may be cut at its output length).
text = own / others - 1 is the part of the error that comes from which text the run sampled, luck = counted / own - 1
the part that comes from its draft tokens' accept / reject draws. Each comes with its z: the difference over the
standard error from resampling the requests (bootstrap over the sequences of the run and of the others, the truncation
share re-estimated in each draw; BOOT draws). |z| < 2 is the spread a run of this many requests has by chance, not a
bias of the derivation. A run needs another SD / SSD run at its temperature in its folder (greedy text is easier to
draft, so runs at another T are no baseline for its text).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from ssd_sim.io.trace import Trace, read_trace, summarize
from ssd_sim.model.logged import LoggedPositions, logged_positions, response, truncation_share
from ssd_sim.theory.analytic import expected_tokens_positional as accept_len  # 1 + sum_i prod_{j<=i} a_j

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("cpu-fp32-zen4-fresh96", "cpu-fp32-zen4-mixed192", "cpu-fp32-epyc-pool96t")  # SD and SSD at T = 1
BOOT = 200  # bootstrap draws per run
SEED = 0


def derived_len(lp: LoggedPositions, T: float, C: float, K: int, share: float) -> float:
    """accept_len from the derived acceptance at (T, C) over lp's contexts."""
    return accept_len(response(lp, T, C, share=share, min_contexts=1).acceptance, K)


def counted_len(lp: LoggedPositions, K: int) -> float:
    """accept_len from the counted acceptance (1 accepted / 0 rejected) per position."""
    a = []
    for i in range(K):
        m = (lp.position == i) & ~np.isnan(lp.counted)
        a.append(float(lp.counted[m].mean()) if m.any() else 0.0)
    return accept_len(np.array(a), K)


def resample(lp: LoggedPositions, rng: np.random.Generator) -> LoggedPositions:
    """One bootstrap draw of lp's sequences (with replacement), each with all of its contexts."""
    order = np.argsort(lp.group, kind="stable")
    groups, starts = np.unique(lp.group[order], return_index=True)
    ends = np.append(starts[1:], order.size)
    picks = rng.integers(0, groups.size, groups.size)
    return lp.subset(np.concatenate([order[starts[g]:ends[g]] for g in picks]))


def lengths(own: LoggedPositions, rest: LoggedPositions, T: float, C: float, K: int) -> tuple[float, float, float]:
    """(others, own, counted) accept lengths; the truncation share is the others' (what a calibration on them adds)."""
    share = truncation_share(rest)
    return derived_len(rest, T, C, K, share), derived_len(own, T, C, K, share), counted_len(own, K)


def run_parts(trace: Trace, others: list[Trace], rng: np.random.Generator) -> dict | None:
    """The run's accept lengths (others / own / counted / measured) and the text and luck parts with their z; None
    when no other run was made at the run's temperature."""
    T, C = float(trace.plan["temperature"]), float(trace.plan.get("saguaro_c", 1.0))
    K = int(trace.plan["num_speculative_tokens"])
    own, rest = logged_positions([trace]), logged_positions(others)
    if rest is None or not np.any(rest.run_temperature == T):
        return None
    rest = rest.subset(rest.run_temperature == T)
    others_len, own_len, counted = lengths(own, rest, T, C, K)
    boot = np.array([lengths(resample(own, rng), resample(rest, rng), T, C, K) for _ in range(BOOT)])
    text_se = np.std(boot[:, 1] - boot[:, 0], ddof=1)
    luck_se = np.std(boot[:, 2] - boot[:, 1], ddof=1)
    return {"others": others_len, "own": own_len, "counted": counted, "measured": summarize(trace).mean_accept_len,
            "text": own_len / others_len - 1, "luck": counted / own_len - 1,
            "text_z": (own_len - others_len) / text_se, "luck_z": (counted - own_len) / luck_se}


def folder_rows(folder: Path, rng: np.random.Generator) -> list[tuple[str, dict]]:
    """run_parts for every SD / SSD run at T > 0 of a folder that has another SD / SSD run at its temperature."""
    traces = {p.name: read_trace(p) for p in sorted(folder.glob("*.jsonl"))}
    rows = []
    for name, t in traces.items():
        if t.mode in ("sd", "ssd") and float(t.plan.get("temperature", 0.0)) > 0 and t.header.batch_size == 1:
            parts = run_parts(t, [o for n, o in traces.items() if n != name and o.mode != "ar"], rng)
            if parts is not None:
                rows.append((name, parts))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", help="trace folders (default: the grids with SD and SSD runs at T = 1)")
    args = ap.parse_args(argv)
    folders = [Path(f) for f in args.folders] or [ROOT / "traces" / f for f in FOLDERS]
    rng = np.random.default_rng(SEED)
    table = Table(title="mean acceptance length (tokens per round) of runs at T > 0: text and luck")
    for col in ("run", "others", "own", "counted", "measured", "text %", "z", "luck %", "z"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for folder in folders:
        for name, r in folder_rows(folder, rng):
            table.add_row(f"{folder.name}/{name}", *(f"{r[k]:.3f}" for k in ("others", "own", "counted", "measured")),
                          f"{100 * r['text']:+.1f}", f"{r['text_z']:+.1f}", f"{100 * r['luck']:+.1f}", f"{r['luck_z']:+.1f}")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
