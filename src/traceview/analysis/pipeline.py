"""The analysis pipeline: what each kernel is, which GPU ran it, which step and phase it belongs to,
and how close it runs to the roof. Every result lands as tables, columns and views in the trace's
database (docs/analysis.md), so rules and reports read them with SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from traceview.analysis import accounting, categories, phases, roofline
from traceview.analysis.hardware import HardwareSpec, get_spec, load_specs, match_gpu
from traceview.analysis.models import load_model
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


def match_devices(con: duckdb.DuckDBPyConnection, gpu: str | None) -> HardwareSpec | None:
    """Match each device to a hardware/ spec (or the `--gpu` override) and note what could not be.

    Returns the spec of the GPU that ran the most kernel time (the target for model accounting).
    """
    specs = load_specs()
    override = None
    if gpu:
        try:
            override = get_spec(gpu, specs)
        except ValueError as exc:
            raise TraceviewError(f"--gpu {gpu}: {exc}") from None
        con.execute(
            """
            INSERT INTO devices (rank, device_id, name)
            SELECT DISTINCT k.rank, k.device_id, '' FROM kernels k
            WHERE NOT EXISTS (SELECT 1 FROM devices d WHERE d.rank = k.rank AND d.device_id = k.device_id)
            """
        )
    rows = con.execute(
        "SELECT rank, device_id, name, compute_major, compute_minor, sm_count, memory_bytes FROM devices"
    ).fetchall()
    matches = {
        (rank, device): override or match_gpu(name, major, minor, sms, memory, specs=specs)
        for rank, device, name, major, minor, sms, memory in rows
    }
    roofline.attach_gpu_specs(con, matches, specs)
    used = con.execute(
        """
        SELECT DISTINCT k.rank, k.device_id, d.name FROM kernels k
        LEFT JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
        WHERE d.spec_id IS NULL
        """
    ).fetchall()
    for rank, device, name in used:
        if name:
            message = f"GPU {device} '{name}' matches no file in hardware/: pass --gpu NAME for roofline numbers"
        else:
            message = f"GPU {device} has no device name in the trace: pass --gpu NAME for roofline numbers"
        db.add_diagnostic(con, rank, "analysis", "warning", "gpu_unknown", message)
    busiest = con.execute(
        """SELECT d.spec_id FROM kernels k JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
           WHERE d.spec_id IS NOT NULL GROUP BY d.spec_id ORDER BY sum(k.dur_ns) DESC LIMIT 1"""
    ).fetchall()
    return next((s for s in specs if busiest and s.id == busiest[0][0]), override)


def analyze(con: duckdb.DuckDBPyConnection, options: AnalysisOptions = AnalysisOptions()) -> None:
    """Run every analysis over an ingested trace, in dependency order."""
    model = options.model_options()
    for pattern in (options.step_regex, *(regex for _, regex in options.phase_kernels)):
        _check_regex(con, pattern)
    categories.classify_kernels(con)
    gpu = match_devices(con, options.gpu)
    roofline.build_op_costs(con)
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
