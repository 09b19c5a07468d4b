"""Reports: ReportData (data.py) rendered as HTML, Markdown or JSON.

A renderer is a module with `NAME`, `EXTENSION` and `render(data) -> str`; adding a format is one
module and one line in RENDERERS.
"""

from __future__ import annotations

import importlib
from types import ModuleType

RENDERERS = {"html": "html", "md": "markdown", "json": "json_report"}


def renderer(name: str) -> ModuleType:
    """The renderer module for a format, imported on demand (HTML pulls in jinja2 and the chart code)."""
    return importlib.import_module(f"traceview.report.{RENDERERS[name]}")
