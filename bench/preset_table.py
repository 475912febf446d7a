"""The regression table of the README: predicted AR / SD / SSD tok/s per sequence for every preset at
b = 1, 2, 4, 8, 16 and T = 0 / 1 (make_plan: best SD over K, best SSD plan).

    .venv/bin/python bench/preset_table.py            # print the table (markdown)
    .venv/bin/python bench/preset_table.py --write    # replace it in README.md between its markers

tests/test_readme.py fails when the README's table and the model disagree, so a change to the model or a
preset shows up in review as a change to this table.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ssd_sim.model.presets import get_preset, list_presets
from ssd_sim.plan.planner import BStar, PlanRequest, make_plan

BATCHES = (1, 2, 4, 8, 16)
TEMPERATURES = (0.0, 1.0)
START, END = "<!-- preset-table:start -->", "<!-- preset-table:end -->"
README = Path(__file__).resolve().parents[1] / "README.md"


def rows() -> list[tuple[str, float, list[tuple[float, float, float]]]]:
    """[(preset, T, [(AR, SD, SSD) tok/s per sequence at each batch size])]."""
    out = []
    for name in list_presets():
        prof = get_preset(name)
        for T in TEMPERATURES:
            cells = []
            for b in BATCHES:
                r = make_plan(prof, PlanRequest(batch_size=b, temperature=T, b_star=BStar.CHOSEN))
                cells.append((r.ar.per_seq_tok_s, r.sd.per_seq_tok_s, r.ssd.per_seq_tok_s))
            out.append((name, T, cells))
    return out


def _fmt(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def table() -> str:
    """The markdown table (AR / SD / SSD tok/s per sequence in each cell)."""
    head = "| preset | T | " + " | ".join(f"b = {b}" for b in BATCHES) + " |"
    lines = [head, "|---|---|" + "---|" * len(BATCHES)]
    for name, T, cells in rows():
        lines.append(f"| `{name}` | {T:g} | " + " | ".join(" / ".join(map(_fmt, c)) for c in cells) + " |")
    return "\n".join(lines)


def readme_table(text: str) -> str:
    """The table between the README's markers."""
    m = re.search(re.escape(START) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    if m is None:
        raise SystemExit(f"README.md has no {START} ... {END} block")
    return m.group(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="replace the table in README.md")
    args = ap.parse_args()
    t = table()
    if args.write:
        text = README.read_text()
        start = text.index(START) + len(START) + 1  # only inside the markers
        README.write_text(text[:start] + t + text[start + len(readme_table(text)):])
    print(t)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
