"""Roofline: how close each kernel, category, phase and step runs to the matched GPU's roof.

A kernel's costs come from the op that launched it (`op_costs`, built by the cost models in
op_costs.toml): a Kineto cpu_op joined on External id, or the nsys `emit_nvtx` range enclosing the
launch call. An op's cost is shared among its kernels in proportion to their time, then judged
against the kernel's GPU: a cost the hardware could not have run is rejected, never clamped.
Aggregates are ΣFLOPs/Σtime over accepted costs, never a mean of percentages (reference: MATH.md §1).
"""

from __future__ import annotations

import duckdb

from traceview.analysis.categories import labelled_kernels_sql
from traceview.analysis.stage import Columns, Relation, Stage
from traceview.model import db

DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp4": 0.5}
# Categories whose FLOPs run on tensor cores; everything else is judged against bandwidth only.
MATH_CATEGORIES = ("gemm", "attention")

COST_COLUMNS = {
    "flops": "useful FLOPs of the kernel: its launching op's FLOPs shared among the op's kernels by time; NULL "
             "without shapes, and NULL when the cost was rejected as physically impossible",
    "bytes": "ideal DRAM bytes, shared the same way (inputs read once, output written once); NULL as for `flops`",
    "cost_op": "the op the costs come from (`aten::addmm`, ...)",
    "cost_dtype": "dtype whose peak judges the kernel: the name's dtype, else the op's first input type",
    "op_range_id": "`ranges.range_id` of that op",
    "cost_status": "the physics check of the modelled cost (docs/analysis.md, *Physics*): `accepted`, "
                   "`l2_resident`, `rejected_compute`, `rejected_memory`; NULL when no cost model applied",
}


