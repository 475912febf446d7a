"""`ssd-dashboard`: start the Streamlit app (app/dashboard.py); extra arguments go to `streamlit run`.

    ssd-dashboard                                  # http://127.0.0.1:8501, this machine only
    ssd-dashboard --host 0.0.0.0                   # every network interface: anyone who reaches the port
    ssd-dashboard --server.port 8600 --server.headless true

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


def command(args: list[str]) -> list[str]:
    """The `streamlit run` command line for the dashboard: passthrough arguments, the listening address (--host,
    else 127.0.0.1 unless --server.address is given) and the upload cap (unless --server.maxUploadSize is given)."""
    args = list(args)
    host = None
    if "--host" in args:
        i = args.index("--host")
        if i + 1 >= len(args) or args[i + 1].startswith("-"):
            raise ValueError("--host needs an address, e.g. --host 0.0.0.0")
        host = args[i + 1]
        del args[i:i + 2]
    given = {a.split("=", 1)[0] for a in args if a.startswith("--server.")}
    extra = []
    if "--server.address" not in given:
        extra += ["--server.address", host or DEFAULT_HOST]
    elif host is not None:
        raise ValueError("give --host or --server.address, not both")
    if "--server.maxUploadSize" not in given:
        extra += ["--server.maxUploadSize", str(MAX_UPLOAD_MB)]
    return [sys.executable, "-m", "streamlit", "run", str(DASHBOARD), *extra, *args]


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
    if args[:1] in (["-h"], ["--help"]):
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
