"""The analysis pipeline: what each kernel is, which GPU ran it, which step and phase it belongs to,
and how close it runs to the roof. Every result lands as tables, columns and views in the trace's
database (docs/analysis.md), so rules and reports read them with SQL. The stages and what each
reads and creates are declared in their modules (analysis/stage.py); this module only orders them.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from traceview.analysis import (accounting, activity, assemble, budget, categories, devices, engines, host_context,
                                op_costs, phases, ranks, roofline, sql_module, steady)
from traceview.analysis.models import load_model
from traceview.analysis.stage import Context, Stage, run_stages
from traceview.errors import TraceviewError
from traceview.model import db


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


# In dependency order; each stage declares what it reads and creates (docs/analysis.md is built from them).
# Side by side, of the stages ready when a thread frees the first listed starts, so the order is also the
# priority: the longest chains first. The windows and work of steps first (they read no label, so they run beside
# the categories), then op costs and the steps' roles before devices (the chain through steps is the analysis's
# longest until `kernels` is assembled), and Python event density, which reads only the trace, in the core left
# free while the steps are found; then the timeline (activity) beside the launch queue (0.8 s of the 2 M export's
# analysis alone); after the timeline, the idle gaps beside the chain through steady to the critical path and
# step budget, and the busy unions; then host context (with the critical path, the longest stage on a trace with
# many host ranges: 0.7 of the 10x vLLM trace's 1.9 s), then the short stages, the communication islands last.
# The order must keep each stage after those that create what it reads (run_stages checks it).
STAGES: tuple[Stage, ...] = (
    phases.WORK_STAGE,
    categories.STAGE,
    op_costs.STAGE,
    phases.ROLES_STAGE,
    devices.STAGE,
    sql_module.load("rule_inputs").stage(),
    roofline.COSTS_STAGE,
    host_context.DENSITY_STAGE,
    phases.STAGE,
    assemble.STAGE,
    activity.STAGE,
    sql_module.load("launch_queue").stage(),
    activity.IDLE_GAPS_STAGE,
    steady.STAGE,
    activity.DEVICE_BUSY_STAGE,
    roofline.VIEWS_STAGE,
    accounting.STAGE,
    roofline.SUMMARY_STAGE,
    host_context.STAGE,
    sql_module.load("step_windows").stage(),
    sql_module.load("critical_path").stage(),
    budget.STAGE,
    ranks.STAGE,
    sql_module.load("collectives").stage(),
    engines.STAGE,
    activity.COMM_ISLANDS_STAGE,
    sql_module.load("trace_facts").stage(),
    sql_module.load("totals").stage(),
)


def analysis_names() -> frozenset[str]:
    """Every relation the stages create and every column they add to a schema table."""
    return frozenset(name for stage in STAGES for name in (
        *(relation.name for relation in stage.creates if not relation.transient),
        *(column for added in stage.adds for column in added.columns)))


def analyze(con: duckdb.DuckDBPyConnection, options: AnalysisOptions = AnalysisOptions()) -> None:
    """Run every analysis stage over an ingested trace; analysing again replaces the previous results."""
    model = options.model_options()
    for pattern in (options.step_regex, *(regex for _, regex in options.phase_kernels)):
        _check_regex(con, pattern)
    con.execute("DELETE FROM diagnostics WHERE source = 'analysis'")
    run_stages(con, STAGES, Context(options, model), threads=db.side_by_side(con, stages=True),
               share_cores=db.shares_cores(con))


def _check_regex(con: duckdb.DuckDBPyConnection, pattern: str | None) -> None:
    """A bad --step-regex or --phase-kernel regex is a usage error, reported before any work."""
    if pattern is None:
        return
    try:
        con.execute("SELECT regexp_matches('', ?)", [pattern]).fetchall()
    except duckdb.Error as exc:
        raise TraceviewError(f"regex {pattern!r}: {str(exc).splitlines()[0]}") from None
