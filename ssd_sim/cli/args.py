"""What ssd-plan, ssd-sim and ssd-run share: the knob flags, one-line errors and the host report."""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import signal
import sys
import threading

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import current_host, host_warning
from ssd_sim.io.limits import MAX_BATCH, MAX_BUDGET, MAX_DRAFT_DEVICES, MAX_K
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import BACKUPS, JIT_REDRAFT, Plan
from ssd_sim.plan.planner import Knobs
from ssd_sim.theory.saguaro import DOWNWEIGHT_SETS


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (no usage dump) and exits with status 2."""

    def error(self, message: str):  # noqa: D102 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def cli_entry(prog: str):
    """Decorate a CLI main: a closed stdout (`ssd-plan --json | head`) ends quietly, Ctrl-C ends with one line and
    status 130, SIGTERM with one line and 143, a ConfigError that escaped with its one line and status 2."""

    def wrap(main):
        @functools.wraps(main)
        def run(*args, **kwargs):
            old = signal.signal(signal.SIGTERM, raise_terminated) if _main_thread() else None
            try:
                return main(*args, **kwargs)
            except BrokenPipeError:
                # the reader went away: say nothing more (stdout is gone) and do not let Python complain at exit
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return 0
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                raise SystemExit(130) from None
            except Terminated:
                print(f"{prog}: terminated", file=sys.stderr)
                raise SystemExit(143) from None
            except ConfigError as e:
                fail(prog, e)
            finally:
                if old is not None:
                    signal.signal(signal.SIGTERM, old)

        return run

    return wrap


class Terminated(BaseException):
    """SIGTERM arrived (raised in the main thread by raise_terminated; a BaseException, like Ctrl-C's
    KeyboardInterrupt, so no `except Exception` on the way swallows it). Shared with ssd-run's handler."""


