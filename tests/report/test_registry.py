"""The renderer registries: every format of every document is importable, and its extension round-trips
through `-o` (the file named is that format's, the others land beside it, no two share a path)."""

from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path

import pytest

from traceview.errors import TraceviewError
from conftest import MACHINE_CPUS
from traceview.report import DOCUMENTS, REPORT, _InWorker

FORMATS = [(registry, renderer) for registry in DOCUMENTS.values() for renderer in registry.renderers.values()]


@pytest.mark.parametrize(("registry", "renderer"), FORMATS, ids=[f"{g.document}-{r.name}" for g, r in FORMATS])
def test_every_format_renders_and_its_extension_round_trips(registry, renderer, tmp_path: Path) -> None:
    assert callable(getattr(importlib.import_module(f"traceview.report.{renderer.module}"), renderer.function))
    assert registry.for_extension("." + renderer.extension) is renderer
    everything = tuple(registry.renderers.values())
    named = tmp_path / "out" / f"run.{renderer.extension}"
    targets = registry.targets(str(named), everything, registry.document)
    assert targets[renderer] == named
    assert {r: p.name for r, p in targets.items()} == {r: f"run.{r.extension}" for r in everything}
    assert registry.parse(renderer.name) == (renderer,)


def test_report_outputs_the_old_bug_and_the_rules() -> None:
    html, md, json = (REPORT[n] for n in ("html", "md", "json"))
    assert REPORT.targets("run.md", (html, md, json), "report") == {
        html: Path("run.html"), md: Path("run.md"), json: Path("run.json")}
    assert REPORT.targets(None, (md, json), "report") == {md: Path("report.md"), json: Path("report.json")}
    assert REPORT.targets("out/report", (html, md), "report") == {html: Path("out/report"), md: Path("out/report.md")}
    assert REPORT.targets("-", (json,), "report") == {json: None}
    with pytest.raises(TraceviewError, match="writes one format to stdout"):
        REPORT.targets("-", (md, json), "report")
    with pytest.raises(TraceviewError, match="a .json file is the json format"):
        REPORT.targets("run.json", (html, md), "report")
    with pytest.raises(TraceviewError, match="refusing to overwrite the input trace"):
        REPORT.targets("trace.json", (json,), "report", [Path("trace.json")])
    with pytest.raises(TraceviewError, match="choose from html, md, json"):
        REPORT.parse("md,pdf")


def test_two_formats_never_write_one_file(tmp_path: Path) -> None:
    """run.html a link to run.md: the HTML would overwrite the Markdown, so nothing is written."""
    (tmp_path / "run.md").write_text("")
    (tmp_path / "run.html").symlink_to(tmp_path / "run.md")
    with pytest.raises(TraceviewError, match="both --format html and md would write it"):
        REPORT.targets(str(tmp_path / "run.md"), (REPORT["html"], REPORT["md"]), "report")


def test_a_new_format_is_opt_in_and_the_defaults_stay() -> None:
    from traceview.report import Registry, Renderer

    assert REPORT.defaults() == ["html", "md", "json"]
    grown = Registry("report", *REPORT.renderers.values(), Renderer("sarif", "sarif", "sarif", "SARIF"))
    assert grown.defaults() == ["html", "md", "json"] and grown.names()[-1] == "sarif"
    assert Registry("diff", Renderer("md", "md", "diff_markdown", "Markdown")).defaults() == ["md"]


@pytest.fixture(scope="module")
def sample_report() -> dict:
    from conftest import REPO
    from traceview import api, workflow

    with api.load(REPO / "sample_traces" / "llm_serving.pt.trace.json.gz") as trace:
        return workflow.report(trace, workflow.CheckOptions.configured())


@pytest.mark.skipif(len(MACHINE_CPUS) < 2, reason="with one core the HTML renderer loads on a thread, not in a process")
def test_the_html_rendered_in_its_own_process_is_the_page_rendered_here(sample_report: dict, all_cores) -> None:
    from traceview.report import html

    started = REPORT["html"].start()
    assert isinstance(started, _InWorker)
    assert started(sample_report) == html.render(sample_report)
    assert started.process.returncode == 0


@pytest.mark.skipif(len(MACHINE_CPUS) < 2, reason="with one core the HTML renderer loads on a thread, not in a process")
def test_a_failure_in_the_renderers_process_is_raised_here_and_no_document_ends_it_quietly(sample_report, all_cores) -> None:
    broken = replace(REPORT["html"], function="no_such_function").start()
    with pytest.raises(RuntimeError, match="^AttributeError rendering html: .*no_such_function") as raised:
        broken(sample_report)
    assert "in the renderer's process" in str(raised.value)  # --debug shows where it failed there
    unused = REPORT["html"].start()
    unused.process.stdin.close()  # the command failed before it had a report
    assert unused.process.wait(timeout=60) == 0 and unused.process.stdout.read() == b""


def test_the_other_formats_render_while_the_html_renders_in_its_process(tmp_path) -> None:
    from traceview import cli

    calls = []

    class InWorker:  # what Renderer.start hands back on two cores: send now, collect the page later
        def send(self, document):
            calls.append(("send", document))
            return lambda: calls.append("collect") or "<html>"

    def markdown(document):
        calls.append("md")
        return "# report"

    outputs = {REPORT["html"]: tmp_path / "r.html", REPORT["md"]: tmp_path / "r.md"}
    cli._write(outputs, "doc", {REPORT["html"]: InWorker(), REPORT["md"]: markdown})
    assert calls == [("send", "doc"), "md", "collect"]
    assert (tmp_path / "r.html").read_text() == "<html>" and (tmp_path / "r.md").read_text() == "# report"
