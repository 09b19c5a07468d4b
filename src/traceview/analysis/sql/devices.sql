-- stage: devices
-- Which GPU ran each kernel: every (rank, device_id) that kernels or memops use gets a `devices` row,
-- matched to a hardware/ spec where the trace says enough (or `--gpu`), else classed by its kernel names.
-- requires: devices, kernels, memops
-- creates: gpu_specs, gpu_peaks, architecture_specs
-- rewrites: devices
--
-- devices.py runs the sections in turn: `_devices` starts as the trace's own device rows (its view
-- `_trace_devices` of them leaves out the rows an earlier analysis added), gains a row for each used device
-- id the device list lacks and, with `--gpu`, for each used id at all; each row then gets the spec matched
-- in Python (hardware.match_gpu), else a class its kernel names prove; `publish` makes it `devices`.

-- section: start
-- adds to devices:
--   spec_id: matched hardware/ file id (`h100-sxm`, `a100-sxm4-40gb`, `mi300x`, ...); NULL when unmatched (a
--     `gpu_unknown` diagnostic says so and asks for `--gpu`)
--   spec_source: how the spec or class was found: `name` (device name), `properties` (compute capability, SM
--     count, memory), `override` (`--gpu`), `device_map` (a device id the device list lacks, mapped onto a
--     listed device), `kernel_names` (no spec: class inferred from kernel names)
--   architecture: the spec's architecture (`ampere`, `hopper`, `cdna3`, ...), or the inferred class (`sm80+`,
--     `sm90+`, `cdna3+`, ...)
--   tensor_cores: the GPU has tensor/matrix cores (a TF32/BF16/FP16 peak above its FP32 peak, or a class that
--     always has them); NULL when not known
--   maps_to_device_id: for a row added for a device id the device list lacks: the listed device whose
--     properties it copies
--   listed: the trace's own device list has this device; false for rows the analysis added (an unlisted id,
--     `--gpu` for a device the trace does not describe, a class inferred from kernel names)
CREATE OR REPLACE TEMP TABLE _devices AS
SELECT *, NULL::VARCHAR AS spec_id, NULL::VARCHAR AS spec_source, NULL::VARCHAR AS architecture,
       NULL::BOOLEAN AS tensor_cores, NULL::INTEGER AS maps_to_device_id, TRUE AS listed
FROM _trace_devices;

DROP VIEW _trace_devices;

-- every (rank, device_id) a kernel or memop uses
CREATE OR REPLACE TEMP VIEW _used_devices AS
SELECT DISTINCT rank, device_id FROM kernels WHERE device_id IS NOT NULL
UNION SELECT DISTINCT rank, device_id FROM memops WHERE device_id IS NOT NULL;

-- ----------------------------------------------------------------------------- device-id mapping

-- per rank with used ids the device list lacks: those ids, and the listed ids kernels or memops use
-- section: unlisted
SELECT u.rank, list(u.device_id ORDER BY u.device_id) FILTER (WHERE d.device_id IS NULL) AS unlisted,
       list(u.device_id ORDER BY u.device_id) FILTER (WHERE d.device_id IS NOT NULL) AS used_listed
FROM _used_devices u LEFT JOIN _devices d USING (rank, device_id)
GROUP BY u.rank
HAVING count(*) FILTER (WHERE d.device_id IS NULL) > 0;

-- section: listed
SELECT device_id, name, compute_major, compute_minor, sm_count, memory_bytes FROM _devices WHERE rank = $rank
ORDER BY device_id;

-- a row for each unlisted id, copying the listed device it maps to (`_device_map`: rank, device_id, maps_to)
-- section: map
INSERT INTO _devices BY NAME
SELECT d.* EXCLUDE (device_id, maps_to_device_id, listed), m.device_id, m.maps_to AS maps_to_device_id,
       FALSE AS listed
FROM _devices d JOIN _device_map m ON d.rank = m.rank AND d.device_id = m.maps_to;

-- --gpu: every used device gets a row, to carry the override
-- section: override
INSERT INTO _devices (rank, device_id, name, listed)
SELECT rank, device_id, '', FALSE FROM _used_devices u
WHERE NOT EXISTS (SELECT 1 FROM _devices d WHERE d.rank = u.rank AND d.device_id = u.device_id);

