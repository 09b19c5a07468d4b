"""Step accounting: where each step's wall time went, the way inference engineers reason about it.

Without a model the trace alone splits a step's wall time into GPU busy time, GPU idle inside the
step's GPU span (launch gaps, host waits) and time outside GPU work (scheduling, Python, I/O).
With a model (`--model`) and token counts (from annotations, or `--batch`/`--context` for decode) each step
also gets its ideal bytes and FLOPs from the on-paper model (estimate.py), so

    wall = bytes/bandwidth + FLOPs/(peak·utilisation) + overhead,

and the floor max(bytes/bandwidth, FLOPs/peak) separates time at the roofline from kernel
inefficiency (busy − floor).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from traceview.analysis.estimate import Estimate, estimate
from traceview.analysis.hardware import HardwareSpec
from traceview.analysis.models import ModelConfig
from traceview.analysis.stage import Context, Relation, Stage
from traceview.errors import TraceviewError
from traceview.model import db


@dataclass(frozen=True)
class ModelOptions:
    """The model and serving shape a user gives for accounting."""

    model: ModelConfig
    dtype: str = "bf16"
    tp: int = 1
    batch: int | None = None
    context: int | None = None
    utilization: float = 1.0


@dataclass(frozen=True)
class StepCost:
    bytes: float
    flops: float
    memory_s: float
    compute_s: float


class StepCoster:
    """Ideal cost of steps under one model and GPU; steps repeat shapes, so estimates are memoised."""

    def __init__(self, options: ModelOptions, gpu: HardwareSpec):
        self.options, self.gpu = options, gpu
        self._estimates: dict[tuple, Estimate] = {}

    def _estimate(self, phase: str, requests: int, new_tokens: int, context: int) -> Estimate:
        key = (phase, max(requests, 1), max(new_tokens, 1), max(context, new_tokens, 1))
        if key not in self._estimates:
            o = self.options
            self._estimates[key] = estimate(
                o.model, self.gpu, dtype=o.dtype, batch=key[1], context=key[3], phase=phase, tp=o.tp,
                prompt_tokens=key[2] if phase == "prefill" else None, utilization=o.utilization,
            )
        return self._estimates[key]

    def cost(self, prefill: tuple[int, int, int] | None, decode: tuple[int, int] | None) -> StepCost | None:
        """prefill = (requests, new tokens, context tokens) per request; decode = (requests, context).

        A mixed step streams its weights once, so the decode part's weights are not counted twice.
        """
        parts: list[Estimate] = []
        if prefill:
            parts.append(self._estimate("prefill", *prefill))
        if decode:
            parts.append(self._estimate("decode", decode[0], 1, decode[1]))
        if not parts:
            return None
        total_bytes = sum(p.memory_bytes for p in parts) - sum(p.weight_bytes for p in parts[1:])
        total_flops = sum(p.flops for p in parts)
        return StepCost(total_bytes, total_flops, total_bytes / parts[0].bandwidth, total_flops / parts[0].peak_flops)


def _shape(row: dict, options: ModelOptions) -> tuple[tuple[int, int, int] | None, tuple[int, int] | None]:
    """Per-request shapes of a step from its token counts; decode steps without counts fall back on
    --batch/--context (a prefill's size cannot be guessed, so it needs counts from an annotation)."""
    prefill = decode = None
    phase = row["phase"]
    if row["prefill_tokens"]:
        requests = row["prefill_requests"] or 1
        new = row["prefill_tokens"] // requests
        context = (row["prefill_context_tokens"] or row["prefill_tokens"]) // requests
        prefill = (requests, new, context)
    if row["decode_tokens"]:
        requests = row["decode_requests"] or row["decode_tokens"]
        context = (row["decode_context_tokens"] or 0) // requests or options.context or 1
        decode = (requests, context)
    elif phase == "decode" and options.batch:
        decode = (options.batch, options.context or 1)
    return prefill, decode


def build_step_accounting(con: duckdb.DuckDBPyConnection, options: ModelOptions | None,
                          gpu: HardwareSpec | None) -> None:
    """`step_accounting`: one row per step with its time decomposition (model terms when given)."""
    con.execute(
        """
        CREATE OR REPLACE TABLE step_accounting AS
        SELECT s.rank, s.step_id, s.phase, s.end_ns - s.start_ns AS wall_ns, s.gpu_time_ns AS gpu_busy_ns,
               coalesce(s.gpu_end_ns - s.gpu_start_ns - s.gpu_time_ns, 0) AS gpu_idle_ns,
               (s.end_ns - s.start_ns) - coalesce(s.gpu_end_ns - s.gpu_start_ns, 0) AS outside_gpu_ns,
               NULL::DOUBLE AS model_bytes, NULL::DOUBLE AS model_flops,
               NULL::BIGINT AS memory_time_ns, NULL::BIGINT AS compute_time_ns,
               NULL::BIGINT AS roofline_floor_ns, NULL::BIGINT AS kernel_inefficiency_ns,
               NULL::BIGINT AS overhead_ns, NULL::VARCHAR AS dominant_term
        FROM steps s
        """
    )
    if options is None or gpu is None:
        return
    rows = con.execute(
        """SELECT rank, step_id, phase, prefill_requests, prefill_tokens, prefill_context_tokens,
                  decode_requests, decode_tokens, decode_context_tokens FROM steps WHERE phase <> 'empty'"""
    ).fetchall()
    names = ("rank", "step_id", "phase", "prefill_requests", "prefill_tokens", "prefill_context_tokens",
             "decode_requests", "decode_tokens", "decode_context_tokens")
    coster = StepCoster(options, gpu)
    costs = []
    for values in rows:
        row = dict(zip(names, values))
        cost = coster.cost(*_shape(row, options))
        if cost:
            costs.append((row["rank"], row["step_id"], cost))
    columns = {"rank": "INTEGER", "step_id": "BIGINT", "bytes": "DOUBLE", "flops": "DOUBLE", "memory_ns": "BIGINT",
               "compute_ns": "BIGINT"}
    priced = [(rank, step_id, cost.bytes, cost.flops, round(cost.memory_s * 1e9), round(cost.compute_s * 1e9))
              for rank, step_id, cost in costs]
    with db.values_table(con, "_costs", columns, priced):
        con.execute(
            """
            UPDATE step_accounting SET model_bytes = c.bytes, model_flops = c.flops,
                   memory_time_ns = c.memory_ns, compute_time_ns = c.compute_ns,
                   roofline_floor_ns = c.floor_ns,
                   -- a floor above the measured busy time is impossible: left NULL (phase_summary says why)
                   kernel_inefficiency_ns = CASE WHEN gpu_busy_ns >= c.floor_ns THEN gpu_busy_ns - c.floor_ns END,
                   overhead_ns = wall_ns - c.memory_ns - c.compute_ns,
                   dominant_term = CASE
                       WHEN wall_ns - c.memory_ns - c.compute_ns >= c.floor_ns THEN 'overhead'
                       WHEN c.memory_ns >= c.compute_ns THEN 'memory' ELSE 'compute' END
            FROM (SELECT *, CASE WHEN memory_ns >= compute_ns THEN memory_ns ELSE compute_ns END AS floor_ns
                  FROM _costs) c
            WHERE step_accounting.rank = c.rank AND step_accounting.step_id = c.step_id
            """
        )


def _run(con: duckdb.DuckDBPyConnection, context: Context) -> None:
    try:
        build_step_accounting(con, context.model, context.gpu)
    except ValueError as exc:
        raise TraceviewError(f"--model {context.options.model}: {exc}") from None


STAGE = Stage(
    name="step_accounting",
    doc="Where each step's wall time went: GPU busy, GPU idle inside the step's GPU span and time outside "
        "GPU work; with `--model`, the step's ideal bytes and FLOPs, so that wall = bytes/bandwidth + "
        "FLOPs/(peak·utilisation) + overhead.",
    requires=("steps", "devices"),  # devices: the stage that matches the GPU (context.gpu)
    creates=(
        Relation("step_accounting", "step", {
            "rank": "trace rank", "step_id": "`steps.step_id`", "phase": "`steps.phase`",
            "wall_ns": "step duration", "gpu_busy_ns": "union of the step's GPU work",
            "gpu_idle_ns": "GPU idle between the step's first and last GPU work",
            "outside_gpu_ns": "wall time before and after the step's GPU work",
            "model_bytes": "ideal bytes of the step (a mixed step streams weights once)",
            "model_flops": "ideal FLOPs of the step",
            "memory_time_ns": "bytes/bandwidth", "compute_time_ns": "FLOPs/peak",
            "roofline_floor_ns": "max of the two: the step cannot be faster",
            "kernel_inefficiency_ns": "GPU busy time above the floor; NULL when the floor is above the busy time "
                                      "(the model does not describe the run)",
            "overhead_ns": "wall − memory time − compute time (negative when they overlap)",
            "dominant_term": "memory, compute or overhead: the largest of the three"}),
    ),
    run=_run,
)