def cost_kernels(con: duckdb.DuckDBPyConnection) -> None:
    """Give each kernel its launching op's cost, shared by time, if the hardware could have run it.

    A modelled cost is judged against the kernel's GPU before anything aggregates it
    (`kernels.cost_status`): FLOP/s above the dtype's dense peak is never plausible; bytes/s above
    the HBM peak is plausible only when the bytes fit the GPU's L2 (and, where the L2 bandwidth is
    published, stay under it), and such a kernel is `l2_resident`. Anything else is rejected: the
    kernel keeps no cost, the modelled one goes to `rejected_costs`, and a diagnostic names the op,
    the implied rate and the time left uncosted. A kernel whose GPU has no spec is judged against the
    fastest GPU in hardware/, so no number leaves that no GPU could produce.
    """
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _kernel_ops AS
        WITH by_external AS (
            SELECT k.rank, k.kernel_id, o.range_id
            FROM kernels k JOIN op_costs o
              ON o.rank = k.rank AND o.external_id = k.external_id AND o.kind = 'cpu_op'
            WHERE k.external_id IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY k.rank, k.kernel_id ORDER BY o.start_ns DESC) = 1
        ),
        launches AS (
            SELECT k.rank, k.kernel_id, a.pid, a.tid, a.start_ns, a.end_ns
            FROM kernels k JOIN api_calls a ON a.rank = k.rank AND a.call_id = k.launch_call_id
            WHERE k.external_id IS NULL
        ),
        by_nvtx AS (
            SELECT l.rank, l.kernel_id, o.range_id
            FROM launches l ASOF JOIN (SELECT * FROM op_costs WHERE kind = 'nvtx') o
              ON o.rank = l.rank AND o.pid = l.pid AND o.tid = l.tid AND o.start_ns <= l.start_ns
            WHERE o.end_ns >= l.end_ns
        )
        SELECT * FROM by_external UNION ALL SELECT * FROM by_nvtx
        """
    )
    with db.values_table(con, "_dtype_bytes", {"dtype": "VARCHAR", "size": "DOUBLE"},
                         [(dtype, float(size)) for dtype, size in DTYPE_BYTES.items()]):
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _judged_costs AS
            WITH modelled AS (
                SELECT ko.rank, ko.kernel_id, ko.range_id, o.op, k.device_id, k.dur_ns,
                       coalesce(k.dtype, o.input_dtype) AS cost_dtype,
                       o.flops * k.dur_ns / sum(k.dur_ns) OVER (PARTITION BY ko.rank, ko.range_id) AS flops,
                       -- moved elements become bytes only where the element size is known (no fp32 guess)
                       coalesce(o.bytes, o.elements * ds.size) * k.dur_ns
                           / sum(k.dur_ns) OVER (PARTITION BY ko.rank, ko.range_id) AS bytes
                FROM _kernel_ops ko
                JOIN op_costs o USING (rank, range_id)
                JOIN ({labelled_kernels_sql()}) k ON k.rank = ko.rank AND k.kernel_id = ko.kernel_id
                LEFT JOIN _dtype_bytes ds ON ds.dtype = coalesce(k.dtype, o.input_dtype)
                WHERE k.dur_ns > 0
            ),
            fastest AS (
                SELECT (SELECT max(hbm_bytes_per_s) FROM gpu_specs) AS hbm_bytes_per_s,
                       (SELECT max(peak_flops) FROM gpu_peaks) AS peak_flops
            ),
            roofs AS (
                SELECT m.*, d.spec_id, s.l2_bytes, s.l2_bytes_per_s,
                       CASE WHEN s.spec_id IS NULL THEN f.hbm_bytes_per_s ELSE s.hbm_bytes_per_s END AS memory_roof,
                       CASE WHEN s.spec_id IS NULL THEN f.peak_flops
                            WHEN p.peak_flops IS NULL THEN (SELECT max(peak_flops) FROM gpu_peaks q WHERE q.spec_id = s.spec_id)
                            ELSE p.peak_flops END AS compute_roof,
                       m.flops / m.dur_ns * 1e9 AS flops_per_s, m.bytes / m.dur_ns * 1e9 AS bytes_per_s
                FROM modelled m
                CROSS JOIN fastest f
                LEFT JOIN devices d ON d.rank = m.rank AND d.device_id = m.device_id
                LEFT JOIN gpu_specs s ON s.spec_id = d.spec_id
                LEFT JOIN gpu_peaks p ON p.spec_id = d.spec_id AND p.dtype = m.cost_dtype
                WHERE m.flops IS NOT NULL OR m.bytes IS NOT NULL
            )
            SELECT *,
                   CASE WHEN flops_per_s > compute_roof THEN 'rejected_compute'
                        WHEN bytes_per_s > memory_roof AND bytes <= l2_bytes
                             AND (l2_bytes_per_s IS NULL OR bytes_per_s <= l2_bytes_per_s) THEN 'l2_resident'
                        WHEN bytes_per_s > memory_roof THEN 'rejected_memory'
                        ELSE 'accepted' END AS cost_status
            FROM roofs
            """
        )
    con.execute(
        """
        CREATE OR REPLACE TABLE kernel_costs AS
        SELECT rank, kernel_id,
               CASE WHEN cost_status IN ('accepted', 'l2_resident') THEN flops END AS flops,
               CASE WHEN cost_status IN ('accepted', 'l2_resident') THEN bytes END AS bytes,
               op AS cost_op, cost_dtype, range_id AS op_range_id, cost_status
        FROM _judged_costs
        """
    )
    con.execute(
        """
        CREATE OR REPLACE TABLE rejected_costs AS
        SELECT rank, kernel_id, range_id AS op_range_id, op, cost_status AS reason, dur_ns, flops, bytes,
               flops_per_s / 1e12 AS implied_tflops, bytes_per_s / 1e12 AS implied_tbps,
               compute_roof / 1e12 AS roof_tflops, memory_roof / 1e12 AS roof_tbps, l2_bytes
        FROM _judged_costs WHERE cost_status LIKE 'rejected%'
        ORDER BY rank, kernel_id
        """
    )
    _diagnose_rejected_costs(con)
    for table in ("_kernel_ops", "_judged_costs"):
        con.execute(f"DROP TABLE {table}")


