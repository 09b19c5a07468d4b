-- stage: engines
-- Per GPU, time in kernels, copies (by direction and memory kind) and memsets, the copy time with no kernel beside
-- it, achieved bytes/s against the host, peer or HBM link's peak from hardware/, and whether copies share a stream
-- with kernels; TV208 reads these.
-- requires: kernels, memops, devices, gpu_specs, device_activity
-- creates: device_engines, copy_directions, copy_kinds, copy_steps
--
-- Every union of intervals below is analysis/intervals.py's, invoked as its macros (busy_islands,
-- islands_with_time_before, busy_before; the loader expands each into the helper's text): per key, in
-- start_ns, end_ns order, `prev_end_ns` is the latest end of the intervals before; an interval starting past it
-- opens an island, which ends where the next opener's prev_end_ns says (the last at the key's latest end), and the
-- union's length is the sum of its islands. Copy-only time is the part of a copy island [lo, hi) that no kernel
-- covers: hi - lo - (K(hi) - K(lo)), K(t) being the device's kernel-busy time before t (`_kernel_before`).

-- Every memcpy with the facts the tables group by. The host side of HtoD is its source, of DtoH its
-- destination; a stream "runs kernels" when any kernel of the same process ran on it.
CREATE OR REPLACE TEMP TABLE _copies AS
SELECT m.rank, m.device_id, m.step_id, m.start_ns, m.end_ns, m.dur_ns, m.bytes, m.copy_kind AS direction,
       m.src_kind, m.dst_kind,
       CASE WHEN m.copy_kind LIKE 'Hto%' THEN m.src_kind WHEN m.copy_kind LIKE '%toH' THEN m.dst_kind END
           AS host_kind,
       s.stream_id IS NOT NULL AS on_compute_stream
FROM memops m
LEFT JOIN (SELECT DISTINCT rank, device_id, pid, stream_id FROM kernels) s
  ON s.rank = m.rank AND s.device_id = m.device_id AND s.pid IS NOT DISTINCT FROM m.pid
 AND s.stream_id IS NOT DISTINCT FROM m.stream_id
WHERE m.kind = 'memcpy';

-- The peak a direction's copies run against, per device; DtoD moves every byte twice through HBM.
CREATE OR REPLACE TEMP TABLE _copy_links AS
SELECT d.rank, d.device_id, t.direction,
       CASE WHEN t.direction IN ('HtoD', 'DtoH') THEN g.host_link
            WHEN t.direction = 'PtoP' AND g.gpu_link = 'none' THEN g.host_link || ' (peer over PCIe)'
            WHEN t.direction = 'PtoP' THEN g.gpu_link
            WHEN t.direction = 'DtoD' THEN 'HBM (read + write)' END AS link,
       CASE WHEN t.direction IN ('HtoD', 'DtoH') THEN g.host_link_bytes_per_s
            WHEN t.direction = 'PtoP' AND g.gpu_link = 'none' THEN g.host_link_bytes_per_s
            WHEN t.direction = 'PtoP' THEN g.gpu_link_bytes_per_s
            WHEN t.direction = 'DtoD' THEN g.hbm_bytes_per_s / 2 END AS link_bytes_per_s
FROM devices d
JOIN gpu_specs g ON g.spec_id = d.spec_id
CROSS JOIN (VALUES ('HtoD'), ('DtoH'), ('PtoP'), ('DtoD')) t(direction);

-- K(t), the device's kernel-busy time before t, at every copy start and end: every copy island, at any
-- grouping, starts at a copy's start and ends at a copy's end, so one ASOF join serves all of them. K(t) is the
-- busy time of the kernel islands before the last one starting at or before t, plus the part of that one before
-- t; 0 when no island starts before t (nothing ran: a true zero, not unknown).
CREATE OR REPLACE TEMP TABLE _kernel_before AS
WITH cover AS (
    islands_with_time_before!((SELECT rank, device_id, start_ns, end_ns FROM kernels
                               WHERE (rank, device_id) IN (SELECT rank, device_id FROM _copies)), (rank, device_id))
),
points AS (
    SELECT rank, device_id, start_ns AS t FROM _copies UNION SELECT rank, device_id, end_ns FROM _copies
)
SELECT p.rank, p.device_id, p.t, busy_before!(k, p.t) AS k
FROM points p ASOF LEFT JOIN cover k ON k.rank = p.rank AND k.device_id = p.device_id AND k.lo <= p.t;

