"""DuckDB's memory limit when the user sets none: sized from the input and the machine.

DuckDB's own default, 80% of physical memory, lets a process grow far past what a trace needs: a 434 MB
Kineto file held 280 MB of tables yet peaked at 1.3 GB, because DuckDB keeps what it allocated while it
may. A limit near the working set costs almost nothing (work past it spills to the connection's
temp_directory) and keeps the peak near the data; it also makes an input larger than memory complete,
spilling, instead of being killed. The working set is estimated twice: from the input's bytes while a
reader parses it, then from the rows it produced for the analysis, whose tables grow with kernels far
more than with host ranges. `--memory-limit` (or $TRACEVIEW_MEMORY_LIMIT) replaces both.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

MIB = 1 << 20
FLOOR_BYTES = 512 * MIB  # below this DuckDB spills on the smallest traces for nothing
MACHINE_SHARE = 0.8  # never more than DuckDB's own default ceiling
# what the process holds outside DuckDB's accounting (the interpreter, the readers' buffers, the report being
# written), measured as peak RSS less the limit: about 175 MB on the 10x vLLM trace, 300 MB on the 2 M-kernel
# export. A small machine keeps a share of itself outside DuckDB besides (`outside_duckdb`)
OUTSIDE_DUCKDB_BYTES = 256 * MIB
# In a memory cgroup the page cache of the input and of the spill files is charged to the process too, and
# under a tight limit DuckDB 2.0.1 stops some statements with "failed to pin block" at one limit and not at
# the next: in a 1 GiB cgroup the 2 M export was killed while parsing at 768 MiB (the cgroup less 256 MiB),
# stopped at 512 MiB (finishing the kernels), completed at 600 MiB in 39 s (924 MB peak RSS, near the kill)
# and completes at 409.6 MiB in 42 s (735 MB). So a machine of a few GB keeps 60% of itself outside DuckDB,
# up to 2 GiB.
SMALL_MACHINE_OUTSIDE_SHARE = 0.6
OUTSIDE_CAP_BYTES = 2 << 30
SMALLEST_BYTES = 64 * MIB  # a limit DuckDB can still sort and spill in
# working set while parsing, per byte of input: Kineto JSON (uncompressed) is parsed in parts and becomes
# smaller tables (on the 10x vLLM trace 1.8 costs 5% of the time unlimited memory takes, at 69% of its peak;
# 1.25 cost 16%); an nsys export is read as integer CSV by child processes; a saved database is compressed
PARSE_FACTOR = {".json": 1.8, ".sqlite": 4.0, ".duckdb": 40.0}
# working set of the analysis, per row: every kernel gets a row in a dozen per-kernel relations
# (activity, gaps, steps, costs, queue depth), a host range or API call in a few. Measured on the 2 M-kernel
# export: 1,536 bytes a kernel (3.4 GB) costs 5% of the time unlimited memory takes (4.7 GB peak), 1,024 (2.5 GB) 12%
KERNEL_ROW_BYTES = 1536
HOST_ROW_BYTES = 200
# and at least this many times the bytes of the tables it starts from, measured once they are loaded: it holds
# them and builds relations and sorts of about their size beside them, and wide rows (Kineto's input shapes) hold
# more than the per-row estimate. The 10x vLLM trace's tables take 300 MB: under the per-row estimate's 512 MiB its
# analysis spilled 45 MB and took 2.95 s (5.43 CPU s), under 2.5 times its tables (715 MiB) 12 MB in 2.63 s (4.82 CPU
# s), medians of 2 in turns; its report's peak RSS rose from 860 to 880-930 MB
TABLE_FACTOR = 2.5


def cores() -> int:
    """The cores this process may run on (a container's CPU set, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def physical_memory() -> int:
    """The machine's memory, or the limit of the process's memory cgroup (v2 `memory.max`, v1
    `memory.limit_in_bytes`) where that is smaller: a container's or a CI job's memory is its cgroup's."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min([total, *_cgroup_limits()])


def _cgroup_limits() -> list[int]:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates = [Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max"]
        elif "memory" in controllers.split(","):
            candidates = [Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.limit_in_bytes"]
        else:
            continue
        for candidate in candidates:
            try:
                text = candidate.read_text().strip()
            except OSError:
                continue
            if text.isdigit():
                limits.append(int(text))
    return limits


def input_bytes(source: Path) -> tuple[int, str]:
    """The bytes a reader will parse and the kind that sets its factor: a gzip member's uncompressed size
    (its trailer, modulo 4 GiB, so never below the compressed size), the files of a rank directory summed."""
    files = sorted(p for p in source.iterdir() if p.is_file()) if source.is_dir() else [source]
    total, kind = 0, ".json"
    for file in files:
        size = file.stat().st_size
        if file.name.endswith(".gz") and size >= 4:
            with file.open("rb") as f:
                f.seek(-4, os.SEEK_END)
                size = max(size, int.from_bytes(f.read(4), "little"))
        total += size
        kind = next((suffix for suffix in PARSE_FACTOR if file.name.endswith(suffix)), kind)
    return total, kind


def limit_bytes(working_set: float, machine: int | None = None) -> int:
    """The limit for an estimated working set: at least FLOOR_BYTES, at most DuckDB's own default and what the
    machine leaves once the process's memory outside DuckDB is counted (a small container spills, not dies)."""
    machine = physical_memory() if machine is None else machine
    ceiling = max(SMALLEST_BYTES, min(int(MACHINE_SHARE * machine), machine - outside_duckdb(machine)))
    return max(min(int(working_set), ceiling), min(FLOOR_BYTES, ceiling))


def outside_duckdb(machine: int) -> int:
    """What a machine keeps outside DuckDB's limit: at least the process's own share (OUTSIDE_DUCKDB_BYTES),
    and on a machine of a few GB 60% of it (SMALL_MACHINE_OUTSIDE_SHARE); past 10 GB, 80% of the machine
    for DuckDB is the tighter bound."""
    return max(OUTSIDE_DUCKDB_BYTES, min(int(SMALL_MACHINE_OUTSIDE_SHARE * machine), OUTSIDE_CAP_BYTES))


def parse_limit(source: Path, machine: int | None = None) -> int:
    size, kind = input_bytes(source)
    return limit_bytes(size * PARSE_FACTOR[kind], machine)


def analysis_working_set(kernels: int, host_rows: int) -> int:
    """What the analysis is estimated to hold: kernels and memops, API calls and host ranges."""
    return kernels * KERNEL_ROW_BYTES + host_rows * HOST_ROW_BYTES


def below_working_set(limit: int, kernels: int, host_rows: int) -> bool:
    """Whether DuckDB's limit is below what the analysis is estimated to hold (a small container's limit, or
    the user's). A limit within a tenth of the estimate counts as sized for it: traceview sets limits in whole
    MiB, and DuckDB reports its limit rounded to one decimal of its unit (3,338 MiB reads as 3.2 GiB)."""
    return limit < 0.9 * analysis_working_set(kernels, host_rows)


def analysis_limit(kernels: int, host_rows: int, machine: int | None = None, *, table_bytes: int = 0) -> int:
    """The limit once the rows are known: the per-row estimate, or TABLE_FACTOR times the loaded tables' bytes."""
    return limit_bytes(max(analysis_working_set(kernels, host_rows), TABLE_FACTOR * table_bytes), machine)


# a size as DuckDB's memory settings spell it: `8GB` is 10⁹ bytes a unit, `512MiB` 2²⁰
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def setting_bytes(text: str) -> int:
    """Bytes of a size that SIZE matches."""
    number, unit = SIZE.match(text).groups()
    return int(float(number) * _UNITS[unit.lower()])


def as_setting(limit: int) -> str:
    return f"{max(1, limit // MIB)}MiB"


_processes = 1  # traceview processes sharing the machine (audit's workers): each keeps a pool only in its share


def share_machine(processes: int) -> None:
    """This process is one of `processes` running side by side (an audit worker's initializer)."""
    global _processes
    _processes = max(1, processes)


def hold_blocks(con, limit: int, machine: int | None = None) -> None:
    """Let DuckDB keep up to `limit` of freed buffer blocks for reuse instead of returning them to the system.

    Each sort, hash table and table copy otherwise maps fresh pages and faults them in one 4 KiB page at a
    time: on the 2 M-kernel export 3.3 M page faults, 7.8 s of system time in a 17 s report (1.4 s of wall
    time saved with the blocks held). The pool is as large as the memory limit, and only where the machine
    has room for the limit twice over: DuckDB's limit counts the blocks in use, not the free ones the pool
    holds, so at worst the process holds both (in a 1 GB container the 2 M export was killed with the pool
    and completes without it); audit's workers count their share of the machine (`share_machine`). Small traces
    keep none (nothing to gain under the floor). The database gives the blocks back when it closes; DuckDB
    refuses to shrink the pool, so it only grows.
    """
    machine = (physical_memory() if machine is None else machine) // _processes
    held = con.execute("SELECT coalesce(getvariable('traceview_block_bytes'), 0)").fetchone()[0]
    if limit > max(held, FLOOR_BYTES) and 2 * limit + OUTSIDE_DUCKDB_BYTES <= machine:
        con.execute(f"SET block_allocator_memory = '{as_setting(limit)}'")
        con.execute(f"SET VARIABLE traceview_block_bytes = {limit}")


def sized(con) -> None:
    """Mark the connection's limit as traceview's estimate (not the user's), so a reader may widen it."""
    con.execute("SET VARIABLE traceview_memory_sized = true")


def widen_for_parse(con) -> None:
    """A reader meeting an input the estimate cannot foresee (one event of hundreds of MB, whose parse
    needs far more than the file's size) takes up to the machine's ceiling while it parses, unless the user
    set the limit; the analysis limit is set again once the rows are known."""
    if con.execute("SELECT getvariable('traceview_memory_sized')").fetchone()[0]:
        machine = physical_memory()
        con.execute(f"SET memory_limit = '{as_setting(limit_bytes(machine, machine))}'")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether DuckDB stopped because a statement needed more than its memory limit (duckdb.OutOfMemoryException,
    named so that this module imports no DuckDB)."""
    return type(exc).__name__ == "OutOfMemoryException"


def out_of_memory_message(exc: BaseException) -> str:
    """What a user reads when DuckDB runs out of memory: the limit, not the input, is at fault (a reader would
    otherwise call the trace damaged), with DuckDB's own figures and what to do."""
    detail = re.search(r"\(([^()]*/[^()]*used)\)", str(exc))
    used = f" ({detail.group(1)})" if detail else ""
    return (f"out of memory: a step needed more than DuckDB's memory limit{used}; rerun with a larger "
            "--memory-limit (or $TRACEVIEW_MEMORY_LIMIT), or on a machine with more memory")
