-- stage: op_costs
-- Ideal DRAM bytes and useful FLOPs of every op range whose inputs the trace records, from the cost
-- models in `src/traceview/analysis/op_costs.toml` (*Cost models* above).
-- requires: ranges
-- creates: op_costs
--
-- op_costs.py runs the sections and, between them, the two statements whose text carries the cost models'
-- SQL (their `when`, `bytes` and `flops` expressions; the op names, patterns and entry ids in them are bound
-- parameters): `_modeled` (each shaped op signature with the first entry that matches it, `cost_model`) from
-- `_op_inputs`, and `_priced` (each signature's costs) from `_modeled` and `_modeled_units`; `op_costs` gives
-- every op range its signature's costs.

-- The macros op_costs.toml's expressions may use, and the two its variables are built with: a type's bytes
-- per element, and the dtype a type's peak is looked up by.
-- section: macros
CREATE OR REPLACE TEMP MACRO numel(d) AS (CASE WHEN len(d) = 0 THEN 1 ELSE list_aggregate(d, 'product') END);

CREATE OR REPLACE TEMP MACRO dim_size(d, k) AS (d[CASE WHEN k >= 0 THEN k + 1 ELSE len(d) + k + 1 END]);

CREATE OR REPLACE TEMP MACRO larger(x, y) AS (CASE WHEN x >= y THEN x ELSE y END);

-- aligned from the last dim; each argument is written out few times, because a macro pastes its argument
-- wherever it appears and where() nests broadcast_dims (the old form took 0.13 s to plan)
CREATE OR REPLACE TEMP MACRO broadcast_dims(a, b) AS (list_reverse(list_transform(range(1, larger(len(a), len(b)) + 1), lambda r: larger(
        CASE WHEN r <= len(a) THEN list_reverse(a)[r] ELSE 1 END,
        CASE WHEN r <= len(b) THEN list_reverse(b)[r] ELSE 1 END))));

CREATE OR REPLACE TEMP MACRO broadcast_numel(a, b) AS (numel(broadcast_dims(a, b)));

CREATE OR REPLACE TEMP MACRO reduced_dims(t) AS (coalesce(TRY_CAST(t AS INTEGER[]), [TRY_CAST(t AS INTEGER)]));

CREATE OR REPLACE TEMP MACRO reduced_numel(d, t) AS (CASE WHEN t IS NULL OR len(reduced_dims(t)) = 0 THEN 1
        ELSE numel(d) / list_aggregate(list_transform(reduced_dims(t), lambda k: dim_size(d, k)), 'product') END);

CREATE OR REPLACE TEMP MACRO element_size(t) AS (CASE t WHEN 'c10::BFloat16' THEN 2 WHEN 'c10::Half' THEN 2
    WHEN 'float' THEN 4 WHEN 'double' THEN 8 WHEN 'c10::Float8_e4m3fn' THEN 1 WHEN 'c10::Float8_e5m2' THEN 1
    WHEN 'c10::Float8_e4m3fnuz' THEN 1 WHEN 'c10::Float8_e5m2fnuz' THEN 1 WHEN 'int' THEN 4 WHEN 'long int' THEN 8
    WHEN 'short int' THEN 2 WHEN 'signed char' THEN 1 WHEN 'unsigned char' THEN 1 WHEN 'bool' THEN 1
    WHEN 'c10::complex<float>' THEN 8 WHEN 'c10::complex<double>' THEN 16 END);

CREATE OR REPLACE TEMP MACRO type_dtype(t) AS (CASE t WHEN 'c10::BFloat16' THEN 'bf16' WHEN 'c10::Half' THEN 'fp16'
    WHEN 'float' THEN 'fp32' WHEN 'double' THEN 'fp64' WHEN 'c10::Float8_e4m3fn' THEN 'fp8'
    WHEN 'c10::Float8_e5m2' THEN 'fp8' WHEN 'c10::Float8_e4m3fnuz' THEN 'fp8' WHEN 'c10::Float8_e5m2fnuz' THEN 'fp8'
    WHEN 'signed char' THEN 'int8' END);

-- the op ranges that record their inputs
-- section: shaped_count
SELECT count(*) FROM ranges WHERE input_dims IS NOT NULL AND kind IN ('cpu_op', 'nvtx');

-- section: trace_ops
-- The op ranges, each with its op: for NVTX the text before the first comma (emit_nvtx appends `seq = N` and the
-- like)
CREATE OR REPLACE TEMP VIEW _op_ranges AS
SELECT *, CASE WHEN kind = 'nvtx' THEN trim(split_part(name, ',', 1)) ELSE name END AS op
FROM ranges WHERE input_dims IS NOT NULL AND kind IN ('cpu_op', 'nvtx');

-- One row per op signature (op and recorded inputs): the cost models read nothing else, and a trace repeats a few
-- hundred signatures over its op ranges (the 2 M-kernel export: 161 over 180 k), so each is costed once and the
-- ranges join their signature's costs
CREATE OR REPLACE TEMP VIEW _shaped_ops AS
SELECT row_number() OVER () AS signature, op, input_dims, input_types, input_values,
       TRY_CAST(input_dims AS BIGINT[][]) AS dims,
       TRY(from_json(input_types, '["VARCHAR"]')) AS types,
       TRY(from_json(input_values, '["VARCHAR"]')) AS vals,
       input_values IS NOT NULL AS values_known
FROM (SELECT DISTINCT op, input_dims, input_types, input_values FROM _op_ranges);

-- no ops, to bind op_costs.toml's expressions against (op_costs.load_cost_models)
-- section: no_ops
CREATE OR REPLACE TEMP VIEW _shaped_ops AS
SELECT ''::VARCHAR AS op, []::BIGINT[][] AS dims, []::VARCHAR[] AS types, []::VARCHAR[] AS vals,
       false AS values_known;

-- The variables op_costs.toml's expressions read, per input i = 1..12 (input i of input_dims, input_types
-- and input_values): d dims, n elements, s bytes per element, u 1 for a tensor (s where every element
-- counts 1, for `elements`), v scalar value. `sizes` (element_size of each input type, computed once:
-- pasting the macro into every column took 0.03 s to plan) is a column of the relation they are selected from.
-- section: inputs
CREATE OR REPLACE TEMP VIEW _op_inputs AS
SELECT *,
       -- input 1
       coalesce(dims[1], []) AS d1,
       CASE WHEN len(coalesce(dims[1], [])) > 0 THEN list_aggregate(coalesce(dims[1], []), 'product')
            WHEN sizes[1] IS NOT NULL THEN 1 ELSE 0 END AS n1,
       CASE WHEN (len(coalesce(dims[1], [])) > 0 OR sizes[1] IS NOT NULL) THEN sizes[1] ELSE 0 END AS s1,
       CASE WHEN (len(coalesce(dims[1], [])) > 0 OR sizes[1] IS NOT NULL) THEN 1 ELSE 0 END AS u1,
       nullif(vals[1], '') AS v1,
       -- input 2
       coalesce(dims[2], []) AS d2,
       CASE WHEN len(coalesce(dims[2], [])) > 0 THEN list_aggregate(coalesce(dims[2], []), 'product')
            WHEN sizes[2] IS NOT NULL THEN 1 ELSE 0 END AS n2,
       CASE WHEN (len(coalesce(dims[2], [])) > 0 OR sizes[2] IS NOT NULL) THEN sizes[2] ELSE 0 END AS s2,
       CASE WHEN (len(coalesce(dims[2], [])) > 0 OR sizes[2] IS NOT NULL) THEN 1 ELSE 0 END AS u2,
       nullif(vals[2], '') AS v2,
       -- input 3
       coalesce(dims[3], []) AS d3,
       CASE WHEN len(coalesce(dims[3], [])) > 0 THEN list_aggregate(coalesce(dims[3], []), 'product')
            WHEN sizes[3] IS NOT NULL THEN 1 ELSE 0 END AS n3,
       CASE WHEN (len(coalesce(dims[3], [])) > 0 OR sizes[3] IS NOT NULL) THEN sizes[3] ELSE 0 END AS s3,
       CASE WHEN (len(coalesce(dims[3], [])) > 0 OR sizes[3] IS NOT NULL) THEN 1 ELSE 0 END AS u3,
       nullif(vals[3], '') AS v3,
       -- input 4
       coalesce(dims[4], []) AS d4,
       CASE WHEN len(coalesce(dims[4], [])) > 0 THEN list_aggregate(coalesce(dims[4], []), 'product')
            WHEN sizes[4] IS NOT NULL THEN 1 ELSE 0 END AS n4,
       CASE WHEN (len(coalesce(dims[4], [])) > 0 OR sizes[4] IS NOT NULL) THEN sizes[4] ELSE 0 END AS s4,
       CASE WHEN (len(coalesce(dims[4], [])) > 0 OR sizes[4] IS NOT NULL) THEN 1 ELSE 0 END AS u4,
       nullif(vals[4], '') AS v4,
       -- input 5
       coalesce(dims[5], []) AS d5,
       CASE WHEN len(coalesce(dims[5], [])) > 0 THEN list_aggregate(coalesce(dims[5], []), 'product')
            WHEN sizes[5] IS NOT NULL THEN 1 ELSE 0 END AS n5,
       CASE WHEN (len(coalesce(dims[5], [])) > 0 OR sizes[5] IS NOT NULL) THEN sizes[5] ELSE 0 END AS s5,
       CASE WHEN (len(coalesce(dims[5], [])) > 0 OR sizes[5] IS NOT NULL) THEN 1 ELSE 0 END AS u5,
       nullif(vals[5], '') AS v5,
       -- input 6
       coalesce(dims[6], []) AS d6,
       CASE WHEN len(coalesce(dims[6], [])) > 0 THEN list_aggregate(coalesce(dims[6], []), 'product')
            WHEN sizes[6] IS NOT NULL THEN 1 ELSE 0 END AS n6,
       CASE WHEN (len(coalesce(dims[6], [])) > 0 OR sizes[6] IS NOT NULL) THEN sizes[6] ELSE 0 END AS s6,
       CASE WHEN (len(coalesce(dims[6], [])) > 0 OR sizes[6] IS NOT NULL) THEN 1 ELSE 0 END AS u6,
       nullif(vals[6], '') AS v6,
       -- input 7
       coalesce(dims[7], []) AS d7,
       CASE WHEN len(coalesce(dims[7], [])) > 0 THEN list_aggregate(coalesce(dims[7], []), 'product')
            WHEN sizes[7] IS NOT NULL THEN 1 ELSE 0 END AS n7,
       CASE WHEN (len(coalesce(dims[7], [])) > 0 OR sizes[7] IS NOT NULL) THEN sizes[7] ELSE 0 END AS s7,
       CASE WHEN (len(coalesce(dims[7], [])) > 0 OR sizes[7] IS NOT NULL) THEN 1 ELSE 0 END AS u7,
       nullif(vals[7], '') AS v7,
       -- input 8
       coalesce(dims[8], []) AS d8,
       CASE WHEN len(coalesce(dims[8], [])) > 0 THEN list_aggregate(coalesce(dims[8], []), 'product')
            WHEN sizes[8] IS NOT NULL THEN 1 ELSE 0 END AS n8,
       CASE WHEN (len(coalesce(dims[8], [])) > 0 OR sizes[8] IS NOT NULL) THEN sizes[8] ELSE 0 END AS s8,
       CASE WHEN (len(coalesce(dims[8], [])) > 0 OR sizes[8] IS NOT NULL) THEN 1 ELSE 0 END AS u8,
       nullif(vals[8], '') AS v8,
       -- input 9
       coalesce(dims[9], []) AS d9,
       CASE WHEN len(coalesce(dims[9], [])) > 0 THEN list_aggregate(coalesce(dims[9], []), 'product')
            WHEN sizes[9] IS NOT NULL THEN 1 ELSE 0 END AS n9,
       CASE WHEN (len(coalesce(dims[9], [])) > 0 OR sizes[9] IS NOT NULL) THEN sizes[9] ELSE 0 END AS s9,
       CASE WHEN (len(coalesce(dims[9], [])) > 0 OR sizes[9] IS NOT NULL) THEN 1 ELSE 0 END AS u9,
       nullif(vals[9], '') AS v9,
       -- input 10
       coalesce(dims[10], []) AS d10,
       CASE WHEN len(coalesce(dims[10], [])) > 0 THEN list_aggregate(coalesce(dims[10], []), 'product')
            WHEN sizes[10] IS NOT NULL THEN 1 ELSE 0 END AS n10,
       CASE WHEN (len(coalesce(dims[10], [])) > 0 OR sizes[10] IS NOT NULL) THEN sizes[10] ELSE 0 END AS s10,
       CASE WHEN (len(coalesce(dims[10], [])) > 0 OR sizes[10] IS NOT NULL) THEN 1 ELSE 0 END AS u10,
       nullif(vals[10], '') AS v10,
       -- input 11
       coalesce(dims[11], []) AS d11,
       CASE WHEN len(coalesce(dims[11], [])) > 0 THEN list_aggregate(coalesce(dims[11], []), 'product')
            WHEN sizes[11] IS NOT NULL THEN 1 ELSE 0 END AS n11,
       CASE WHEN (len(coalesce(dims[11], [])) > 0 OR sizes[11] IS NOT NULL) THEN sizes[11] ELSE 0 END AS s11,
       CASE WHEN (len(coalesce(dims[11], [])) > 0 OR sizes[11] IS NOT NULL) THEN 1 ELSE 0 END AS u11,
       nullif(vals[11], '') AS v11,
       -- input 12
       coalesce(dims[12], []) AS d12,
       CASE WHEN len(coalesce(dims[12], [])) > 0 THEN list_aggregate(coalesce(dims[12], []), 'product')
            WHEN sizes[12] IS NOT NULL THEN 1 ELSE 0 END AS n12,
       CASE WHEN (len(coalesce(dims[12], [])) > 0 OR sizes[12] IS NOT NULL) THEN sizes[12] ELSE 0 END AS s12,
       CASE WHEN (len(coalesce(dims[12], [])) > 0 OR sizes[12] IS NOT NULL) THEN 1 ELSE 0 END AS u12,
       nullif(vals[12], '') AS v12