def _diagnose_rejected_costs(con: duckdb.DuckDBPyConnection) -> None:
    """One diagnostic per (rank, op, reason): the implied rate against the roof and the time left uncosted."""
    con.execute(
        """
        INSERT INTO diagnostics
        SELECT r.rank, 'analysis', 'warning', 'cost_rejected',
               printf('%d kernels of %s: modelled cost implies %s against the roof of %s; cost rejected, '
                      || '%.3f ms (%.1f%% of kernel time) left uncosted',
                      count(*), r.op,
                      CASE WHEN r.reason = 'rejected_compute' THEN printf('%.1f TFLOP/s', max(r.implied_tflops))
                           ELSE printf('%.2f TB/s', max(r.implied_tbps)) END,
                      CASE WHEN r.reason = 'rejected_compute' THEN printf('%.1f TFLOP/s dense', any_value(r.roof_tflops))
                           WHEN any_value(r.l2_bytes) IS NULL THEN printf('%.2f TB/s HBM', any_value(r.roof_tbps))
                           ELSE printf('%.2f TB/s HBM (working set above the %d MiB L2)', any_value(r.roof_tbps),
                                       any_value(r.l2_bytes) // 1048576) END,
                      sum(r.dur_ns) / 1e6, 100.0 * sum(r.dur_ns) / any_value(t.kernel_ns)),
               NULL
        FROM rejected_costs r
        JOIN (SELECT rank, sum(dur_ns) AS kernel_ns FROM kernels GROUP BY rank) t USING (rank)
        GROUP BY r.rank, r.op, r.reason
        ORDER BY r.rank, sum(r.dur_ns) DESC, r.op
        """
    )


def _roofline_terms(keys: str) -> str:
    """Per-group roofline over the kernels whose accepted costs can be turned into time.

    t_compute = Σ F/P(dtype) and t_memory = Σ B/BW over those kernels, each kernel's floor the larger
    of its two terms; the group's effective peak is ΣF / Σ(F/P), so mixed dtypes weigh by their own
    peaks. Every sum is over costed kernels only, so a group with none has NULL figures, and since no
    accepted kernel runs above its roof, no group can exceed 100%.
    """
    return f"""
        SELECT {keys},
               count(*) AS kernels,
               sum(dur_ns)::BIGINT AS time_ns,
               sum(dur_ns) FILTER (WHERE costed)::BIGINT AS costed_time_ns,
               sum(dur_ns) FILTER (WHERE cost_status LIKE 'rejected%')::BIGINT AS rejected_time_ns,
               sum(dur_ns) FILTER (WHERE cost_status = 'l2_resident')::BIGINT AS l2_resident_time_ns,
               sum(flops) FILTER (WHERE costed) AS flops,
               sum(bytes) FILTER (WHERE costed) AS bytes,
               sum(flops) FILTER (WHERE costed)
                   / nullif(sum(dur_ns) FILTER (WHERE costed AND flops IS NOT NULL), 0) / 1e3 AS achieved_tflops,
               sum(bytes) FILTER (WHERE costed)
                   / nullif(sum(dur_ns) FILTER (WHERE costed AND bytes IS NOT NULL), 0) / 1e3 AS achieved_tbps,
               sum(flops) FILTER (WHERE costed AND bytes IS NOT NULL)
                   / nullif(sum(bytes) FILTER (WHERE costed AND flops IS NOT NULL), 0) AS arithmetic_intensity,
               sum(flops) FILTER (WHERE costed) / nullif(sum(compute_s) FILTER (WHERE costed), 0)
                   / any_value(hbm_bytes_per_s) AS ridge,
               sum(compute_s) FILTER (WHERE costed) * 1e9 AS compute_floor_ns,
               sum(memory_s) FILTER (WHERE costed) * 1e9 AS memory_floor_ns,
               sum(floor_s) FILTER (WHERE costed) * 1e9 AS roofline_floor_ns
        FROM _roofline_input
        GROUP BY {keys}
    """


