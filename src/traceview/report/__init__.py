"""Renderers: each document (report, check, audit, diff, info) has one registry of its output formats.

A format is a `Renderer`: its `--format` name, the file extension it writes, whether it is binary,
and the function that turns the document (plain data, built once) into text or bytes. The command
line takes its `--format` choices and its output paths from the registry, so a new format (SARIF,
GitHub annotations) is one module plus one entry here.
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from traceview import memory
from traceview.errors import TraceviewError


# renderer processes started by the entry point, waiting for the command line to claim them
_STARTED_EARLY: dict[Renderer, _InWorker] = {}


@dataclass(frozen=True)
class Renderer:
    """One output format of one document; the module is imported on first use (HTML pulls in jinja2, altair)."""

    name: str
    extension: str
    module: str  # under traceview.report
    description: str
    function: str = "render"
    binary: bool = False
    flag: str | None = None  # the option that writes this format to its own file (audit: --junit PATH)
    default: bool = False  # written when --format is not given (a new format is opt-in)
    prepare: str | None = None  # a function of the module that loads what rendering needs, ahead of it

    def render(self, document: Any) -> str | bytes:
        return getattr(importlib.import_module(f"traceview.report.{self.module}"), self.function)(document)

    def start(self) -> Callable[[Any], str | bytes]:
        """This format's render function, with what it renders with (HTML: altair, the chart code, the
        templates, the Vega bundle) loading from now on, so that it overlaps the analysis. On a machine with a
        second core the loading, and then the render, run in a process of their own (report/worker.py): on a
        thread, altair's import holds the GIL the analysis's Python needs; the entry point may have started that
        process already (`start_early`), and it is the one handed back. With one core, on a thread."""
        if self.prepare is None:
            return self.render
        if _renders_in_a_process():
            return _STARTED_EARLY.pop(self, None) or _InWorker(self)

        def load() -> None:
            try:
                getattr(importlib.import_module(f"traceview.report.{self.module}"), self.prepare)()
            except Exception:  # the render imports the same modules and reports the error where it matters
                pass

        threading.Thread(target=load, name=f"prepare-{self.name}", daemon=True).start()
        return self.render

    def start_early(self) -> None:
        """Start this format's renderer process now, before the command line's imports, for `start` to hand
        over (traceview/launch.py); unclaimed, it ends with the command."""
        if self.prepare is not None and _renders_in_a_process():
            _STARTED_EARLY[self] = _InWorker(self)


def _renders_in_a_process() -> bool:
    return memory.cores() > 1 and bool(sys.executable)  # an embedded interpreter may have no executable to start


class _InWorker:
    """A renderer's process, started now: it loads, then waits for the one document it renders."""

    def __init__(self, renderer: Renderer):
        self.name = renderer.name
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}  # this process's imports
        # a session of its own: a terminal's Ctrl-C is the command's to report, and the pipe it closes ends this
        self.process = subprocess.Popen(
            [sys.executable, "-m", "traceview.report.worker", renderer.module, renderer.prepare, renderer.function],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)

    def __call__(self, document: Any) -> str | bytes:
        return self.send(document)()

    def send(self, document: Any) -> Callable[[], str | bytes]:
        """Hand the document over and return at once, with the function that collects the page: the worker
        renders while the caller renders its other formats."""
        try:
            self.process.stdin.write(pickle.dumps(document, protocol=pickle.HIGHEST_PROTOCOL))
            self.process.stdin.close()
        except BrokenPipeError:  # the worker is gone: collecting says so, with its exit code
            pass
        return self._collect

    def _collect(self) -> str | bytes:
        out = self.process.stdout.read()  # the one pipe left (stdin is closed), so no communicate()
        self.process.stdout.close()
        self.process.wait()
        if self.process.returncode or not out:
            raise TraceviewError(f"the {self.name} renderer's process failed (exit code {self.process.returncode})")
        reply = pickle.loads(out)
        if reply[0] == "ok":
            return reply[1]
        _, kind, message, where = reply
        if kind == TraceviewError.__name__:
            raise TraceviewError(message)
        raise RuntimeError(f"{kind} rendering {self.name}: {message}\n\nin the renderer's process:\n{where}")