FROM (SELECT *, list_transform(types, lambda t: element_size(t)) AS sizes FROM _shaped_ops WHERE dims IS NOT NULL);

-- the entries some op matched: only their SQL is bound (binding all of it is most of the time on a small
-- trace, 60 -> 20 ms)
-- section: used
SELECT DISTINCT cost_model FROM _modeled;

-- `_modeled` with every tensor's element size 1: `bytes` evaluated over it is the moved elements
-- section: units
CREATE OR REPLACE TEMP VIEW _modeled_units AS
SELECT * REPLACE (u1 AS s1, u2 AS s2, u3 AS s3, u4 AS s4, u5 AS s5, u6 AS s6,
                   u7 AS s7, u8 AS s8, u9 AS s9, u10 AS s10, u11 AS s11, u12 AS s12)
FROM _modeled;

-- section: finish
-- each op range with its signature's costs; the profiler's own FLOP count where no entry gives FLOPs
CREATE OR REPLACE TABLE op_costs AS
SELECT r.rank, r.range_id, r.kind, r.pid, r.tid, r.start_ns, r.end_ns, r.external_id, p.op,
       CASE WHEN p.model_flops IS NOT NULL THEN p.model_flops ELSE r.flops END AS flops,
       p.model_bytes AS bytes, p.elements, p.input_dtype, p.seq_len,
       CASE WHEN p.cost_model IS NOT NULL THEN p.cost_model WHEN r.flops IS NOT NULL THEN 'profiler' END AS cost_model
