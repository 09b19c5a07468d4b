-- The traceview trace schema: the same tables and columns whatever the input format.
-- Every time is an integer nanosecond on the trace's own time base (see trace_info.time_base).
-- Every table carries `rank`, so a whole job (a directory of per-rank traces, or one nsys export of several
-- processes) is one database.
-- docs/schema.md is generated from the comments in this file; {formats} in one stands for the registered readers
-- (ingest.READERS). The tables readers stage (db.STAGING_TABLES) take their columns' types and meanings from here.

-- One row per rank: one per trace file, and in an nsys export one per process that ran GPU work.
CREATE TABLE trace_info (
    rank INTEGER,                -- rank in its job: the trace's own (Kineto distributedInfo, nsys MPI_RANKS), else numbered (nsys processes by lowest GPU ordinal, then pid; directory files by name or order); 0 for a single process
    source_format VARCHAR,       -- the name of the reader that read the file: {formats}
    producer VARCHAR,            -- tool that wrote the file: 'nsys', 'pytorch-profiler'
    producer_version VARCHAR,    -- nsys product version or Kineto schemaVersion; NULL when the file does not say
    schema_version VARCHAR,      -- nsys export schema version; NULL for Kineto
    file VARCHAR,                -- absolute path of the input file
    file_bytes BIGINT,           -- size of the input file in bytes
    world_size INTEGER,          -- ranks in the job as the trace reports it (nsys without MPI_RANKS: the processes that ran GPU work, when more than one); NULL when unknown
    time_base VARCHAR,           -- what the *_ns columns count from: 'unix_epoch', 'session' (nsys capture session) or 'profiler' (a clock of unknown epoch)
    time_origin_ns BIGINT,       -- Unix epoch ns of time 0 of the time base; NULL when unknown
    start_ns BIGINT,             -- earliest start over kernels, memops, api_calls and ranges
    end_ns BIGINT                -- latest end over kernels, memops, api_calls and ranges
);

-- One row per GPU the trace describes (a trace lists every visible GPU, used or not).
CREATE TABLE devices (
    rank INTEGER,                -- trace rank
    device_id INTEGER,           -- device ordinal as used by kernels.device_id
    name VARCHAR,                -- device name as the trace spells it; '' when the trace leaves it empty
    sm_count INTEGER,            -- streaming multiprocessors (NVIDIA) or compute units (AMD)
    memory_bytes BIGINT,         -- device memory capacity in bytes
    compute_major INTEGER,       -- compute capability major version
    compute_minor INTEGER,       -- compute capability minor version
    memory_bandwidth_bytes_per_s BIGINT, -- peak memory bandwidth the trace reports (nsys only), bytes per second
    clock_hz BIGINT,             -- SM clock the trace reports (nsys only), Hz
    l2_bytes BIGINT,             -- L2 cache size the trace reports (nsys only), bytes
    warp_size INTEGER            -- threads per warp (32 NVIDIA, 64 AMD CDNA)
);

-- One row per GPU kernel execution.
CREATE TABLE kernels (
    rank INTEGER,                -- trace rank
    kernel_id BIGINT,            -- row id, unique within a rank, in start order
    device_id INTEGER,           -- GPU ordinal (devices.device_id)
    stream_id BIGINT,            -- stream the kernel ran on
    pid BIGINT,                  -- process that launched it
    tid BIGINT,                  -- thread that launched it (from the launch call); NULL when no launch call matched
    start_ns BIGINT,             -- kernel start on the GPU
    end_ns BIGINT,               -- kernel end on the GPU
    dur_ns BIGINT,               -- end_ns - start_ns
    name VARCHAR,                -- full (demangled) kernel name
    short_name VARCHAR,          -- base name without template arguments, parameters or return type
    grid_x INTEGER,              -- grid size, x
    grid_y INTEGER,              -- grid size, y
    grid_z INTEGER,              -- grid size, z
    block_x INTEGER,             -- block size, x
    block_y INTEGER,             -- block size, y
    block_z INTEGER,             -- block size, z
    registers_per_thread INTEGER, -- registers per thread; NULL when not recorded (ROCm)
    shared_memory_bytes BIGINT,  -- static + dynamic shared memory per block, bytes; NULL when not recorded
    correlation_id BIGINT,       -- id linking the kernel to its launch call, unique per (rank, pid)
    launch_kind VARCHAR,         -- 'graph' (replayed from a CUDA/HIP graph) or 'eager'
    launch_api VARCHAR,          -- name of the launch call (api_calls.name); NULL when none matched
    launch_call_id BIGINT,       -- api_calls.call_id of the launch call (the first, if a correlation id repeats); NULL when none matched
    graph_id BIGINT,             -- CUDA graph id when recorded
    graph_node_id BIGINT,        -- CUDA graph node id when recorded
    external_id BIGINT           -- Kineto External id linking to the CPU op that launched it; NULL for nsys
);

