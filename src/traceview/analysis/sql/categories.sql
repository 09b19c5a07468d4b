-- stage: categories
-- Kernel category, math dtype and attention phase hint from the kernel's name
-- (`src/traceview/analysis/categories.toml`; the first matching pattern wins).
-- requires: kernels
-- creates: kernel_name_labels, category_patterns, dtype_patterns, labelled_kernels
--
-- Matching runs once per distinct (name, short_name) and is joined back, so millions of kernels cost what a
-- few hundred names cost. categories.py runs the sections in the order patterns, labels, view: between the
-- first two it writes `_kernel_name_rules`, each distinct (name, short_name) with the priority of the first
-- category and dtype pattern it matches (one CASE a list whose patterns are bound parameters: bound, they
-- are constants, so DuckDB compiles each regex once).

-- The rules of a patterns file, compiled with RE2 as DuckDB does before a trace runs them: all of a list in
-- one statement; only a failure pays for finding the entry.
-- section: check_all
SELECT list_transform($patterns, lambda p: regexp_matches('', p));

-- section: check_one
SELECT regexp_matches('', $pattern);

-- section: labels
-- transient table kernel_name_labels: one row per distinct kernel (name, short_name)
--   name_key: kernels.name ('' for NULL)
--   short_key: kernels.short_name ('' for NULL)
--   category: gemm, attention, conv, norm, activation, rotary, kv_cache_write, reduction_softmax, communication,
--     memory, sampling, fused, elementwise, moe_routing, embedding, optimizer, other (`category_patterns`)
--   dtype: math dtype the name states (fp4, fp8, int8, bf16, fp16, tf32, fp32, fp64); NULL when the name does
--     not say (`dtype_patterns`)
--   attention_phase_hint: 'prefill' or 'decode' for attention kernels written for one phase only
--     (paged_attention, BatchDecode, MMHA/XQA → decode; BatchPrefill, fmha_v2 context → prefill); NULL for
--     kernels serving both (FlashAttention in vLLM V1)
CREATE OR REPLACE TABLE kernel_name_labels AS
SELECT coalesce(m.name, '') AS name_key, coalesce(m.short_name, '') AS short_key,
       coalesce(c.category, 'other') AS category, nullif(d.dtype, $no_dtype) AS dtype,
       c.phase_hint AS attention_phase_hint
FROM _kernel_name_rules m
LEFT JOIN category_patterns c ON c.priority = m.category_rule
LEFT JOIN dtype_patterns d ON d.priority = m.dtype_rule;

DROP TABLE _kernel_name_rules;

-- adds to kernels:
--   *: the columns of kernel_name_labels from category on

-- The rules themselves, so a user can ask SQL why a kernel got its label; the lists are the rules'
-- fields, in priority order.
-- section: patterns
-- table category_patterns: one row per category pattern, in priority order
--   priority: order of the pattern in categories.toml (first match wins)
--   category: the label it gives
--   field: `name` or `short_name`: what the pattern is matched against
--   pattern: RE2 regex
--   phase_hint: the attention phase hint it gives, if any
CREATE OR REPLACE TABLE category_patterns AS
SELECT unnest($category_priorities::INTEGER[]) AS priority, unnest($category_labels::VARCHAR[]) AS category,
       unnest($category_fields::VARCHAR[]) AS field, unnest($category_patterns::VARCHAR[]) AS pattern,
       unnest($category_phase_hints::VARCHAR[]) AS phase_hint;

-- table dtype_patterns: one row per dtype pattern, in priority order
--   priority: order of the pattern in categories.toml (first match wins)
--   dtype: the label it gives ('none': stop and leave dtype NULL)
--   field: `name` or `short_name`
--   pattern: RE2 regex
CREATE OR REPLACE TABLE dtype_patterns AS
SELECT unnest($dtype_priorities::INTEGER[]) AS priority, unnest($dtype_labels::VARCHAR[]) AS dtype,
       unnest($dtype_fields::VARCHAR[]) AS field, unnest($dtype_patterns::VARCHAR[]) AS pattern;

-- Transient, like kernel_name_labels: analysis/assemble.py drops it (categories.py declares it so).
-- section: view
-- view labelled_kernels: one row per kernel, for the stages before `kernels` is assembled
--   rank: `kernels.rank`
--   kernel_id: `kernels.kernel_id`
--   device_id: `kernels.device_id`
--   stream_id: `kernels.stream_id`
--   pid: `kernels.pid`
--   tid: `kernels.tid`
--   start_ns: `kernels.start_ns`
--   end_ns: `kernels.end_ns`
--   dur_ns: `kernels.dur_ns`
--   name: `kernels.name`
--   short_name: `kernels.short_name`
--   grid_x: `kernels.grid_x`
--   grid_y: `kernels.grid_y`
--   grid_z: `kernels.grid_z`
--   block_x: `kernels.block_x`
--   block_y: `kernels.block_y`
--   block_z: `kernels.block_z`
--   registers_per_thread: `kernels.registers_per_thread`
--   shared_memory_bytes: `kernels.shared_memory_bytes`
--   correlation_id: `kernels.correlation_id`
--   launch_kind: `kernels.launch_kind`
--   launch_api: `kernels.launch_api`
--   launch_call_id: `kernels.launch_call_id`
--   graph_id: `kernels.graph_id`
--   graph_node_id: `kernels.graph_node_id`
--   external_id: `kernels.external_id`
--   *: the columns of kernel_name_labels from category on
CREATE OR REPLACE VIEW labelled_kernels AS
SELECT k.rank, k.kernel_id, k.device_id, k.stream_id, k.pid, k.tid, k.start_ns, k.end_ns, k.dur_ns, k.name,
       k.short_name, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers_per_thread,
       k.shared_memory_bytes, k.correlation_id, k.launch_kind, k.launch_api, k.launch_call_id, k.graph_id,
       k.graph_node_id, k.external_id, l.category, l.dtype, l.attention_phase_hint
FROM kernels k JOIN kernel_name_labels l
  ON coalesce(k.name, '') = l.name_key AND coalesce(k.short_name, '') = l.short_key;
