-- stage: collectives
-- Collectives as an expert reads them: each communication kernel's kind (from the host op that launched it, else
-- the kernel name), NCCL algorithm and protocol, message size where the trace records it, whether it ran in backward
-- work and how much of it no compute hid; the parallelism those collectives imply per rank; and a summary per rank,
-- kind and message size with bus bandwidth against the GPU link's peak and whether it sits on the critical path.
-- TV401, TV402 and the rule engine's trace_facts read these.
-- requires: gpu_activity, kernels, steps, ranges, api_calls, trace_info, devices, gpu_specs
-- creates: collective_calls, parallelism, collective_summary
--
-- Grammars, all structural: NCCL/RCCL kernels are `ncclDevKernel_<Coll>_<Op>_<type>_<ALGO>_<PROTO>` and the older
-- `ncclKernel_<Coll>_<ALGO>_<PROTO>_<Op>_<type>`; RCCL's `ncclDevKernel_Generic_N` names no collective, so the
-- kind comes from the host range around its launch: PyTorch's `nccl:all_reduce` / `c10d::allreduce_` /
-- `record_param_comms`, NCCL's own NVTX (`ncclAllReduce`), vLLM's `all_reduce` custom ops. NCCL implements
-- all-to-all with SendRecv kernels, so the host op wins over the kernel name.