-- section: properties
SELECT rank, device_id, maps_to_device_id, name, compute_major, compute_minor, sm_count, memory_bytes
FROM _devices;

-- ----------------------------------------------------------------------------- specs

-- the specs matched (`_matches`: rank, device_id, spec_id, spec_source, architecture, tensor_cores)
-- section: matches
UPDATE _devices SET spec_id = m.spec_id, spec_source = m.spec_source, architecture = m.architecture,
       tensor_cores = m.tensor_cores
FROM _matches m
WHERE _devices.rank = m.rank AND _devices.device_id = m.device_id;

-- The spec tables: each parameter is a list of one column's values, a row a spec (or peak, or class and spec).
-- section: gpu_specs
-- table gpu_specs: one row per file in hardware/
--   spec_id: the file's id
--   name: marketing name
--   vendor: nvidia or amd
--   architecture: ampere, hopper, cdna3, ...
--   hbm_bytes_per_s: peak HBM bandwidth, bytes/s
--   memory_bytes: device memory
--   sm_count: SMs or CUs
--   l2_bytes: L2 size; NULL where hardware/ has no sourced number
--   l2_bytes_per_s: peak L2 bandwidth; NULL where hardware/ has no sourced number
--   host_link: link to host memory: `PCIe 5.0 x16`, `NVLink-C2C`; NULL where hardware/ has no sourced link
--   host_link_bytes_per_s: its peak per direction, bytes/s: PCIe raw signalling after line encoding (gen3 x16
--     15.75e9, gen4 x16 31.51e9, gen5 x16 63.02e9), no packet overhead taken off; NULL when the link is not
--     known
--   gpu_link: GPU-to-GPU link: `NVLink 4 x18`, `NVLink bridge 3 x4`, `Infinity Fabric x7`, `none` (peers over
--     PCIe); NULL where hardware/ has no sourced link
--   gpu_link_bytes_per_s: what one GPU can drive to one peer per direction, bytes/s (half the vendor's
--     bidirectional figure); NULL when not known or `none`
--   gpu_link_kind: the link's kind in hardware/: nvlink, nvlink-bridge, nvlink-c2c, infinity-fabric or none; NULL
--     where hardware/ has no sourced link
--   gpu_links: the number of links (NVLink links, Infinity Fabric links: one per peer of an xGMI mesh); NULL when
--     hardware/ does not state it
CREATE OR REPLACE TABLE gpu_specs AS
SELECT unnest($spec_id::VARCHAR[]) AS spec_id, unnest($name::VARCHAR[]) AS name,
       unnest($vendor::VARCHAR[]) AS vendor, unnest($architecture::VARCHAR[]) AS architecture,
       unnest($hbm_bytes_per_s::DOUBLE[]) AS hbm_bytes_per_s, unnest($memory_bytes::BIGINT[]) AS memory_bytes,
       unnest($sm_count::BIGINT[]) AS sm_count, unnest($l2_bytes::BIGINT[]) AS l2_bytes,
       unnest($l2_bytes_per_s::DOUBLE[]) AS l2_bytes_per_s, unnest($host_link::VARCHAR[]) AS host_link,
       unnest($host_link_bytes_per_s::DOUBLE[]) AS host_link_bytes_per_s,
       unnest($gpu_link::VARCHAR[]) AS gpu_link, unnest($gpu_link_bytes_per_s::DOUBLE[]) AS gpu_link_bytes_per_s,
       unnest($gpu_link_kind::VARCHAR[]) AS gpu_link_kind, unnest($gpu_links::INTEGER[]) AS gpu_links;

-- section: gpu_peaks
-- table gpu_peaks: one row per (spec, dtype) with a published dense peak
--   spec_id: `gpu_specs.spec_id`
--   dtype: fp64 ... fp4
--   peak_flops: dense peak, FLOP/s
CREATE OR REPLACE TABLE gpu_peaks AS
SELECT unnest($spec_id::VARCHAR[]) AS spec_id, unnest($dtype::VARCHAR[]) AS dtype,
       unnest($peak_flops::DOUBLE[]) AS peak_flops;