-- table device_engines: one row per (rank, device_id) that ran any kernel or memop
--   rank: trace rank
--   device_id: GPU ordinal
--   span_ns: `device_activity.span_ns`: first start to last end of its kernels and memops
--   kernel_ns: `device_activity.kernel_busy_ns`: union of its kernel intervals (0: it ran no kernel)
--   copy_ns: union of its memcpy intervals, all directions (0: no memcpy)
--   memset_ns: union of its memset intervals (0: no memset)
--   idle_ns: `device_activity.idle_ns`: nothing ran on any stream
--   copy_only_ns: memcpy time with no kernel running on the device: the part of copy_ns that the kernel union does
--     not cover
--   copy_only_pct: 100 * copy_only_ns / span_ns
--   copies: memcpys
--   copy_bytes: Σ memcpy bytes; NULL when a copy's size is not recorded
--   compute_stream_copy_ns: Σ duration of memcpys on a stream that also runs kernels (serialised with them: stream
--     order forbids overlap)
--   side_stream_copy_ns: Σ duration of memcpys on streams that run no kernel (free to overlap compute)
--   spec_id: `devices.spec_id`
--   host_link: `gpu_specs.host_link`
--   host_link_bytes_per_s: `gpu_specs.host_link_bytes_per_s`
--   gpu_link: `gpu_specs.gpu_link`
--   gpu_link_bytes_per_s: `gpu_specs.gpu_link_bytes_per_s`
CREATE OR REPLACE TABLE device_engines AS
WITH counts AS (
    SELECT rank, device_id, count(*) AS copies,
           CASE WHEN count(bytes) = count(*) THEN sum(bytes) END::BIGINT AS copy_bytes,
           sum(dur_ns) FILTER (WHERE on_compute_stream)::BIGINT AS compute_stream_copy_ns,
           sum(dur_ns) FILTER (WHERE NOT on_compute_stream)::BIGINT AS side_stream_copy_ns
    FROM _copies GROUP BY rank, device_id
),
memsets AS (
    -- the union of the memsets per device
    SELECT rank, device_id, sum(hi - lo)::BIGINT AS busy_ns FROM (
        busy_islands!((SELECT rank, device_id, start_ns, end_ns FROM memops WHERE kind = 'memset'),
                      (rank, device_id))
    ) GROUP BY ALL
),
uncovered AS (
    -- the union of the copies per device, and the part of it no kernel covers
    SELECT c.rank, c.device_id, sum(c.hi - c.lo)::BIGINT AS busy_ns,
           sum(c.hi - c.lo - (h.k - l.k))::BIGINT AS copy_only_ns
    FROM (
        busy_islands!((SELECT rank, device_id, start_ns, end_ns FROM _copies), (rank, device_id))
    ) c
    JOIN _kernel_before h ON h.rank = c.rank AND h.device_id = c.device_id AND h.t = c.hi
    JOIN _kernel_before l ON l.rank = c.rank AND l.device_id = c.device_id AND l.t = c.lo
    GROUP BY c.rank, c.device_id
)
SELECT a.rank, a.device_id, a.span_ns,
       coalesce(a.kernel_busy_ns, 0) AS kernel_ns, coalesce(c.busy_ns, 0) AS copy_ns,
       coalesce(s.busy_ns, 0) AS memset_ns, a.idle_ns,
       coalesce(c.copy_only_ns, 0) AS copy_only_ns,
       100.0 * coalesce(c.copy_only_ns, 0) / nullif(a.span_ns, 0) AS copy_only_pct,
       coalesce(n.copies, 0) AS copies,
       CASE WHEN n.copies IS NULL THEN 0 ELSE n.copy_bytes END AS copy_bytes,
       coalesce(n.compute_stream_copy_ns, 0) AS compute_stream_copy_ns,
       coalesce(n.side_stream_copy_ns, 0) AS side_stream_copy_ns,
       d.spec_id, g.host_link, g.host_link_bytes_per_s, g.gpu_link, g.gpu_link_bytes_per_s
