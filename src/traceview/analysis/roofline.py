"""Roofline: FLOPs and bytes per kernel where the trace gives shapes, and how close each kernel,
category, phase and step runs to the matched GPU's roof.

Costs come from the op that launched the kernel: a Kineto cpu_op with `Input Dims`/`Input type`
(record_shapes), or an nsys `emit_nvtx` range with `sizes = [...]`. Matmul-like ops get FLOPs
(2·M·N·K; attention 4·B·H·Lq·Lk·E, no causal halving, as torch.utils.flop_counter counts it);
every op with shapes gets ideal DRAM bytes (inputs once + output once). An op's cost is shared
among its kernels in proportion to their time. Aggregates are ΣFLOPs/Σtime, never a mean of
percentages (reference: MATH.md §1).
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from traceview.analysis.hardware import HardwareSpec
from traceview.model import db

ELEMENT_BYTES = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "int": 4,
    "long int": 8, "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::complex<float>": 8, "c10::complex<double>": 16,
}
TYPE_DTYPES = {
    "c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8",
}
DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp4": 0.5}
# Categories whose FLOPs run on tensor cores; everything else is judged against bandwidth only.
MATH_CATEGORIES = ("gemm", "attention")

# FLOPs and output elements of matmul-like ops; a, b are the first two tensor inputs' dims
# (for addmm/baddbmm the bias comes first, so m1, m2 are inputs 2 and 3).
OP_FORMULAS = """
    CASE
        WHEN op = 'aten::mm' THEN struct_pack(f := 2.0 * d1[1] * d1[2] * d2[2], o := d1[1] * d2[2])
        WHEN op = 'aten::addmm' THEN struct_pack(f := 2.0 * d2[1] * d2[2] * d3[2], o := d2[1] * d3[2])
        WHEN op = 'aten::bmm' THEN struct_pack(f := 2.0 * d1[1] * d1[2] * d1[3] * d2[3], o := d1[1] * d1[2] * d2[3])
        WHEN op = 'aten::baddbmm' THEN struct_pack(f := 2.0 * d2[1] * d2[2] * d2[3] * d3[3], o := d2[1] * d2[2] * d3[3])
        WHEN op = 'aten::linear' AND len(d2) = 2
            THEN struct_pack(f := 2.0 * n1 * d2[1], o := n1 / d1[len(d1)] * d2[1])
        WHEN op = 'aten::matmul' AND len(d2) = 2 AND len(d1) >= 2
            THEN struct_pack(f := 2.0 * n1 * d2[2], o := n1 / d1[len(d1)] * d2[2])
        WHEN op = 'aten::matmul' AND len(d1) = 3 AND len(d2) = 3
            THEN struct_pack(f := 2.0 * d1[1] * d1[2] * d1[3] * d2[3], o := d1[1] * d1[2] * d2[3])
        WHEN op IN ('aten::scaled_dot_product_attention', 'aten::_scaled_dot_product_flash_attention',
                    'aten::_scaled_dot_product_efficient_attention', 'aten::_scaled_dot_product_cudnn_attention')
             AND len(d1) = 4 AND len(d2) = 4
            THEN struct_pack(f := 4.0 * d1[1] * d1[2] * d1[3] * d2[3] * d1[4], o := n1)
        WHEN op IN ('aten::_flash_attention_forward', 'aten::_efficient_attention_forward')
             AND len(d1) = 4 AND len(d2) = 4
            THEN struct_pack(f := 4.0 * d1[1] * d1[2] * d1[3] * d2[2] * d1[4], o := n1)
    END
"""
# Gathers read only the rows they pick, not the whole table: (output elements, index elements).
GATHER_FORMULAS = """
    CASE
        WHEN op = 'aten::embedding' AND len(d1) = 2 THEN struct_pack(o := n2 * d1[2], i := n2)
        WHEN op = 'aten::index_select' AND len(d1) >= 1 AND len(d3) = 1 THEN struct_pack(o := d3[1] * n1 / d1[1], i := d3[1])
    END
