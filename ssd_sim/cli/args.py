"""What ssd-plan, ssd-sim and ssd-run share: the knob flags, one-line errors and the host report."""

from __future__ import annotations

import argparse
import functools
import os
import re
import signal
import sys
import threading
from typing import Any

from ssd_sim.io.errors import ConfigError, path_error
from ssd_sim.io.limits import MAX_BATCH
from ssd_sim.io.values import (  # noqa: F401  (re-exported: the CLIs' other flags parse with them too)
    bounded_int,
    fan_out_arg,
    fan_out_list_arg,
    nonneg_float,
    nonneg_int,
    positive_int,
    threshold_arg,
    unit_float,
)
from ssd_sim.model.drift import HORIZONS
from ssd_sim.plan.plan import knob_fields


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (no usage dump) and exits with status 2."""

    def error(self, message: str):  # noqa: D102 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def cli_entry(prog: str):
    """Decorate a CLI main: a closed stdout (`ssd-plan --json | head`) ends quietly, Ctrl-C ends with one line and
    status 130, SIGTERM with one line and 143, a ConfigError (or a path too long: io.errors.path_error) that escaped
    with its one line and status 2."""

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
            except (KeyboardInterrupt, Terminated) as e:
                raise SystemExit(stopped(prog, e)) from None
            except ConfigError as e:
                fail(prog, e)
            except OSError as e:  # a path too long for the file system, wherever it was first touched
                if (err := path_error(e)) is None:
                    raise
                fail(prog, err)
            finally:
                if old is not None:
                    signal.signal(signal.SIGTERM, old)

        return run

    return wrap


def stopped(prog: str, signalled: BaseException) -> int:
    """Print the one line of a run stopped by Ctrl-C (KeyboardInterrupt) or SIGTERM (Terminated); its exit status."""
    word, status = ("terminated", 143) if isinstance(signalled, Terminated) else ("interrupted", 130)
    print(f"{prog}: {word}", file=sys.stderr)
    return status


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
    print_error(prog, err)
    raise SystemExit(2)


def print_error(prog: str, err: Exception) -> None:
    """The one line of an error, on stderr (fail prints it before exiting)."""
    print(f"{prog}: error: {one_line(str(err))}", file=sys.stderr)


def batch_size_list(text: str) -> tuple[int, ...]:
    """An argparse type for --batch-sizes: '1,2,4,8,16' -> (1, 2, 4, 8, 16), whole numbers of sequences in
    1..MAX_BATCH, sorted, each once; anything else (empty, 0, negative, fractional, not a number) is one line."""
    example = "give batch sizes as comma-separated whole numbers, e.g. 1,2,4,8,16"
    parts = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in parts):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty entry: {example}")
    if len(parts) > 64:
        raise argparse.ArgumentTypeError(f"{len(parts)} batch sizes: at most 64 in one sweep")
    parse = bounded_int(1, MAX_BATCH, "sequences")
    out = []
    for t in parts:
        try:
            out.append(parse(t))
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"{e}: {example}") from None
    return tuple(sorted(set(out)))


def add_knob_args(p: argparse.ArgumentParser, workload: bool = True, helps: dict[str, str] | None = None) -> None:
    """The knob flags of the schema (ssd_sim.plan.plan.Plan): SSD knobs, and with `workload` the workload flags.
    Any flag given is fixed; the rest comes from the plan file or is searched (ssd_sim.plan.knobs.resolve).
    `helps`: a CLI's own help for a flag it takes but limits (ssd-run: one draft device)."""
    titles = {"knob": "SSD knobs (fixed when given, otherwise searched / taken from --plan)", "workload": "workload"}
    groups = {g: p.add_argument_group(t) for g, t in titles.items() if g == "knob" or workload}
    for name, k in knob_fields().items():
        if k.flag is not None and k.group in groups:
            add_knob_arg(groups[k.group], name, **({"help": helps[name]} if helps and name in helps else {}))


def add_knob_arg(group, name: str, **extra) -> None:
    """One knob's flag as the schema declares it (flag, short flag, parser, help); `extra` e.g. a default."""
    k = knob_fields()[name]
    names = [k.short, k.flag] if k.short else [k.flag]
    kw = {"choices": k.choices} if k.choices else {"type": k.parse, "metavar": k.metavar}
    group.add_argument(*names, dest=name, **{"help": k.help, **kw, **extra})


def add_horizon_arg(group) -> None:
    """--horizon: which run the intervals' latency spread is for (model.drift), as ssd-plan and ssd-sim take it."""
    group.add_argument("--horizon", choices=HORIZONS, default="later",
                       help="when the run happens, for the intervals' latency spread: later = more than an hour "
                            "after the profile's latencies were timed, or unknown (default; the drift measured over "
                            "hours); session = within the hour (e.g. right after ssd-run calibrate-here): a narrower "
                            "spread where the profile measured one")


def knob_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The knob and workload flags as given (None = not given), by Plan field, for ssd_sim.plan.knobs.resolve."""
    return {name: getattr(args, name, None) for name, k in knob_fields().items() if k.flag is not None}