-- table collective_calls: one row per communication kernel (kernels.category = 'communication')
--   rank: trace rank
--   device_id: GPU ordinal
--   kernel_id: kernels.kernel_id
--   step_id: the step that launched it; NULL outside every step
--   phase: steps.phase of that step; NULL outside every step
--   name: kernels.name
--   family: gpu_activity.comm_family
--   kind: all_reduce, all_gather, reduce_scatter, all_to_all (collective or expert-parallel dispatch/combine),
--     send_recv, broadcast, reduce; 'unknown' when neither the host op nor the kernel name says (RCCL
--     `Generic` kernels replayed from a graph)
--   kind_source: 'host_op' (the innermost communication range around the launch call on its thread) or
--     'kernel_name'; NULL when kind is unknown
--   host_op: that range's name (the latest-starting, then shortest, enclosing one); NULL when the launch has none
--     (or no launch call is in the trace)
--   algorithm: NCCL/RCCL algorithm from the kernel name (RING, TREE, NVLS, NVLS_TREE, COLLNET_DIRECT,
--     COLLNET_CHAIN, PAT); NULL when the name does not say (Generic, custom all-reduce)
--   protocol: LL, LL128 or SIMPLE from the kernel name; NULL when it does not say
--   message_bytes: bytes of the largest tensor among the host op's recorded inputs (Kineto record_shapes `Input
--     Dims` x `Input type`, nsys emit_nvtx sizes): nccl-tests' size (an all-gather's gathered buffer, a
--     reduce-scatter's full input); NULL when no enclosing communication range records a tensor of known dtype
--   group_size: ranks in the collective, taken as trace_info.world_size (the trace keeps no process-group size);
--     NULL when the trace does not say
--   in_backward: the launch call ran inside a backward or gradient range on its thread (autograd's
--     `evaluate_function: ...Backward` and `AccumulateGrad`, `*_backward` ops, `FSDP::post_backward`, `.backward`)
--   parallelism: what the call implies: expert (all-to-all), embedding (all-to-all beside pooled embedding
--     lookups and no mixture-of-experts work), pipeline (send/recv), data (all-reduce or
--     reduce-scatter in the backward work of a train step), tensor (all-reduce, all-gather or reduce-scatter of an
--     inference step, or an all-reduce or reduce-scatter of a train step outside backward, on a rank that issues at
--     least two per step: one per layer); NULL when the structure does not say (broadcasts, unknown kinds,
--     collectives outside steps)
--   serial: on the critical path by structure: a tensor-parallel kind (all_reduce, all_gather, reduce_scatter) or
--     an unknown one in an inference step (prefill, decode, mixed): the next layer needs the result, and nothing in
--     the trace shows it could overlap
--   start_ns: kernel start
--   dur_ns: kernel duration
--   exposed_ns: dur_ns minus its overlap with the union of the device's non-communication kernels
CREATE OR REPLACE TABLE collective_calls AS
WITH comm AS (
    SELECT a.rank, a.device_id, a.activity_id AS kernel_id, a.step_id, s.phase, k.name, a.comm_family AS family,
           a.start_ns, a.end_ns, a.dur_ns, c.pid AS call_pid, c.tid AS call_tid, c.start_ns AS call_ns
    FROM gpu_activity a
    JOIN kernels k ON k.rank = a.rank AND k.kernel_id = a.activity_id
    LEFT JOIN steps s ON s.rank = a.rank AND s.step_id = a.step_id
    LEFT JOIN api_calls c ON c.rank = a.rank AND c.call_id = a.launch_call_id
    WHERE a.kind = 'kernel' AND a.category = 'communication'
),
range_names AS MATERIALIZED (  -- the grammars run once per distinct range name (stored: the planner moved them onto every range)
    SELECT name,
           CASE WHEN regexp_matches(name, '(?i)all_?reduce') THEN 'all_reduce'
                WHEN regexp_matches(name, '(?i)all_?gather') THEN 'all_gather'
                WHEN regexp_matches(name, '(?i)reduce_?scatter') THEN 'reduce_scatter'
                WHEN regexp_matches(name, '(?i)all_?to_?all|all2all') THEN 'all_to_all'
                WHEN regexp_matches(name, '(?i)^(nccl|rccl|c10d)[:_]+(i?send|i?recv|batch_isend_irecv)|^nccl(Send|Recv|GroupEnd)')
                    THEN 'send_recv'
                WHEN regexp_matches(name, '(?i)^(nccl|rccl|c10d)[:_]*broadcast') THEN 'broadcast'
                WHEN regexp_matches(name, '(?i)^(nccl|rccl|c10d)[:_]*reduce_?$') THEN 'reduce'
           END AS kind,
           regexp_matches(name, '(?i)backward|autograd::engine::evaluate_function|accumulategrad') AS backward
    FROM (SELECT DISTINCT name FROM ranges WHERE kind IN ('cpu_op', 'user_annotation', 'nvtx'))
),
host_ranges AS (
    SELECT r.rank, r.pid, r.tid, r.start_ns, r.end_ns, r.depth, r.name, n.kind, n.backward,
           -- the largest recorded tensor: elements (product of its dims) times its dtype's bytes
           (SELECT max(list_product(d.dims) * d.width)::BIGINT FROM (
                SELECT unnest(json_transform(r.input_dims, '[["BIGINT"]]')) AS dims,
                       unnest(list_transform(json_transform(r.input_types, '["VARCHAR"]'),
                              lambda t: CASE WHEN regexp_matches(t, '(?i)double|int64|long|complex<float>') THEN 8
                                        WHEN regexp_matches(t, '(?i)float8|fp8|e4m3|e5m2|char|int8|uint8|bool|byte') THEN 1
                                        WHEN regexp_matches(t, '(?i)half|bfloat16|bf16|fp16|short|int16') THEN 2
                                        WHEN regexp_matches(t, '(?i)^(float|int|int32|unsigned int|float32|fp32)$') THEN 4
                                   END)) AS width
            ) d WHERE len(d.dims) > 0 AND d.width IS NOT NULL) AS tensor_bytes
    FROM ranges r JOIN range_names n USING (name)
    WHERE r.kind IN ('cpu_op', 'user_annotation', 'nvtx') AND (n.kind IS NOT NULL OR n.backward)
),
bucket AS (bucket_width!((SELECT start_ns, end_ns FROM host_ranges))),
bucketed AS (  -- each host range in every bucket it touches: about five buckets a range, times its nesting depth
    in_buckets!((SELECT * FROM host_ranges), (SELECT ns FROM bucket))
),
enclosing AS (
    -- the ranges around each launch, joined on the thread and the launch's bucket: a join on the thread alone
    -- compared every launch with every range of its thread
    SELECT c.rank, c.kernel_id,
           arg_max(h.kind, (h.start_ns, -h.end_ns)) FILTER (WHERE h.kind IS NOT NULL) AS op_kind,
           arg_max(h.name, (h.start_ns, -h.end_ns)) FILTER (WHERE h.kind IS NOT NULL) AS host_op,
           arg_max(h.tensor_bytes, (h.start_ns, -h.end_ns)) FILTER (WHERE h.kind IS NOT NULL AND h.tensor_bytes IS NOT NULL)
               AS message_bytes,
           bool_or(h.backward) AS in_backward
    FROM comm c CROSS JOIN bucket z
    JOIN bucketed h
      ON h.rank = c.rank AND h.pid = c.call_pid AND h.tid = c.call_tid AND h.b = c.call_ns // z.ns
     AND h.start_ns <= c.call_ns AND h.end_ns >= c.call_ns
    GROUP BY c.rank, c.kernel_id
),
compute_cum AS (
    islands_with_time_before!((SELECT rank, device_id, start_ns, end_ns FROM gpu_activity
                               WHERE kind = 'kernel' AND category <> 'communication'
                                 AND (rank, device_id) IN (SELECT DISTINCT rank, device_id FROM comm)),
                              (rank, device_id))
),
hidden AS (
    SELECT c.rank, c.kernel_id, busy_before!(k, c.end_ns) AS b_end
    FROM comm c ASOF LEFT JOIN compute_cum k ON k.rank = c.rank AND k.device_id = c.device_id AND k.lo <= c.end_ns
),
hidden_lo AS (
    SELECT c.rank, c.kernel_id, busy_before!(k, c.start_ns) AS b_start
    FROM comm c ASOF LEFT JOIN compute_cum k ON k.rank = c.rank AND k.device_id = c.device_id AND k.lo <= c.start_ns
),
named AS (
    SELECT c.*, e.op_kind, e.host_op, e.message_bytes, coalesce(e.in_backward, false) AS in_backward,
           CASE c.family WHEN 'nccl_all_reduce' THEN 'all_reduce' WHEN 'custom_all_reduce' THEN 'all_reduce'
                         WHEN 'all_gather' THEN 'all_gather' WHEN 'reduce_scatter' THEN 'reduce_scatter'
                         WHEN 'all_to_all' THEN 'all_to_all' WHEN 'send_recv' THEN 'send_recv'
                         WHEN 'broadcast' THEN 'broadcast'
                         ELSE CASE WHEN regexp_matches(c.name, '(?i)nccl(Dev)?Kernel_Reduce_') THEN 'reduce' END
           END AS name_kind,
           regexp_extract(c.name, '_(RING|TREE|NVLS_TREE|NVLS|COLLNET_DIRECT|COLLNET_CHAIN|PAT)_(LL128|LL|SIMPLE)([_(]|$)', 1)
               AS algo,
           regexp_extract(c.name, '_(RING|TREE|NVLS_TREE|NVLS|COLLNET_DIRECT|COLLNET_CHAIN|PAT)_(LL128|LL|SIMPLE)([_(]|$)', 2)
               AS proto,
           h.b_end - l.b_start AS hidden_ns
    FROM comm c
    LEFT JOIN enclosing e USING (rank, kernel_id)
    JOIN hidden h USING (rank, kernel_id)
    JOIN hidden_lo l USING (rank, kernel_id)
),
kinded AS (
    SELECT n.*, coalesce(n.op_kind, n.name_kind, 'unknown') AS kind FROM named n
),
per_step AS (
    SELECT rank, step_id, phase, kind, in_backward, count(*) AS calls
    FROM kinded WHERE step_id IS NOT NULL GROUP BY ALL
),
tp_ranks AS (
    -- per layer: at least two tensor-parallel collectives per step, on average over the steps that run them
    SELECT DISTINCT rank FROM (
        SELECT rank FROM per_step
        WHERE phase IN ('prefill', 'decode', 'mixed') AND kind IN ('all_reduce', 'all_gather', 'reduce_scatter')
        GROUP BY rank, phase, kind HAVING sum(calls) >= 2 * count(*)
        UNION ALL
        SELECT rank FROM per_step
        WHERE phase = 'train' AND kind IN ('all_reduce', 'reduce_scatter') AND NOT in_backward
          AND rank IN (SELECT rank FROM kinded WHERE in_backward)
        GROUP BY rank, kind HAVING sum(calls) >= 2 * count(*)
    )
),
sharded_embedding_ranks AS (
    -- all-to-all beside pooled embedding lookups (recsys model parallelism: TorchRec/fbgemm table-batched
    -- embeddings) and no mixture-of-experts work: the all-to-alls move embedding shards, not expert tokens
    -- (looked for only on ranks that run an all-to-all, over distinct names)
    SELECT rank FROM (SELECT DISTINCT rank, name FROM kernels
                      WHERE rank IN (SELECT rank FROM kinded WHERE kind = 'all_to_all')
                      UNION SELECT DISTINCT rank, name FROM ranges
                      WHERE kind = 'cpu_op' AND rank IN (SELECT rank FROM kinded WHERE kind = 'all_to_all'))
    GROUP BY rank
    HAVING bool_or(regexp_matches(name, '(?i)embedding_?bag|split_embedding|embedding_codegen'))
       AND NOT bool_or(regexp_matches(name, '(?i)(^|[^a-z])(moe|experts?)([^a-z]|$)|fused_moe|grouped_?gemm|topk_gating'))
)
SELECT n.rank, n.device_id, n.kernel_id, n.step_id, n.phase, n.name, n.family, n.kind,
       CASE WHEN n.op_kind IS NOT NULL THEN 'host_op' WHEN n.name_kind IS NOT NULL THEN 'kernel_name' END AS kind_source,
       n.host_op, nullif(n.algo, '') AS algorithm, nullif(n.proto, '') AS protocol, n.message_bytes,
       t.world_size AS group_size, n.in_backward,
       CASE WHEN n.kind = 'all_to_all' AND n.rank IN (SELECT rank FROM sharded_embedding_ranks) THEN 'embedding'
            WHEN n.kind = 'all_to_all' THEN 'expert'
            WHEN n.kind = 'send_recv' THEN 'pipeline'
            WHEN n.kind IN ('all_reduce', 'reduce_scatter') AND n.phase = 'train' AND n.in_backward THEN 'data'
            WHEN n.rank IN (SELECT rank FROM tp_ranks)
                 AND ((n.kind IN ('all_reduce', 'all_gather', 'reduce_scatter') AND n.phase IN ('prefill', 'decode', 'mixed'))
                      OR (n.kind IN ('all_reduce', 'reduce_scatter') AND n.phase = 'train'))
                THEN 'tensor'
       END AS parallelism,
       n.kind IN ('all_reduce', 'all_gather', 'reduce_scatter', 'unknown')
           AND coalesce(n.phase IN ('prefill', 'decode', 'mixed'), false) AS serial,
       n.start_ns, n.dur_ns, (n.dur_ns - n.hidden_ns)::BIGINT AS exposed_ns
FROM kinded n JOIN trace_info t USING (rank)
ORDER BY n.rank, n.start_ns, n.kernel_id;

-- view parallelism: one row per (rank, kind of parallelism) the rank's collectives imply; no rows without collectives
--   rank: trace rank
--   kind: a collective_calls.parallelism of some call: tensor (at least two all-reduces, all-gathers or
--     reduce-scatters per inference step, one per layer; in train steps, all-reduces or reduce-scatters outside
--     backward work on a rank whose backward work is marked), data (all-reduce or reduce-scatter in the backward
--     work of train steps: gradient buckets, FSDP's reduce-scatter), expert (all-to-all: NCCL all-to-all,
--     DeepEP-style dispatch/combine), embedding (all-to-all on a rank that runs pooled embedding lookups and no
--     mixture-of-experts work: recsys tables sharded across ranks), pipeline (send/recv that no all-to-all op
--     issued). A tensor-parallel rank's
--     backward all-reduces count as data: the trace does not tell a layer's input-gradient all-reduce from a
--     gradient bucket's
--   evidence: the counts behind it, per phase for tensor ('161 all-reduces per prefill step'), else over the steps
--     ('3 all-reduces in backward over 1 step')
CREATE OR REPLACE VIEW parallelism AS
WITH labels AS (
    SELECT * FROM (VALUES ('all_reduce', 'all-reduce', 'all-reduces'), ('all_gather', 'all-gather', 'all-gathers'),
                          ('reduce_scatter', 'reduce-scatter', 'reduce-scatters'),
                          ('all_to_all', 'all-to-all', 'all-to-alls'), ('send_recv', 'send/recv', 'send/recvs'))
                  v(kind, one, many)
),
groups AS (
    SELECT c.rank, c.parallelism, c.kind, CASE WHEN c.parallelism = 'tensor' THEN c.phase END AS phase,
           count(*) AS calls, count(DISTINCT c.step_id) AS steps
    FROM collective_calls c WHERE c.parallelism IS NOT NULL GROUP BY ALL
),
parts AS (
    SELECT g.rank, g.parallelism, g.calls,
           CASE WHEN g.parallelism = 'tensor'
                THEN printf('%s per %s step', CASE WHEN round(g.calls / g.steps) = 1 THEN '1 ' || l.one
                                                   ELSE printf('%.0f %s', g.calls / g.steps, l.many) END, g.phase)
                ELSE printf('%d %s%s over %d step%s', g.calls, CASE WHEN g.calls = 1 THEN l.one ELSE l.many END,
                            CASE WHEN g.parallelism = 'data' THEN ' in backward' ELSE '' END, g.steps,
                            CASE WHEN g.steps = 1 THEN '' ELSE 's' END) END AS part
    FROM groups g JOIN labels l USING (kind)
)
SELECT rank, parallelism AS kind, string_agg(part, ', ' ORDER BY calls DESC, part) AS evidence
FROM parts GROUP BY rank, parallelism
ORDER BY rank, kind;

-- The summary's rows with the bus bandwidth as measured, before physics checks it against the link.
CREATE OR REPLACE TEMP TABLE _collective_rates AS
WITH calls AS (
    SELECT c.*,
           CASE WHEN c.phase IN ('prefill', 'decode', 'mixed') THEN 'serving' WHEN c.phase = 'train' THEN 'train'
                ELSE 'other' END AS workload,
           CASE WHEN g.gpu_link_kind = 'none' THEN g.host_link ELSE g.gpu_link END AS link,
           CASE WHEN g.gpu_link_kind = 'none' THEN g.host_link_bytes_per_s
                WHEN g.gpu_link_kind = 'infinity-fabric' AND c.group_size > 1
                    THEN g.gpu_link_bytes_per_s * CASE WHEN c.group_size - 1 < g.gpu_links THEN c.group_size - 1
                                                       ELSE g.gpu_links END
                WHEN g.gpu_link_kind = 'infinity-fabric' THEN NULL
                ELSE g.gpu_link_bytes_per_s END AS link_bytes_per_s
    FROM collective_calls c
    LEFT JOIN devices d ON d.rank = c.rank AND d.device_id = c.device_id
    LEFT JOIN gpu_specs g ON g.spec_id = d.spec_id
),
grouped AS (
    SELECT rank, kind, message_bytes, workload, parallelism, count(*) AS calls, sum(dur_ns)::BIGINT AS total_ns,
           max(dur_ns) AS max_ns, string_agg(DISTINCT algorithm, ',' ORDER BY algorithm) AS algorithm,
           string_agg(DISTINCT protocol, ',' ORDER BY protocol) AS protocol,
           any_value(group_size) AS group_size, any_value(link) AS link, min(link_bytes_per_s) AS link_bytes_per_s,
           sum(exposed_ns)::BIGINT AS exposed_ns, bool_or(serial) AS serial
    FROM calls GROUP BY rank, kind, message_bytes, workload, parallelism
),
rated AS (
    SELECT *, total_ns / calls AS mean_ns,
           message_bytes * calls / (nullif(total_ns, 0) / 1e9)
               * CASE WHEN kind = 'all_reduce' THEN 2.0 * (group_size - 1) / group_size
                      WHEN kind IN ('all_gather', 'reduce_scatter', 'all_to_all') THEN 1.0 * (group_size - 1) / group_size
                      WHEN kind IN ('broadcast', 'reduce', 'send_recv') THEN 1.0 END AS measured_bus_bytes_per_s
    FROM grouped
)
SELECT * FROM rated;

-- table collective_summary: one row per (rank, kind, message size, workload, parallelism) of communication kernels; message_bytes NULL pools those of unknown size
--   rank: trace rank
--   kind: collective_calls.kind
--   message_bytes: collective_calls.message_bytes; NULL: sizes not recorded
--   workload: 'serving' (prefill, decode, mixed steps), 'train', or 'other' (other steps, outside steps)
--   calls: kernels
--   total_ns: Σ dur_ns
--   mean_ns: total_ns / calls
--   max_ns: the longest call
--   variability: max_ns / mean_ns (1.0: every call took as long)
--   algorithm: the NCCL/RCCL algorithm(s) from the names, ',' separated; NULL when no name says
--   protocol: the protocol(s) from the names; NULL when no name says
--   group_size: collective_calls.group_size
--   bus_bytes_per_s: NCCL's bus bandwidth: message_bytes x calls / total_ns scaled by 2(n-1)/n for all-reduce,
--     (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for broadcast, reduce and send/recv; NULL when the
--     size or group size is unknown, or the figure is above the link's peak (rejected, with a
--     `collective_bandwidth_rejected` diagnostic)
--   link: the GPU link it is measured against (gpu_specs.gpu_link; the host link where peers talk over PCIe)
--   link_bytes_per_s: the peak bus bandwidth one GPU can drive in this collective, per direction: the NVLink
--     (switch or bridge) figure; over Infinity Fabric (xGMI), one link per peer, so the per-link figure times
--     min(n-1, links); the host link's PCIe figure for `none`; NULL when the GPU or link is not known
--   pct_of_link: 100 x bus_bytes_per_s / link_bytes_per_s
--   parallelism: the parallelism these calls imply (tensor, data, expert, embedding, pipeline, as in `parallelism`); NULL
--     when the structure does not say (broadcasts, unknown kinds, all-reduces outside steps)
--   exposed_ns: Σ collective_calls.exposed_ns: time no compute kernel ran beside them
--   on_critical_path: serving: tensor-parallel (or unknown-kind) collectives are (collective_calls.serial);
--     otherwise: most of their time (over half) ran with no compute beside it
CREATE OR REPLACE TABLE collective_summary AS
WITH checked AS (
    SELECT *, group_size > 1 AND NOT coalesce(measured_bus_bytes_per_s > link_bytes_per_s, false) AS accepted
    FROM _collective_rates
)
SELECT rank, kind, message_bytes, workload, calls, total_ns, mean_ns::BIGINT AS mean_ns, max_ns,
       max_ns / nullif(mean_ns, 0) AS variability, algorithm, protocol, group_size,
       CASE WHEN accepted THEN measured_bus_bytes_per_s END AS bus_bytes_per_s, link, link_bytes_per_s,
       CASE WHEN accepted THEN 100.0 * measured_bus_bytes_per_s / link_bytes_per_s END AS pct_of_link,
       parallelism, exposed_ns,
       CASE WHEN workload = 'serving' THEN serial ELSE 2 * exposed_ns > total_ns END AS on_critical_path
FROM checked
ORDER BY rank, total_ns DESC, kind, message_bytes NULLS LAST;

INSERT INTO diagnostics
SELECT rank, 'analysis', 'warning', 'collective_bandwidth_rejected',
       printf('%d %s call%s of %d bytes over %d ranks: a bus bandwidth of %.1f GB/s is above the %s peak of %.1f GB/s, '
              || 'which no GPU can drive; the size or the group size is not what the trace says, so no bandwidth is '
              || 'reported', calls, kind, CASE WHEN calls = 1 THEN '' ELSE 's' END, message_bytes, group_size,
              measured_bus_bytes_per_s / 1e9, link, link_bytes_per_s / 1e9), NULL
FROM _collective_rates
WHERE measured_bus_bytes_per_s > link_bytes_per_s
ORDER BY rank, kind, message_bytes;

DROP TABLE _collective_rates;
