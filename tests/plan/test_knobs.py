"""The knob schema and its one merge rule: the same flags resolve a plan file identically in ssd-plan, ssd-sim and
ssd-run; what a new K drops, ssd-plan and ssd-sim search alike and ssd-run refuses in one line; every knob, its flag
and its engine default are declared once (in Plan's fields)."""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path

import pytest

from ssd_runtime.cli import build_parser as run_parser
from ssd_sim.cli.args import knob_flags
from ssd_sim.cli.plan import build_parser as plan_parser
from ssd_sim.cli.plan import main as plan_main
from ssd_sim.cli.sim import build_parser as sim_parser
from ssd_sim.cli.sim import main as sim_main
from ssd_sim.io.errors import ConfigError
from ssd_sim.model.profile import ENGINES
from ssd_sim.plan.knobs import Knobs, resolve
from ssd_sim.plan.plan import Backup, Mode, Plan, PlanFile, knob_fields

ROOT = Path(__file__).resolve().parents[2]
BASE = Plan(num_speculative_tokens=3, fan_out=(2, 2, 1, 3), fan_out_miss=(8, 0, 0, 0), saguaro_c_list=(0.4, 0.6, 0.8),
            backup="adaptive", backup_threshold=4, temperature=1.0, batch_size=2, downweight="top_f_plus_1")
FLAGS = ["", "-k 5", "-k 3", "--fan-out 2", "--fan-out 1,2,3", "-k 2 --fan-out 1,1,1", "--fan-out-miss 8,0,0,0",
         "--saguaro-c 0.5", "--backup fast -b 8 -t 0", "--jit-redraft batch --downweight top_f",
         "--backup-threshold inf --draft-devices 1", "-k 4 --fan-out 3 --fan-out-miss 15,0,0,0,0"]


def flags(parser, line: str) -> dict:
    return knob_flags(parser.parse_args(shlex.split(line)))


@pytest.mark.parametrize("base", [BASE, None], ids=["plan-file", "no-plan-file"])
@pytest.mark.parametrize("line", FLAGS)
def test_the_same_flags_resolve_identically_in_all_three_clis(base, line):
    results = [resolve(base, flags(p(), line)) for p in (plan_parser, sim_parser, run_parser)]
    assert results[0] == results[1] == results[2], line


def test_a_plan_file_fixes_every_knob_and_flags_replace_what_they_name():
    res = resolve(BASE, flags(plan_parser(), "--backup fast -b 8"))
    assert res.dropped == () and res.plan(mode="ssd") == BASE.replace(backup="fast", batch_size=8)
    assert res.knobs == Knobs.of(BASE).replace(backup="fast")


def test_a_new_k_drops_the_fan_outs_and_the_c_list_that_no_longer_fit():
    res = resolve(BASE, flags(sim_parser(), "-k 5"))
    assert res.dropped == ("fan_out", "fan_out_miss", "saguaro_c_list")
    assert res.knobs.num_speculative_tokens == 5 and res.knobs.fan_out is None and res.knobs.saguaro_c_list is None
    with pytest.raises(ConfigError, match=r"fan_out: K = 5 drops the plan file's fan-out .* give --fan-out with 6 "
                                          r"entries, or let ssd-plan choose one: ssd-plan --plan FILE -k 5"):
        res.plan()


def test_a_uniform_fan_out_keeps_the_plan_files_k_and_a_single_c_replaces_its_list():
    res = resolve(BASE, flags(run_parser(), "--fan-out 2 --saguaro-c 0.5"))
    plan = res.plan()
    assert plan.fan_out == (2, 2, 2, 2) == plan.fan_out_miss and plan.saguaro_c == 0.5 and plan.saguaro_c_list == ()


def test_k_and_a_fan_out_list_that_disagree_are_one_message():
    with pytest.raises(ConfigError, match=r"--fan-out has 2 entries but -k 3 needs K\+1 = 4"):
        resolve(None, flags(plan_parser(), "-k 3 --fan-out 1,2"))


