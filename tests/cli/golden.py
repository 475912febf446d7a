"""The golden command set: ssd-plan, ssd-sim and calibrate over every preset, fixed knobs, plan files and --json,
run in-process with this host replaced by a fixed one, so their output is comparable byte for byte across
machines and refactors (tests/cli/test_golden.py).

    python -m tests.cli.golden --update [ID ...]   # re-record tests/golden/*.txt, or only these (deliberate changes only)

Each record holds the exit status, stdout, and every file the command wrote; stderr only for failing commands
(successful ones may warn about the host, which is this machine's business). Changes a record is allowed to show
are listed in DOCUMENTED_CHANGES with the reason.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
INPUTS = GOLDEN / "inputs"
PRESETS = ("llama70b-1b-h100", "llama70b-1b-h200", "qwen32b-0.6b-h100", "qwen-coder-1.5b-0.5b-cpu",
           "qwen-coder-1.5b-0.5b-cpu-dense", "qwen-coder-1.5b-0.5b-cpu-int8")
GRID = "traces/cpu-fp32-grid"  # relative to the folder a command runs in

# id -> command line, run in a fresh folder holding in/ (tests/golden/inputs), traces/ (the shipped traces) and an
# empty out/, so every path a command prints is the same short relative one on any machine
COMMANDS: dict[str, str] = {
    **{f"plan-{p}": f"ssd-plan --preset {p}" for p in PRESETS},
    **{f"plan-{p}-json": f"ssd-plan --preset {p} --json" for p in PRESETS},
    "plan-llama-b8-t1": "ssd-plan --preset llama70b-1b-h100 -b 8 -t 1",
    "plan-qwen32-k7-f3": "ssd-plan --preset qwen32b-0.6b-h100 -k 7 --fan-out 3",
    "plan-llama-fanout-list-c-fast": "ssd-plan --preset llama70b-1b-h100 --fan-out 4,3,3,3,3,2,2,4 --saguaro-c 0.5 "
                                     "--backup fast -t 1",
    "plan-h200-adaptive-json": "ssd-plan --preset llama70b-1b-h200 -k 4 --backup adaptive --backup-threshold 4 -b 8 "
                               "--json",
    "plan-qwen32-engine-knobs": "ssd-plan --preset qwen32b-0.6b-h100 --downweight top_f --jit-redraft rows -t 0.7",
    "plan-llama-throughput-b16": "ssd-plan --preset llama70b-1b-h100 --objective throughput-per-device -b 16",
    "plan-cpu-fanout-miss": "ssd-plan --preset qwen-coder-1.5b-0.5b-cpu -k 2 --fan-out 1,1,2 --fan-out-miss 2,1,1",
    "plan-llama-draft-devices": "ssd-plan --preset llama70b-1b-h100 --draft-devices 2 -b 4",
    "plan-qwen32-emit-engine": "ssd-plan --preset qwen32b-0.6b-h100 --emit ssd-engine",
    "plan-qwen32-emit-vllm": "ssd-plan --preset qwen32b-0.6b-h100 --emit vllm",
    "plan-llama-emit-sglang": "ssd-plan --preset llama70b-1b-h100 -b 4 --emit sglang",
    "plan-llama-explain": "ssd-plan --preset llama70b-1b-h100 --explain",
    "plan-cpu-limits": "ssd-plan --preset qwen-coder-1.5b-0.5b-cpu --max-k 4 --budget-cap 8",
    "plan-llama-risk": "ssd-plan --preset llama70b-1b-h100 --risk 0.1",
    "plan-llama-t1-c-k5": "ssd-plan --preset llama70b-1b-h100 -t 1 --saguaro-c 0.3 -k 5",
    "plan-write": "ssd-plan --preset qwen32b-0.6b-h100 -b 2 -o out/plan.json",
    "plan-file": "ssd-plan --plan in/qwen32-b2.json",
    "plan-file-json": "ssd-plan --plan in/qwen32-b2.json --json",
    "plan-file-b4": "ssd-plan --plan in/qwen32-b2.json -b 4",
    "plan-file-backup-fast": "ssd-plan --plan in/qwen32-b2.json --backup fast",
    "plan-file-emit": "ssd-plan --plan in/qwen32-b2.json --emit ssd-engine",
    "plan-file-other-preset": "ssd-plan --plan in/qwen32-b2.json --preset llama70b-1b-h100",
    "plan-file-new-k": "ssd-plan --plan in/qwen32-b2.json -k 5",
    "plan-file-uniform-fanout": "ssd-plan --plan in/qwen32-b2.json --fan-out 2",
    "plan-file-c-list": "ssd-plan --plan in/llama-c-list.json --json",
    "plan-profile": f"ssd-plan --profile {GRID}/profile.json",
    "plan-profile-t1-json": f"ssd-plan --profile {GRID}/profile.json -t 1 --json",
    "plan-bad-fanout": "ssd-plan --preset llama70b-1b-h100 -k 3 --fan-out 1,2",
    "plan-batch-sizes": "ssd-plan --preset llama70b-1b-h100 --batch-sizes 1,2,4,8,16 -o out/plan.json",  # issue 30
    "plan-spec-70b-128k-json": "ssd-plan --target Llama-3.1-70B --draft Llama-3.2-1B --gpu h100 --tp 4 "
                               "--context 131072 -b 2 --batch-sizes 1,2,4,8 --json",  # memory: 3 sequences fit
    "sim-llama": "ssd-sim --preset llama70b-1b-h100 --tokens 64",
    "sim-qwen32-fast-b4": "ssd-sim --preset qwen32b-0.6b-h100 --mode ssd-fast -b 4 --tokens 64",
    "sim-cpu-json": "ssd-sim --preset qwen-coder-1.5b-0.5b-cpu --tokens 64 --json",
    "sim-llama-sd-json": "ssd-sim --preset llama70b-1b-h100 --mode sd --tokens 64 --json",
    "sim-cpu-ar": "ssd-sim --preset qwen-coder-1.5b-0.5b-cpu --mode ar --tokens 32",
    "sim-cpu-fixed-knobs": "ssd-sim --preset qwen-coder-1.5b-0.5b-cpu -k 2 --fan-out 1,1,2 --tokens 64",
    "sim-poisson-json": "ssd-sim --preset llama70b-1b-h100 --workload poisson --rate 2 --num-requests 8 --max-batch 4 "
                        "--tokens 32 --json",
    "sim-h200-adaptive-t1": "ssd-sim --preset llama70b-1b-h200 --mode ssd-adaptive -b 8 -t 1 --tokens 32",
    "sim-plan-file": "ssd-sim --plan in/qwen32-b2.json --preset qwen32b-0.6b-h100 --tokens 64",
    "sim-plan-file-b2-json": "ssd-sim --plan in/qwen32-b2.json --preset qwen32b-0.6b-h100 -b 2 --tokens 64 --json",
    "sim-plan-file-c": "ssd-sim --plan in/qwen32-b2.json --preset qwen32b-0.6b-h100 --saguaro-c 0.5 -t 1 "
                       "--tokens 64",
    "sim-plan-file-new-k": "ssd-sim --plan in/qwen32-b2.json --preset qwen32b-0.6b-h100 -k 5 --tokens 64",
    "sim-chrome-trace": "ssd-sim --preset qwen32b-0.6b-h100 --tokens 8 --chrome-trace out/timeline.json",
    "calibrate-grid": f"ssd-plan calibrate {GRID}/ar-b1-t0.jsonl {GRID}/sd-k2-b1-t0.jsonl "
                      f"{GRID}/ssd-k2-f001-b1-t0.jsonl -o out/profile.json",
    "calibrate-grid-t1": f"ssd-plan calibrate {GRID}/ar-b1-t0.jsonl {GRID}/sd-k2-b1-t1.jsonl "
                         f"{GRID}/ssd-k2-f112-b1-t1.jsonl -o out/profile.json",
}


def _document(cids, change: str) -> None:
    """Add `change` to the documented changes of each record (joined with '; ' after any earlier one)."""
    for cid in cids:
        DOCUMENTED_CHANGES[cid] = (DOCUMENTED_CHANGES[cid] + "; " if cid in DOCUMENTED_CHANGES else "") + change


# id -> why its record differs from the one recorded before the knob schema (issue 24's merge fix)
DOCUMENTED_CHANGES: dict[str, str] = {
    "plan-file-uniform-fanout": "a uniform --fan-out keeps the plan file's K (before, ssd-plan re-searched K while "
                                "ssd-sim and ssd-run kept it)",
    "plan-file-c-list": "the plan file's per-position C list is kept (before, ssd-plan dropped it silently while "
                        "ssd-sim and ssd-run kept it)",
    "plan-bad-fanout": "-k and a --fan-out list that disagree are one message in every CLI (before, each had its own)",
    "sim-plan-file-new-k": "a new K drops the plan file's fan-out and ssd-sim searches one as ssd-plan does (before: "
                           "exit 2, 'the plan's fan-out has 4 entries but K = 5 needs 6')",
    **{cid: "the simulator's phases carry the runtime's names (ssd_sim.io.records.Phase): its draft_primary is "
            "split into draft_glue and draft_branch as the trace times them" for cid in
       ("sim-cpu-json", "sim-llama-sd-json", "sim-poisson-json", "sim-plan-file-b2-json")},
}
# The reference engine's flags checked against its current bench.py (engine_rules.REFERENCE_COMMIT): Qwen targets
# need --qwen (Llama became the default family), and the command's note names the repository and commit.
_ENGINE_FLAGS = ("the ssd-engine command names its family (--qwen / --llama) as the reference engine's current "
                 "bench.py needs, and a note names the engine's repository and the commit its flags were checked "
                 "against")
_document(('plan-file-b4', 'plan-file-backup-fast', 'plan-file-c-list', 'plan-file-emit', 'plan-file-json', 'plan-file-new-k', 'plan-file-other-preset', 'plan-file-uniform-fanout', 'plan-file', 'plan-h200-adaptive-json', 'plan-llama-b8-t1', 'plan-llama-draft-devices', 'plan-llama-explain', 'plan-llama-fanout-list-c-fast', 'plan-llama-risk', 'plan-llama-t1-c-k5', 'plan-llama-throughput-b16', 'plan-llama70b-1b-h100-json', 'plan-llama70b-1b-h100', 'plan-llama70b-1b-h200-json', 'plan-llama70b-1b-h200', 'plan-qwen32-emit-engine', 'plan-qwen32-engine-knobs', 'plan-qwen32-k7-f3', 'plan-qwen32b-0.6b-h100-json', 'plan-qwen32b-0.6b-h100', 'plan-write'), _ENGINE_FLAGS)

# Issue 25: what moved the planner's numbers (each a model change, none fitted to a published result).
_ISSUE_25 = ("issue 25: GPU presets are spec + measured inputs (model.roofline's KV reads per row, FLOPs and all-reduce "
             "bytes per token at the preset's context, so latencies grow with batch; the measured steps fix only the "
             "overhead); hit rates per stopping position (after all K accepted the bonus is a plain target sample; "
             "after a fast backup too); Saguaro's C leaves the all-accepted hits alone and follows the plan's "
             "down-weighted set; the budget search covers caches past what fits inside one verify; the vLLM command "
             "shards the draft like the target (its draft-model proposer requires it) and both SD commands name the "
             "engine version they were checked against; the reference engine keeps fan-out lists above b = 8")
_document(['plan-file', 'plan-file-b4', 'plan-file-backup-fast', 'plan-file-c-list', 'plan-file-json', 'plan-file-new-k', 'plan-file-other-preset', 'plan-file-uniform-fanout', 'plan-h200-adaptive-json', 'plan-llama-b8-t1', 'plan-llama-draft-devices', 'plan-llama-explain', 'plan-llama-fanout-list-c-fast', 'plan-llama-risk', 'plan-llama-t1-c-k5', 'plan-llama-throughput-b16', 'plan-llama70b-1b-h100', 'plan-llama70b-1b-h100-json', 'plan-llama70b-1b-h200', 'plan-llama70b-1b-h200-json', 'plan-profile-t1-json', 'plan-qwen-coder-1.5b-0.5b-cpu-dense-json', 'plan-qwen-coder-1.5b-0.5b-cpu-int8-json', 'plan-qwen-coder-1.5b-0.5b-cpu-json', 'plan-qwen32-emit-engine', 'plan-qwen32-emit-vllm', 'plan-qwen32-engine-knobs', 'plan-qwen32-k7-f3', 'plan-qwen32b-0.6b-h100', 'plan-qwen32b-0.6b-h100-json', 'plan-write', 'sim-chrome-trace', 'sim-h200-adaptive-t1', 'sim-llama', 'sim-llama-sd-json', 'sim-plan-file', 'sim-plan-file-b2-json', 'sim-plan-file-c', 'sim-plan-file-new-k', 'sim-poisson-json', 'sim-qwen32-fast-b4'], _ISSUE_25)

_ISSUE_26 = ("issue 26: where the interference is measured (SSD traces or a probe) and its spread dominates, the advice "
             "to settle it no longer says it is not measured")
_document(['plan-cpu-fanout-miss', 'plan-profile-t1-json', 'plan-qwen-coder-1.5b-0.5b-cpu-dense-json',
             'plan-qwen-coder-1.5b-0.5b-cpu-int8-json', 'plan-qwen-coder-1.5b-0.5b-cpu-json'], _ISSUE_26)


_HORIZON = ("issue 26: drift per horizon (model.drift: 4.8% for a run within the hour of the timed forwards, 17.3% "
            "later, 13.2% pooled before): the report's uncertainty says which run its intervals are for (horizon, "
            "timed_at, session_spread_measured); a calibration records both spreads and when its forwards were timed, "
            "and adds the drift also where fewer than 3 AR / SD traces leave the residual assumed (before: 8% alone)")
_document(['plan-llama70b-1b-h100-json', 'plan-llama70b-1b-h200-json', 'plan-qwen32b-0.6b-h100-json',
           'plan-qwen-coder-1.5b-0.5b-cpu-json', 'plan-qwen-coder-1.5b-0.5b-cpu-dense-json',
           'plan-qwen-coder-1.5b-0.5b-cpu-int8-json', 'plan-h200-adaptive-json', 'plan-write', 'plan-file-json',
           'plan-file-c-list', 'plan-profile-t1-json', 'plan-batch-sizes', 'calibrate-grid', 'calibrate-grid-t1'],
          _HORIZON)


_ISSUE_29 = ("issue 29: a plan file's (or flag's) fixed backup threshold is what the plan line prints, beside the "
             "crossover b* the planner found (before, the line printed the crossover as the plan's threshold)")
_document(['plan-file', 'plan-file-b4', 'plan-file-new-k'], _ISSUE_29)
_FIT = ("issue 29: a latency fit frees only as many curve parameters as the traces time distinct forward sizes "
        "(model.latency.identifiable); the rest are held and a calibrate warning says so (before, the surplus left "
        "a valley of equal cost whose end point differed between CPU kinds)")
_document(['calibrate-grid', 'calibrate-grid-t1', 'plan-profile', 'plan-profile-t1-json'], _FIT)  # the last two plan with the refit


_ISSUE_30 = ("issue 30 (part): an optimum on a search bound says so (a note line and the report's search_bounds: SD's "
             "best K = --max-k); ssd-sim's table is 120 columns wide off a terminal, as ssd-plan's (it wrapped at 80)")
_document(['plan-llama70b-1b-h100', 'plan-llama70b-1b-h200', 'plan-llama70b-1b-h100-json', 'plan-llama70b-1b-h200-json',
             'plan-qwen32b-0.6b-h100-json', 'plan-qwen-coder-1.5b-0.5b-cpu-json', 'plan-qwen-coder-1.5b-0.5b-cpu-dense-json',
             'plan-qwen-coder-1.5b-0.5b-cpu-int8-json', 'plan-h200-adaptive-json', 'plan-llama-throughput-b16',
             'plan-llama-draft-devices', 'plan-llama-explain', 'plan-cpu-limits', 'plan-llama-risk', 'plan-write',
             'plan-file-json', 'plan-file-other-preset', 'plan-file-c-list', 'plan-profile-t1-json', 'sim-llama',
             'sim-qwen32-fast-b4', 'sim-cpu-fixed-knobs', 'sim-h200-adaptive-t1', 'sim-plan-file', 'sim-plan-file-c',
             'sim-plan-file-new-k', 'sim-chrome-trace'], _ISSUE_30)


_ISSUE_30_COMMANDS = ("issue 30 (commands that paste, numbers that agree): every emitted command is one unwrapped line under "
                      "the engine's repository and version (ssd-plan's table: 'ssd-engine, github.com/... at commit ...:' then "
                      "the command; --emit: '# note:' and '# ENGINE: repository, version' comment lines, the command last; "
                      "each emitter's JSON has 'source'); commands and notes name models by their Hugging Face id, not the "
                      "local cache path or a preset's description (emit.model_id, a 'models:' note says where it came from); "
                      "the reference engine's refusal lists the families and sizes it runs; P(SSD beats SD) is stated for "
                      "the objective (uncertainty.decided_on / p_objective / p_ssd_beats_sd_per_device; "
                      "throughput-per-device decides per device, where before it kept the point ranking beside a "
                      "per-sequence probability); the engine-runnable plan's prediction is a table row and a line under the "
                      "recommendation where it differs (report.reference_engine, ssd-engine predicted_total_tok_s / "
                      "predicted_tok_s_per_device); a profile calibrated from traces without host records names their "
                      "machine line as where it was measured (host.measured_on)")
_document(['plan-llama70b-1b-h100', 'plan-llama70b-1b-h200', 'plan-qwen32b-0.6b-h100', 'plan-qwen-coder-1.5b-0.5b-cpu', 'plan-qwen-coder-1.5b-0.5b-cpu-dense', 'plan-qwen-coder-1.5b-0.5b-cpu-int8', 'plan-llama70b-1b-h100-json', 'plan-llama70b-1b-h200-json', 'plan-qwen32b-0.6b-h100-json', 'plan-qwen-coder-1.5b-0.5b-cpu-json', 'plan-qwen-coder-1.5b-0.5b-cpu-dense-json', 'plan-qwen-coder-1.5b-0.5b-cpu-int8-json', 'plan-llama-b8-t1', 'plan-qwen32-k7-f3', 'plan-llama-fanout-list-c-fast', 'plan-h200-adaptive-json', 'plan-qwen32-engine-knobs', 'plan-llama-throughput-b16', 'plan-cpu-fanout-miss', 'plan-llama-draft-devices', 'plan-qwen32-emit-engine', 'plan-qwen32-emit-vllm', 'plan-llama-emit-sglang', 'plan-llama-explain', 'plan-cpu-limits', 'plan-llama-risk', 'plan-llama-t1-c-k5', 'plan-write', 'plan-file', 'plan-file-json', 'plan-file-b4', 'plan-file-backup-fast', 'plan-file-emit', 'plan-file-other-preset', 'plan-file-new-k', 'plan-file-uniform-fanout', 'plan-file-c-list', 'plan-profile', 'plan-profile-t1-json'], _ISSUE_30_COMMANDS)

_ISSUE_28_PROMPTS = ("issue 28 (part): a workload carries every request's prompt length (an arrivals file's prompt_tokens, "
                     "one per request, are prefilled as given instead of their median): the JSON's workload has "
                     "'prompt_lengths' ([] when one length is every request's)")
_document(['sim-cpu-json', 'sim-llama-sd-json', 'sim-poisson-json', 'sim-plan-file-b2-json'], _ISSUE_28_PROMPTS)


_ISSUE_26_DECISION = ("issue 26: the recommended mode is the one with the highest mean tok/s over the uncertainty draws (the "
                      "choice of least expected regret; uncertainty.rule / expected / close_call / confident_from), where "
                      "before SSD needed P(SSD beats SD) >= 0.8 (uncertainty.threshold): the recommendation line says "
                      "which rule, and close calls (P between 0.2 and 0.8) that went to SD now go to the faster mean")
_document(['plan-batch-sizes', 'plan-cpu-fanout-miss', 'plan-cpu-limits', 'plan-file', 'plan-file-b4', 'plan-file-backup-fast', 'plan-file-c-list', 'plan-file-json', 'plan-file-new-k', 'plan-file-other-preset', 'plan-file-uniform-fanout', 'plan-h200-adaptive-json', 'plan-llama-b8-t1', 'plan-llama-draft-devices', 'plan-llama-explain', 'plan-llama-fanout-list-c-fast', 'plan-llama-risk', 'plan-llama-t1-c-k5', 'plan-llama-throughput-b16', 'plan-llama70b-1b-h100', 'plan-llama70b-1b-h100-json', 'plan-llama70b-1b-h200', 'plan-llama70b-1b-h200-json', 'plan-profile', 'plan-profile-t1-json', 'plan-qwen-coder-1.5b-0.5b-cpu', 'plan-qwen-coder-1.5b-0.5b-cpu-dense', 'plan-qwen-coder-1.5b-0.5b-cpu-dense-json', 'plan-qwen-coder-1.5b-0.5b-cpu-int8', 'plan-qwen-coder-1.5b-0.5b-cpu-int8-json', 'plan-qwen-coder-1.5b-0.5b-cpu-json', 'plan-qwen32-engine-knobs', 'plan-qwen32-k7-f3', 'plan-qwen32b-0.6b-h100', 'plan-qwen32b-0.6b-h100-json', 'plan-write'], _ISSUE_26_DECISION)
_ISSUE_26_LEVEL = ("issue 26: a calibrated latency's level is the ratio of measured to fitted total time (a run's mean round, "
                   "outliers included, not the robust fit's typical one; the fit report's 'level'), and SD's per-round "
                   "request + reply is measured on SD rounds (latency.sd_transfer_ms, the wait beyond the drafting) "
                   "instead of borrowing SSD's; the shipped grid profile was refit with both (CPU latencies +0.2-1.5%)")
_document(['calibrate-grid', 'calibrate-grid-t1', 'plan-cpu-fanout-miss', 'plan-cpu-limits', 'plan-profile', 'plan-profile-t1-json', 'plan-qwen-coder-1.5b-0.5b-cpu', 'plan-qwen-coder-1.5b-0.5b-cpu-dense', 'plan-qwen-coder-1.5b-0.5b-cpu-dense-json', 'plan-qwen-coder-1.5b-0.5b-cpu-int8', 'plan-qwen-coder-1.5b-0.5b-cpu-int8-json', 'plan-qwen-coder-1.5b-0.5b-cpu-json', 'sim-cpu-ar', 'sim-cpu-fixed-knobs', 'sim-cpu-json'], _ISSUE_26_LEVEL)

_ISSUE_25_CONTEXT = ("issue 25: ssd-sim takes a GPU preset's (or spec pair's) KV reads at the workload's mean decode context "
                     "(mean prompt + half the mean output: 128 + 64 / 2 = 160 tokens for the defaults) instead of the "
                     "preset's own 400 unless --context is given, and says so in a line (JSON: context_note); the "
                     "draft's tree rows read less KV, so some plans move (sim-llama: K = 5 -> 6)")
_document(['sim-chrome-trace', 'sim-h200-adaptive-t1', 'sim-llama', 'sim-llama-sd-json', 'sim-plan-file', 'sim-plan-file-b2-json', 'sim-plan-file-c', 'sim-plan-file-new-k', 'sim-poisson-json', 'sim-qwen32-fast-b4'], _ISSUE_25_CONTEXT)

_ISSUE_26_SD_STEP = ("issue 26: SD's first draft step feeds 2 tokens after a round in which some row accepted all K (the "
                     "K-th draft token, sampled but never fed, and the bonus; 1 - (1 - P(k = K))^b of the rounds), priced "
                     "at its expectation (LatencyModel.sd_draft_ms) instead of as a 1-token step, and calibration times "
                     "SD drafting with it; the grid profile was refit (its draft at 1 x 1 token 148.8 -> 136.4 ms, at "
                     "1 x 2 199.7 -> 189.6 ms; the draft's glue and branch beside a verify +0% -> +3.5%)")
_document(['calibrate-grid', 'calibrate-grid-t1', 'plan-cpu-fanout-miss', 'plan-cpu-limits', 'plan-profile', 'plan-profile-t1-json', 'plan-qwen-coder-1.5b-0.5b-cpu', 'plan-qwen-coder-1.5b-0.5b-cpu-dense', 'plan-qwen-coder-1.5b-0.5b-cpu-dense-json', 'plan-qwen-coder-1.5b-0.5b-cpu-int8', 'plan-qwen-coder-1.5b-0.5b-cpu-int8-json', 'plan-qwen-coder-1.5b-0.5b-cpu-json'], _ISSUE_26_SD_STEP)

_ISSUE_26_INTERFERENCE = ("issue 26: calibrated interference is levelled like the latencies: a shift added to both fitted "
                          "slowdowns makes the modelled SSD verifies sum to the measured ones (model.interference.interference_level; "
                          "the grid's +1.9% / +6.1% -> +2.1% / +6.3%)")
_document(['calibrate-grid', 'calibrate-grid-t1', 'plan-profile', 'plan-profile-t1-json'], _ISSUE_26_INTERFERENCE)

_ISSUE_25_GROWTH = ("issue 25: where ssd-sim takes the latencies at the workload's mean decode context it also prints (JSON: "
                    "context_growth) the simulated mode's analytic round averaged over the context growing from the mean "
                    "prompt to prompt + output (cli/growth.py), against the round at the mean context")
_document(['sim-chrome-trace', 'sim-h200-adaptive-t1', 'sim-llama', 'sim-llama-sd-json', 'sim-plan-file', 'sim-plan-file-b2-json', 'sim-plan-file-c', 'sim-plan-file-new-k', 'sim-poisson-json', 'sim-qwen32-fast-b4'], _ISSUE_25_GROWTH)
_ISSUE_25_PER_ROUND = ("issue 25: ssd-sim on a GPU preset charges each simulated round at its batch's mean context (prompts "
                       "plus the tokens decoded so far, sim/round_latency.ContextLatency) instead of the mean decode "
                       "context, so the simulated column (not the analytic one) moves and the context line says so")
_document(['sim-chrome-trace', 'sim-h200-adaptive-t1', 'sim-llama', 'sim-llama-sd-json', 'sim-plan-file', 'sim-plan-file-b2-json', 'sim-plan-file-c', 'sim-plan-file-new-k', 'sim-poisson-json', 'sim-qwen32-fast-b4'], _ISSUE_25_PER_ROUND)
_ISSUE_25_STAGGERED = ("issue 25: the growth check also gives the round's average with the batch's rows at independent points "
                       "of their decode (continuous batching; JSON staggered_tok_s / staggered_err_pct), beside the one "
                       "with the rows in step")
_document(['sim-chrome-trace', 'sim-h200-adaptive-t1', 'sim-llama', 'sim-llama-sd-json', 'sim-plan-file', 'sim-plan-file-b2-json', 'sim-plan-file-c', 'sim-plan-file-new-k', 'sim-poisson-json', 'sim-qwen32-fast-b4'], _ISSUE_25_STAGGERED)
_CALIBRATE_GRID = ['calibrate-grid', 'calibrate-grid-t1']  # the two calibrations of traces/cpu-fp32-grid
_ISSUE_26_TRANSFER = ("issue 26: SSD's transfer is each round's wait for the reply beyond the draft's lookup, backup and its "
                      "overrun of the previous verify (calibrate.ssd_transfer_samples); a low quantile of the wait alone "
                      "had counted a draft slower than the verify as link time (grid T = 1: 94.67 -> 1.22 ms)")
_document(_CALIBRATE_GRID, _ISSUE_26_TRANSFER)
_ISSUE_26_LATER_DRIFT = ("issue 26: the later drift measured again with the Xeon pool grid repeated 3.9 h later "
                         "(model.drift: 20 setups, 64-235 min apart: 15.4%, was 17.3% over 16 setups; the within-hour "
                         "drift unchanged)")
_document(_CALIBRATE_GRID, _ISSUE_26_LATER_DRIFT)
_ISSUE_26_EPYC_DRIFT = ("issue 26: the later drift measured again with the EPYC pool grid repeated 2.8 h later "
                        "(model.drift: 23 setups, 64-235 min apart: 14.5%, was 15.4% over 20 setups; the within-hour "
                        "drift unchanged)")
_document(_CALIBRATE_GRID, _ISSUE_26_EPYC_DRIFT)
_ISSUE_26_RESIDUAL = ("issue 26: the runs' spread around the latency fit is measured (model.residual: 5.2% pooled "
                      "over the 10 shipped calibrations with 3+ AR / SD runs), no longer assumed 8% where a "
                      "calibration has fewer than 3 AR / SD runs (these two have 2)")
_document(_CALIBRATE_GRID, _ISSUE_26_RESIDUAL)
_ISSUE_26_THIRD_SESSION = ("issue 26: the later drift and the runs' spread around a fit measured again with the EPYC "
                           "pool grid's third session (model.drift: 23 setups, 64-743 min apart: 13.7%, was 14.5%; "
                           "model.residual: 5.1% over 11 calibrations at 1.25 degrees of freedom, was 5.2% over 10 "
                           "at 1.2)")
_document(_CALIBRATE_GRID, _ISSUE_26_THIRD_SESSION)
_ISSUE_26_FRESH96 = ("issue 26: the runs' spread around a fit measured again with the grid on a new prompt file "
                     "(traces/cpu-fp32-epyc-fresh96; model.residual: 4.9% over 12 calibrations at 1.10 degrees of "
                     "freedom, was 5.1% over 11 at 1.25)")
_document(_CALIBRATE_GRID, _ISSUE_26_FRESH96)
_ISSUE_26_CLUSTERED_DRIFT = ("issue 26: the later drift counts each cluster of sessions once (model.drift.project_drift: "
                             "8.7% on 7 degrees of freedom with the Xeon pool's day-2 runs, was 13.7% counting all "
                             "23 setups), a run's drift is predicted by Student's t on the drift's degrees of freedom "
                             "(Drift.predictive_sd: 10.0% later, 5.2% within the hour), and the runs' spread around a "
                             "fit was measured again with "
                             "traces/cpu-fp32-xeon-fresh96 (model.residual: 4.8% over 13 calibrations at 1.11 degrees "
                             "of freedom, was 4.9% over 12 at 1.10)")
_document(_CALIBRATE_GRID, _ISSUE_26_CLUSTERED_DRIFT)
_ISSUE_26_FRESH96_LATER = ("issue 26: the later drift measured again with the fresh96 grid's T = 0 runs repeated 2.7 h "
                           "later on the same Xeon guest (traces/cpu-fp32-xeon-fresh96-later, 15-26% slower verifies): "
                           "9.2% on 8 degrees of freedom over 6 clusters of sessions, was 8.7% on 7; the next run's "
                           "10.4%, was 10.0%")
_document(_CALIBRATE_GRID, _ISSUE_26_FRESH96_LATER)
_ISSUE_26_FRESH96_THIRD = ("issue 26: the later drift measured again with the fresh96 grid's T = 0 runs a third time on "
                           "that Xeon guest (traces/cpu-fp32-xeon-fresh96-third, back to the first session's speed): "
                           "9.1% on 9 degrees of freedom over 6 clusters of 15 sessions, was 9.2% on 8; the next run's "
                           "10.2%, was 10.4%")
_document(_CALIBRATE_GRID, _ISSUE_26_FRESH96_THIRD)
_ISSUE_26_FRESH96_FOURTH = ("issue 26: the later drift measured again with the fresh96 grid's T = 0 runs a fourth time "
                            "on that Xeon guest (traces/cpu-fp32-xeon-fresh96-fourth, 4.9 h after the first session, "
                            "within 2% of its speed): 8.8% on 10 degrees of freedom over 6 clusters of 16 sessions, "
                            "was 9.1% on 9; the next run's 9.7%, was 10.2%")
_document(_CALIBRATE_GRID, _ISSUE_26_FRESH96_FOURTH)
_ISSUE_26_ZEN4 = ("issue 26: the later drift measured again with pool40i's AR and SD runs repeated 60 h later on "
                  "another guest of the Zen 4 kind (traces/cpu-fp32-zen4-pool40r, 0.73x the verify ms): 10.1% on 11 "
                  "degrees of freedom over 6 clusters of 17 sessions, was 8.8% on 10; the next run's 11.0%, was 9.7%; "
                  "and the runs' spread around a fit with traces/cpu-fp32-zen4-fresh96 (model.residual: 4.7% over 14 "
                  "calibrations at 1.09 degrees of freedom, was 4.8% over 13 at 1.11)")
_document(_CALIBRATE_GRID, _ISSUE_26_ZEN4)
_ISSUE_26_ZEN4_SAME_GUEST = ("issue 26: the later drift measured again with those two runs repeated 1.8 h later on the "
                             "same Zen 4 guest (traces/cpu-fp32-zen4-pool40s, 1.00-1.01x the verify ms): 10.5% on 12 "
                             "degrees of freedom over 6 clusters of 18 sessions, was 10.1% on 11; the next run's 11.4%, "
                             "was 11.0%")
_document(_CALIBRATE_GRID, _ISSUE_26_ZEN4_SAME_GUEST)
_ISSUE_26_ZEN4_FRESH96_LATER = ("issue 26: the later drift measured again with the Zen 4 fresh96 grid's T = 0 runs and SSD "
                                "T = 1 run repeated 8.9 h later on the same guest (traces/cpu-fp32-zen4-fresh96-later, "
                                "1.05-1.08x the verify ms): 10.2% on 13 degrees of freedom over 7 clusters of 20 sessions, "
                                "was 10.5% on 12; the next run's 11.0%, was 11.4%")
_document(_CALIBRATE_GRID, _ISSUE_26_ZEN4_FRESH96_LATER)
_ISSUE_26_ZEN4_FRESH96_THIRD = ("issue 26: the later drift measured again with the Zen 4 fresh96 grid's T = 0 runs a third "
                                "time on that guest 1.3 h after the second (traces/cpu-fp32-zen4-fresh96-third, back at "
                                "1.01-1.03x the first session's verify ms): 9.8% on 14 degrees of freedom over 7 clusters "
                                "of 21 sessions, was 10.2% on 13; the next run's 10.5%, was 11.0%")
_document(_CALIBRATE_GRID, _ISSUE_26_ZEN4_FRESH96_THIRD)
_ISSUE_26_ZEN5_CHECK = ("issue 26: the drifts measured again with traces/cpu-fp32-epyc-avx512/check's runs repeated on "
                        "another Zen 5 guest 128 h later (traces/cpu-fp32-zen5-check, 1.16-1.28x the verify ms; a "
                        "folder's check/ runs now count) and two repeat pairs of traces/cpu-fp32-splits that a plan "
                        "field at its empty default had kept apart: later 10.1% on 15 degrees of freedom over 8 clusters "
                        "of 23 sessions, was 9.8% on 14, the next run's 10.8%, was 10.5%; within the hour 4.5% over 12 "
                        "setups, was 4.8% over 10, the next run's 4.8%, was 5.2%")
_document(_CALIBRATE_GRID, _ISSUE_26_ZEN5_CHECK)
_EXTRAPOLATED_PER_MODE = ("issue 26: each mode's latency is extrapolated only past the forwards it runs "
                          "(model.uncertainty.for_forwards): AR's interval no longer takes the spread of the SSD plan's "
                          "larger verifies (2.37-3.18 -> 2.54-2.94 tok/s), and SSD's its own K's rather than the larger "
                          "of its K and SD's (4.74-6.05 -> 4.79-6.09)")
_document(["plan-profile"], _EXTRAPOLATED_PER_MODE)

_ISSUE_26_JIT_GLUE = ("issue 26: after a jit backup of every row ssd-run's glue feeds one token per row, not K + 1 "
                      "(LatencyModel.glue_ms after_jit; the reference engine's presets keep K + 1: jit_glue_full): the "
                      "CPU preset's SSD at b = 1, T = 0 5.32 -> 5.38 tok/s, ssd-sim's CPU round 830.5 -> 825.8 ms; "
                      "calibration times those glues at one token (model.interference.glue_tokens): the T = 1 grid's "
                      "draft fit R^2 0.975 -> 0.990, largest residual 50% -> 16%, glue / branch beside a verify "
                      "+1% -> +8%; the shipped grid profile refit with it (and with the timed range calibration now "
                      "records, so its intervals take the later drift: SSD 4.79-6.09 -> 4.45-6.52 tok/s)")
_document(["calibrate-grid", "calibrate-grid-t1", "plan-cpu-fanout-miss", "plan-cpu-limits", "plan-profile",
           "plan-profile-t1-json", *(f"plan-qwen-coder-1.5b-0.5b-cpu{v}{j}" for v in ("", "-dense", "-int8")
                                     for j in ("", "-json")), "sim-cpu-fixed-knobs", "sim-cpu-json"], _ISSUE_26_JIT_GLUE)

_MEMORY = ("the report's memory: how many sequences' KV caches fit (a spec pair's max_batch_size, now the smaller of the "
           "target's devices and the draft's device) and a warning for batch sizes above it")
_document([c for c in COMMANDS if c.endswith("-json") and c.startswith("plan-") and c != "plan-spec-70b-128k-json"]
          + ["plan-write", "plan-batch-sizes"], _MEMORY)
_MEMORY_PER_MODE = ("the report's memory counts each mode's KV caches where they are (model.memory): by_mode (null "
                    "for a measured profile), SD's draft weights and cache on the target's devices, SSD's branch "
                    "rows (budget x K tokens a sequence) on the draft's; max_batch_size and the warning are the "
                    "recommended mode's")
_document([c for c in COMMANDS if c.endswith("-json") and c.startswith("plan-")]
          + ["plan-write", "plan-batch-sizes"], _MEMORY_PER_MODE)


def fixed_host():
    from ssd_sim.io.host import Host

    return Host(cpu="Golden Test CPU", cpu_id="GenuineTest family 6 model 1 stepping 1", isa=("avx2", "fma"), cores=2,
                memory_gib=24.0, torch="2.13.0+cpu")


@contextlib.contextmanager
def _deterministic():
    """This host replaced by fixed_host(), no terminal width from the environment."""
    import ssd_sim.plan.report as report

    saved, env = report.current_host, os.environ.pop("COLUMNS", None)
    report.current_host = fixed_host
    try:
        yield
    finally:
        report.current_host = saved
        if env is not None:
            os.environ["COLUMNS"] = env


def run(cid: str, folder: Path) -> str:
    """Run one command in this process inside `folder` (empty); its record (exit status, stdout, written files,
    stderr when failing)."""
    from ssd_sim.cli.plan import main as plan_main
    from ssd_sim.cli.sim import main as sim_main

    (folder / "in").symlink_to(INPUTS)
    (folder / "traces").symlink_to(ROOT / "traces")
    out_dir = folder / "out"
    out_dir.mkdir()
    argv = shlex.split(COMMANDS[cid])
    main = {"ssd-plan": plan_main, "ssd-sim": sim_main}[argv[0]]
    stdout, stderr = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with _deterministic(), contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main(argv[1:])
            except SystemExit as e:
                code = e.code
    finally:
        os.chdir(cwd)
    record = [f"$ {COMMANDS[cid]}", f"exit: {code}", "--- stdout", stdout.getvalue()]
    for f in sorted(out_dir.rglob("*")):
        record += [f"--- file {f.relative_to(folder)}", f.read_text()]
    if code != 0:
        record += ["--- stderr", stderr.getvalue()]
    return "\n".join(record) + "\n"


_NUMBER = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")
# Solver tolerances (brentq's xtol, least squares' ftol) stop at another point within them on another CPU or numpy /
# scipy build: measured, calibrate-grid-t1's flat latency fit moves the draft's fixed_ms by 1.1e-5 relative
# (128.37569 -> 128.37424) and a near-zero slowdown by 4.9e-6 absolute (5.57e-5 -> 5.08e-5) between two hosts.
REL_TOL = 1e-4
ABS_TOL = 1e-5  # for numbers near zero, where a relative tolerance means nothing


def same_record(got: str, want: str) -> bool:
    """The record's text equal and every decimal number within REL_TOL (or ABS_TOL): the last digits of a float
    differ between CPU kinds and numpy / scipy builds (vector paths, solver stopping points)."""
    if got == want:
        return True
    a, b = _NUMBER.findall(got), _NUMBER.findall(want)
    return (_NUMBER.sub("#", got) == _NUMBER.sub("#", want) and len(a) == len(b)
            and all(abs(float(x) - float(y)) <= max(REL_TOL * abs(float(y)), ABS_TOL) for x, y in zip(a, b, strict=True)))


def golden_path(cid: str) -> Path:
    return GOLDEN / f"{cid}.txt"


def main(argv: list[str]) -> int:
    import tempfile

    if argv[:1] != ["--update"] or not set(argv[1:]) <= set(COMMANDS):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    GOLDEN.mkdir(exist_ok=True)
    for cid in argv[1:] or COMMANDS:
        with tempfile.TemporaryDirectory() as d:
            golden_path(cid).write_text(run(cid, Path(d)))
        print(f"recorded {golden_path(cid).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