-- section: architecture_specs
-- table architecture_specs: one row per (inferred class, spec it can be)
--   architecture: an inferred class (`sm80+`, `cdna3+`, ...)
--   spec_id: a hardware/ spec of that class; rules that need a number without a spec take the least
--     favourable one (TV301: the smallest FP32 → TF32/BF16/FP16 speed-up)
CREATE OR REPLACE TABLE architecture_specs AS
SELECT unnest($architecture::VARCHAR[]) AS architecture, unnest($spec_id::VARCHAR[]) AS spec_id;

-- ----------------------------------------------------------------------------- kernel-name inference

-- Each used device without a spec, classed by the most advanced architecture its kernel names prove
-- (`_arch_classes`: architecture, vendor, class_level, tensor_cores; `_arch_patterns`: vendor, pattern,
-- capture, level), among the names of the vendor whose names cover the most kernel time.
-- section: infer
WITH unknown AS (
    SELECT DISTINCT k.rank, k.device_id FROM kernels k
    LEFT JOIN _devices d ON d.rank = k.rank AND d.device_id = k.device_id
    WHERE k.device_id IS NOT NULL AND d.spec_id IS NULL
),
names AS (
    SELECT k.rank, k.device_id, k.name, sum(k.dur_ns) AS time_ns
    FROM kernels k JOIN unknown u ON u.rank = k.rank AND u.device_id = k.device_id
    GROUP BY ALL
),
hits AS (
    SELECT n.rank, n.device_id, n.name, n.time_ns, p.vendor,
           CASE WHEN NOT p.capture THEN p.level
                WHEN p.vendor = 'amd' THEN ('0x' || regexp_extract(n.name, p.pattern, 1))::BIGINT
                ELSE regexp_extract(n.name, p.pattern, 1)::BIGINT END AS level
    FROM names n JOIN _arch_patterns p ON regexp_matches(n.name, p.pattern)
),
classed AS (
    SELECT h.*, c.architecture, c.class_level, c.tensor_cores
    FROM hits h ASOF JOIN _arch_classes c ON c.vendor = h.vendor AND h.level >= c.class_level
),
vendors AS (  -- the vendor whose names cover the most kernel time
    SELECT rank, device_id, arg_max(vendor, vendor_ns) AS vendor
    FROM (SELECT rank, device_id, vendor, sum(time_ns) AS vendor_ns
          FROM (SELECT DISTINCT rank, device_id, vendor, name, time_ns FROM classed) GROUP BY ALL)
    GROUP BY rank, device_id
)
SELECT c.rank, c.device_id,
       arg_max(struct_pack(a := c.architecture, t := c.tensor_cores, n := c.name),
               struct_pack(l := c.class_level, ns := c.time_ns)) AS pick
FROM classed c JOIN vendors v ON v.rank = c.rank AND v.device_id = c.device_id AND v.vendor = c.vendor
GROUP BY c.rank, c.device_id
ORDER BY c.rank, c.device_id;

-- section: has_row
SELECT count(*) FROM _devices WHERE rank = $rank AND device_id = $device_id;

-- section: add_row
INSERT INTO _devices (rank, device_id, name, listed) VALUES ($rank, $device_id, '', FALSE);

-- section: inferred
UPDATE _devices SET spec_source = 'kernel_names', architecture = $architecture, tensor_cores = $tensor_cores
WHERE rank = $rank AND device_id = $device_id;

-- ----------------------------------------------------------------------------- publish

-- used devices that have no spec, for the `gpu_unknown` diagnostics
-- section: unknown
SELECT DISTINCT k.rank, k.device_id, d.name FROM kernels k
LEFT JOIN _devices d ON d.rank = k.rank AND d.device_id = k.device_id
WHERE d.spec_id IS NULL;

-- the spec of the GPU that ran the most kernel time
-- section: busiest
SELECT d.spec_id FROM kernels k JOIN _devices d ON d.rank = k.rank AND d.device_id = k.device_id
WHERE d.spec_id IS NOT NULL GROUP BY d.spec_id ORDER BY sum(k.dur_ns) DESC LIMIT 1;

-- section: publish
CREATE OR REPLACE TABLE devices AS SELECT * FROM _devices;

DROP TABLE _devices;

DROP VIEW _used_devices;
