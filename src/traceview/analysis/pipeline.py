"""The analysis pipeline: what each kernel is, which GPU ran it, which step and phase it belongs to,
and how close it runs to the roof. Every result lands as tables, columns and views in the trace's
database (docs/analysis.md), so rules and reports read them with SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from traceview.analysis import accounting, categories, devices, op_costs, phases, roofline
from traceview.analysis.models import load_model
from traceview.errors import TraceviewError


@dataclass(frozen=True)
class AnalysisOptions:
    """What a user can tell the analysis that the trace does not say."""

    gpu: str | None = None
    step_regex: str | None = None
    step_gap_ns: int = phases.DEFAULT_GAP_NS
    phase_kernels: tuple[tuple[str, str], ...] = ()
    model: str | None = None
    dtype: str = "bf16"
    tp: int = 1
    batch: int | None = None
    context: int | None = None
    utilization: float = 1.0

    def model_options(self) -> accounting.ModelOptions | None:
        if not self.model:
            return None
        try:
            model = load_model(self.model)
        except (ValueError, OSError) as exc:
            raise TraceviewError(f"--model {self.model}: {exc}") from None
        return accounting.ModelOptions(model, self.dtype, self.tp, self.batch, self.context, self.utilization)


def analyze(con: duckdb.DuckDBPyConnection, options: AnalysisOptions = AnalysisOptions()) -> None:
    """Run every analysis over an ingested trace, in dependency order."""
    model = options.model_options()
    for pattern in (options.step_regex, *(regex for _, regex in options.phase_kernels)):
        _check_regex(con, pattern)
    categories.classify_kernels(con)
    gpu = devices.match_devices(con, options.gpu)
    op_costs.build_op_costs(con)
    roofline.cost_kernels(con)
    phases.segment_steps(con, step_regex=options.step_regex, gap_ns=options.step_gap_ns,
                         phase_kernels=options.phase_kernels)
    roofline.build_roofline_views(con)
    try:
        accounting.build_step_accounting(con, model, gpu)
    except ValueError as exc:
        raise TraceviewError(f"--model {options.model}: {exc}") from None
    roofline.build_phase_summary(con)


def _check_regex(con: duckdb.DuckDBPyConnection, pattern: str | None) -> None:
    """A bad --step-regex or --phase-kernel regex is a usage error, reported before any work."""
    if pattern is None:
        return
    try:
        con.execute("SELECT regexp_matches('', ?)", [pattern]).fetchall()
    except duckdb.Error as exc:
        raise TraceviewError(f"regex {pattern!r}: {str(exc).splitlines()[0]}") from None
