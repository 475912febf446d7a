"""app.launch: the ssd-dashboard entry point, its listening address and upload cap."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import launch


def test_command_runs_the_dashboard_on_loopback_with_the_upload_cap():
    cmd = launch.command(["--server.port", "8600"])
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"] and cmd[4].endswith("app/dashboard.py")
    assert cmd[5:] == ["--server.address", "127.0.0.1", "--server.maxUploadSize", str(launch.MAX_UPLOAD_MB),
                       "--server.port", "8600"]


def test_host_or_server_address_choose_the_address_on_purpose():
    assert launch.command(["--host", "0.0.0.0"])[5:7] == ["--server.address", "0.0.0.0"]
    mine = launch.command(["--server.address=10.0.0.5", "--server.maxUploadSize", "8"])
    assert "127.0.0.1" not in mine and mine[5:] == ["--server.address=10.0.0.5", "--server.maxUploadSize", "8"]
    with pytest.raises(ValueError):
        launch.command(["--host", "0.0.0.0", "--server.address", "1.2.3.4"])
    with pytest.raises(ValueError):
        launch.command(["--host"])


def test_help_and_missing_streamlit(monkeypatch, capsys):
    assert launch.main(["--help"]) == 0
    assert "streamlit run" in capsys.readouterr().out
    assert launch.main(["--host"]) == 2
    assert "--host needs an address" in capsys.readouterr().err
    monkeypatch.setattr(launch, "find_spec", lambda name: None)
    assert launch.main([]) == 2
    assert "pip install -e '.[app]'" in capsys.readouterr().err


@pytest.mark.parametrize("args,tail", [
    (["--host=0.0.0.0"], ["--server.address", "0.0.0.0", "--server.maxUploadSize", "64"]),
    (["--host", "0.0.0.0", "--port", "8600"], ["--server.address", "0.0.0.0", "--server.maxUploadSize", "64",
                                               "--server.port", "8600"]),
    (["--port=8600", "--server.headless=true"], ["--server.address", "127.0.0.1", "--server.maxUploadSize", "64",
                                                 "--server.headless=true", "--server.port", "8600"]),
])
def test_host_and_port_in_either_spelling_become_streamlit_s_options(args, tail):
    assert launch.command(args)[5:] == tail


@pytest.mark.parametrize("args,message", [
    (["--port=abc"], "--port 'abc': give a port number in 1..65535"),
    (["--port", "70000"], "--port '70000': give a port number in 1..65535"),
    (["--server.port=abc"], "--server.port 'abc': give a port number in 1..65535"),
    (["--port"], "--port needs a port number, e.g. --port 8600"),
    (["--bogus"], "unknown argument '--bogus': ssd-dashboard takes --host ADDR, --port N and Streamlit's"),
    (["-x"], "unknown argument '-x'"),
    (["notes.py"], "unknown argument 'notes.py'"),
    (["--server.prot", "1"], "unknown Streamlit option '--server.prot'"),
    (["--server.headless", "maybe"], "--server.headless 'maybe': give true or false"),
    (["--host=a", "--host=b"], "--host is given twice"),
    (["--port", "1", "--server.port", "2"], "give --port or --server.port, not both"),
    (["--host="], "--host needs an address"),
])
def test_bad_options_are_one_line_and_exit_2_before_the_listening_line(monkeypatch, capsys, args, message):
    monkeypatch.setattr(launch.os, "execv", lambda *a: pytest.fail("streamlit must not start"))
    assert launch.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ssd-dashboard: error: {message}") and err.count("\n") == 1 and "http://" not in err


def test_main_execs_streamlit_and_says_where_it_listens(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(launch.os, "execv", lambda path, argv: seen.append((path, argv)))
    launch.main(["--server.headless", "true"])
    assert seen == [(sys.executable, launch.command(["--server.headless", "true"]))]
    assert "http://127.0.0.1:8501 (this machine only" in capsys.readouterr().err


def listening(port: int) -> set[str]:
    """Local addresses with a TCP socket in LISTEN on `port` (Linux /proc/net/tcp{,6})."""
    out = set()
    for name, width in (("tcp", 8), ("tcp6", 32)):
        path = Path(f"/proc/net/{name}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:
                out.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(addr)[::-1]) if width == 8 else "v6:" + addr)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads the listening sockets from /proc/net/tcp")
@pytest.mark.parametrize("extra,want", [([], "127.0.0.1"), (["--host", "0.0.0.0"], "0.0.0.0")])
def test_the_launcher_listens_on_loopback_unless_told_otherwise(extra, want):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app.launch", "--server.port", str(port), "--server.headless",
                             "true", "--browser.gatherUsageStats", "false", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            cwd=Path(launch.__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 60
        while not listening(port) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert listening(port) == {want}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