"""


def attach_gpu_specs(con: duckdb.DuckDBPyConnection, specs: dict[tuple[int, int], HardwareSpec | None],
                     all_specs: list[HardwareSpec]) -> None:
    """Record the matched spec per device and the peaks table the roofline joins on."""
    con.execute("ALTER TABLE devices ADD COLUMN IF NOT EXISTS spec_id VARCHAR")
    rows = [(rank, device, spec.id) for (rank, device), spec in specs.items() if spec]
    con.register("_matches", pa.table({
        "rank": [r[0] for r in rows], "device_id": [r[1] for r in rows], "spec_id": [r[2] for r in rows],
    }, schema=pa.schema([("rank", pa.int32()), ("device_id", pa.int32()), ("spec_id", pa.string())])))
    con.execute("UPDATE devices SET spec_id = m.spec_id FROM _matches m "
                "WHERE devices.rank = m.rank AND devices.device_id = m.device_id")
    con.unregister("_matches")
    peaks = [(s.id, dtype, tflops * 1e12) for s in all_specs for dtype, tflops in s.peak_tflops.items()]
    con.register("_peaks", pa.table({
        "spec_id": [p[0] for p in peaks], "dtype": [p[1] for p in peaks], "peak_flops": [p[2] for p in peaks],
    }))
    con.execute("CREATE OR REPLACE TABLE gpu_peaks AS SELECT * FROM _peaks")
    con.unregister("_peaks")
    con.register("_specs", pa.table({
        "spec_id": [s.id for s in all_specs], "name": [s.name for s in all_specs],
        "hbm_bytes_per_s": [s.hbm_tbps * 1e12 for s in all_specs],
        "memory_bytes": [s.memory_bytes for s in all_specs], "sm_count": [s.sm_count for s in all_specs],
    }))
    con.execute("CREATE OR REPLACE TABLE gpu_specs AS SELECT * FROM _specs")
    con.unregister("_specs")


def build_op_costs(con: duckdb.DuckDBPyConnection) -> None:
    """`op_costs`: FLOPs and ideal bytes of every op range that carries input shapes."""
    con.register("_element_bytes", pa.table({"type": list(ELEMENT_BYTES), "size": list(ELEMENT_BYTES.values())}))
    con.register("_type_dtypes", pa.table({"type": list(TYPE_DTYPES), "dtype": list(TYPE_DTYPES.values())}))
    con.execute(
        f"""
        CREATE OR REPLACE TABLE op_costs AS
        WITH shaped AS (
            SELECT rank, range_id, kind, pid, tid, start_ns, end_ns, external_id, flops AS recorded_flops,
                   CASE WHEN kind = 'nvtx' THEN trim(split_part(name, ',', 1)) ELSE name END AS op,
                   TRY_CAST(input_dims AS BIGINT[][]) AS dims,
                   TRY(from_json(input_types, '["VARCHAR"]')) AS types
            FROM ranges WHERE input_dims IS NOT NULL AND kind IN ('cpu_op', 'nvtx')
        ),
        inputs AS (
            SELECT rank, range_id, unnest(dims) AS d, unnest(types) AS t FROM shaped WHERE dims IS NOT NULL
        ),
        sized AS (
            SELECT i.rank, i.range_id,
                   sum(CASE WHEN len(i.d) > 0 THEN list_aggregate(i.d, 'product') END) AS in_elements,
                   max(CASE WHEN len(i.d) > 0 THEN list_aggregate(i.d, 'product') END) AS max_elements,
                   sum(CASE WHEN len(i.d) > 0 THEN list_aggregate(i.d, 'product') * e.size END) AS in_bytes,
                   bool_and(len(i.d) = 0 OR e.size IS NOT NULL) AS all_typed
            FROM inputs i LEFT JOIN _element_bytes e ON e.type = i.t
            GROUP BY ALL
        ),
        formulas AS (
            SELECT s.*, {OP_FORMULAS} AS mm, {GATHER_FORMULAS} AS gather
            FROM (
                SELECT *, dims[1] AS d1, dims[2] AS d2, dims[3] AS d3,
                       list_aggregate(dims[1], 'product') AS n1, list_aggregate(dims[2], 'product') AS n2
                FROM shaped WHERE dims IS NOT NULL
            ) s
        )
        SELECT f.rank, f.range_id, f.kind, f.pid, f.tid, f.start_ns, f.end_ns, f.external_id, f.op,
               coalesce(f.recorded_flops, f.mm.f) AS flops,
               -- output: matmul output elements; in-place ops (trailing '_') write their first input,
               -- which is already counted; other ops write about as much as their largest input
               CASE WHEN f.gather.o IS NOT NULL THEN 2 * f.gather.o + f.gather.i
                    ELSE z.in_elements + CASE WHEN f.mm.o IS NOT NULL THEN f.mm.o
                                              WHEN f.op LIKE '%\\_' ESCAPE '\\' THEN 0 ELSE z.max_elements END
               END AS elements,
               CASE WHEN f.gather.o IS NOT NULL THEN 2 * f.gather.o * ob.size + 8 * f.gather.i
                    WHEN z.all_typed THEN z.in_bytes + coalesce(ob.size, 0) *
                   CASE WHEN f.mm.o IS NOT NULL THEN f.mm.o
                        WHEN f.op LIKE '%\\_' ESCAPE '\\' THEN 0 ELSE z.max_elements END END AS bytes,
               td.dtype AS input_dtype,
               -- tokens per sequence of a [batch, seq, features] linear input: 1 in decode, the prompt in prefill
               CASE WHEN f.op IN ('aten::linear', 'aten::matmul') AND len(f.d1) = 3 THEN f.d1[2] END AS seq_len
        FROM formulas f
        JOIN sized z USING (rank, range_id)
        LEFT JOIN _element_bytes ob ON ob.type = f.types[1]
        LEFT JOIN _type_dtypes td ON td.type = f.types[1]
        """
    )
    con.unregister("_element_bytes")
    con.unregister("_type_dtypes")


def cost_kernels(con: duckdb.DuckDBPyConnection) -> None:
    """Add kernels.flops / kernels.bytes / kernels.cost_op: the launching op's cost, shared by time."""
    for column, sql_type in (("flops", "DOUBLE"), ("bytes", "DOUBLE"), ("cost_op", "VARCHAR"), ("cost_dtype", "VARCHAR"),
                              ("op_range_id", "BIGINT")):
        con.execute(f"ALTER TABLE kernels ADD COLUMN IF NOT EXISTS {column} {sql_type}")
    dtype = "k.dtype" if db.has_column(con, "kernels", "dtype") else "NULL"
    con.register("_dtype_bytes", pa.table({"dtype": list(DTYPE_BYTES), "size": [float(v) for v in DTYPE_BYTES.values()]}))
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
    con.execute(
        f"""
        UPDATE kernels SET flops = c.flops, bytes = c.bytes, cost_op = c.op, cost_dtype = c.cost_dtype,
                           op_range_id = c.range_id
        FROM (
            SELECT ko.rank, ko.kernel_id, ko.range_id, o.op, coalesce({dtype}, o.input_dtype) AS cost_dtype,
                   o.flops * k.dur_ns / sum(k.dur_ns) OVER (PARTITION BY ko.rank, ko.range_id) AS flops,
                   coalesce(o.bytes, o.elements * coalesce(db.size, 4)) * k.dur_ns
                       / sum(k.dur_ns) OVER (PARTITION BY ko.rank, ko.range_id) AS bytes
            FROM _kernel_ops ko
            JOIN op_costs o USING (rank, range_id)
            JOIN kernels k ON k.rank = ko.rank AND k.kernel_id = ko.kernel_id
            LEFT JOIN _dtype_bytes db ON db.dtype = coalesce({dtype}, o.input_dtype)
            WHERE k.dur_ns > 0
        ) c
        WHERE kernels.rank = c.rank AND kernels.kernel_id = c.kernel_id
        """
    )
    con.unregister("_dtype_bytes")
    con.execute("DROP TABLE _kernel_ops")



