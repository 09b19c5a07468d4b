-- stage: steps
-- Steps (engine iterations, forward passes, training iterations) and their phase with its evidence; the windows
-- and the work each one launched come from `step_work`.
-- requires: kernels, kernel_name_labels, op_costs, step_work_windows, step_work_kernels, step_work_memops,
--     step_work_roles
-- creates: steps
--
-- A step's phase: an engine's step annotation (confidence 1.0, or token counts) first, then training evidence
-- (backward work, a strong optimizer range; weak optimizer evidence only beside those), then weaker inference
-- evidence. The interval facts (busy time) are analysis/intervals.py's busy_time_sql, invoked here as the
-- busy_time macro that the loader expands into that helper's text.

-- adds to kernels:
--   step_id: the step whose launch call started this work (`steps.step_id`); work with no launch call in the trace
--     (issued before the capture began): the latest-starting step whose window holds its start; NULL when launched
--     outside every step
--   phase: the step's phase; 'other' for work launched outside any step

-- adds to memops:
--   step_id: the step whose launch call started this work (`steps.step_id`); work with no launch call in the trace
--     (issued before the capture began): the latest-starting step whose window holds its start; NULL when launched
--     outside every step

-- section: steps
-- The contract `steps` table: one row per step with its phase, evidence, GPU time and tokens. Steps that run both a
-- decode-only and a prefill-only attention kernel are not called mixed from the kernel names: unified backends
-- (vLLM's ROCm chunked_prefill_paged_decode) launch their paged decode kernel in every step. Mixed needs many-token
-- GEMMs (tiles, or GEMM time well above the trace's decode steps) and decode attention doing decode-step work; else
-- the phase the evidence supports, at a lower confidence. The user's kernel-name patterns (`--phase-kernel
-- decode=REGEX`) are the rows of `_phase_kernel_patterns` (phase, pattern).
-- table steps: one row per step
--   rank: trace rank
--   step_id: step number within the rank, in time order from 0
--   phase: train, prefill, decode, mixed, empty or unknown (above)
--   phase_source: evidence that decided the phase, strongest first: `annotation:<grammar>` (an engine's step
--     annotation with confidence 1.0 or token counts), `training:backward`, `training:optimizer`,
--     `training:backward+optimizer`, `annotation:<grammar>` (a less certain grammar), `no_gpu_work`, `user_mapping`
--     (`--phase-kernel`; both phases matched → mixed), `input_shapes` (linear inputs `[B, S, H]`: S = 1 decode,
--     S > 1 prefill), `attention_kernels` (phase-only attention kernels), `attention_kernels+decode_work`,
--     `attention_kernels+gemm_tiles`, `attention_kernels+gemm_time` (both attention flavours, settled by GEMMs),
--     `cuda_graph` (graph replays, next to eager steps), `eager_vs_graph` (an eager step in a trace whose other
--     steps replay graphs), `no_evidence`
--   confidence: 1.0 engine annotation or no GPU work; 0.95 backward; 0.9 user mapping; 0.85 optimizer alone; 0.8
--     shapes, phase-only attention; 0.7 graph vs eager; 0.6 graphs alone, or both attention flavours settled by GEMMs
--     (0.5 decode from tiles, 0.4 by the prefill kernel alone); 0 unknown
--   start_ns: the step from the earliest of its window and GPU work
--   end_ns: ... to the latest
--   gpu_time_ns: GPU busy time of the step: the union of its kernels' and memops' intervals (overlaps counted once)
--   kernels: kernels the step launched
--   prefill_tokens: new prefill tokens in the step, from the annotation (NULL when unknown)
--   decode_tokens: new decode tokens in the step, from the annotation (NULL when unknown)
--   prefill_requests: prefill requests, from the annotation
--   decode_requests: decode requests, from the annotation
--   prefill_context_tokens: Σ prefill context lengths including the new tokens (vLLM detailed annotation `sk`)
--   decode_context_tokens: Σ decode context lengths including the new tokens
--   name: the window's range name
--   step_source: where the window came from: `user_regex`, `annotation:<grammar>`, `execute_model`, `profiler_step`,
--     `training_loop` (no step marker, but a training loop's NVTX/user ranges: each outermost forward range opens a
--     step, named after it), `gpu_gap` (no step marker: a burst of GPU work and the idle gap after it, up to the next
--     burst, named `gpu burst`, where the rank's bursts repeat a kernel pattern; otherwise the rank's whole GPU span
--     as one window, named `gpu span`, with a `gap_steps_not_repeating` diagnostic)
--   cpu_start_ns: the host window's start
--   cpu_end_ns: the host window's end
--   gpu_start_ns: first start of the step's GPU work
--   gpu_end_ns: last end of the step's GPU work
--   graph_kernels: kernels replayed from CUDA/HIP graphs
--   memops: memcpys and memsets the step issued
--   train_forward_ns: train steps with known backward: busy time of the rest (forward and loss ranges, input copies;
--     an optimizer with neither an optimizer range nor weak optimizer evidence counts here); NULL otherwise. The
--     three overlap where streams run concurrently, so they can sum above `gpu_time_ns`
--   train_backward_ns: train steps: GPU busy time of the backward work (gradient all-reduce ranges included); NULL
--     when no launch was attributed to backward
--   train_optimizer_ns: train steps: GPU busy time of the optimizer work; NULL when nothing marks it (no
--     optimizer range, no weak optimizer evidence in a training step)
CREATE OR REPLACE TABLE steps AS
WITH work AS (
    SELECT k.rank, k.step_id, count(*) AS kernels, min(k.start_ns) AS gpu_start_ns, max(k.end_ns) AS gpu_end_ns,
           count(*) FILTER (WHERE launch_kind = 'graph') AS graph_kernels,
           count(*) FILTER (WHERE attention_phase_hint = 'decode') AS decode_attention,
           count(*) FILTER (WHERE attention_phase_hint = 'prefill') AS prefill_attention,
           sum(k.dur_ns) FILTER (WHERE attention_phase_hint = 'decode') AS decode_attention_ns,
           sum(k.dur_ns) FILTER (WHERE k.category = 'gemm') AS gemm_ns,
           sum(k.dur_ns) FILTER (WHERE k.tile = 'small') AS gemm_small_tile_ns,
           sum(k.dur_ns) FILTER (WHERE k.tile = 'large') AS gemm_large_tile_ns
    FROM step_work_kernels k
    GROUP BY ALL
),
memwork AS (
    SELECT rank, step_id, count(*) AS memops, min(start_ns) AS lo, max(end_ns) AS hi
    FROM step_work_memops GROUP BY ALL
),
roles AS (
    SELECT rank, step_id,
           count(*) FILTER (WHERE train_role = 'backward') AS backward_work,
           count(*) FILTER (WHERE train_role = 'optimizer') AS optimizer_work,
           count(*) FILTER (WHERE train_role = 'other') AS other_work
    FROM step_work_roles GROUP BY ALL
),
busy_by_role AS (  -- busy_time_sql of the step's work keyed by (rank, step_id, train_role)
    busy_time!((SELECT rank, step_id, train_role, start_ns, end_ns FROM step_work_roles), (rank, step_id, train_role))
),
role_busy AS (
    SELECT rank, step_id,
           max(busy_ns) FILTER (WHERE train_role = 'backward') AS backward_ns,
           max(busy_ns) FILTER (WHERE train_role = 'optimizer') AS optimizer_ns,
           max(busy_ns) FILTER (WHERE train_role = 'other') AS other_ns
    FROM busy_by_role GROUP BY ALL
),
-- a step whose work has one role is as busy as that role; only mixed steps merge their roles again
mixed_roles AS (
    SELECT rank, step_id FROM roles
    WHERE (backward_work > 0)::INT + (optimizer_work > 0)::INT + (other_work > 0)::INT > 1
),
busy AS (
    SELECT rank, step_id, busy_ns FROM busy_by_role ANTI JOIN mixed_roles USING (rank, step_id)
    UNION ALL
    -- busy_time_sql of the mixed steps' work keyed by (rank, step_id)
    busy_time!((SELECT rank, step_id, start_ns, end_ns FROM step_work_roles SEMI JOIN mixed_roles USING (rank, step_id)),
               (rank, step_id))
),
z AS (bucket_width!((SELECT start_ns, end_ns FROM step_work_windows))),
shapes AS (  -- the shaped ops starting in each window, joined on the thread and a time bucket (each window listed in
    -- the buckets it covers), not on the thread alone, which compared every window with every op of its thread
    SELECT w.rank, w.step_id, min(o.seq_len) AS min_seq_len, max(o.seq_len) AS max_seq_len
    FROM (in_buckets!((SELECT * FROM step_work_windows), (SELECT ns FROM z))) w
    JOIN (SELECT o.*, o.start_ns // z.ns AS b FROM op_costs o, z WHERE o.seq_len IS NOT NULL) o
      ON o.rank = w.rank AND o.pid = w.pid AND o.tid = w.tid AND o.b = w.b
     AND o.start_ns >= w.start_ns AND o.start_ns < w.end_ns
    GROUP BY w.rank, w.step_id
),
user_names AS MATERIALIZED (
    -- the phase each of the user's patterns gives a kernel name, tried once per distinct name (kernel_name_labels'
    -- name_key: '' only for a name that is '', which a NULL name does not join), not once per kernel
    SELECT l.name_key AS name, m.phase
    FROM (SELECT DISTINCT name_key FROM kernel_name_labels) l
    JOIN _phase_kernel_patterns m ON regexp_matches(l.name_key, m.pattern)
),
mapped AS (  -- per step, the phases the user's patterns point to; without patterns no kernel is read
    SELECT p.rank, p.step_id,
           CASE WHEN count(DISTINCT m.phase) > 1 THEN 'mixed' ELSE any_value(m.phase) END AS user_phase
    FROM (SELECT * FROM step_work_kernels WHERE EXISTS (SELECT 1 FROM _phase_kernel_patterns)) p
    JOIN kernels k USING (rank, kernel_id)
    JOIN user_names m ON m.name = k.name
    GROUP BY ALL
),
joined AS (
    SELECT w.*, coalesce(k.kernels, 0) AS kernels, coalesce(m.memops, 0) AS memops,
           -- the earlier start and the later end of kernels and memops; a kind with no work (NULL) drops out
           CASE WHEN m.lo IS NULL THEN k.gpu_start_ns WHEN k.gpu_start_ns IS NULL THEN m.lo
                WHEN m.lo < k.gpu_start_ns THEN m.lo ELSE k.gpu_start_ns END AS gpu_start_ns,
           CASE WHEN m.hi IS NULL THEN k.gpu_end_ns WHEN k.gpu_end_ns IS NULL THEN m.hi
                WHEN m.hi > k.gpu_end_ns THEN m.hi ELSE k.gpu_end_ns END AS gpu_end_ns,
           coalesce(k.graph_kernels, 0) AS graph_kernels,
           coalesce(k.decode_attention, 0) AS decode_attention,
           coalesce(k.prefill_attention, 0) AS prefill_attention,
           k.decode_attention_ns, k.gemm_ns, k.gemm_small_tile_ns, k.gemm_large_tile_ns,
           coalesce(r.backward_work, 0) AS backward_work, coalesce(r.optimizer_work, 0) AS optimizer_work,
           coalesce(r.other_work, 0) AS other_work, rb.backward_ns, rb.optimizer_ns, rb.other_ns,
           sh.min_seq_len, sh.max_seq_len, mp.user_phase,
           coalesce(b.busy_ns, 0) AS gpu_time_ns
    FROM step_work_windows w
    LEFT JOIN work k USING (rank, step_id)
    LEFT JOIN memwork m USING (rank, step_id)
    LEFT JOIN roles r USING (rank, step_id)
    LEFT JOIN role_busy rb USING (rank, step_id)
    LEFT JOIN busy b USING (rank, step_id)
    LEFT JOIN shapes sh USING (rank, step_id)
    LEFT JOIN mapped mp USING (rank, step_id)
),
rank_shape AS (
    SELECT rank,
           count(*) FILTER (WHERE kernels > 0 AND graph_kernels > 0) AS graph_steps,
           count(*) FILTER (WHERE kernels > 0 AND graph_kernels = 0) AS eager_steps
    FROM joined WHERE phase IS NULL GROUP BY rank
),
decided AS (
    SELECT j.*,
        CASE
            -- an engine's own account of the step (a sure grammar, or token counts) outranks op-name heuristics
            WHEN j.phase IS NOT NULL AND (j.confidence = 1.0 OR j.counts_tokens)
                THEN struct_pack(p := j.phase, s := j.source, c := j.confidence)
            WHEN j.backward_work > 0 AND j.optimizer_work > 0
                THEN struct_pack(p := 'train', s := 'training:backward+optimizer', c := 0.95)
            WHEN j.backward_work > 0 THEN struct_pack(p := 'train', s := 'training:backward', c := 0.95)
            WHEN j.optimizer_work > 0 THEN struct_pack(p := 'train', s := 'training:optimizer', c := 0.85)
            WHEN j.phase IS NOT NULL THEN struct_pack(p := j.phase, s := j.source, c := j.confidence)
            WHEN j.kernels = 0 AND j.memops = 0 THEN struct_pack(p := 'empty', s := 'no_gpu_work', c := 1.0)
            WHEN j.user_phase IS NOT NULL THEN struct_pack(p := j.user_phase, s := 'user_mapping', c := 0.9)
            WHEN j.min_seq_len > 1 THEN struct_pack(p := 'prefill', s := 'input_shapes', c := 0.8)
            WHEN j.max_seq_len = 1 THEN struct_pack(p := 'decode', s := 'input_shapes', c := 0.8)
            -- resolved below from GEMM tiles and the trace's decode steps
            WHEN j.decode_attention > 0 AND j.prefill_attention > 0 THEN struct_pack(p := NULL, s := 'attention_kernels', c := NULL)
            WHEN j.decode_attention > 0 THEN struct_pack(p := 'decode', s := 'attention_kernels', c := 0.8)
            WHEN j.prefill_attention > 0 THEN struct_pack(p := 'prefill', s := 'attention_kernels', c := 0.8)
            WHEN j.graph_kernels > 0 AND r.eager_steps > 0 THEN struct_pack(p := 'decode', s := 'cuda_graph', c := 0.7)
            WHEN j.graph_kernels > 0 THEN struct_pack(p := 'decode', s := 'cuda_graph', c := 0.6)
            WHEN j.kernels > 0 AND r.graph_steps > 0 THEN struct_pack(p := 'prefill', s := 'eager_vs_graph', c := 0.7)
            ELSE struct_pack(p := 'unknown', s := 'no_evidence', c := 0.0)
        END AS verdict
    FROM joined j LEFT JOIN rank_shape r USING (rank)
),
decode_reference AS (
    -- the rank's steady-state decode steps: their GEMM time and decode-attention time per launch
    SELECT rank, median(gemm_ns) AS decode_gemm_ns,
           median(decode_attention_ns / decode_attention) FILTER (WHERE decode_attention > 0)
               AS decode_attention_launch_ns
    FROM decided WHERE verdict.p = 'decode' GROUP BY rank
),
evidence AS (
    SELECT d.*,
           d.gemm_large_tile_ns > 0 AND (d.gemm_small_tile_ns IS NULL OR d.gemm_large_tile_ns > d.gemm_small_tile_ns)
               AS large_tiles,
           d.gemm_small_tile_ns > 0 AND (d.gemm_large_tile_ns IS NULL OR d.gemm_small_tile_ns > d.gemm_large_tile_ns)
               AS small_tiles,
           d.gemm_ns > 2 * ref.decode_gemm_ns AS gemm_above_decode,
           d.decode_attention_ns >= 0.5 * d.decode_attention * ref.decode_attention_launch_ns AS decode_work
    FROM decided d LEFT JOIN decode_reference ref USING (rank)
),
resolved AS (
    SELECT *,
        CASE
            WHEN verdict.p IS NOT NULL THEN verdict
            WHEN (large_tiles OR gemm_above_decode) AND decode_work
                THEN struct_pack(p := 'mixed', s := 'attention_kernels+decode_work', c := 0.6)
            WHEN large_tiles THEN struct_pack(p := 'prefill', s := 'attention_kernels+gemm_tiles', c := 0.6)
            WHEN gemm_above_decode THEN struct_pack(p := 'prefill', s := 'attention_kernels+gemm_time', c := 0.6)
            WHEN small_tiles THEN struct_pack(p := 'decode', s := 'attention_kernels+gemm_tiles', c := 0.5)
            -- a prefill-only kernel ran; the decode kernel alone proves no decode tokens
            ELSE struct_pack(p := 'prefill', s := 'attention_kernels', c := 0.4)
        END AS final
    FROM evidence
)
SELECT rank, step_id, final.p AS phase, final.s AS phase_source, final.c AS confidence,
       -- the window widened to its GPU work; a step with no GPU work keeps its window
       CASE WHEN gpu_start_ns IS NULL OR start_ns < gpu_start_ns THEN start_ns ELSE gpu_start_ns END AS start_ns,
       CASE WHEN gpu_end_ns IS NULL OR end_ns > gpu_end_ns THEN end_ns ELSE gpu_end_ns END AS end_ns,
       gpu_time_ns, kernels, prefill_tokens, decode_tokens, prefill_requests, decode_requests,
       prefill_context_tokens, decode_context_tokens,
       name, source AS step_source, start_ns AS cpu_start_ns, end_ns AS cpu_end_ns,
       gpu_start_ns, gpu_end_ns, graph_kernels, memops,
       -- GPU busy time by training role; forward is the rest of a step whose backward is known
       CASE WHEN final.p = 'train' AND backward_work > 0
            THEN CASE WHEN other_work > 0 THEN other_ns ELSE 0 END END AS train_forward_ns,
       CASE WHEN final.p = 'train' AND backward_work > 0 THEN backward_ns END AS train_backward_ns,
       CASE WHEN final.p = 'train' AND optimizer_work > 0 THEN optimizer_ns END AS train_optimizer_ns
FROM resolved
ORDER BY rank, step_id;

