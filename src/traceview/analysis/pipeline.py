"""The analysis pipeline: what each kernel is, which GPU ran it, which step and phase it belongs to,
and how close it runs to the roof. Every result lands as tables, columns and views in the trace's
database (docs/analysis.md), so rules and reports read them with SQL.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from traceview.analysis import categories, phases, roofline
from traceview.analysis.hardware import get_spec, load_specs, match_gpu
from traceview.errors import TraceviewError
from traceview.model import db


@dataclass(frozen=True)
class AnalysisOptions:
    """What a user can tell the analysis that the trace does not say."""

    gpu: str | None = None
    step_regex: str | None = None
    step_gap_ns: int = phases.DEFAULT_GAP_NS


def match_devices(con: duckdb.DuckDBPyConnection, gpu: str | None) -> None:
    """Match each device to a hardware/ spec (or the `--gpu` override) and note what could not be."""
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


def analyze(con: duckdb.DuckDBPyConnection, options: AnalysisOptions = AnalysisOptions()) -> None:
    """Run every analysis over an ingested trace, in dependency order."""
    categories.classify_kernels(con)
    match_devices(con, options.gpu)
    phases.segment_steps(con, step_regex=options.step_regex, gap_ns=options.step_gap_ns)
    roofline.build_op_costs(con)
    roofline.cost_kernels(con)
    roofline.build_roofline_views(con)