def _roofline_terms(keys: str) -> str:
    """Per-group roofline over kernels: floors summed kernel by kernel, then compared to time.

    t_compute = Σ F/P(dtype) and t_memory = Σ B/BW over the kernels with costs; the group's
    effective peak is ΣF / Σ(F/P), so mixed dtypes weigh by their own peaks.
    """
    return f"""
        SELECT {keys},
               count(*) AS kernels,
               sum(dur_ns)::BIGINT AS time_ns,
               sum(dur_ns) FILTER (WHERE flops IS NOT NULL OR bytes IS NOT NULL)::BIGINT AS costed_time_ns,
               sum(flops) AS flops,
               sum(bytes) AS bytes,
               sum(flops) / nullif(sum(dur_ns) FILTER (WHERE flops IS NOT NULL), 0) / 1e3 AS achieved_tflops,
               sum(bytes) / nullif(sum(dur_ns) FILTER (WHERE bytes IS NOT NULL), 0) / 1e3 AS achieved_tbps,
               sum(flops) / nullif(sum(bytes) FILTER (WHERE flops IS NOT NULL), 0) AS arithmetic_intensity,
               sum(flops) / nullif(sum(flops / peak_flops), 0) / any_value(hbm_bytes_per_s) AS ridge,
               sum(flops / peak_flops) * 1e9 AS compute_floor_ns,
               sum(bytes / hbm_bytes_per_s) * 1e9 AS memory_floor_ns,
               sum(greatest(coalesce(flops / peak_flops, 0), coalesce(bytes / hbm_bytes_per_s, 0)))
                   FILTER (WHERE flops IS NOT NULL OR bytes IS NOT NULL) * 1e9 AS roofline_floor_ns
        FROM _roofline_input
        GROUP BY {keys}
    """


