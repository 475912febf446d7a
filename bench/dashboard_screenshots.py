"""Real-browser check of the dashboard: start it, load every page in headless Chromium, save screenshots.

    apt-get install -y chromium            # Debian's chromium (nothing is installed by this script)
    .venv/bin/python bench/dashboard_screenshots.py [--out docs/screenshots] [--chromium /usr/bin/chromium]

Starts the dashboard as `ssd-dashboard --server.headless true` does (127.0.0.1 only, the upload cap) on a free
port, drives Chromium over the
DevTools protocol (the `websockets` client that ships with streamlit), waits on each page until the
title is shown, the "running" indicator is gone and the expected Plotly charts are drawn, then saves
<out>/<page>.png and prints one table row per page (load time, charts, PNG size). Exit status 1 if a
page fails to render (an exception box, a missing title, or fewer charts than expected).
Traces: the real traces/ (the *.jsonl of every setup folder, traces/README.md) if there are any, deep-linking the
first SSD trace shipped beside a calibrated profile (the page compares it with that profile: predicted and measured
of the same setup), else a small synthetic trace in a temporary dir.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (url path, title, plotly charts expected when rendered); query params deep-link the traces page.
PAGES = [("whatif", "What-if", 5), ("timeline", "Timeline", 1), ("pareto", "Pareto", 1),
         ("traces", "Traces", 6), ("plan", "Plan", 0)]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--remote-debugging-port=0"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float) -> None:
    end = time.time() + timeout_s
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer in {timeout_s:.0f} s")


def start_streamlit(port: int, traces: Path, log: Path) -> subprocess.Popen:
    """The dashboard as `ssd-dashboard` starts it (app.launch.command: 127.0.0.1 only, the upload cap), headless."""
    sys.path.insert(0, str(ROOT))
    from app.launch import command

    env = {**os.environ, "SSD_TRACES_DIR": str(traces)}
    cmd = command(["--port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"])
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def start_chromium(binary: str, profile_dir: Path, size: tuple[int, int]) -> tuple[subprocess.Popen, str]:
    """Start headless Chromium; return the process and the DevTools websocket URL of its page."""
    cmd = [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", f"--window-size={size[0]},{size[1]}",
           "about:blank"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port_file = profile_dir / "DevToolsActivePort"
    end = time.time() + 30
    while not port_file.exists() or not port_file.read_text().strip():
        if time.time() > end or proc.poll() is not None:
            raise RuntimeError("chromium did not start (is it installed? apt-get install -y chromium)")
        time.sleep(0.2)
    port = port_file.read_text().split()[0]
    wait_http(f"http://127.0.0.1:{port}/json/version", 30)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as r:
        page = next(t for t in json.load(r) if t["type"] == "page")
    return proc, page["webSocketDebuggerUrl"]


class DevTools:
    """A minimal synchronous Chrome DevTools Protocol client (commands only; events are skipped)."""

    def __init__(self, ws_url: str):
        from websockets.sync.client import connect

        self._conn = connect(ws_url, max_size=64 * 2**20, open_timeout=30)
        self.ws = self._conn.__enter__()  # the connection is a context manager; closed in close()
        self.n = 0

    def call(self, method: str, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def eval(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def close(self) -> None:
        self._conn.__exit__(None, None, None)


STATE_JS = """(() => {
  const h1 = [...document.querySelectorAll('h1')].map(e => e.innerText.trim());
  return {h1, charts: document.querySelectorAll('.js-plotly-plot').length,
          running: !!document.querySelector('[data-testid="stStatusWidgetRunningIcon"]')
                   || !!document.querySelector('[data-testid="stSkeleton"]'),
          exceptions: document.querySelectorAll('[data-testid="stException"]').length,
          none_text: [...document.querySelectorAll('[data-testid="stMain"] *')]
            .filter(e => !e.children.length && /^(None|nan|NaN|null)$/.test((e.innerText || '').trim())).length};
})()"""


def load_page(dt: DevTools, url: str, title: str, charts: int, timeout_s: float) -> dict:
    """Navigate and wait until the page is rendered (title, charts, not running) or the timeout."""
    dt.call("Page.navigate", url=url)
    t0, state, stable = time.time(), {}, 0
    while time.time() - t0 < timeout_s:
        time.sleep(0.5)
        state = dt.eval(STATE_JS) or {}
        done = title in state.get("h1", []) and state.get("charts", 0) >= charts and not state.get("running")
        stable = stable + 1 if done else 0
        if stable >= 3 or state.get("exceptions"):
            break
    state["load_s"] = time.time() - t0
    return state


FULL_HEIGHT_JS = """(() => { const m = document.querySelector('[data-testid="stMain"]');
  return m ? m.scrollHeight : document.body.scrollHeight; })()"""


def screenshot(dt: DevTools, path: Path, size: tuple[int, int], max_height: int) -> int:
    """Save a PNG of the whole page (up to max_height px): the viewport is stretched to the content."""
    height = min(max(int(dt.eval(FULL_HEIGHT_JS) or size[1]), size[1]), max(max_height, size[1]))
    dt.call("Emulation.setDeviceMetricsOverride", width=size[0], height=height, deviceScaleFactor=1, mobile=False)
    time.sleep(1.5)  # Plotly re-lays out to the new size
    data = base64.b64decode(dt.call("Page.captureScreenshot", format="png")["data"])
    dt.call("Emulation.clearDeviceMetricsOverride")
    path.write_bytes(data)
    return len(data)


def _mode(trace: Path) -> str | None:
    """The mode a trace's header line names (None if unreadable)."""
    try:
        with trace.open(encoding="utf-8") as f:
            return json.loads(f.readline()).get("mode")
    except (OSError, ValueError, AttributeError):
        return None


