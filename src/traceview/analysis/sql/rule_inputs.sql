-- stage: rule_inputs
-- What several rules would otherwise each rebuild: the CPU op that launched each kernel (TV302, TV303, TV304
-- name a kernel by its layer), and `step_claims()`, the list of per-step claims a finding makes on the step
-- budget's ledger (docs/rules.md, savings), so a rule's SQL is about its own judgement.
-- requires: ranges
-- creates: launching_ops

-- A finding's claims, aggregated over rows of (rank, step_id, ns): one {rank, step_id, bucket, ns} per row, in
-- step order, time outside steps last.
CREATE OR REPLACE MACRO step_claims(rank, step_id, bucket, ns) AS
    list({'rank': rank, 'step_id': step_id, 'bucket': bucket, 'ns': ns} ORDER BY step_id NULLS LAST);

-- table launching_ops: one row per (rank, Kineto External id) of a CPU op: a table, so the rules that read it share one grouping of the CPU ops
--   rank: trace rank
--   external_id: `ranges.external_id`, which a kernel shares with the op that launched it
--   op: the innermost op of that id (the deepest `cpu_op` range): the layer's own op (`aten::linear`,
--     `aten::mul`), not the module around it
CREATE OR REPLACE TABLE launching_ops AS
SELECT rank, external_id, arg_max(name, depth) AS op
FROM ranges WHERE kind = 'cpu_op' AND external_id IS NOT NULL
GROUP BY ALL;