def build_roofline_views(con: duckdb.DuckDBPyConnection) -> None:
    """roofline_kernels and roofline_by_{category,phase,step}: achieved vs the matched GPU's roof."""
    category = "k.category" if db.has_column(con, "kernels", "category") else "NULL::VARCHAR"
    con.execute(
        f"""
        CREATE OR REPLACE VIEW _roofline_input AS
        SELECT k.rank, k.kernel_id, k.step_id, k.phase, {category} AS category, k.name, k.dur_ns,
               CASE WHEN {category} IN {MATH_CATEGORIES} THEN k.flops END AS flops, k.bytes, k.cost_dtype,
               p.peak_flops, s.hbm_bytes_per_s
        FROM kernels k
        LEFT JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
        LEFT JOIN gpu_specs s ON s.spec_id = d.spec_id
        LEFT JOIN gpu_peaks p ON p.spec_id = d.spec_id AND p.dtype = k.cost_dtype
        """
    )
    con.execute(
        """
        CREATE OR REPLACE VIEW roofline_kernels AS
        SELECT rank, kernel_id, step_id, phase, category, name, dur_ns, flops, bytes, cost_dtype AS dtype,
               flops / nullif(dur_ns, 0) / 1e3 AS achieved_tflops,
               bytes / nullif(dur_ns, 0) / 1e3 AS achieved_tbps,
               flops / nullif(bytes, 0) AS arithmetic_intensity,
               peak_flops / hbm_bytes_per_s AS ridge,
               CASE WHEN flops IS NULL AND bytes IS NOT NULL THEN 'memory'
                    WHEN flops / peak_flops >= bytes / hbm_bytes_per_s THEN 'compute'
                    WHEN bytes IS NOT NULL THEN 'memory' END AS bound,
               least(100.0, 100.0 * greatest(coalesce(flops / peak_flops, 0), coalesce(bytes / hbm_bytes_per_s, 0))
                     * 1e9 / nullif(dur_ns, 0)) AS pct_of_roof,
               bytes / nullif(dur_ns, 0) * 1e9 > hbm_bytes_per_s AS l2_resident
        FROM _roofline_input
        WHERE flops IS NOT NULL OR bytes IS NOT NULL
        """
    )
    for name, keys in (("roofline_by_category", "rank, category"), ("roofline_by_phase", "rank, phase"),
                       ("roofline_by_step", "rank, step_id, phase")):
        con.execute(
            f"""
            CREATE OR REPLACE VIEW {name} AS
            SELECT *,
                   CASE WHEN compute_floor_ns IS NULL AND memory_floor_ns IS NULL THEN NULL
                        WHEN coalesce(compute_floor_ns, 0) >= coalesce(memory_floor_ns, 0) THEN 'compute'
                        ELSE 'memory' END AS bound,
                   least(100.0, 100.0 * roofline_floor_ns / nullif(costed_time_ns, 0)) AS pct_of_roof
            FROM ({_roofline_terms(keys)})
            """
        )