FROM device_activity a
LEFT JOIN memsets s ON s.rank = a.rank AND s.device_id = a.device_id
LEFT JOIN uncovered c ON c.rank = a.rank AND c.device_id = a.device_id
LEFT JOIN counts n ON n.rank = a.rank AND n.device_id = a.device_id
LEFT JOIN devices d ON d.rank = a.rank AND d.device_id = a.device_id
LEFT JOIN gpu_specs g ON g.spec_id = d.spec_id
ORDER BY a.rank, a.device_id;

-- table copy_directions: one row per (rank, device_id, direction) with memcpys
--   rank: trace rank
--   device_id: GPU ordinal
--   direction: `memops.copy_kind`: HtoD, DtoH, DtoD, PtoP, HtoH, ...
--   copies: memcpys
--   bytes: Σ bytes; NULL when a copy's size is not recorded
--   dur_ns: Σ durations
--   busy_ns: union of the direction's copy intervals
--   copy_only_ns: the part of busy_ns with no kernel running on the device
--   compute_stream_copies: copies on a stream that also runs kernels
--   compute_stream_ns: Σ their durations
--   pinned_copies: copies whose host side is pinned (page-locked) memory
--   pageable_copies: copies whose host side is pageable memory (staged by the driver)
--   host_kinds: the host-side memory kinds, comma-separated (`Pageable`, `Pinned`, `Managed`, ...); NULL for
--     device-to-device directions
--   pinned_bytes: Σ bytes of the pinned copies; NULL when the direction has no host side, or a copy's host memory
--     kind or size is not recorded
--   pageable_bytes: Σ bytes of the pageable copies; NULL as pinned_bytes
--   pinned_pct: 100 * pinned_bytes / bytes: the share of the bytes the copy engines DMA straight from page-locked
--     memory (Managed and other kinds count as not pinned); NULL as pinned_bytes, or when no byte moved
--   achieved_bytes_per_s: bytes / busy_ns: what the copies moved per second of wall time; NULL when a copy's size
--     is not recorded
--   pct_of_link: 100 * achieved_bytes_per_s / link_bytes_per_s; NULL when either is not known
--   link: the link the direction's bytes cross: the host link (`PCIe 5.0 x16`, `NVLink-C2C`) for HtoD and DtoH, the
--     GPU link for PtoP (the host link, marked `(peer over PCIe)`, when the GPU has none), `HBM (read + write)` for
--     DtoD; NULL when not known (no spec, no sourced link, HtoH)
--   link_bytes_per_s: its peak per direction, bytes/s (`gpu_specs.host_link_bytes_per_s`, `gpu_link_bytes_per_s`;
--     DtoD: half the HBM bandwidth, since a copy reads and writes every byte); NULL when not known
--   link_source: where the peak comes from: `hardware/<spec_id>.toml`; NULL when there is no peak
CREATE OR REPLACE TABLE copy_directions AS
WITH counts AS (
    SELECT rank, device_id, direction, count(*) AS copies,
           CASE WHEN count(bytes) = count(*) THEN sum(bytes) END::BIGINT AS bytes,
           sum(dur_ns)::BIGINT AS dur_ns,
           count(*) FILTER (WHERE on_compute_stream) AS compute_stream_copies,
           coalesce(sum(dur_ns) FILTER (WHERE on_compute_stream), 0)::BIGINT AS compute_stream_ns,
           count(*) FILTER (WHERE host_kind = 'Pinned') AS pinned_copies,
           count(*) FILTER (WHERE host_kind = 'Pageable') AS pageable_copies,
           string_agg(DISTINCT host_kind, ', ' ORDER BY host_kind) AS host_kinds,
           -- by bytes, only where every copy's host kind and size are known (a host direction)
           CASE WHEN count(host_kind) = count(*) AND count(bytes) = count(*)
                THEN coalesce(sum(bytes) FILTER (WHERE host_kind = 'Pinned'), 0) END::BIGINT AS pinned_bytes,
           CASE WHEN count(host_kind) = count(*) AND count(bytes) = count(*)
                THEN coalesce(sum(bytes) FILTER (WHERE host_kind = 'Pageable'), 0) END::BIGINT AS pageable_bytes
    FROM _copies GROUP BY ALL
),
uncovered AS (
    SELECT c.rank, c.device_id, c.direction, sum(c.hi - c.lo)::BIGINT AS busy_ns,
           sum(c.hi - c.lo - (h.k - l.k))::BIGINT AS copy_only_ns
    FROM (
        busy_islands!((SELECT rank, device_id, direction, start_ns, end_ns FROM _copies),
                      (rank, device_id, direction))
    ) c
    JOIN _kernel_before h ON h.rank = c.rank AND h.device_id = c.device_id AND h.t = c.hi
    JOIN _kernel_before l ON l.rank = c.rank AND l.device_id = c.device_id AND l.t = c.lo
    GROUP BY c.rank, c.device_id, c.direction
),
joined AS (
    SELECT n.*, u.busy_ns, u.copy_only_ns
    FROM counts n
    JOIN uncovered u ON u.rank IS NOT DISTINCT FROM n.rank AND u.device_id IS NOT DISTINCT FROM n.device_id
                    AND u.direction IS NOT DISTINCT FROM n.direction
)
SELECT j.rank, j.device_id, j.direction, j.copies, j.bytes, j.dur_ns, j.busy_ns, j.copy_only_ns,
       j.compute_stream_copies, j.compute_stream_ns, j.pinned_copies, j.pageable_copies, j.host_kinds,
       j.pinned_bytes, j.pageable_bytes, 100.0 * j.pinned_bytes / nullif(j.bytes, 0) AS pinned_pct,
       j.bytes * 1e9 / nullif(j.busy_ns, 0) AS achieved_bytes_per_s,
       100.0 * j.bytes * 1e9 / nullif(j.busy_ns, 0) / l.link_bytes_per_s AS pct_of_link,
       l.link, l.link_bytes_per_s,
       CASE WHEN l.link_bytes_per_s IS NOT NULL THEN 'hardware/' || d.spec_id || '.toml' END AS link_source
