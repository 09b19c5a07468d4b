"""The command line as the tests run it: in this process by default (no interpreter start, no imports of duckdb,
polars and altair per call), or as a real process where the process is the point (exit through os._exit,
signals, pipes, `python -m traceview`).

Both return what subprocess.run does (returncode, stdout, stderr), so a test reads the same either way.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from conftest import session_cache, on_all_cores
from traceview import cli


@dataclass
class Ran:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def traceview_cli(*args: object, env: dict | None = None, cwd: Path | None = None, cache: bool = True) -> Ran:
    """`traceview ARGS` run in this process as `traceview.cli.main` runs it, stdout and stderr captured apart.

    Every trace is read through the session's cache (`--cache-dir`: each trace parsed and analysed once a session)
    unless `cache` is false or the caller sets TRACEVIEW_CACHE_DIR itself. The environment, the working directory and
    the SIGINT handler are restored afterwards, whatever the command changed. `diff` and `audit` run with
    --jobs 1: the tests' process holds DuckDB's threads and must not fork workers (traceview_process does)."""
    argv = _without_worker_processes([str(arg) for arg in args])
    overrides = dict(env or {})
    if cache and "TRACEVIEW_CACHE_DIR" not in overrides:
        overrides["TRACEVIEW_CACHE_DIR"] = str(session_cache())
    stdout, stderr = io.BytesIO(), io.BytesIO()
    with _isolated(overrides, cwd):
        sys.stdout = io.TextIOWrapper(stdout, encoding="utf-8", write_through=True)
        sys.stderr = io.TextIOWrapper(stderr, encoding="utf-8", errors="backslashreplace", write_through=True)
        code = cli.run(argv)
        sys.stdout.flush()
        sys.stderr.flush()
        out, err = stdout.getvalue(), stderr.getvalue()  # read before the wrappers go, which closes their buffers
    return Ran(argv, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def traceview_process(*args: object, env: dict | None = None, cwd: Path | None = None, cache: bool = True,
                      timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m traceview ARGS` as its own process on every core, for what only a process shows; traces are read
    through the session's cache as in `traceview_cli`."""
    argv = [str(arg) for arg in args]
    environment = {**os.environ, **(env or {})}
    if cache and "TRACEVIEW_CACHE_DIR" not in (env or {}):
        environment["TRACEVIEW_CACHE_DIR"] = str(session_cache())
    with on_all_cores():
        return subprocess.run([sys.executable, "-m", "traceview", *argv], capture_output=True, text=True,
                              env={name: value for name, value in environment.items() if value is not None}, cwd=cwd,
                              timeout=timeout, check=False)


def _without_worker_processes(argv: list[str]) -> list[str]:
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command not in ("diff", "audit"):
        return argv
    if "--jobs" in argv:
        assert argv[argv.index("--jobs") + 1] == "1", "worker processes run from traceview_process, not in this process"
        return argv
    return [*argv, "--jobs", "1"]


@contextmanager
def _isolated(overrides: dict, cwd: Path | None):
    environment, directory = dict(os.environ), os.getcwd()
    streams = sys.stdin, sys.stdout, sys.stderr
    handler = signal.getsignal(signal.SIGINT)
    for name, value in overrides.items():  # None: unset
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)
    sys.stdin = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        os.chdir(directory)
        os.environ.clear()
        os.environ.update(environment)
        signal.signal(signal.SIGINT, handler)
