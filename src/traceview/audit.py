"""Audit many traces at once, for CI: discover traces, run ingest + analysis + rules on each in
worker processes (or on the workers of a Dask cluster), and collect one plain, JSON-ready row per
trace (sorted, so output is identical from run to run). One bad trace is one error row, never the
end of the run.

A directory whose trace files all name distinct ranks (`rank3`, `worker_5`, ...) is one multi-rank
job: it gets per-rank rows and a straggler view.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import statistics
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from traceview import memory, profiling
from traceview.errors import TraceviewError
from traceview.model.db import dict_rows
from traceview.rules.loader import SEVERITIES

AUDIT_VERSION = 1
CONNECT_TIMEOUT_S = 10
WORKER_WAIT_S = 120
DASK_MISSING = "audit --scheduler needs the dask extra: pip install 'traceview[dask]'"


@dataclass(frozen=True)
class Target:
    """One unit of work: a trace file, or a directory holding the ranks of one job."""

    path: str
    kind: str  # "file" | "job"


@dataclass(frozen=True)
class AuditOptions:
    """Everything a worker needs, picklable: the check (analysis, rules, configuration, baseline), report settings."""

    check: Any  # workflow.CheckOptions
    reports_dir: str | None = None
    report_formats: tuple[str, ...] = ("html", "md", "json")
    cache_dir: str | None = None  # None: $TRACEVIEW_CACHE_DIR, as api.load reads it
    memory_limit: str | None = None  # None: $TRACEVIEW_MEMORY_LIMIT
    profile: bool = False  # each row carries its worker's `--profile` entries under "profile"
    extra: dict = field(default_factory=dict)


def _is_job_dir(directory: Path, files: list[Path]) -> bool:
    from traceview.ingest import RANK_IN_NAME

    ranks = [RANK_IN_NAME.search(f.name) for f in files]
    return len(files) >= 2 and all(ranks) and len({int(m.group(1)) for m in ranks}) == len(files)


def discover(arguments: list[str]) -> tuple[list[Target], list[dict], list[str]]:
    """Targets from files, directories (walked) and globs; arguments that match nothing are error rows.

    Files in a walked directory that are not traces (a README, a lock file) are returned as skipped;
    a file named on the command line is always a target, so a non-trace there is an error row.
    """
    targets: list[Target] = []
    errors: list[dict] = []
    skipped: list[str] = []
    for argument in arguments:
        paths = [Path(p) for p in sorted(glob.glob(argument, recursive=True))] if glob.has_magic(argument) else [Path(argument)]
        if not paths or not paths[0].exists():
            errors.append(_error_row(argument, "no such file or directory"))
            continue
        for path in paths:
            if path.is_dir():
                targets += _walk(path, skipped)
            else:
                targets.append(Target(str(path), "file"))
    unique = {t.path: t for t in targets}
    return sorted(unique.values(), key=lambda t: t.path), errors, sorted(set(skipped))


def _is_trace(path: Path) -> bool:
    """Whether a reader takes the file (by its first bytes, as ingest decides), so a package-lock.json is
    skipped; a trace-named file no reader can open (empty, unreadable, an nsys report to export) stays a
    target and becomes an error row that says why."""
    from traceview.api import is_duckdb_file
    from traceview.ingest import REPORT_SUFFIXES, TRACE_SUFFIXES, not_a_trace, reader_for

    if is_duckdb_file(path):
        return True
    try:
        reader_for(path)
    except TraceviewError as exc:
        return str(exc) != not_a_trace(path) and path.name.endswith((*TRACE_SUFFIXES, *REPORT_SUFFIXES))
    return True


def _walk(directory: Path, skipped: list[str]) -> list[Target]:
    files: list[Path] = []
    others: list[Path] = []
    for path in sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")):
        (files if _is_trace(path) else others).append(path)
    skipped += [str(p) for p in others]
    if _is_job_dir(directory, files):
        return [Target(str(directory), "job")]
    found = [Target(str(f), "file") for f in files]
    for sub in sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found += _walk(sub, skipped)
    return found


def _error_row(path: str, message: str) -> dict:
    return {"path": path, "kind": "file", "status": "error", "error": message}


def _rank_rows(con) -> list[dict]:
    return dict_rows(
        con,
        """
        SELECT k.rank, count(*) AS kernels, sum(k.dur_ns)::BIGINT AS kernel_time_ns,
               coalesce(sum(k.dur_ns) FILTER (WHERE k.category = 'communication'), 0)::BIGINT AS comm_time_ns,
               coalesce(sum(k.dur_ns) FILTER (WHERE k.category <> 'communication'), 0)::BIGINT AS compute_time_ns,
               max(k.end_ns) - min(k.start_ns) AS gpu_span_ns
        FROM kernels k GROUP BY k.rank ORDER BY k.rank
        """,
    )


def straggler_view(ranks: list[dict]) -> dict | None:
    """Which rank differs most: compute time (the straggler) and collective wait (the ranks that wait).

    In a synchronous job the slowest rank computes longest and waits least in collectives; the
    others spend the difference waiting inside the collective kernels.
    """
    if len(ranks) < 2:
        return None

    def spread(key: str) -> dict:
        values = sorted(r[key] for r in ranks)
        median = statistics.median(values)
        top = max(ranks, key=lambda r: abs(r[key] - median))
        return {"median_ns": median, "max_ns": values[-1], "min_ns": values[0],
                "max_over_median": values[-1] / median if median else None,
                "most_different_rank": top["rank"], "most_different_ns": top[key]}

    compute, comm = spread("compute_time_ns"), spread("comm_time_ns")
    slowest = max(ranks, key=lambda r: r["compute_time_ns"])
    return {"compute": compute, "collective_wait": comm, "straggler_rank": slowest["rank"],
            "straggler_excess_ns": slowest["compute_time_ns"] - compute["median_ns"]}


def audit_one(target: Target, options: AuditOptions) -> dict:
    """Ingest, analyse and check one target; any failure becomes this target's error row. With
    `options.profile` the worker's own profile travels back in the row (the worker's clock, not the pool's)."""
    if not options.profile:
        return _audit_one(target, options)
    with profiling.collect() as profile:
        row = _audit_one(target, options)
    row["profile"] = profile.to_dict()
    return row


