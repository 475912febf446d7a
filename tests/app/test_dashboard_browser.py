"""Real-browser check (slow): bench/dashboard_screenshots.py in headless Debian chromium, every page.

    .venv/bin/pytest -m slow tests/test_dashboard_browser.py      # needs `apt-get install -y chromium`
"""

from __future__ import annotations

import shutil

import pytest

from tests.helpers.bench import load_bench


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian chromium (apt-get install -y chromium)")
def test_every_page_renders_in_chromium(tmp_path):
    pytest.importorskip("streamlit")
    mod = load_bench("dashboard_screenshots")
    assert mod.main(["--out", str(tmp_path)]) == 0
    for page, _, _ in mod.PAGES:
        png = tmp_path / f"{page}.png"
        assert png.stat().st_size > 20_000  # a blank page or a spinner is a few KB
