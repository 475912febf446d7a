"""The README works as written: its Python API example runs, and every `ssd-plan` / `ssd-sim` command in it
exits 0 (in order, in a scratch copy of the repository's traces/, so commands that write files write there)."""

from __future__ import annotations

import glob
import re
import shlex
import shutil
from pathlib import Path

import pytest

from ssd_sim.cli.plan import main as ssd_plan
from ssd_sim.cli.sim import main as ssd_sim
from tests.helpers.bench import load_bench

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CLIS = {"ssd-plan": ssd_plan, "ssd-sim": ssd_sim}


def code_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def cli_commands() -> list[list[str]]:
    """Every line of a bash block that starts with ssd-plan or ssd-sim, comments removed, globs expanded later."""
    out = []
    for block in code_blocks("bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] in CLIS:
                out.append(words)
    return out


def test_python_api_example_runs(capsys):
    (example,) = [b for b in code_blocks("python") if "from ssd_sim import" in b]
    exec(compile(example, "README.md", "exec"), {})
    assert "Plan(" in capsys.readouterr().out


def test_every_cli_command_in_the_readme_exits_0(tmp_path, monkeypatch, capsys):
    shutil.copytree(ROOT / "traces", tmp_path / "traces")
    shutil.copytree(ROOT / "docs" / "examples", tmp_path / "docs" / "examples")
    monkeypatch.chdir(tmp_path)
    commands = cli_commands()
    assert len(commands) >= 12
    for words in commands:
        args = [m for w in words[1:] for m in (sorted(glob.glob(w)) if "*" in w else [w])]
        try:
            code = CLIS[words[0]](args)
        except SystemExit as e:  # argparse and one-line errors exit this way
            code = e.code
        assert code in (0, None), f"{shlex.join(words)} -> exit {code}: {capsys.readouterr().err}"
    capsys.readouterr()


DOCS = {"README.md": README, **{f"docs/{p.name}": p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))}}
NAMED = sorted({(doc, path) for doc, text in DOCS.items()
                for path in re.findall(r"`((?:traces|bench|tests|docs|ssd_sim|ssd_runtime|app)/[\w./-]+\.(?:py|md|json|toml))`",
                                       text)})


@pytest.mark.parametrize(("doc", "path"), NAMED)
def test_every_file_the_docs_name_exists(doc, path):
    assert (ROOT / path).exists(), f"{doc} names {path}"


def test_the_readme_links_the_fidelity_record():
    """The README summarises the hold-out results; the split tables and how each spread was measured live in
    docs/FIDELITY.md, which must exist and be linked."""
    assert "(docs/FIDELITY.md)" in README
    assert "## Hold-out splits that share no text" in DOCS["docs/FIDELITY.md"]


def test_the_regression_table_matches_the_model():
    pt = load_bench("preset_table")
    shown = pt.readme_table(README).splitlines()
    fresh = pt.table().splitlines()
    assert README.count(shown[0]) == 1  # the table appears once, between its markers
    assert [row.split("|")[1:3] for row in shown] == [row.split("|")[1:3] for row in fresh]  # presets and T
    num = re.compile(r"\d+\.\d+")
    for s_row, f_row in zip(shown[2:], fresh[2:], strict=True):  # values to the printed digit (+-1 in the last)
        for a, b in zip(num.findall(s_row), num.findall(f_row), strict=True):
            assert float(a) == pytest.approx(float(b), abs=1.01 * 10 ** -len(a.split(".")[1])), (s_row, f_row)


def test_the_python_version_is_pyprojects():
    import tomllib

    need = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]  # ">=3.11"
    version = need.removeprefix(">=")
    said = set(re.findall(r"Python (3\.\d+)\+", README))
    assert said == {version}, (said, need)


def test_the_dashboard_is_started_the_safe_way():
    """`streamlit run app/dashboard.py` listens on every interface with Streamlit's 200 MB upload cap; `ssd-dashboard`
    (app/launch.py) binds 127.0.0.1 and caps uploads. Neither the README nor the screenshot script starts it raw."""
    assert "streamlit run app/dashboard.py" not in README
    row = next(line for line in README.splitlines() if line.startswith("| `ssd-dashboard` |"))
    assert "`ssd-dashboard`" in row.split("|")[3]
    shots = (ROOT / "bench" / "dashboard_screenshots.py").read_text()
    assert "from app.launch import command" in shots and '"streamlit", "run"' not in shots


def ssd_run_commands() -> list[list[str]]:
    """Every line of a bash block that starts with ssd-run, comments removed."""
    lines = [shlex.split(line, comments=True) for block in code_blocks("bash") for line in block.splitlines()]
    return [words for words in lines if words and words[0] == "ssd-run"]


def test_every_ssd_run_command_in_the_readme_parses():
    """ssd-run needs real models to run, which CI does not fetch; its README lines must at least be what its
    parsers accept (a renamed or removed flag fails here)."""
    from ssd_runtime.calibrate_here import build_parser as calibrate_here_parser
    from ssd_runtime.cli import build_parser

    commands = ssd_run_commands()
    assert len(commands) >= 6
    for words in commands:
        if words[1:2] == ["fetch-models"]:
            assert words == ["ssd-run", "fetch-models"]
        elif words[1:2] == ["calibrate-here"]:
            calibrate_here_parser().parse_args(words[2:])
        else:
            build_parser().parse_args(words[1:])
