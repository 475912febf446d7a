"""app.launch: the ssd-dashboard entry point."""

from __future__ import annotations

import sys

from app import launch


def test_command_runs_the_dashboard_with_passthrough_args():
    cmd = launch.command(["--server.port", "8600"])
    assert cmd[:4] == [sys.executable, "-m", "streamlit", "run"]
    assert cmd[4].endswith("app/dashboard.py") and cmd[5:] == ["--server.port", "8600"]


def test_help_and_missing_streamlit(monkeypatch, capsys):
    assert launch.main(["--help"]) == 0
    assert "streamlit run" in capsys.readouterr().out
    monkeypatch.setattr(launch, "find_spec", lambda name: None)
    assert launch.main([]) == 2
    assert "pip install -e '.[app]'" in capsys.readouterr().err


def test_main_execs_streamlit(monkeypatch):
    seen = []
    monkeypatch.setattr(launch.os, "execv", lambda path, argv: seen.append((path, argv)))
    launch.main(["--server.headless", "true"])
    assert seen == [(sys.executable, launch.command(["--server.headless", "true"]))]
