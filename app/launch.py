"""`ssd-dashboard`: start the Streamlit app (app/dashboard.py); Streamlit's options go to `streamlit run`.

    ssd-dashboard                                  # http://127.0.0.1:8501, this machine only
    ssd-dashboard --host 0.0.0.0 --port 8600       # every network interface: anyone who reaches the port
    ssd-dashboard --server.port 8600 --server.headless true

Options: --host ADDR, --port N (or --host=ADDR, --port=N) and Streamlit's --section.option VALUE; anything else
(an unknown flag, a value of the wrong type) is refused in one line with exit status 2 before anything starts.

By default the dashboard listens on 127.0.0.1 only: it lists the files under traces/ and accepts uploads, which
a planning tool on a shared GPU box should not offer to the network by accident. `--host ADDR` (or Streamlit's
own `--server.address ADDR`) chooses the address on purpose. Uploads are capped at MAX_UPLOAD_MB (Streamlit's
server.maxUploadSize, and again by the app with a one-line message) and parsed in memory, never written to disk.
"""

from __future__ import annotations

import os
import sys
from importlib.util import find_spec
from pathlib import Path

DASHBOARD = Path(__file__).resolve().with_name("dashboard.py")
DEFAULT_HOST = "127.0.0.1"
MAX_UPLOAD_MB = 64  # a trace with distributions is ~0.7 KB per generated token: 64 MB holds a b = 16 x 2,048-token run twice


OWN = {"--host": "--server.address", "--port": "--server.port"}  # ssd-dashboard's own options -> Streamlit's
BOOLS = {"true", "false", "1", "0", "yes", "no", "on", "off", "t", "f", "y", "n"}  # what Streamlit's flags read
NEEDS, EXAMPLE = {"--host": "an address", "--port": "a port number"}, {"--host": "0.0.0.0", "--port": "8600"}
USAGE = "ssd-dashboard takes --host ADDR, --port N and Streamlit's --section.option VALUE (e.g. --server.headless true)"


def command(args: list[str]) -> list[str]:
    """The `streamlit run` command line for the dashboard: Streamlit options passed through, the listening address
    (--host, else 127.0.0.1 unless --server.address is given), --port as --server.port and the upload cap (unless
    --server.maxUploadSize is given). ValueError (one line) for anything else, before anything starts."""
    passed, own = [], {}
    for name, value, tokens in _options(args):
        if name in OWN:
            if OWN[name] in own or name in own:
                raise ValueError(f"{name} is given twice")
            own[name] = value
        else:
            passed += tokens
    given = {a.split("=", 1)[0] for a in passed if a.startswith("--")}
    for mine, theirs in OWN.items():
        if mine in own and theirs in given:
            raise ValueError(f"give {mine} or {theirs}, not both")
    extra = [] if "--server.address" in given else ["--server.address", own.get("--host", DEFAULT_HOST)]
    if "--server.maxUploadSize" not in given:
        extra += ["--server.maxUploadSize", str(MAX_UPLOAD_MB)]
    port = ["--server.port", own["--port"]] if "--port" in own else []
    return [sys.executable, "-m", "streamlit", "run", str(DASHBOARD), *extra, *passed, *port]


def _options(args: list[str]) -> list[tuple[str, str, list[str]]]:
    """(name, value, the tokens as given) of each `--name VALUE` / `--name=VALUE`; ValueError for a token that is not
    one of ours or a known Streamlit option, a missing value, or a value of the wrong type."""
    out, i = [], 0
    while i < len(args):
        start, token = i, args[i]
        name, eq, value = token.partition("=")
        if not name.startswith("--") or (name not in OWN and "." not in name):
            raise ValueError(f"unknown argument {token[:60]!r}: {USAGE}")
        if not eq:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise ValueError(f"{name} needs {NEEDS.get(name, 'a value')}, e.g. {name} {EXAMPLE.get(name, 'VALUE')}")
            i += 1
            value = args[i]
        _check_value(name, value)
        out.append((name, value, args[start:i + 1]))
        i += 1
    return out


def _check_value(name: str, value: str) -> None:
    """ValueError unless value suits the option: a port 1..65535, or the type of a Streamlit option."""
    if name in ("--port", "--server.port"):
        if not (value.isascii() and value.isdigit() and 1 <= int(value) <= 65535):
            raise ValueError(f"{name} {value[:40]!r}: give a port number in 1..65535")
        return
    if name in ("--host", "--server.address") and not value.strip():
        raise ValueError(f"{name} needs an address, e.g. {name} 0.0.0.0")
    if name in OWN:
        return
    kinds = _streamlit_options()
    kind = kinds.get(name[2:], "unknown") if kinds is not None else None
    if kind == "unknown":
        raise ValueError(f"unknown Streamlit option {name[:60]!r} (`streamlit config show` lists them): {USAGE}")
    if kind is bool and value.lower() not in BOOLS:
        raise ValueError(f"{name} {value[:40]!r}: give true or false")
    if kind in (int, float):
        try:
            kind(value)
        except ValueError:
            raise ValueError(f"{name} {value[:40]!r}: give a number") from None


def _streamlit_options() -> dict[str, type] | None:
    """Streamlit's config options and their types (None where this Streamlit does not expose them)."""
    try:
        from streamlit import config

        return {k: o.type for k, o in config._config_options_template.items()}
    except (ImportError, AttributeError):
        return None


def _address(cmd: list[str]) -> tuple[str, str]:
    """(address, port) the command will listen on, for the start-up line."""
    def value(flag: str, default: str) -> str:
        for i, a in enumerate(cmd):
            if a == flag and i + 1 < len(cmd):
                return cmd[i + 1]
            if a.startswith(flag + "="):
                return a.split("=", 1)[1]
        return default

    return value("--server.address", DEFAULT_HOST), value("--server.port", "8501")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(__doc__.strip())
        return 0
    if find_spec("streamlit") is None:
        print("ssd-dashboard: error: streamlit is not installed; run `pip install -e '.[app]'`", file=sys.stderr)
        return 2
    try:
        cmd = command(args)
    except ValueError as e:
        print(f"ssd-dashboard: error: {e}", file=sys.stderr)
        return 2
    host, port = _address(cmd)
    scope = ("this machine only; --host 0.0.0.0 serves every interface" if host in ("127.0.0.1", "localhost", "::1")
             else "reachable by anyone who can reach this address and port")
    print(f"ssd-dashboard: http://{host}:{port} ({scope}); uploads up to {MAX_UPLOAD_MB} MB", file=sys.stderr,
          flush=True)
    os.execv(cmd[0], cmd)  # become streamlit: signals (Ctrl-C, SIGTERM) reach it directly
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