FROM joined j
LEFT JOIN devices d ON d.rank = j.rank AND d.device_id = j.device_id
LEFT JOIN _copy_links l ON l.rank = j.rank AND l.device_id = j.device_id AND l.direction = j.direction
ORDER BY j.rank, j.device_id, j.busy_ns DESC, j.direction;

-- table copy_kinds: one row per (rank, device_id, direction, src_kind, dst_kind) with memcpys
--   rank: trace rank
--   device_id: GPU ordinal
--   direction: `memops.copy_kind`
--   src_kind: `memops.src_kind`: Pageable, Pinned, Device, Managed, ...
--   dst_kind: `memops.dst_kind`
--   copies: memcpys
--   bytes: Σ bytes; NULL when a copy's size is not recorded
--   dur_ns: Σ durations
--   busy_ns: union of their intervals
--   copy_only_ns: the part of busy_ns with no kernel running on the device
--   compute_stream_copies: copies on a stream that also runs kernels
--   *: the columns of copy_directions from achieved_bytes_per_s on
CREATE OR REPLACE TABLE copy_kinds AS
WITH counts AS (
    SELECT rank, device_id, direction, src_kind, dst_kind, count(*) AS copies,
           CASE WHEN count(bytes) = count(*) THEN sum(bytes) END::BIGINT AS bytes,
           sum(dur_ns)::BIGINT AS dur_ns,
           count(*) FILTER (WHERE on_compute_stream) AS compute_stream_copies
    FROM _copies GROUP BY ALL
),
uncovered AS (
    SELECT c.rank, c.device_id, c.direction, c.src_kind, c.dst_kind, sum(c.hi - c.lo)::BIGINT AS busy_ns,
           sum(c.hi - c.lo - (h.k - l.k))::BIGINT AS copy_only_ns
    FROM (
        busy_islands!((SELECT rank, device_id, direction, src_kind, dst_kind, start_ns, end_ns FROM _copies),
                      (rank, device_id, direction, src_kind, dst_kind))
    ) c
    JOIN _kernel_before h ON h.rank = c.rank AND h.device_id = c.device_id AND h.t = c.hi
    JOIN _kernel_before l ON l.rank = c.rank AND l.device_id = c.device_id AND l.t = c.lo
    GROUP BY c.rank, c.device_id, c.direction, c.src_kind, c.dst_kind
),
joined AS (
    SELECT n.*, u.busy_ns, u.copy_only_ns
    FROM counts n
    JOIN uncovered u ON u.rank IS NOT DISTINCT FROM n.rank AND u.device_id IS NOT DISTINCT FROM n.device_id
                    AND u.direction IS NOT DISTINCT FROM n.direction AND u.src_kind IS NOT DISTINCT FROM n.src_kind
                    AND u.dst_kind IS NOT DISTINCT FROM n.dst_kind
)
SELECT j.rank, j.device_id, j.direction, j.src_kind, j.dst_kind, j.copies, j.bytes, j.dur_ns, j.busy_ns,
       j.copy_only_ns, j.compute_stream_copies,
       j.bytes * 1e9 / nullif(j.busy_ns, 0) AS achieved_bytes_per_s,
       100.0 * j.bytes * 1e9 / nullif(j.busy_ns, 0) / l.link_bytes_per_s AS pct_of_link,
       l.link, l.link_bytes_per_s,
       CASE WHEN l.link_bytes_per_s IS NOT NULL THEN 'hardware/' || d.spec_id || '.toml' END AS link_source
