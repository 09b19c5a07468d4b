"""One pipeline for every command and for Python: analyse → check (the baseline applied) → report data.

`traceview report`, `check`, `diff` and `audit` all call `check()` and `report()` here, so a trace
gives the same findings whichever command reads it.

    import traceview
    from traceview import workflow

    with traceview.load("run.sqlite") as trace:
        data = workflow.report(trace, workflow.CheckOptions.configured())
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from traceview import __version__, api, profiling
from traceview.analysis.pipeline import AnalysisOptions
from traceview.errors import TraceviewError
from traceview.model import db
from traceview.report.chrome_trace import ExportSummary, write_chrome_trace
from traceview.report.data import SCHEMA_VERSION, build_report
from traceview.report.finding_windows import finding_windows
from traceview.report.timeline import FocusStep
from traceview.rules import engine
from traceview.rules.baseline import read_baseline
from traceview.rules.config import RuleConfig
from traceview.rules.loader import Rule, load_rules

if TYPE_CHECKING:  # polars takes 0.1 s to import and only query() returns its frames
    import polars as pl

READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN"}
NESTED_TYPES = {"list", "struct", "map", "array", "union"}  # DuckDB type ids CSV cannot hold


@dataclass(frozen=True)
class CheckOptions:
    """Everything a check needs besides the trace; picklable, so audit ships it to worker processes once."""

    analysis: AnalysisOptions = field(default_factory=AnalysisOptions)
    config: RuleConfig = field(default_factory=RuleConfig)
    rules: tuple[Rule, ...] = ()
    known: frozenset[str] = frozenset()  # fingerprints of the baseline's findings, suppressed

    @classmethod
    def configured(cls, analysis: AnalysisOptions | None = None, config: RuleConfig | None = None,
                   rules: list[Rule] | None = None, *, baseline: bool = True) -> CheckOptions:
        """The rules the configuration names (built-in ones by default) and its baseline, read once here."""
        config = config or RuleConfig()
        known = read_baseline(config.baseline) if baseline and config.baseline else frozenset()
        return cls(analysis or AnalysisOptions(), config,
                   tuple(rules if rules is not None else load_rules(config.rules_dirs)), known)


def check(trace: api.Trace, options: CheckOptions, con: duckdb.DuckDBPyConnection | None = None) -> engine.CheckResult:
    """Analyse the trace and run the selected rules (on `con`, a cursor of the trace's, where given); findings in
    the baseline are suppressed."""
    trace.analyze(options.analysis)
    return engine.check(con or trace.con, list(options.rules), options.config, options.known)


def report(trace: api.Trace, options: CheckOptions, result: engine.CheckResult | None = None,
           focus_step: FocusStep | None = None) -> dict[str, Any]:
    """ReportData for the trace; `result` reuses a check already run on it with these options; `focus_step`
    adds that step to the timeline. Without `result`, on a trace whose statements run side by side
    (db.side_by_side), the rules run while the sections that do not need their findings are built."""
    if result is None:
        trace.analyze(options.analysis)
        threads = db.side_by_side(trace.con)
        if threads > 1:  # the rules on a cursor of the pool; a Ctrl-C stops their statement too
            with profiling.alongside("report", "rules"), db.cursor_pool(trace.con, threads) as submit:
                checked = submit(lambda cursor: check(trace, options, cursor))
                return build_report(trace.con, checked, __version__, focus_step=focus_step)
        result = check(trace, options)
    return build_report(trace.con, result, __version__, focus_step=focus_step)  # profiled per section


def export(trace: api.Trace, options: CheckOptions, target: Path) -> ExportSummary:
    """`traceview export`: the trace and its findings (each with the window the report gives it) as Chrome
    trace-event JSON at `target`."""
    checked = check(trace, options)  # first: an analysis read from --cache-dir replaces trace.con
    findings = finding_windows(trace.con, [f.to_dict() for f in checked.findings])
    return write_chrome_trace(trace.con, findings, target, version=__version__)


def saved_report(path: Path) -> dict[str, Any] | None:
    """The JSON report `traceview report` saved at `path`, or None where `path` is not one (a trace)."""
    if not (path.is_file() and path.suffix == ".json"):
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not (isinstance(data, dict) and data.get("generator", {}).get("name") == "traceview"):
        return None
    if data.get("schema_version") != SCHEMA_VERSION:
        raise TraceviewError(f"{path}: report schema_version {data.get('schema_version')} is not {SCHEMA_VERSION}")
    return data


def _trace_report(path: Path, options: CheckOptions) -> dict[str, Any]:
    with api.load(path) as trace:
        return report(trace, options)


def reports_for(paths: list[Path], options: CheckOptions, jobs: int = 1) -> list[dict[str, Any]]:
    """The sides of a diff, in order: each saved JSON report as it is, each trace analysed, checked and reported,
    the traces in up to `jobs` worker processes (the runs are independent, and analysing each is most of a diff's
    time)."""
    reports = [saved_report(path) for path in paths]
    traces = [i for i, data in enumerate(reports) if data is None]
    if jobs <= 1 or len(traces) <= 1:
        analysed = [_trace_report(paths[i], options) for i in traces]
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(jobs, len(traces))) as pool:
            analysed = list(pool.map(_trace_report, [paths[i] for i in traces], [options] * len(traces)))
    for i, data in zip(traces, analysed):
        reports[i] = data
    return reports


def query(trace: api.Trace, sql: str, *, nested_as_json: bool = False) -> pl.DataFrame:
    """A read-only query's rows; `nested_as_json` writes list, struct and map cells as JSON text (for CSV)."""
    import polars as pl

    try:
        statements = trace.con.extract_statements(sql)
    except duckdb.Error as exc:
        raise TraceviewError(f"SQL error: {str(exc).splitlines()[0]}") from None
    if not statements:
        raise TraceviewError("SQL error: empty query")
    for statement in statements:
        if statement.type.name not in READ_ONLY_STATEMENTS:
            raise TraceviewError(f"query is read-only: {statement.type.name} statements are not allowed")
    try:
        relation = trace.con.sql(sql)
        if relation is None:
            return pl.DataFrame()
        if nested_as_json and any(kind.id in NESTED_TYPES for kind in relation.types):
            relation = relation.select(", ".join(
                f'to_json({_quoted(name)})::VARCHAR AS {_quoted(name)}' if kind.id in NESTED_TYPES else _quoted(name)
                for name, kind in zip(relation.columns, relation.types)))
        return relation.pl()
    except duckdb.Error as exc:
        raise TraceviewError(f"SQL error: {str(exc).splitlines()[0]}") from None


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
