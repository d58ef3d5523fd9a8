"""Reports of batch results: table, JSON, DataFrame, self-contained HTML (rendered in headless Chromium).
"""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import blamejax as bj


def _report_result():
    return bj.blame_batch(
        bj.demos.refund_pipeline,
        bj.demos.refund_cases(30),
        0,
        option_names={"writer": ("correct", "wrong uncited", "wrong cited")},
    )


def test_json_and_table(tmp_path):
    result = _report_result()
    path = tmp_path / "r.json"
    result.to_json(path)
    data = json.loads(path.read_text())
    np.testing.assert_allclose(data["mean_shapley"], result.mean_shapley)
    assert data["steps"] == list(result.steps) and data["noise"] == "recorded"
    table = result.table()
    assert "planner" in table and "+0.4167" in table and "Gumbel-max coupling" in table


def test_dataframe():
    pd = pytest.importorskip("pandas")
    frame = _report_result().to_dataframe()
    assert isinstance(frame, pd.DataFrame) and list(frame.index) == [
        "planner",
        "retriever",
        "writer",
        "reviewer",
    ]


def test_html_is_self_contained():
    page = _report_result().to_html()
    assert "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
    assert "https://" not in page and "<link" not in page
    assert "wrong uncited" in page  # option names in the drill-down


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(
    _chromium() is None and os.environ.get("CI") != "true",
    reason="Debian's chromium is not installed here (CI installs it)",
)
def test_html_in_headless_chromium(tmp_path):
    result = _report_result()
    page = tmp_path / "report.html"
    result.save_html(page)
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [_chromium(), *flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    rows = re.findall(r'<tr data-step="([^"]+)">(.*?)</tr>', dom.stdout)
    assert [r[0] for r in rows] == list(result.steps)
    for i, (_, cells) in enumerate(rows):
        values = [float(v) for v in re.findall(r'data-value="([^"]+)"', cells)]
        expected = [
            result.mean_shapley[i],
            result.lower[i],
            result.upper[i],
            result.share_of_repair[i],
            result.resolve_rate[i],
            result.last_step_rate[i],
        ]
        np.testing.assert_allclose(values, np.asarray(expected, np.float64), rtol=1e-6)
    shot = tmp_path / "report.png"
    subprocess.run(
        [_chromium(), *flags, f"--screenshot={shot}", "--window-size=1100,900", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
