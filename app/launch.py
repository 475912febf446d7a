"""`ssd-dashboard`: start the Streamlit app (app/dashboard.py); extra arguments go to `streamlit run`.

    ssd-dashboard                                  # http://localhost:8501
    ssd-dashboard --server.port 8600 --server.headless true
"""

from __future__ import annotations

import os
import sys
from importlib.util import find_spec
from pathlib import Path

DASHBOARD = Path(__file__).resolve().with_name("dashboard.py")


def command(args: list[str]) -> list[str]:
    """The `streamlit run` command line for the dashboard with passthrough arguments."""
    return [sys.executable, "-m", "streamlit", "run", str(DASHBOARD), *args]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if find_spec("streamlit") is None:
        print("ssd-dashboard: error: streamlit is not installed; run `pip install -e '.[app]'`", file=sys.stderr)
        return 2
    cmd = command(args)
    os.execv(cmd[0], cmd)  # become streamlit: signals (Ctrl-C, SIGTERM) reach it directly
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
