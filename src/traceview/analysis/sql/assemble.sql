-- stage: assemble
-- `kernels` and `memops` as users query them: the ingested columns plus the columns the stages above
-- add (`categories`, `kernel_costs`, `steps`), joined once.
-- requires: kernels, memops, kernel_name_labels, kernel_costs, kernel_steps, memop_steps, steps
-- rewrites: kernels, memops, labelled_kernels, kernel_name_labels, kernel_costs, kernel_steps, memop_steps,
--     step_work_windows, step_work_memops, step_work_kernels, step_work_roles, range_roles
--
-- Stages never alter the schema tables; each writes its facts to a table of its own (labels per distinct
-- name, costs and steps per kernel), and this stage joins them back once, in the order the stages declare
-- what they add to `kernels`. Only the ingested columns are read from the old tables (`_ingested_kernels`,
-- `_ingested_memops`: assemble.py's views of schema.sql's columns), so analysing a trace again (other
-- options) starts from the trace, not from the previous analysis.

CREATE OR REPLACE TABLE kernels AS
SELECT k.*, l.* EXCLUDE (name_key, short_key), c.* EXCLUDE (rank, kernel_id), s.step_id,
       CASE WHEN st.phase IS NULL THEN 'other' ELSE st.phase END AS phase
FROM _ingested_kernels k
JOIN kernel_name_labels l ON coalesce(k.name, '') = l.name_key AND coalesce(k.short_name, '') = l.short_key
LEFT JOIN kernel_costs c ON c.rank = k.rank AND c.kernel_id = k.kernel_id
LEFT JOIN kernel_steps s ON s.rank = k.rank AND s.kernel_id = k.kernel_id
LEFT JOIN steps st ON st.rank = k.rank AND st.step_id = s.step_id;

CREATE OR REPLACE TABLE memops AS
SELECT m.*, s.step_id
FROM _ingested_memops m LEFT JOIN memop_steps s ON s.rank = m.rank AND s.memop_id = m.memop_id;

DROP VIEW labelled_kernels;
DROP TABLE kernel_name_labels;
DROP TABLE kernel_costs;
DROP TABLE kernel_steps;
DROP TABLE memop_steps;
DROP TABLE step_work_windows;
DROP TABLE step_work_memops;
DROP TABLE step_work_kernels;
DROP TABLE step_work_roles;
DROP TABLE range_roles;
DROP VIEW _ingested_kernels;
DROP VIEW _ingested_memops;