FROM _op_ranges r
JOIN _priced p ON p.op = r.op AND p.input_dims = r.input_dims AND p.input_types IS NOT DISTINCT FROM r.input_types
              AND p.input_values IS NOT DISTINCT FROM r.input_values
WHERE p.cost_model IS NOT NULL OR r.flops IS NOT NULL;

DROP TABLE _priced;

DROP VIEW _modeled_units;

DROP TABLE _modeled;

DROP VIEW _op_inputs;

DROP VIEW _shaped_ops;

DROP VIEW _op_ranges;

-- with no shaped op ranges (most nsys exports and unshaped Kineto traces): planning the cost query is skipped
-- section: empty
-- table op_costs: one row per op range an op_costs.toml entry (or the profiler's own FLOP count) costs
--   rank: trace rank
--   range_id: the op's `ranges.range_id`
--   kind: copied from `ranges`
--   pid: copied from `ranges`
--   tid: copied from `ranges`
--   start_ns: copied from `ranges`
--   end_ns: copied from `ranges`
--   external_id: copied from `ranges`
--   op: op name (`aten::mm`); for NVTX the text before the first comma
--   flops: FLOPs of matmul-like ops (or the recorded value); NULL for others
--   bytes: bytes read and written, when every input's type is known
--   elements: elements read and written
--   input_dtype: dtype of the first input
--   seq_len: S of a `[B, S, H]` linear/matmul input (1 in decode)
--   cost_model: the op_costs.toml entry that costed the op (`mm`, `sdpa`, `kv_cache_write`, ...), or `profiler`
CREATE OR REPLACE TABLE op_costs (
    rank INTEGER, range_id BIGINT, kind VARCHAR, pid BIGINT, tid BIGINT, start_ns BIGINT, end_ns BIGINT,
    external_id BIGINT, op VARCHAR, flops DOUBLE, bytes DOUBLE, elements DOUBLE, input_dtype VARCHAR, seq_len BIGINT,
    cost_model VARCHAR
);
