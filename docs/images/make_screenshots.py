"""Rebuild the pictures in docs/images: the report's first screen and its step timeline, for the vLLM H100
trace and an nsys export of ../shared/traces (and the README's picture of the sample trace's report).

    .venv/bin/python docs/images/make_screenshots.py [--traces ../shared/traces] [--chromium chromium]

The first screen is headless Chromium's screenshot of the report at 1280×1000 (no network: the page is
self-contained). The timeline is the report's own Vega-Lite spec of the slowest step of the busiest
phase, rendered to PNG by vl-convert (the engine the report's charts are checked with), so the picture
is the chart, without the page around it.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import vl_convert

from traceview import api, workflow
from traceview.report import charts, html

IMAGES = Path(__file__).resolve().parent
REPO = IMAGES.parents[1]
TRACES = {  # picture name → trace under the shared traces directory
    "vllm-h100": "torch/tracemap__vllm_h100_tp4_rank0_isl1000_osl10_c32.pt.trace.json.gz",
    "nsys-a100": "nsys/bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite",
}


def _report(trace: Path) -> dict:
    with api.load(trace) as loaded:
        return workflow.report(loaded, workflow.CheckOptions.configured())


def first_screen(chromium: str, page: str, target: Path) -> None:
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "report.html"
        source.write_text(page, encoding="utf-8")
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={work}/profile", "--virtual-time-budget=10000", "--window-size=1280,1000",
                        f"--screenshot={target}", source.as_uri()], check=True, capture_output=True, timeout=180)


def timeline(data: dict, target: Path) -> None:
    """The slowest step of the phase with the most GPU time, as the report draws it."""
    steps = data["timeline"]["steps"]
    busiest = max(data["phases"], key=lambda p: p["gpu_busy_ns"] or 0)["phase"]
    step = next((s for s in steps if s["phase"] == busiest), steps[0])
    chart = charts.build(data)[charts.timeline_chart_name(step)]
    target.write_bytes(vl_convert.vegalite_to_png(chart.to_dict(), scale=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args(argv)
    for name, relative in TRACES.items():
        data = _report(args.traces / relative)
        page = html.render(data)
        first_screen(args.chromium, page, IMAGES / f"{name}-first-screen.png")
        timeline(data, IMAGES / f"{name}-timeline.png")
        print(f"wrote {IMAGES / f'{name}-first-screen.png'} and {IMAGES / f'{name}-timeline.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
