"""The entry point: which command lines start the HTML renderer before the command line's imports, and that the
command line claims the renderer it started."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from commands import traceview_cli, traceview_process
from conftest import MACHINE_CPUS, REPO
from traceview import report
from traceview.launch import GROUP_OPTIONS_WITH_VALUES, report_formats, start_renderers
from traceview.report import REPORT

SAMPLE = REPO / "sample_traces" / "llm_serving.sqlite"


@pytest.mark.parametrize(("args", "formats"), [
    (["report", "run.sqlite"], "html,md,json"),
    (["--debug", "--cache-dir", "report", "report", "run.sqlite", "--format", "md"], "md"),  # a directory named report
    (["--memory-limit=2GB", "report", "--format=json,html", "run.sqlite"], "json,html"),
    (["--memory-limit", "2GB"], None),
    (["info", "report"], None),
    (["report", "--help"], None),
    ([], None),
])
def test_the_formats_a_report_command_line_asks_for(args: list[str], formats: str | None) -> None:
    assert report_formats(args) == formats


def test_the_group_options_that_take_a_value_are_the_command_lines() -> None:
    from traceview import cli

    taking = {name for option in cli.cli.params if isinstance(option, click.Option) and not option.is_flag
              for name in option.opts}
    assert taking == set(GROUP_OPTIONS_WITH_VALUES)


@pytest.mark.skipif(len(MACHINE_CPUS) < 2, reason="with one core the HTML renderer loads on a thread, not in a process")
def test_the_command_line_claims_the_renderer_started_early(all_cores) -> None:
    start_renderers(["report", "run.sqlite", "--format", "pdf"])  # the command line names the bad format
    start_renderers(["report", "run.sqlite", "--format", "md"])  # Markdown renders in the command's own process
    assert report._STARTED_EARLY == {}
    start_renderers(["--debug", "report", "run.sqlite", "--format", "md,html"])
    assert list(report._STARTED_EARLY) == [REPORT["html"]]
    early = report._STARTED_EARLY[REPORT["html"]]
    assert REPORT["html"].start() is early and report._STARTED_EARLY == {}
    early.process.stdin.close()  # unclaimed by a document, it ends quietly
    assert early.process.wait(timeout=60) == 0


def test_the_page_from_the_entry_point_is_the_page_rendered_in_process(tmp_path: Path) -> None:
    ran = traceview_process("report", SAMPLE, "--format", "html", "-o", tmp_path / "process.html")
    assert (ran.returncode, ran.stderr) == (0, f"wrote {tmp_path / 'process.html'}\n")
    assert traceview_cli("report", SAMPLE, "--format", "html", "-o", tmp_path / "here.html").returncode == 0
    assert (tmp_path / "process.html").read_text() == (tmp_path / "here.html").read_text()
