"""Screenshots of the batch report's HTML page at 3, 42 and 146 failures, to look at.

Builds the stochastic-RAG job's report (200 questions, seed 0, recorded noise; 146 failures)
with `max_failures` 3, 42 and all, writes `report_<F>.html` and, with Debian's headless
`chromium`, `report_<F>.png` (1200 x 900 window) into the output folder, and prints the
chart's structure (each panel's axis range and tick count) for every report.

    python benchmarks/report_screenshots.py [--out blamejax-out/screenshots] [--noise recorded]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import blamejax as bj

OPTION_NAMES = {
    "rewrite": bj.demos.REWRITE_OPTIONS,
    "retrieve": bj.demos.RETRIEVE_OPTIONS,
    "answer": bj.demos.ANSWER_OPTIONS,
    "verify": bj.demos.VERIFY_OPTIONS,
}
SIZES = (3, 42, None)  # None: every failure (146 for 200 questions, seed 0)


def screenshot(chromium: str, page: Path, png: Path, size=(1200, 900)) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                f"--window-size={size[0]},{size[1]}",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="blamejax-out/screenshots")
    parser.add_argument("--noise", default="recorded", choices=sorted(bj.estimators.NOISE_MODES))
    parser.add_argument("--cases", type=int, default=200)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases = bj.demos.rag_cases(args.cases, seed=0)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    for size in SIZES:
        result = bj.blame_batch(
            bj.demos.rag_pipeline,
            cases,
            0,
            noise=args.noise,
            max_failures=size,
            option_names=OPTION_NAMES,
        )
        name = f"report_{result.num_analysed}"
        page = out / f"{name}.html"
        result.save_html(page)
        text = page.read_text()
        panels = re.findall(
            r'<g class="panel" data-quantity="(\w+)" data-min="([^"]+)" data-max="([^"]+)" data-ticks="(\d+)"',
            text,
        )
        print(
            f"{result.num_analysed} failures: "
            + "; ".join(f"{q} [{lo}, {hi}] {t} ticks" for q, lo, hi, t in panels)
        )
        if chromium is None:
            print("  (no chromium: no screenshot)")
            continue
        screenshot(chromium, page, out / f"{name}.png")
        print(f"  {out / name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
