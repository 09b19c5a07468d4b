"""Step accounting: where each step's wall time went, the way inference engineers reason about it.

Without a model the trace alone splits a step's wall time into GPU busy time, GPU idle inside the
step's GPU span (launch gaps, host waits) and time outside GPU work (scheduling, Python, I/O).
With a model (`--model`) and token counts (from annotations, or `--batch`/`--context` for decode) each step
also gets its ideal bytes and FLOPs from the on-paper model (estimate.py), so

    wall = bytes/bandwidth + FLOPs/(peak·utilisation) + overhead,

and the floor max(bytes/bandwidth, FLOPs/peak) separates time at the roofline from kernel
inefficiency (busy − floor). The SQL is analysis/sql/step_accounting.sql; Python costs each step's shape
on the model and hands the figures back in a values table.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from traceview.analysis import sql_module
from traceview.analysis.estimate import Estimate, estimate
from traceview.analysis.hardware import HardwareSpec
from traceview.analysis.models import ModelConfig
from traceview.analysis.stage import Context
from traceview.errors import TraceviewError
from traceview.model import db

MODULE = sql_module.load("step_accounting")


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
    MODULE.run(con, "")
    if options is None or gpu is None:
        return
    MODULE.run(con, "model_steps")
    names = [column[0] for column in con.description]
    rows = con.fetchall()
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
        MODULE.run(con, "model")


def _run(con: duckdb.DuckDBPyConnection, context: Context) -> None:
    try:
        build_step_accounting(con, context.model, context.gpu)
    except ValueError as exc:
        raise TraceviewError(f"--model {context.options.model}: {exc}") from None


STAGE = MODULE.stage(run=_run)
