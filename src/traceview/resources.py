"""Where traceview's data files are: the top-level ``hardware/``, ``rules/``, ``templates/`` and ``sample_traces/``.

pyproject.toml maps each folder onto a namespace package (``traceview_data.hardware`` is ``hardware/`` and so on),
so a built wheel carries the files and an editable install (``pip install -e .``) points the same packages at the
checkout. Both are found one way, through the import system. The packages sit outside ``traceview`` because
setuptools' editable finder cannot reach a namespace package nested inside a regular one.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

from traceview.errors import TraceviewError

DATA_PACKAGE = "traceview_data"
DataFolder = Literal["hardware", "rules", "templates", "sample_traces"]


def data_dir(name: DataFolder) -> Path:
    """The installed folder ``name``: the checkout's own folder in an editable install, the wheel's copy otherwise."""
    try:
        spec = importlib.util.find_spec(f"{DATA_PACKAGE}.{name}")
    except ModuleNotFoundError:
        spec = None
    locations = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    for location in locations:
        if location.is_dir():
            return location.resolve()
    raise TraceviewError(
        f"traceview's {name}/ folder is not installed (no package {DATA_PACKAGE}.{name}): "
        "install traceview with pip (pip install -e . in a checkout)"
    )