def build_roofline_views(con: duckdb.DuckDBPyConnection) -> None:
    """roofline_kernels and roofline_by_{category,phase,step}: achieved vs the matched GPU's roof.

    A kernel counts towards an aggregate (`costed`) when its cost was accepted and every term it has
    can be turned into time (its dtype has a peak, its GPU a bandwidth). L2-resident kernels keep
    their per-kernel figures, against the L2 bandwidth where it is published, but stay out of the
    aggregates, whose bandwidth is HBM bandwidth.
    """
    con.execute(
        f"""
        CREATE OR REPLACE VIEW _roofline_input AS
        WITH terms AS (
            SELECT k.rank, k.kernel_id, k.step_id, k.phase, k.category, k.name, k.dur_ns, k.cost_status,
                   CASE WHEN k.category IN {MATH_CATEGORIES} THEN k.flops END AS flops, k.bytes, k.cost_dtype,
                   p.peak_flops, s.hbm_bytes_per_s, s.l2_bytes_per_s
            FROM kernels k
            LEFT JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
            LEFT JOIN gpu_specs s ON s.spec_id = d.spec_id
            LEFT JOIN gpu_peaks p ON p.spec_id = d.spec_id AND p.dtype = k.cost_dtype
        ),
        seconds AS (
            SELECT *, flops / peak_flops AS compute_s, bytes / hbm_bytes_per_s AS memory_s,
                   cost_status = 'accepted' AND (flops IS NOT NULL OR bytes IS NOT NULL)
                       AND (flops IS NULL OR peak_flops IS NOT NULL)
                       AND (bytes IS NULL OR hbm_bytes_per_s IS NOT NULL) AS costed
            FROM terms
        )
        SELECT *, CASE WHEN compute_s IS NULL THEN memory_s WHEN memory_s IS NULL THEN compute_s
                       WHEN compute_s >= memory_s THEN compute_s ELSE memory_s END AS floor_s
        FROM seconds
        """
    )
    con.execute(
        """
        CREATE OR REPLACE VIEW roofline_kernels AS
        SELECT rank, kernel_id, step_id, phase, category, name, dur_ns, flops, bytes, cost_dtype AS dtype, cost_status,
               flops / nullif(dur_ns, 0) / 1e3 AS achieved_tflops,
               bytes / nullif(dur_ns, 0) / 1e3 AS achieved_tbps,
               flops / nullif(bytes, 0) AS arithmetic_intensity,
               peak_flops / hbm_bytes_per_s AS ridge,
               CASE WHEN cost_status = 'l2_resident' OR (flops IS NULL AND bytes IS NOT NULL) THEN 'memory'
                    WHEN compute_s >= memory_s OR (memory_s IS NULL AND compute_s IS NOT NULL) THEN 'compute'
                    WHEN memory_s IS NOT NULL THEN 'memory' END AS bound,
               CASE WHEN costed THEN 100.0 * floor_s * 1e9 / dur_ns
                    WHEN cost_status = 'l2_resident' THEN 100.0 * bytes / l2_bytes_per_s * 1e9 / dur_ns
               END AS pct_of_roof,
               cost_status = 'l2_resident' AS l2_resident
        FROM _roofline_input
        WHERE cost_status IN ('accepted', 'l2_resident') AND dur_ns > 0
        """
    )
    for name, keys in (("roofline_by_category", "rank, category"), ("roofline_by_phase", "rank, phase"),
                       ("roofline_by_step", "rank, step_id, phase")):
        con.execute(
            f"""
            CREATE OR REPLACE VIEW {name} AS
            SELECT *,
                   100.0 * costed_time_ns / nullif(time_ns, 0) AS coverage_pct,
                   CASE WHEN costed_time_ns IS NULL THEN NULL
                        WHEN compute_floor_ns IS NULL THEN 'memory'
                        WHEN memory_floor_ns IS NULL OR compute_floor_ns >= memory_floor_ns THEN 'compute'
                        ELSE 'memory' END AS bound,
                   100.0 * roofline_floor_ns / nullif(costed_time_ns, 0) AS pct_of_roof
            FROM ({_roofline_terms(keys)})
            """
        )


