"""The HTML report: one self-contained page that works offline and sends no request.

Jinja templates in the repo's top-level ``templates/`` (``report.html`` extends ``base.html`` and
includes one ``_<section>.html`` per section) render ReportData with autoescape on. Charts are
altair specs (``charts.py``) embedded as JSON in ``<script type="application/json">`` blocks, with
``<``, ``>`` and ``&`` written as ``\\u003c`` etc., so no trace string can close the block. Vega,
Vega-Lite and vega-embed come inline from vl-convert; vega-embed runs with ``ast: true`` (Vega's
expression interpreter instead of generated code), so the Content-Security-Policy below needs no
``unsafe-eval`` and forbids every network access.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from traceview import units as fmt
from traceview.errors import TraceviewError
from traceview.files import user_cache_dir, write_atomically
from traceview.report import evidence
from traceview.report.names import short_kernel_names
from traceview.report.style import PHASE_COLORS, PHASE_ORDER
from traceview.resources import data_dir

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "font-src 'none'; connect-src 'none'; media-src 'none'; object-src 'none'; frame-src 'none'; "
       "worker-src 'none'; base-uri 'none'; form-action 'none'")
_KEEP_LINE = re.compile(r"^(\s+|[-*•] |\d+[.)] )")  # rule text lines that start a new line when unwrapping
NAME_WIDTH = 72  # characters of a kernel name in a table cell; the full name is its tooltip
TEMPLATE_OPTIONS = {"autoescape": True, "trim_blocks": True, "lstrip_blocks": True, "keep_trailing_newline": True}


def default_templates_dir() -> Path:
    """The top-level ``templates/``, as installed (:func:`traceview.resources.data_dir`)."""
    return data_dir("templates")


@lru_cache(maxsize=1)
def vega_javascript() -> str:
    """Vega, Vega-Lite and vega-embed as one script, safe to place inside a <script> element.

    vl-convert builds the bundle in about 1.5 s, the largest fixed cost of a report, so the bundle is
    kept in the user cache directory, one file per vl-convert version.
    """
    try:
        import vl_convert
    except ImportError as error:
        raise TraceviewError("the HTML report needs vl-convert-python: pip install vl-convert-python") from error
    cached = user_cache_dir() / f"vega-bundle-{vl_convert.__version__}.js"
    try:
        return cached.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    bundle = vl_convert.javascript_bundle()  # defines window.vegaEmbed
    script = re.sub(r"</(script)", r"<\\/\1", bundle, flags=re.IGNORECASE).replace("<!--", "<\\!--")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(cached, script)
    except (OSError, TraceviewError):
        pass  # a read-only home only costs the rebuild next time
    return script


def environment(templates_dir: str | Path | None = None) -> jinja2.Environment:
    """The Jinja environment every HTML page renders in (the report, the diff): autoescape, unit filters.

    `templates_dir` overrides the shipped templates.
    """
    return _environment(str(Path(templates_dir) if templates_dir else default_templates_dir()))


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """Compiled templates in the user cache directory: compiling the report's templates takes 0.1 s,
    loading them a few ms. Jinja checks each entry against its template's source; the folder name
    carries what else shapes the code (the Jinja version and the lexer options). A cache that cannot
    be written only costs the compile next time."""

    def __init__(self) -> None:
        key = hashlib.sha1(repr((jinja2.__version__, sorted(TEMPLATE_OPTIONS.items()))).encode()).hexdigest()[:12]
        directory = user_cache_dir() / f"templates-{key}"
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
        super().__init__(str(directory))

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


@lru_cache(maxsize=4)
def _environment(directory: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory), undefined=jinja2.StrictUndefined,
        bytecode_cache=_CompiledTemplates(), **TEMPLATE_OPTIONS,
    )
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":"), "allow_nan": False}
    env.globals.update(
        duration=fmt.duration, number=fmt.number, percent=fmt.percent, size=fmt.size, tflops=fmt.tflops,
        tbps=fmt.tbps, evidence_shape=evidence.shape, evidence_value=evidence_value, paragraphs=paragraphs,
        basename=_basename, name_width=NAME_WIDTH,
        phase_colors=PHASE_COLORS,
    )
    return env


def _basename(path: Any) -> str:
    return str(path).replace("\\", "/").rsplit("/", 1)[-1]


def _category_table(data: dict[str, Any]) -> dict[str, Any]:
    """Categories as rows, phases as columns: kernel time and share of the phase."""
    phases = sorted({c["phase"] or "none" for c in data["categories"]},
                    key=lambda p: (PHASE_ORDER.index(p) if p in PHASE_ORDER else 99, p))
    rows: dict[str, dict[str, Any]] = {}
    for c in data["categories"]:
        row = rows.setdefault(c["category"] or "none", {"category": c["category"] or "none", "time_ns": 0,
                                                         "kernels": 0, "phases": {}})
        row["time_ns"] += c["time_ns"] or 0
        row["kernels"] += c["kernels"] or 0
        row["phases"][c["phase"] or "none"] = c
    total = sum(r["time_ns"] for r in rows.values()) or 1
    for row in rows.values():
        row["share_pct"] = 100.0 * row["time_ns"] / total
    return {"phases": phases, "rows": sorted(rows.values(), key=lambda r: (-r["time_ns"], r["category"]))}


def _gaps(data: dict[str, Any]) -> list[str]:
    """What the report could not compute for this trace, in words."""
    gaps = []
    gpu, summary = data["gpu"], data["summary"]
    if not summary["kernels"]:
        gaps.append("No GPU kernels in the trace: time accounting, steps, roofline, kernels and categories are omitted.")
        return gaps
    if not gpu.get("spec_id"):
        gaps.append(f"The GPU ({gpu.get('name') or 'no device name'}) matched no hardware spec: no peaks, "
                    "no roofs, no % of roof (pass --gpu to name it).")
    if not any(data["roofline"].values()):
        gaps.append("No FLOP/byte costs: the trace has no operator input shapes (profile with record_shapes=True), "
                    "so no kernel is placed on the roofline and achieved TFLOP/s and TB/s are unknown.")
    if not data["steps"]:
        gaps.append("No steps were found (no step annotations and no idle gaps splitting the work): "
                    "no step timeline and no per-phase accounting.")
    unsplit = [p["phase"] for p in data["phases"] if p["roofline_ns"] is None]
    if unsplit:
        gaps.append(f"No roofline floor for {', '.join(unsplit)}: GPU busy time is not split into floor and "
                    "kernel inefficiency (run with --model and token counts).")
    return gaps


def evidence_value(key: str, value: Any, origin_ns: int | None = None) -> str:
    """An evidence value with the unit its column name states (``_ns``, ``_pct``, ``_bytes``, ...); timestamps
    (``start_ns``, ``end_ns``, ``ts_ns``) from the trace start when it is known (:mod:`report.evidence`)."""
    return evidence.value_text(key, value, origin_ns)


def _kernel_rows(kernels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The top kernels with the short name the table shows: shortened together, so no two rows read the same."""
    short = short_kernel_names((k["name"] or k["short_name"] or "" for k in kernels), NAME_WIDTH)
    return [{**k, "label": short.get(k["name"] or k["short_name"] or "", k["short_name"] or "")} for k in kernels]