def test_without_a_plan_file_the_open_knobs_take_the_plan_defaults():
    assert resolve(None, flags(run_parser(), "-k 2 --fan-out 3")).plan() == Plan(num_speculative_tokens=2,
                                                                                fan_out=(3, 3, 3))
    assert resolve(None, {}).plan() == Plan()


def test_ssd_plan_and_ssd_sim_search_a_dropped_fan_out_alike(tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(PlanFile(BASE.replace(temperature=0.0, saguaro_c_list=()),
                             {"profile": {"name": "qwen32b-0.6b-h100", "preset": "qwen32b-0.6b-h100"}}).to_json())
    assert plan_main(["--plan", str(path), "-k", "5", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["plan"]
    # --context 400: the preset's own, which ssd-plan uses; without it ssd-sim takes the KV reads at its workload's
    # mean decode context (128 + 16 / 2 tokens), another profile with its own best fan-out
    assert sim_main(["--plan", str(path), "--preset", "qwen32b-0.6b-h100", "-k", "5", "--tokens", "16",
                     "--context", "400", "--json"]) == 0
    simulated = json.loads(capsys.readouterr().out)["plan"]
    assert planned == simulated and planned["num_speculative_tokens"] == 5 and len(planned["fan_out"]) == 6


def test_mode_and_backup_are_enums_that_read_and_write_as_strings():
    p = Plan(backup="fast", mode="sd")
    assert p.backup is Backup.FAST and p.mode is Mode.SD and p.backup == "fast" and f"{p.mode}" == "sd"
    assert json.dumps(p.to_dict())  # plain JSON
    assert Plan.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_every_engine_default_names_every_engine_a_profile_can_have():
    for name, k in knob_fields().items():
        assert k.engine is None or set(k.engine) == set(ENGINES), name


def test_each_knob_is_declared_once_in_the_code():
    """The knob set lives in Plan's fields only: no other class declares five or more of them (the old Knobs,
    the CLI's positional Knobs(...) and its _override did), nothing builds Knobs positionally, and no CLI adds a
    knob flag of its own (they all come from add_knob_args' loop over the schema)."""
    names = set(knob_fields())
    sources = {p: p.read_text() for d in ("ssd_sim", "ssd_runtime", "app") for p in (ROOT / d).rglob("*.py")}
    for path, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.name != "Plan":
                declared = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                            and isinstance(s.target, ast.Name) and s.target.id in names]
                assert len(declared) < 5, (path.name, node.name, declared)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Knobs":
                assert not node.args, (path.name, "Knobs(...) with positional arguments")
        for k in knob_fields().values():
            if k.flag and path.name != "engine_rules.py":  # engine_rules encodes other engines' own flags
                assert not re.search(rf"add_argument\([^)]*['\"]{k.flag}['\"]", text), (path.name, k.flag)


def test_an_infinite_threshold_flag_means_never_fast_but_a_plan_file_s_null_means_none_chosen():
    import math

    from ssd_sim.model.presets import get_preset
    from ssd_sim.plan.planner import PlanRequest, make_plan

    never = resolve(None, {"backup": "adaptive", "backup_threshold": math.inf}).knobs
    assert never.backup_threshold == math.inf
    r = make_plan(get_preset("llama70b-1b-h100"), PlanRequest(batch_size=8, knobs=never))
    assert r.ssd.backup == "jit" and r.plan.backup_threshold == math.inf  # the crossover (b* = 2) is not used
    from_file = resolve(Plan(backup="adaptive"), {}).knobs  # backup_threshold null in the file
    assert from_file.backup_threshold is None


def test_the_plan_line_says_when_the_threshold_is_fixed_and_where_the_crossover_is(capsys):
    from ssd_sim.cli.plan import main

    assert main(["--preset", "llama70b-1b-h100", "-b", "8", "--backup", "adaptive", "--backup-threshold", "inf"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "backup=adaptive (fast backup from b*=never, fixed; the crossover is b*=2;" in out


@pytest.mark.parametrize("T,C,warns", [(0.0, 0.5, True), (1e-6, 0.5, True), (1.0, 0.5, False), (0.0, 1.0, False),
                                       (0.0, None, False)])
def test_a_saguaro_c_for_greedy_decoding_is_said_to_have_no_effect(T, C, warns):
    from ssd_sim.plan.knobs import ignored_at_greedy

    line = ignored_at_greedy({"saguaro_c": C}, T)
    assert (line is not None) == warns
    if warns:
        assert line == (f"--saguaro-c 0.5 has no effect at T = {T:g}: decoding is greedy, and Saguaro sampling acts "
                        "only when the draft samples (T > 0)")


def test_ssd_plan_and_ssd_sim_print_that_c_is_ignored_at_t_0(capsys):
    assert plan_main(["--preset", "llama70b-1b-h100", "--saguaro-c", "0.5", "-t", "0", "--json"]) == 0
    assert "ssd-plan: warning: --saguaro-c 0.5 has no effect at T = 0" in capsys.readouterr().err
    assert sim_main(["--preset", "llama70b-1b-h100", "--saguaro-c", "0.5", "--tokens", "8", "--json"]) == 0
    assert "ssd-sim: warning: --saguaro-c 0.5 has no effect at T = 0" in capsys.readouterr().err


def test_ssd_run_s_help_says_it_takes_one_draft_device():
    help_text = " ".join(run_parser().format_help().split())
    assert "--draft-devices N 1 only: ssd-run runs the draft on one device" in help_text


@pytest.mark.parametrize("mode, flags, needle", [
    ("ar", "-k 3", "num_speculative_tokens: --num-speculative-tokens does nothing with --mode ar (the target decodes "
                   "alone); drop it, or use --mode ssd"),
    ("sd", "--fan-out 2", "fan_out: --fan-out does nothing with --mode sd (SD drafts on the target's devices and "
                          "caches nothing)"),
    ("sd", "--saguaro-c 0.5", "--saguaro-c does nothing with --mode sd"),
    ("ssd-fast", "--backup jit", "backup: --backup jit contradicts --mode ssd-fast (the fast backup); drop one, or use "
                                 "--mode ssd --backup jit"),
    ("ssd-adaptive", "--backup fast", "--backup fast contradicts --mode ssd-adaptive"),
    ("ssd-fast", "--backup-threshold 8", "--backup-threshold does nothing with --mode ssd-fast"),
])
def test_a_knob_flag_the_mode_never_reads_is_refused_in_ssd_sim(capsys, mode, flags, needle):
    with pytest.raises(SystemExit) as e:
        sim_main(["--preset", "llama70b-1b-h100", "--mode", mode, *flags.split(), "--tokens", "8"])
    assert e.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.parametrize("mode, flags", [("ar", "-t 1 -b 2"), ("sd", "-k 3 -t 1"), ("ssd-fast", "--backup fast -k 2"),
                                         ("ssd-adaptive", "--backup-threshold 4"), ("ssd", "--fan-out 2 --backup fast")])
def test_the_knobs_a_mode_reads_pass(mode, flags):
    assert sim_main(["--preset", "llama70b-1b-h100", "--mode", mode, *flags.split(), "--tokens", "8", "--json"]) == 0


def test_ssd_run_refuses_a_knob_its_mode_never_reads_before_loading_anything(capsys):
    from ssd_runtime.cli import main as run_main

    with pytest.raises(SystemExit) as e:
        run_main(["--mode", "ar", "-k", "3", "--target", "/nonexistent"])
    assert e.value.code == 2
    assert "--num-speculative-tokens does nothing with --mode ar" in capsys.readouterr().err