def build_phase_summary(con: duckdb.DuckDBPyConnection) -> None:
    """`phase_summary`: per phase, time, achieved rates, which wall it hits and how close it is.

    The bound comes from the strongest evidence available (`bound_source`): measured kernel costs
    when they cover most of the phase's kernel time; else the model accounting (`--model`); else
    tokens per step, since a step's arithmetic intensity is about its tokens when weights dominate
    (MATH.md §3.3) and is compared with the GPU's bf16 ridge; else the textbook rule (decode is
    memory-bound, prefill compute-bound). `pct_of_roof` comes only from measured costs or the model,
    and where neither gives one, `no_roof_reason` says why. A model floor above the measured GPU time
    is physically impossible: the model does not describe the run, so its figures are dropped and a
    diagnostic says so.
    """
    con.execute(
        """
        CREATE OR REPLACE TABLE phase_summary AS
        WITH step_totals AS (
            SELECT s.rank, s.phase, count(*) AS steps, sum(s.end_ns - s.start_ns)::BIGINT AS wall_ns,
                   sum(s.gpu_time_ns)::BIGINT AS gpu_busy_ns,
                   median(coalesce(s.prefill_tokens, 0) + coalesce(s.decode_tokens, 0))
                       FILTER (WHERE s.prefill_tokens IS NOT NULL OR s.decode_tokens IS NOT NULL) AS tokens_per_step,
                   sum(a.memory_time_ns) AS model_memory_ns, sum(a.compute_time_ns) AS model_compute_ns,
                   sum(a.roofline_floor_ns) AS model_floor_ns,
                   sum(s.gpu_time_ns) FILTER (WHERE a.roofline_floor_ns IS NOT NULL) AS model_busy_ns
            FROM steps s LEFT JOIN step_accounting a USING (rank, step_id)
            WHERE s.phase <> 'empty'
            GROUP BY ALL
        ),
        ridges AS (
            SELECT d.rank, any_value(p.peak_flops / g.hbm_bytes_per_s) AS ridge_bf16
            FROM devices d JOIN gpu_specs g USING (spec_id) JOIN gpu_peaks p ON p.spec_id = d.spec_id AND p.dtype = 'bf16'
            GROUP BY d.rank
        ),
        specs AS (
            SELECT k.rank, k.phase, count(d.spec_id) AS kernels_with_spec
            FROM kernels k LEFT JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
            GROUP BY ALL
        ),
        evidence AS (
            SELECT t.*, r.kernels, r.time_ns AS kernel_time_ns, r.costed_time_ns, r.coverage_pct, r.rejected_time_ns,
                   r.flops, r.bytes, r.achieved_tflops, r.achieved_tbps, r.arithmetic_intensity,
                   coalesce(r.ridge, g.ridge_bf16) AS ridge, g.ridge_bf16, sp.kernels_with_spec,
                   r.bound AS measured_bound, r.pct_of_roof AS measured_pct, r.roofline_floor_ns AS measured_floor_ns,
                   r.costed_time_ns >= 0.5 * r.time_ns AS measured,
                   100.0 * t.model_floor_ns / nullif(t.model_busy_ns, 0) AS model_pct
            FROM step_totals t
            LEFT JOIN roofline_by_phase r USING (rank, phase)
            LEFT JOIN ridges g USING (rank)
            LEFT JOIN specs sp USING (rank, phase)
        ),
        decided AS (
            SELECT *,
                   CASE WHEN measured THEN 'measured'
                        WHEN model_pct <= 100 THEN 'model'
                        WHEN tokens_per_step IS NOT NULL AND ridge_bf16 IS NOT NULL THEN 'tokens_per_step'
                        WHEN phase IN ('decode', 'prefill') THEN 'phase_rule'
                   END AS bound_source
            FROM evidence
        )
        SELECT rank, phase, steps, wall_ns, gpu_busy_ns, kernels, kernel_time_ns, costed_time_ns, coverage_pct,
               rejected_time_ns, flops, bytes, achieved_tflops, achieved_tbps, arithmetic_intensity, ridge,
               tokens_per_step,
               CASE bound_source
                   WHEN 'measured' THEN measured_bound
                   WHEN 'model' THEN CASE WHEN model_memory_ns >= model_compute_ns THEN 'memory' ELSE 'compute' END
                   WHEN 'tokens_per_step' THEN CASE WHEN tokens_per_step < ridge_bf16 THEN 'memory' ELSE 'compute' END
                   WHEN 'phase_rule' THEN CASE phase WHEN 'decode' THEN 'memory' ELSE 'compute' END
               END AS bound,
               bound_source,
               CASE bound_source WHEN 'measured' THEN measured_pct WHEN 'model' THEN model_pct END AS pct_of_roof,
               CASE bound_source WHEN 'measured' THEN measured_floor_ns WHEN 'model' THEN model_floor_ns END
                   AS roofline_floor_ns,
               CASE bound_source WHEN 'measured' THEN costed_time_ns WHEN 'model' THEN model_busy_ns END AS roof_basis_ns,
               CASE WHEN bound_source IN ('measured', 'model') THEN NULL
                    WHEN model_pct > 100 THEN 'model_exceeds_measured'
                    WHEN kernels_with_spec = 0 OR kernels_with_spec IS NULL THEN 'no_gpu_spec'
                    WHEN costed_time_ns IS NULL AND rejected_time_ns IS NOT NULL THEN 'costs_rejected'
                    WHEN costed_time_ns IS NOT NULL THEN 'low_coverage'
                    ELSE 'no_shapes'
               END AS no_roof_reason
        FROM decided
        ORDER BY rank, phase
        """
    )
    con.execute(
        """
        INSERT INTO diagnostics
        SELECT rank, 'analysis', 'warning', 'model_exceeds_measured',
               printf('%s: the model''s floor (%.3f ms) is above the measured GPU time (%.3f ms), which no GPU can do: '
                      || 'the --model options do not describe this run, so its roofline figures are dropped',
                      phase, t.model_floor_ns / 1e6, t.model_busy_ns / 1e6), NULL
        FROM (
            SELECT s.rank, s.phase, sum(a.roofline_floor_ns) AS model_floor_ns,
                   sum(s.gpu_time_ns) FILTER (WHERE a.roofline_floor_ns IS NOT NULL) AS model_busy_ns
            FROM steps s JOIN step_accounting a USING (rank, step_id) GROUP BY ALL
        ) t
        WHERE t.model_floor_ns > t.model_busy_ns
        """
    )