def build_phase_summary(con: duckdb.DuckDBPyConnection) -> None:
    """`phase_summary`: per phase, time, achieved rates, which wall it hits and how close it is.

    The bound comes from the strongest evidence available (`bound_source`): measured kernel costs
    when they cover most of the phase's kernel time; else the model accounting (`--model`); else
    tokens per step, since a step's arithmetic intensity is about its tokens when weights dominate
    (MATH.md §3.3) and is compared with the GPU's bf16 ridge; else the textbook rule (decode is
    memory-bound, prefill compute-bound).
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
        )
        SELECT t.rank, t.phase, t.steps, t.wall_ns, t.gpu_busy_ns, r.kernels, r.time_ns AS kernel_time_ns,
               r.costed_time_ns, r.flops, r.bytes, r.achieved_tflops, r.achieved_tbps, r.arithmetic_intensity,
               coalesce(r.ridge, g.ridge_bf16) AS ridge, t.tokens_per_step,
               CASE
                   WHEN r.costed_time_ns >= 0.5 * r.time_ns THEN r.bound
                   WHEN t.model_floor_ns IS NOT NULL THEN CASE WHEN t.model_memory_ns >= t.model_compute_ns THEN 'memory' ELSE 'compute' END
                   WHEN t.tokens_per_step IS NOT NULL AND g.ridge_bf16 IS NOT NULL
                       THEN CASE WHEN t.tokens_per_step < g.ridge_bf16 THEN 'memory' ELSE 'compute' END
                   WHEN t.phase = 'decode' THEN 'memory'
                   WHEN t.phase = 'prefill' THEN 'compute'
               END AS bound,
               CASE
                   WHEN r.costed_time_ns >= 0.5 * r.time_ns THEN 'measured'
                   WHEN t.model_floor_ns IS NOT NULL THEN 'model'
                   WHEN t.tokens_per_step IS NOT NULL AND g.ridge_bf16 IS NOT NULL THEN 'tokens_per_step'
                   WHEN t.phase IN ('decode', 'prefill') THEN 'phase_rule'
               END AS bound_source,
               CASE
                   WHEN r.costed_time_ns >= 0.5 * r.time_ns THEN r.pct_of_roof
                   WHEN t.model_floor_ns IS NOT NULL THEN least(100.0, 100.0 * t.model_floor_ns / nullif(t.model_busy_ns, 0))
               END AS pct_of_roof
        FROM step_totals t
        LEFT JOIN roofline_by_phase r USING (rank, phase)
        LEFT JOIN ridges g USING (rank)
        ORDER BY t.rank, t.phase
        """
    )