def paragraphs(text: str) -> list[str]:
    """Rule text as paragraphs: blank lines split them, wrapped lines rejoin, list items and indented lines stay."""
    out = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.split("\n")
        merged = [lines[0]]
        for line in lines[1:]:
            if _KEEP_LINE.match(line):
                merged.append(line)
            else:
                merged[-1] = f"{merged[-1].rstrip()} {line.strip()}"
        out.append("\n".join(merged))
    return out


def _finding_groups(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings grouped by rule (in rank order of each rule's first finding), so a rule's fix is shown once: the
    variant the first finding's facts chose; a finding whose facts chose another says so itself."""
    groups: dict[str, dict[str, Any]] = {}
    for number, finding in enumerate(findings, start=1):
        group = groups.setdefault(finding["rule"], {
            "rule": finding["rule"], "name": finding.get("name"), "title": finding["title"],
            "severity": finding["severity"], "fix": finding.get("fix"), "fix_summary": finding.get("fix_summary"),
            "fix_basis": finding.get("fix_basis") or [], "doc": finding.get("doc"),
            "saving_ns": 0, "findings": []})
        group["saving_ns"] += finding.get("estimated_saving_ns") or 0
        group["findings"].append({"number": number, **finding})
    return list(groups.values())


def _peaks(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    """Dense peaks with dtypes that share a value merged ('bf16/fp16')."""
    merged: dict[float, list[str]] = {}
    for dtype, value in (gpu.get("peak_tflops") or {}).items():
        merged.setdefault(value, []).append(dtype)
    return [{"dtypes": "/".join(d), "tflops": v} for v, d in sorted(merged.items(), reverse=True)]


def _columns(data: dict[str, Any]) -> dict[str, bool]:
    """Optional table columns, shown only when some row has a value."""
    return {
        "tokens": any(any(v is not None for v in (s.get("tokens") or {}).values()) for s in data["steps"]),
        "kernel_tbps": any(k["achieved_tbps"] is not None for k in data["top_kernels"]),
        "kernel_tflops": any(k["achieved_tflops"] is not None for k in data["top_kernels"]),
        "phase_costs": any(p[key] is not None for p in data["phases"]
                           for key in ("pct_of_roof", "achieved_tflops", "achieved_tbps", "arithmetic_intensity")),
    }


def prepare() -> None:
    """Load what a page renders with: altair and the chart code (a quarter of a second of imports), the
    compiled templates and the Vega bundle. The report command runs this while the trace is analysed."""
    from traceview.report import charts  # noqa: F401  (imported for its altair)

    environment().get_template("report.html")
    vega_javascript()


def render(data: dict[str, Any], templates_dir: str | Path | None = None) -> str:
    """The page for one ReportData; `templates_dir` overrides the shipped templates."""
    from traceview.report import charts  # altair is imported only when a page is rendered

    specs = {name: charts.vega_lite(chart) for name, chart in charts.build(data).items() if chart is not None}
    return environment(templates_dir).get_template("report.html").render(
        data=data, charts=specs, csp=CSP, has_gpu=bool(data["summary"]["kernels"]), gaps=_gaps(data),
        peaks=_peaks(data["gpu"]), columns=_columns(data), category_table=_category_table(data),
        finding_groups=_finding_groups(data["findings"]), step_bucket=charts.step_bucket(len(data["steps"])),
        kernel_rows=_kernel_rows(data["top_kernels"]),
        vega_js=Markup(vega_javascript()) if specs else Markup(""),
    )