-- One row per memory copy or memset on the GPU.
CREATE TABLE memops (
    rank INTEGER,                -- trace rank
    memop_id BIGINT,             -- row id, unique within a rank, in start order
    kind VARCHAR,                -- 'memcpy' or 'memset'
    copy_kind VARCHAR,           -- 'HtoD', 'DtoH', 'DtoD', 'HtoH', 'PtoP', ...; NULL for memset
    bytes BIGINT,                -- bytes copied or set; NULL when the trace does not say
    src_kind VARCHAR,            -- source memory kind: 'Pageable', 'Pinned', 'Device', 'Managed', ...
    dst_kind VARCHAR,            -- destination memory kind (for memset: the memory set)
    device_id INTEGER,           -- GPU ordinal
    stream_id BIGINT,            -- stream
    pid BIGINT,                  -- process that issued it
    start_ns BIGINT,             -- start on the GPU
    end_ns BIGINT,               -- end on the GPU
    dur_ns BIGINT,               -- end_ns - start_ns
    correlation_id BIGINT,       -- id linking it to its API call, unique per (rank, pid)
    name VARCHAR                 -- display name, e.g. 'Memcpy HtoD (Pinned -> Device)'
);

-- One row per CUDA/HIP runtime or driver API call on the host.
CREATE TABLE api_calls (
    rank INTEGER,                -- trace rank
    call_id BIGINT,              -- row id, unique within a rank, in start order
    pid BIGINT,                  -- calling process
    tid BIGINT,                  -- calling thread
    name VARCHAR,                -- API name without the nsys '_vNNNN' version suffix, e.g. 'cudaLaunchKernel'
    api VARCHAR,                 -- 'runtime' or 'driver'
    start_ns BIGINT,             -- call start on the host
    end_ns BIGINT,               -- call end on the host
    dur_ns BIGINT,               -- end_ns - start_ns
    correlation_id BIGINT,       -- id shared with the GPU work it launched, unique per (rank, pid)
    is_launch BOOLEAN,           -- launches GPU work (kernel or graph launch)
    is_sync BOOLEAN,             -- blocks the host until the GPU catches up (device/stream/event synchronize)
    external_id BIGINT           -- Kineto External id of the enclosing CPU op; NULL for nsys
);

-- One row per host-side range: NVTX ranges, PyTorch annotations, CPU ops, Python frames, profiler steps.
CREATE TABLE ranges (
    rank INTEGER,                -- trace rank
    range_id BIGINT,             -- row id, unique within a rank, in start order
    pid BIGINT,                  -- process
    tid BIGINT,                  -- thread the range started on
    name VARCHAR,                -- range text
    kind VARCHAR,                -- 'nvtx', 'user_annotation', 'gpu_user_annotation', 'cpu_op', 'python_function', 'profiler_step', 'nvtx_mark'
    domain VARCHAR,              -- NVTX domain name; NULL for the default domain and for Kineto ranges
    start_ns BIGINT,             -- range start
    end_ns BIGINT,               -- range end; equals start_ns for marks
    dur_ns BIGINT,               -- end_ns - start_ns
    depth INTEGER,               -- nesting depth among ranges of the same kind on the same (pid, tid), 0 = outermost
    external_id BIGINT,          -- Kineto External id (links cpu_op and user_annotation to the GPU work they launched)
    input_dims VARCHAR,          -- JSON list of input shapes (Kineto record_shapes; nsys emit_nvtx 'sizes = ...')
    input_types VARCHAR,         -- JSON list of input dtypes (Kineto record_shapes)
    input_values VARCHAR,        -- JSON list of scalar inputs (Kineto 'Concrete Inputs'); NULL when not recorded
    flops DOUBLE                 -- FLOPs the profiler recorded for the op; NULL when not recorded
);

-- What the capture itself (and the ingester) reported: missing tables, diagnostic events, dropped data.
CREATE TABLE diagnostics (
    rank INTEGER,                -- trace rank
    source VARCHAR,              -- 'capture' (written by the profiler), 'ingest' or 'analysis' (noticed by traceview)
    severity VARCHAR,            -- 'info', 'warning' or 'error'
    code VARCHAR,                -- stable short code, e.g. 'no_kernels', 'diagnostic_event', 'unmatched_kernels'
    message VARCHAR,             -- one human-readable line
    timestamp_ns BIGINT          -- when the capture reported it; NULL when not timed
);