COSTS_STAGE = Stage(
    name="kernel_costs",
    doc="Each kernel's share of its launching op's modelled cost, judged against its GPU: a cost the "
        "hardware could not have run is rejected, never clamped (*Physics* above).",
    requires=("kernels", "kernel_name_labels", "op_costs", "api_calls", "devices", "gpu_specs", "gpu_peaks"),
    creates=(
        Relation("kernel_costs", "kernel a cost model applied to", {
            "rank": "trace rank", "kernel_id": "`kernels.kernel_id`", **COST_COLUMNS}, transient=True),
        Relation("rejected_costs", "kernel whose modelled cost was physically impossible", {
            "rank": "trace rank", "kernel_id": "`kernels.kernel_id`", "op_range_id": "`ranges.range_id` of the op",
            "op": "the op", "reason": "`rejected_compute` (FLOP/s above the dense peak) or `rejected_memory` "
                                      "(bytes/s above HBM with a working set above L2)",
            "dur_ns": "kernel time", "flops": "the modelled FLOPs", "bytes": "the modelled bytes",
            "implied_tflops": "modelled FLOPs / time, 10¹² FLOP/s", "implied_tbps": "modelled bytes / time, TB/s",
            "roof_tflops": "the dense peak it was judged against", "roof_tbps": "the HBM bandwidth it was judged against",
            "l2_bytes": "the GPU's L2 size; NULL when not published"}),
    ),
    adds=(Columns("kernels", COST_COLUMNS),),
    run=lambda con, context: cost_kernels(con),
)