def _audit_one(target: Target, options: AuditOptions) -> dict:
    from traceview import api, workflow

    row: dict[str, Any] = {"path": target.path, "kind": target.kind}
    try:
        with api.load(target.path, cache_dir=options.cache_dir, memory_limit=options.memory_limit) as trace:
            result = workflow.check(trace, options.check)
            info = trace.con.execute(
                "SELECT any_value(source_format), count(*), any_value(world_size) FROM trace_info").fetchall()[0]
            gpu = trace.con.execute(
                "SELECT coalesce(spec_id, nullif(name, ''), 'unknown') FROM busiest_device").fetchall()
            phases = dict(trace.con.execute("SELECT phase, count(*) FROM steps GROUP BY phase ORDER BY phase").fetchall())
            findings = [
                {"rule": f.rule, "severity": f.severity, "title": f.title, "message": f.message,
                 "estimated_saving_ns": f.estimated_saving_ns, "fingerprint": f.fingerprint}
                for f in result.findings
            ]
            row.update(
                status="ok", format=info[0], ranks=info[1], world_size=info[2],
                gpu=gpu[0][0] if gpu else None,
                kernels=trace.scalar("SELECT count(*) FROM kernels"),
                steps=sum(phases.values()), phases=phases,
                findings=findings,
                findings_by_severity={s: sum(f["severity"] == s for f in findings) for s in reversed(SEVERITIES)},
                top_finding=findings[0]["message"] if findings else None,
                skipped=[s.to_dict() for s in result.skipped], rules_run=list(result.rules_run),
                suppressed=result.suppressed,
            )
            if target.kind == "job":
                row["rank_rows"] = _rank_rows(trace.con)
                row["stragglers"] = straggler_view(row["rank_rows"])
            if options.reports_dir:
                row["reports"] = _write_reports(workflow.report(trace, options.check, result), target, options)
    except TraceviewError as exc:
        row.update(status="error", error=exc.format_message())
    except Exception as exc:  # noqa: BLE001 - one bad trace must not end the audit
        row.update(status="error", error=f"unexpected: {type(exc).__name__}: {exc}",
                   traceback=traceback.format_exc(limit=5))
    return row