FROM joined j
LEFT JOIN devices d ON d.rank = j.rank AND d.device_id = j.device_id
LEFT JOIN _copy_links l ON l.rank = j.rank AND l.device_id = j.device_id AND l.direction = j.direction
ORDER BY j.rank, j.device_id, j.busy_ns DESC, j.direction, j.src_kind, j.dst_kind;

-- table copy_steps: one row per (rank, device_id, step) whose launches issued memcpys (step_id NULL: issued outside every step)
--   rank: trace rank
--   device_id: GPU ordinal
--   step_id: `memops.step_id`: the step whose launch call issued the copies
--   kernel_ns: union of the kernels the step launched on the device (the compute copies could hide under)
--   copy_ns: union of the step's memcpys
--   copy_only_ns: the part of copy_ns with no kernel (of any step) running on the device
--   bytes: Σ bytes; NULL when a copy's size is not recorded
--   copy_at_link_ns: copy_ns if every direction ran at its link's peak: copy_ns scaled by Σ over directions of
--     min(busy, bytes / peak) over Σ busy; a direction whose bytes or peak is unknown, or that already beats the
--     peak, keeps its busy time
--   overlap_ns: the tier `overlap`, what running the copies beside the step's own kernels could hide: with them
--     overlapped only max(0, copy_ns - kernel_ns) stays exposed, so copy_only_ns less that, 0 where the copies
--     already run under other steps' kernels that much; never above copy_only_ns nor kernel_ns
--   link_peak_ns: the tier `link_peak`, what copies at the link's peak would win with nothing else changed:
--     copy_ns - copy_at_link_ns, at most copy_only_ns (time under kernels shortens nothing); 0 at or past the peak
--   move_less_ns: the tier `move_less`, the bound of moving less data: the whole copy_only_ns (no copy, no wait)
CREATE OR REPLACE TABLE copy_steps AS
WITH by_direction AS (
    -- the union of the copies per step and direction
    SELECT rank, device_id, step_id, direction, sum(hi - lo)::BIGINT AS busy_ns FROM (
        busy_islands!((SELECT rank, device_id, step_id, direction, start_ns, end_ns FROM _copies),
                      (rank, device_id, step_id, direction))
    ) GROUP BY ALL
),
directions AS (
    SELECT b.rank, b.device_id, b.step_id, b.direction, b.busy_ns, n.bytes,
           -- at the link's peak, unless its bytes or peak are unknown or it already runs faster
           CASE WHEN n.bytes IS NULL OR l.link_bytes_per_s IS NULL
                     OR n.bytes * 1e9 / l.link_bytes_per_s >= b.busy_ns THEN b.busy_ns
                ELSE n.bytes * 1e9 / l.link_bytes_per_s END AS at_link_ns
    FROM by_direction b
    JOIN (SELECT rank, device_id, step_id, direction,
                 CASE WHEN count(bytes) = count(*) THEN sum(bytes) END AS bytes
          FROM _copies GROUP BY ALL) n
      ON n.rank IS NOT DISTINCT FROM b.rank AND n.device_id IS NOT DISTINCT FROM b.device_id
     AND n.step_id IS NOT DISTINCT FROM b.step_id AND n.direction IS NOT DISTINCT FROM b.direction
    LEFT JOIN _copy_links l ON l.rank = b.rank AND l.device_id = b.device_id AND l.direction = b.direction
),
speedup AS (
    SELECT rank, device_id, step_id,
           CASE WHEN sum(busy_ns) = 0 THEN 1.0 ELSE sum(at_link_ns) / sum(busy_ns) END AS at_link_share,
           CASE WHEN count(bytes) = count(*) THEN sum(bytes) END::BIGINT AS bytes
    FROM directions GROUP BY ALL
),
uncovered AS (
    -- the union of the step's copies per device, and the part of it no kernel of any step covers
    SELECT c.rank, c.device_id, c.step_id, sum(c.hi - c.lo)::BIGINT AS busy_ns,
           sum(c.hi - c.lo - (h.k - l.k))::BIGINT AS copy_only_ns
    FROM (
        busy_islands!((SELECT rank, device_id, step_id, start_ns, end_ns FROM _copies), (rank, device_id, step_id))
    ) c
    JOIN _kernel_before h ON h.rank = c.rank AND h.device_id = c.device_id AND h.t = c.hi
    JOIN _kernel_before l ON l.rank = c.rank AND l.device_id = c.device_id AND l.t = c.lo
    GROUP BY c.rank, c.device_id, c.step_id
),
step_kernels AS (
    -- the union of the kernels each step launched, on the devices that copy
    SELECT rank, device_id, step_id, sum(hi - lo)::BIGINT AS busy_ns FROM (
        busy_islands!((SELECT rank, device_id, step_id, start_ns, end_ns FROM kernels
                       WHERE (rank, device_id) IN (SELECT rank, device_id FROM _copies)),
                      (rank, device_id, step_id))
    ) GROUP BY ALL
),
steps AS (
    SELECT c.rank, c.device_id, c.step_id, coalesce(k.busy_ns, 0) AS kernel_ns, c.busy_ns AS copy_ns,
           c.copy_only_ns, s.bytes, round(c.busy_ns * s.at_link_share)::BIGINT AS copy_at_link_ns
    FROM uncovered c
    JOIN speedup s ON s.rank IS NOT DISTINCT FROM c.rank AND s.device_id IS NOT DISTINCT FROM c.device_id
                  AND s.step_id IS NOT DISTINCT FROM c.step_id
    LEFT JOIN step_kernels k ON k.rank IS NOT DISTINCT FROM c.rank AND k.device_id IS NOT DISTINCT FROM c.device_id
                            AND k.step_id IS NOT DISTINCT FROM c.step_id
),
exposed AS (
    -- the copy time overlap would leave exposed: what the step's kernels cannot cover
    SELECT *, CASE WHEN copy_ns > kernel_ns THEN copy_ns - kernel_ns ELSE 0 END AS exposed_overlapped_ns,
           copy_ns - copy_at_link_ns AS above_link_ns
    FROM steps
)
SELECT rank, device_id, step_id, kernel_ns, copy_ns, copy_only_ns, bytes, copy_at_link_ns,
       (CASE WHEN copy_only_ns > exposed_overlapped_ns THEN copy_only_ns - exposed_overlapped_ns ELSE 0 END)::BIGINT
           AS overlap_ns,
       (CASE WHEN above_link_ns < copy_only_ns THEN above_link_ns ELSE copy_only_ns END)::BIGINT AS link_peak_ns,
       copy_only_ns AS move_less_ns
FROM exposed
ORDER BY rank, device_id, step_id NULLS LAST;

DROP TABLE _copies;
DROP TABLE _copy_links;
DROP TABLE _kernel_before;