_GROUP_COLUMNS = {
    "kernels": "kernels in the group", "time_ns": "their summed time",
    "costed_time_ns": "time of the *costed* kernels: accepted costs whose every term has a peak; NULL when none",
    "rejected_time_ns": "time of the kernels whose costs were rejected; NULL when none",
    "l2_resident_time_ns": "time of the L2-resident kernels; NULL when none",
    "flops": "ΣFLOPs over the costed kernels", "bytes": "Σbytes over the costed kernels",
    "achieved_tflops": "ΣFLOPs / Σtime over the costed kernels that have FLOPs; NULL when none",
    "achieved_tbps": "Σbytes / Σtime over the costed kernels that have bytes; NULL when none",
    "arithmetic_intensity": "ΣFLOPs / Σbytes",
    "ridge": "effective ridge: ΣF / Σ(F/peak) over bandwidth, so mixed dtypes weigh by their own peaks",
    "compute_floor_ns": "Σ F/peak", "memory_floor_ns": "Σ B/bandwidth",
    "roofline_floor_ns": "Σ max(F/peak, B/bandwidth), kernel by kernel",
    "coverage_pct": "costed time / time",
    "bound": "'compute' when the compute floor is the larger, else 'memory'; NULL when nothing was costed",
    "pct_of_roof": "roofline floor / costed time; NULL when nothing was costed (never 0 or 100 from no data)",
}

VIEWS_STAGE = Stage(
    name="roofline",
    doc="Achieved FLOP/s and bandwidth against the matched GPU's roof, per kernel and summed per category, "
        "phase and step (ΣFLOPs/Σtime over accepted costs, never a mean of percentages).",
    requires=("kernels", "devices", "gpu_specs", "gpu_peaks"),
    creates=(
        Relation("_roofline_input", "kernel, with the terms the roofline views sum", {
            "rank": "trace rank", "kernel_id": "`kernels.kernel_id`", "step_id": "`kernels.step_id`",
            "phase": "`kernels.phase`", "category": "`kernels.category`", "name": "`kernels.name`",
            "dur_ns": "`kernels.dur_ns`", "cost_status": "`kernels.cost_status`",
            "flops": "`kernels.flops` of gemm and attention kernels (the rest are judged against bandwidth only)",
            "bytes": "`kernels.bytes`", "cost_dtype": "`kernels.cost_dtype`",
            "peak_flops": "dense peak of that dtype on the kernel's GPU", "hbm_bytes_per_s": "its HBM bandwidth",
            "l2_bytes_per_s": "its L2 bandwidth, where published", "compute_s": "flops / peak_flops",
            "memory_s": "bytes / hbm_bytes_per_s",
            "costed": "accepted cost whose every term can be turned into time: counts towards aggregates",
            "floor_s": "the larger of compute_s and memory_s"}, view=True),
        Relation("roofline_kernels", "kernel with an accepted or L2-resident cost", {
            "rank": "trace rank", "kernel_id": "`kernels.kernel_id`", "step_id": "`kernels.step_id`",
            "phase": "`kernels.phase`", "category": "`kernels.category`", "name": "`kernels.name`",
            "dur_ns": "`kernels.dur_ns`", "flops": "`kernels.flops`", "bytes": "`kernels.bytes`",
            "dtype": "the dtype whose peak applies (`kernels.cost_dtype`)",
            "cost_status": "`accepted` or `l2_resident` (rejected kernels are not in this view)",
            "achieved_tflops": "FLOPs / time", "achieved_tbps": "bytes / time",
            "arithmetic_intensity": "FLOPs / bytes",
            "ridge": "peak FLOP/s of the dtype / memory bandwidth, FLOP per byte",
            "bound": "'compute' when FLOPs/peak ≥ bytes/bandwidth, else 'memory'",
            "pct_of_roof": "max(FLOPs/peak, bytes/bandwidth) / time; for an L2-resident kernel bytes/L2 bandwidth "
                           "/ time; NULL when a term has no peak",
            "l2_resident": "achieved bandwidth above the HBM peak by a working set that fits L2: the data came "
                           "from cache"}, view=True),
        Relation("roofline_by_category", "(rank, category)",
                 {"rank": "trace rank", "category": "`kernels.category`", **_GROUP_COLUMNS}, view=True),
        Relation("roofline_by_phase", "(rank, phase)",
                 {"rank": "trace rank", "phase": "`kernels.phase`", **_GROUP_COLUMNS}, view=True),
        Relation("roofline_by_step", "(rank, step)",
                 {"rank": "trace rank", "step_id": "`kernels.step_id`", "phase": "`kernels.phase`", **_GROUP_COLUMNS},
                 view=True),
    ),
    run=lambda con, context: build_roofline_views(con),
)

