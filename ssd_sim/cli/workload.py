"""`ssd-plan workload METRICS --engine vllm|sglang|reference -t T -o workload.json`: a workload profile from the
speculative-decoding metrics an engine already reports (ssd_sim.io.engine_metrics, model.workload_profile).

Use it with `--acceptance-from workload.json` beside --preset, --profile or a spec pair (--target/--draft/--gpu).
Bad input: one line naming the field, exit 2, nothing written.
"""

from __future__ import annotations

import json

from ssd_sim.cli.args import OneLineParser, add_knob_arg, cli_entry, fail
from ssd_sim.io.engine_metrics import ENGINES, read_engine_metrics
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import save_json_atomic
from ssd_sim.io.outputs import check_outputs
from ssd_sim.model.workload_profile import WorkloadProfile

PROG = "ssd-plan workload"


@cli_entry(PROG)
def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog=PROG, description="Write a workload profile (per-position acceptance at one temperature) "
                      "from an engine's speculative-decoding metrics: vLLM's /metrics text, LLM.get_metrics() as JSON "
                      "or its server log, SGLang's log, or the reference engine's METRICS dict as JSON.")
    p.add_argument("metrics", help="the metrics file")
    p.add_argument("--engine", required=True, choices=ENGINES, help="which engine wrote it")
    g = p.add_argument_group("what the metrics do not say")
    add_knob_arg(g, "temperature")
    add_knob_arg(g, "num_speculative_tokens")
    p.add_argument("--name", help="workload name (default: the file's stem)")
    p.add_argument("-o", "--output", required=True, help="workload JSON to write")
    args = p.parse_args(argv)
    try:
        if args.temperature is None:
            raise ConfigError("temperature", "the metrics do not record the sampling temperature: give -t T (the "
                                             "temperature the requests ran at)")
        check_outputs({"output": args.output}, {"metrics": args.metrics})
        counts = read_engine_metrics(args.metrics, args.engine, args.num_speculative_tokens)
        from pathlib import Path

        w = WorkloadProfile.from_counts(counts, args.temperature, args.name or Path(args.metrics).stem)
        save_json_atomic(args.output, json.dumps(w.to_dict(), indent=2), "output")
    except ConfigError as e:
        fail(PROG, e)
    acc = ", ".join(f"{a:.3f} [{lo:.2f},{hi:.2f}]" for a, (lo, hi) in zip(w.acceptance, w.ci95, strict=True))
    print(f"{w.name}: {counts.note}; per-position acceptance at T = {w.temperature:g}: {acc}")
    print(f"assumed: {'; '.join(w.assumed)}")
    print(f"workload written to {args.output}; next: ssd-plan --preset NAME|--profile FILE|--target .. --acceptance-from "
          f"{args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