def _write_reports(data: dict, target: Target, options: AuditOptions) -> list[str]:
    from traceview.files import write_atomically
    from traceview.report import REPORT

    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(target.path).name)
    written = []
    for name in options.report_formats:
        renderer = REPORT[name]
        path = Path(options.reports_dir) / f"{stem}.{renderer.extension}"
        write_atomically(path, renderer.render(data))
        written.append(str(path))
    return written


def run(targets: list[Target], options: AuditOptions, jobs: int,
        progress: Callable[[int, int, dict], None] | None = None) -> list[dict]:
    """Audit targets in `jobs` worker processes (1 = in this process); rows come back sorted by path."""
    rows: list[dict] = []
    if jobs <= 1 or len(targets) <= 1:
        for target in targets:
            rows.append(audit_one(target, options))
            if progress:
                progress(len(rows), len(targets), rows[-1])
    else:
        with ProcessPoolExecutor(max_workers=jobs, initializer=memory.share_machine, initargs=(jobs,)) as pool:
            futures = [pool.submit(audit_one, target, options) for target in targets]
            for future in as_completed(futures):
                rows.append(future.result())
                if progress:
                    progress(len(rows), len(targets), rows[-1])
    return sorted(rows, key=lambda r: r["path"])


def run_on_cluster(targets: list[Target], options: AuditOptions, address: str,
                   progress: Callable[[int, int, dict], None] | None = None,
                   task: Callable[[Target, AuditOptions], dict] = audit_one) -> list[dict]:
    """Audit targets on the workers of the Dask scheduler at `address`; rows come back sorted by path.

    Paths travel, not trace data: workers must see the same filesystem at the same absolute paths.
    A trace whose task fails on the cluster (a worker died, a task could not be unpickled) is an error row.
    `task` is what runs per target (tests pass one that fails).
    """
    from traceview import __version__

    client = _connect(address)
    try:
        from distributed import as_completed as completed

        # what the local path inherits through the environment, and absolute paths, since workers have their own cwd
        remote = replace(
            options, reports_dir=_absolute(options.reports_dir),
            cache_dir=_absolute(options.cache_dir or os.environ.get("TRACEVIEW_CACHE_DIR")),
            memory_limit=options.memory_limit or os.environ.get("TRACEVIEW_MEMORY_LIMIT"),
        )
        # the options (rule set and configuration, ~100 kB) go to the cluster once, not once per trace
        shared = client.submit(_identity, remote, pure=False)
        shipped = [Target(os.path.abspath(t.path), t.kind) for t in targets]
        futures = client.map(task, shipped, options=shared, pure=False)
        try:
            client.wait_for_workers(1, timeout=WORKER_WAIT_S)
        except (TimeoutError, asyncio.TimeoutError):  # distinct before Python 3.11
            raise TraceviewError(f"the Dask scheduler at {address} has had no worker for {WORKER_WAIT_S} s") from None
        _check_workers(client, __version__)
        submitted = {future.key: target for future, target in zip(futures, targets, strict=True)}
        rows: list[dict] = []
        for future in completed(futures, loop=client.loop):
            target = submitted[future.key]
            if future.status == "finished":
                row = _as_given(future.result(), target, options)
            else:
                row = {"path": target.path, "kind": target.kind, "status": "error",
                       "error": f"on the cluster: {_task_failure(future)}"}
            rows.append(row)
            if progress:
                progress(len(rows), len(targets), row)
    finally:
        _close(client)
    return sorted(rows, key=lambda r: r["path"])