SUMMARY_STAGE = Stage(
    name="phase_summary",
    doc="Per rank and phase (empty steps left out): which wall each phase hits and how far from it, from "
        "the strongest evidence available.",
    requires=("steps", "step_accounting", "roofline_by_phase", "kernels", "devices", "gpu_specs", "gpu_peaks"),
    creates=(
        Relation("phase_summary", "(rank, phase)", {
            "rank": "trace rank", "phase": "the phase",
            "steps": "steps of the phase", "wall_ns": "Σ step wall time", "gpu_busy_ns": "Σ step GPU busy time",
            "kernels": "from `roofline_by_phase`", "kernel_time_ns": "`roofline_by_phase.time_ns`",
            "costed_time_ns": "from `roofline_by_phase`", "coverage_pct": "from `roofline_by_phase`",
            "rejected_time_ns": "from `roofline_by_phase`", "flops": "from `roofline_by_phase`",
            "bytes": "from `roofline_by_phase`", "achieved_tflops": "from `roofline_by_phase`",
            "achieved_tbps": "from `roofline_by_phase`", "arithmetic_intensity": "from `roofline_by_phase`",
            "ridge": "the phase's effective ridge, else the GPU's bf16 ridge",
            "tokens_per_step": "median new tokens per step, when annotations count them",
            "bound": "memory or compute",
            "bound_source": "`measured` (kernel costs cover half the phase's kernel time or more), `model` (step "
                            "accounting), `tokens_per_step` (a step's intensity is about its tokens when weights "
                            "dominate, MATH.md §3.3, compared with the bf16 ridge), `phase_rule` (decode "
                            "memory-bound, prefill compute-bound)",
            "pct_of_roof": "measured: roofline floor / costed time; model: Σ step floors / Σ GPU busy; else NULL",
            "roofline_floor_ns": "the floor `pct_of_roof` divides: measured Σ kernel floors, or the model's Σ step "
                                 "floors",
            "roof_basis_ns": "what the floor is divided by: the costed kernel time (measured) or the GPU busy time "
                             "of the modelled steps (model), so `pct_of_roof` = 100 · `roofline_floor_ns` / "
                             "`roof_basis_ns` and pools across ranks as a ratio of sums",
            "no_roof_reason": "why `pct_of_roof` is NULL: `no_gpu_spec`, `no_shapes` (no op shapes recorded: "
                              "profile with `torch.profiler.profile(record_shapes=True)`, or under nsys with "
                              "`torch.autograd.profiler.emit_nvtx(record_shapes=True)`), `costs_rejected` (every "
                              "modelled cost was physically impossible), `low_coverage` (costs cover under half "
                              "the kernel time), `model_exceeds_measured` (the `--model` floor is above the "
                              "measured GPU time: the options do not describe the run; a diagnostic says so)"}),
    ),
    run=lambda con, context: build_phase_summary(con),
)