def raise_terminated(signum, frame) -> None:
    """A SIGTERM handler: turn the signal into Terminated in the main thread."""
    raise Terminated()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def one_line(text: str) -> str:
    """text with control characters (newlines from a file's keys or values) escaped, so it prints as one line."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], text)


def fail(prog: str, err: Exception) -> None:
    """Print a one-line error for bad input and exit 2."""
    print(f"{prog}: error: {one_line(str(err))}", file=sys.stderr)
    raise SystemExit(2)


def fan_out_arg(text: str) -> int | tuple[int, ...]:
    """'3' -> 3 (uniform, per position); '4,3,3,2' -> (4, 3, 3, 2) (one per position 0..K)."""
    parts = text.replace(" ", "").split(",")
    if len(text) > 4096 or any(p == "" for p in parts):
        raise argparse.ArgumentTypeError(
            f"invalid fan-out {text[:40]!r}: give an integer (uniform) or a comma list like 4,3,3,2 (no empty entries)")
    try:
        vals = [int(v) for v in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid fan-out {text[:40]!r}: give an integer (uniform) or a comma list like 4,3,3,2") from None
    if any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"invalid fan-out {text!r}: entries must be integers >= 0")
    if any(v > MAX_BUDGET for v in vals):
        raise argparse.ArgumentTypeError(f"invalid fan-out {text[:40]!r}: at most {MAX_BUDGET} guesses per sequence "
                                         "and round in all")
    return vals[0] if len(vals) == 1 and "," not in text else tuple(vals)


def fan_out_list_arg(text: str) -> tuple[int, ...]:
    v = fan_out_arg(text)
    return (v,) if isinstance(v, int) else v


def _number(text: str, cast, kind: str):
    if len(text) > 64:
        raise argparse.ArgumentTypeError(f"invalid {kind} {text[:20]}... ({len(text)} characters)")
    try:
        return cast(text)
    except ValueError:
        hint = " (write it out as an integer)" if cast is int and _is_float(text) else ""
        raise argparse.ArgumentTypeError(f"invalid {kind} {text!r}{hint}") from None


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def unit_float(text: str) -> float:
    v = _number(text, float, "number")
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"{v} is outside [0, 1]")
    return v


def positive_int(text: str) -> int:
    v = _number(text, int, "integer")
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be >= 1")
    return v


def bounded_int(lo: int, hi: int, what: str):
    """An argparse type: an integer in lo..hi; the error states the range and what the number counts."""

    def parse(text: str) -> int:
        v = _number(text, int, "integer")
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is outside {lo}..{hi} ({what})")
        return v

    parse.__name__ = f"integer in {lo}..{hi}"
    return parse


def nonneg_int(text: str) -> int:
    v = _number(text, int, "integer")
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} must be >= 0")
    return v


def nonneg_float(text: str) -> float:
    v = _number(text, float, "number")
    if not (v >= 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"{v} must be a finite number >= 0")
    return v


def threshold_arg(text: str) -> float:
    if text.lower() in ("inf", "never", "none"):
        return math.inf
    v = nonneg_float(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be a batch size >= 1 (or 'inf')")
    return v


def add_knob_args(p: argparse.ArgumentParser, workload: bool = True) -> None:
    """The SSD knob flags. Any flag given is fixed; the rest comes from the plan file or is searched."""
    g = p.add_argument_group("SSD knobs (fixed when given, otherwise searched / taken from --plan)")
    g.add_argument("-k", "--num-speculative-tokens", type=bounded_int(1, MAX_K, "draft tokens per round"), metavar="K",
                   help=f"draft tokens proposed per round (tokens, 1..{MAX_K})")
    g.add_argument("--fan-out", type=fan_out_arg, metavar="F|F0,..,FK",
                   help="cached bonus-token guesses per stopping position: one integer (uniform) or K+1 "
                        f"comma-separated integers (hit case, F^p); at most {MAX_BUDGET} in all")
    g.add_argument("--fan-out-miss", type=fan_out_list_arg, metavar="F0,..,FK",
                   help="the same after a round served by the backup (F^b); must sum like --fan-out")
    g.add_argument("--saguaro-c", type=unit_float, metavar="C",
                   help="Saguaro down-weight of the cached tokens in [0, 1] (1 = plain sampling)")
    g.add_argument("--downweight", choices=DOWNWEIGHT_SETS,
                   help="which set C multiplies: top_f (paper) or top_f_plus_1 (reference engine); default: what "
                        "the profile's engine does")
    g.add_argument("--backup", choices=BACKUPS,
                   help="on a cache miss: jit (neural redraft), fast (random tokens) or adaptive (by batch size)")
    g.add_argument("--backup-threshold", type=threshold_arg, metavar="B",
                   help="adaptive backup: jit below this batch size, fast at or above (sequences; 'inf' = never)")
    g.add_argument("--jit-redraft", choices=JIT_REDRAFT,
                   help="jit backup redrafts only the rows that missed (rows, ssd-run) or the whole batch (batch, "
                        "the reference engine); default: what the profile's engine does")
    if workload:
        w = p.add_argument_group("workload")
        w.add_argument("-b", "--batch-size", type=bounded_int(1, MAX_BATCH, "sequences"),
                       metavar="B", help=f"sequences decoded together (1..{MAX_BATCH}, default 1)")
        w.add_argument("-t", "--temperature", type=nonneg_float, metavar="T",
                       help="sampling temperature of target and draft (default 0 = greedy)")
        w.add_argument("--draft-devices", type=bounded_int(1, MAX_DRAFT_DEVICES, "draft accelerators"), metavar="N",
                       help=f"devices running the draft; more devices hold a bigger cache budget (1..{MAX_DRAFT_DEVICES}, "
                            "default 1)")


def knobs_from_args(args: argparse.Namespace) -> Knobs:
    """The knobs the user fixed on the command line (None = search)."""
    return Knobs(
        num_speculative_tokens=args.num_speculative_tokens,
        fan_out=args.fan_out,
        fan_out_miss=args.fan_out_miss,
        saguaro_c=args.saguaro_c,
        backup=args.backup,
        backup_threshold=args.backup_threshold,
        downweight=args.downweight,
        jit_redraft=args.jit_redraft,
    )


def plan_from_args(args: argparse.Namespace, base: Plan | None = None) -> Plan:
    """A complete plan: the base plan (from --plan, or defaults) with every given flag applied on top.

    Raises ConfigError naming the field when the result is inconsistent (e.g. a fan-out of the wrong length).
    """
    d = (base or Plan()).to_dict()
    d["backup_threshold"] = math.inf if d["backup_threshold"] is None else d["backup_threshold"]
    K = args.num_speculative_tokens or d["num_speculative_tokens"]
    if isinstance(args.fan_out, tuple):
        if args.num_speculative_tokens is not None and len(args.fan_out) != K + 1:
            raise ConfigError("fan_out", f"--fan-out has {len(args.fan_out)} entries, expected K+1 = {K + 1}")
        K = len(args.fan_out) - 1
        d["fan_out"] = args.fan_out
    elif isinstance(args.fan_out, int):
        d["fan_out"] = (args.fan_out,) * (K + 1)
    elif base is None or K != d["num_speculative_tokens"]:
        if base is not None:
            raise ConfigError("fan_out", f"the plan's fan-out has {len(d['fan_out'])} entries but K = {K} "
                              f"needs {K + 1}; also pass --fan-out")
        d["fan_out"] = (1,) * (K + 1)
    d["num_speculative_tokens"] = K
    if args.fan_out_miss is not None:
        d["fan_out_miss"] = args.fan_out_miss
    elif args.fan_out is not None or len(d["fan_out_miss"]) != K + 1 or sum(d["fan_out_miss"]) != sum(d["fan_out"]):
        d["fan_out_miss"] = d["fan_out"]
    for flag, key in (("saguaro_c", "saguaro_c"), ("downweight", "downweight"), ("backup", "backup"),
                      ("backup_threshold", "backup_threshold"), ("jit_redraft", "jit_redraft"),
                      ("temperature", "temperature"), ("batch_size", "batch_size"),
                      ("draft_devices", "draft_devices")):
        v = getattr(args, flag, None)
        if v is not None:
            d[key] = v
    d["fan_out"], d["fan_out_miss"] = tuple(d["fan_out"]), tuple(d["fan_out_miss"])
    return Plan(**d)


def host_report(profile: Profile) -> dict:
    """Where the profile was measured, this host, and the one-line warning when they differ (or None)."""
    here = current_host()
    return {"measured_on": profile.host.to_dict() if profile.host is not None else None, "here": here.to_dict(),
            "warning": host_warning(profile.name, profile.host, here)}
