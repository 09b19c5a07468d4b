"""docs/schema.md, generated from the comments in schema.sql so the reference cannot drift.

Run `python -m traceview.model.docs > docs/schema.md`; a test fails when the file is stale.
"""

from __future__ import annotations

import re

from traceview.model.db import schema_sql

TABLE = re.compile(r"^CREATE TABLE (\w+) \($")
COLUMN = re.compile(r"^\s+(\w+) (\w+(?:\(\d+(?:,\d+)?\))?),?\s*--\s*(.+)$")

PREAMBLE = """# The traceview schema

Every input format (Nsight Systems SQLite, PyTorch profiler JSON) lands in these tables with the same
names and columns; `traceview query TRACE "SQL"` and `traceview.load(path).sql("SQL")` run SQL over them.
Times are integer nanoseconds on one time base per trace (`trace_info.time_base`): durations are exact,
never rounded to microseconds. Every table has `rank`, so a directory of per-rank traces is one database.

How each source maps in:

| table | Nsight Systems export | PyTorch profiler (Kineto) |
|---|---|---|
| trace_info | META_DATA_EXPORT / EXPORT_META_DATA, TARGET_INFO_SESSION_START_TIME | schemaVersion, distributedInfo, baseTimeNanoseconds |
| devices | TARGET_INFO_GPU | deviceProperties |
| kernels | CUPTI_ACTIVITY_KIND_KERNEL + StringIds, launch call on (pid, correlationId) | `kernel` events (legacy `Kernel`), launch call on `correlation` |
| memops | CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET | `gpu_memcpy`, `gpu_memset` (legacy `Memcpy`, `Memset`) |
| api_calls | CUPTI_ACTIVITY_KIND_RUNTIME (runtime and driver) | `cuda_runtime`, `cuda_driver` (legacy `Runtime`) |
| ranges | NVTX_EVENTS (push/pop, start/end, marks; domains from registration rows) | `cpu_op` (legacy `Operator`), `user_annotation`, `gpu_user_annotation`, `python_function`, `ProfilerStep#N` |
| diagnostics | DIAGNOSTIC_EVENT rows, missing tables | missing kernel events, range-profiler mode, negative durations |

`launch_kind` is `graph` when the launch call is a graph launch (`cudaGraphLaunch`, `cuGraphLaunch`,
`hipGraphLaunch`), or the kernel carries a graph node id, or ROCm marks it `Dispatch Task`. A kernel's
`pid` is the process that launched it; in a Kineto file that is the launching call's pid, not the GPU row.
"""


def render() -> str:
    lines = [PREAMBLE]
    description: list[str] = []
    for raw in schema_sql().splitlines():
        if match := TABLE.match(raw):
            lines += [f"## `{match.group(1)}`", "", " ".join(description), "", "| column | type | meaning |", "|---|---|---|"]
            description = []
        elif match := COLUMN.match(raw):
            name, sql_type, meaning = match.groups()
            lines.append(f"| `{name}` | {sql_type} | {meaning.replace('|', '/')} |")
        elif raw.startswith(");"):
            lines.append("")
        elif raw.startswith("-- "):
            description.append(raw[3:])
        elif not raw.strip():
            description = []
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