def _task_failure(future) -> str:
    """Why a task has no row: its exception (a worker died: KilledWorker), or why it was cancelled."""
    if future.status == "error":
        exc = future.exception()
        message = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    try:
        future.result()
    except BaseException as exc:  # noqa: BLE001 - a cancelled future raises CancelledError, a BaseException
        reason = getattr(exc, "reason", None)
        return f"task {future.status} ({reason})" if reason else f"task {future.status}"
    return f"task {future.status}"


def _close(client) -> None:
    """Close the client; a scheduler lost mid-run is already in the rows, so its reconnect noise is not logged."""
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        client.close()
    finally:
        logging.disable(previous)


def _as_given(row: dict, target: Target, options: AuditOptions) -> dict:
    """The row the local path would write: paths as the user gave them, not the absolute ones shipped."""
    shipped = os.path.abspath(target.path)

    def local(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(shipped, target.path)
        if isinstance(value, list):
            return [local(v) for v in value]
        if isinstance(value, dict):
            return {k: local(v) for k, v in value.items()}
        return value

    row = local(row)
    if "reports" in row:
        row["reports"] = [str(Path(options.reports_dir) / Path(p).name) for p in row["reports"]]
    return row


def _identity(value: Any) -> Any:
    return value


def _absolute(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


def _connect(address: str):
    """A distributed.Client for `address`, or one line saying why not (the extra is missing, nothing answers)."""
    try:
        from distributed import Client
        from distributed.comm import connect
    except ImportError:
        raise TraceviewError(DASK_MISSING) from None

    async def handshake() -> None:
        comm = await asyncio.wait_for(connect(address, timeout=CONNECT_TIMEOUT_S), CONNECT_TIMEOUT_S + 5)
        await comm.close()

    # Client alone hangs on a port that accepts but never answers, and a malformed address leaves a
    # half-built Client whose finaliser prints a traceback at exit: a bare handshake first rules both out
    try:
        asyncio.run(handshake())
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except asyncio.TimeoutError:
        reason = f"no answer in {CONNECT_TIMEOUT_S + 5} s; is it a Dask scheduler?"
    except Exception as exc:  # noqa: BLE001 - a bad address, nothing listening, something else listening
        reason = str(exc).splitlines()[0] if str(exc) else f"{type(exc).__name__}; is it a Dask scheduler?"
    raise TraceviewError(f"cannot connect to the Dask scheduler at {address}: {reason}")


def _check_workers(client, version: str) -> None:
    """Every connected worker has this traceview: mixed versions would mix rule sets in one audit."""
    for worker, found in sorted(client.run(_installed_version, on_error="return").items()):
        if found != version:
            what = f"traceview {found}" if isinstance(found, str) else f"no usable traceview ({found})"
            raise TraceviewError(f"dask worker {worker} has {what}, this client has {version}: "
                                 "install the same traceview on every worker")


def _installed_version() -> str:
    from traceview import __version__

    return __version__


def summarise(rows: list[dict], fail_on: str, rules: tuple = (), skipped: list[str] = ()) -> dict:
    """The audit document (every audit renderer formats it); `skipped`: files walked past as not traces."""
    ok = [r for r in rows if r["status"] == "ok"]
    counts = {s: sum(r["findings_by_severity"][s] for r in ok) for s in reversed(SEVERITIES)}
    failing = any(counts[s] for s in SEVERITIES[SEVERITIES.index(fail_on):])
    errors = sum(r["status"] == "error" for r in rows)
    return {
        "schema_version": AUDIT_VERSION,
        "fail_on": fail_on,
        "traces": len(rows),
        "errors": errors,
        "findings": counts,
        "exit_code": 2 if errors else (1 if failing else 0),
        "rules": {rule.id: f"{rule.name}: {rule.title}" for rule in rules},
        "rows": rows,
        "skipped": list(skipped),
    }


def default_jobs() -> int:
    return memory.cores()