class Registry:
    """The formats of one document, in the order `--format` lists them."""

    def __init__(self, document: str, *renderers: Renderer):
        self.document = document
        self.renderers = {r.name: r for r in renderers}
        extensions = [r.extension for r in renderers]
        if len(set(extensions)) != len(extensions):
            raise ValueError(f"{document}: two formats share a file extension")

    def names(self) -> list[str]:
        return list(self.renderers)

    def defaults(self) -> list[str]:
        """The formats written when --format is not given: those marked default, else the first."""
        return [r.name for r in self.renderers.values() if r.default] or self.names()[:1]

    def __getitem__(self, name: str) -> Renderer:
        return self.renderers[name]

    def for_extension(self, suffix: str) -> Renderer | None:
        """The format whose files end in `suffix` ('.md'), or None."""
        return next((r for r in self.renderers.values() if "." + r.extension == suffix.lower()), None)

    def chosen(self, text: str, output: str | None, given: bool) -> tuple[Renderer, ...]:
        """The formats to write: --format's when given; otherwise an -o whose extension is a format's (`d.html`)
        picks that format, like the default list would (`report -o run.md`), else the defaults."""
        named = self.for_extension(Path(output).suffix) if output and output != "-" and not given else None
        return (named,) if named is not None and named.name not in self.defaults() else self.parse(text)

    def parse(self, text: str) -> tuple[Renderer, ...]:
        """`--format html,md`: the named formats, each once, in the order given."""
        names = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",") if f.strip()))
        unknown = [n for n in names if n not in self.renderers]
        if unknown or not names:
            raise TraceviewError(f"--format {text!r}: choose from {', '.join(self.renderers)} (comma-separated)")
        return tuple(self.renderers[n] for n in names)

    def targets(self, output: str | None, chosen: tuple[Renderer, ...], default_stem: str,
                inputs: list[Path] = ()) -> dict[Renderer, Path | None]:
        """Where each chosen format goes (None: stdout).

        `-o -` is one format on stdout. An `-o` whose extension is a format's (`run.md`) is that
        format's file and the others land beside it (`run.html`, `run.json`); any other `-o` is the
        first format's file. Two formats never share a path, and no output is an input.
        """
        if output == "-":
            if len(chosen) != 1:
                raise TraceviewError("-o - writes one format to stdout: pick it with --format")
            return {chosen[0]: None}
        path = Path(output) if output else Path(f"{default_stem}.{chosen[0].extension}")
        named = self.for_extension(path.suffix)
        if named is not None and named not in chosen:
            raise TraceviewError(f"-o {path}: a .{named.extension} file is the {named.name} format, "
                                 f"which --format {','.join(r.name for r in chosen)} does not include")
        primary = named or chosen[0]
        stem = path.with_suffix("") if named else path
        targets = {r: path if r is primary else stem.with_name(f"{stem.name}.{r.extension}") for r in chosen}
        protected = {p.resolve() for p in inputs}
        seen: dict[Path, Renderer] = {}
        for renderer, target in targets.items():
            resolved = target.resolve()
            if resolved in protected:
                raise TraceviewError(f"{target}: refusing to overwrite the input trace")
            if resolved in seen:
                raise TraceviewError(f"{target}: both --format {seen[resolved].name} and {renderer.name} would "
                                     "write it (a link joins the two paths)")
            seen[resolved] = renderer
        return targets


REPORT = Registry(
    "report",
    Renderer("html", "html", "html", "one self-contained HTML page", default=True, prepare="prepare"),
    Renderer("md", "md", "markdown", "Markdown for a PR comment", default=True),
    Renderer("json", "json", "json_report", "versioned JSON (docs/report-json.md)", default=True),
)
CHECK = Registry(
    "check",
    Renderer("text", "txt", "check_text", "text for a terminal"),
    Renderer("json", "json", "json_report", "JSON"),
)
AUDIT = Registry(
    "audit",
    Renderer("text", "txt", "audit_text", "a table for a terminal"),
    Renderer("json", "json", "json_report", "JSON", flag="json"),
    Renderer("junit", "xml", "junit", "JUnit XML", flag="junit"),
    Renderer("md", "md", "audit_markdown", "Markdown (the same text is appended to $GITHUB_STEP_SUMMARY when set)",
             flag="markdown"),
)
DIFF = Registry(
    "diff",
    Renderer("md", "md", "diff_markdown", "Markdown for a PR comment"),
    Renderer("json", "json", "json_report", "JSON"),
    Renderer("html", "html", "diff_html", "one self-contained HTML page"),
)
INFO = Registry(
    "info",
    Renderer("text", "txt", "info_text", "text for a terminal"),
    Renderer("json", "json", "json_report", "JSON"),
)
DOCUMENTS = {registry.document: registry for registry in (REPORT, CHECK, AUDIT, DIFF, INFO)}