def _ships_profile(folder: Path) -> bool:
    """Whether a calibrated profile (schema ssd-profile/1) lies in the folder."""
    for p in folder.glob("*.json"):
        try:
            if json.loads(p.read_text(encoding="utf-8")).get("schema") == "ssd-profile/1":
                return True
        except (OSError, ValueError, AttributeError):
            continue
    return False


def traces_dir(tmp: Path) -> tuple[Path, str | None]:
    """The real traces/ if it holds a trace, else a synthetic one; and the trace to deep-link: the first SSD trace
    shipped beside a calibrated profile (the page compares it with that profile), else the first trace."""
    real = sorted((ROOT / "traces").rglob("*.jsonl"))
    if real:
        beside = [t for t in real if _mode(t) == "ssd" and _ships_profile(t.parent)]
        return ROOT / "traces", str((beside or real)[0].relative_to(ROOT / "traces"))
    sys.path.insert(0, str(ROOT))
    from tests.helpers.trace_samples import write_trace

    write_trace(tmp / "synthetic-ssd.jsonl", "ssd", rounds=60, batch=2)
    return tmp, "synthetic-ssd.jsonl"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshots"), help="folder for the PNGs")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--size", default="1400x1000", help="window size WxH (px)")
    ap.add_argument("--max-height", type=int, default=2400, help="tallest screenshot (px); 0 = the window")
    ap.add_argument("--timeout", type=float, default=90, help="seconds to wait for each page")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    size = tuple(int(v) for v in args.size.split("x"))
    tmp = Path(tempfile.mkdtemp(prefix="ssd-dash-"))
    traces, trace_name = traces_dir(tmp)
    port = free_port()
    app = start_streamlit(port, traces, tmp / "streamlit.log")
    browser = None
    failed = 0
    try:
        wait_http(f"http://127.0.0.1:{port}/_stcore/health", 60)
        browser, ws = start_chromium(args.chromium, tmp / "chromium", size)
        dt = DevTools(ws)
        dt.call("Page.enable")
        print(f"{'page':10} {'load s':>7} {'charts':>6} {'PNG KB':>7}  file")
        root = load_page(dt, f"http://127.0.0.1:{port}/", PAGES[0][1], PAGES[0][2], args.timeout)
        if PAGES[0][1] not in root.get("h1", []):
            print(f"the root URL did not open {PAGES[0][1]}: {json.dumps(root)}")
            failed += 1
        for path, title, charts in PAGES:
            query = f"?trace={trace_name}" if path == "traces" and trace_name else ""
            url = f"http://127.0.0.1:{port}/{path}{query}"
            st = load_page(dt, url, title, charts, args.timeout)
            size_b = screenshot(dt, out / f"{path}.png", size, args.max_height)
            ok = (title in st.get("h1", []) and st.get("charts", 0) >= charts and not st.get("exceptions")
                  and not st.get("none_text"))
            failed += not ok
            print(f"{path:10} {st['load_s']:7.1f} {st.get('charts', 0):6d} {size_b / 1024:7.0f}  "
                  f"{out / (path + '.png')}{'' if ok else '  FAILED ' + json.dumps(st)}")
        dt.close()
    finally:
        for proc in (browser, app):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=20)
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
