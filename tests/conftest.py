"""Shared fixtures: the real traces in ../shared/traces (read in place, never copied), each ingested and analysed
once per test session, whichever worker asks first, and the checks that the run tested what it should.

The session store is one temporary directory that the controlling process makes and every pytest-xdist worker
inherits ($TRACEVIEW_TEST_STORE). A trace's ingest, its analysis (a saved DuckDB database) and its report are built
there by the first worker to need them, under a file lock, and read by the others: the work of analysing a trace
is done once a session, not once per test module and worker.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

import traceview
from traceview.analysis.pipeline import AnalysisOptions
from traceview.api import content_key

REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces"
NSYS_TRACES = sorted((SHARED_TRACES / "nsys").glob("*.sqlite"))
KINETO_TRACES = sorted((SHARED_TRACES / "torch").glob("*.json*")) + sorted(
    (SHARED_TRACES / "torch" / "param__dlrm_v100_8rank").glob("*.json")
)
DLRM_DIR = SHARED_TRACES / "torch" / "param__dlrm_v100_8rank"
VLLM_H100 = SHARED_TRACES / "torch" / "tracemap__vllm_h100_tp4_rank0_isl1000_osl10_c32.pt.trace.json.gz"
TRACE_SUFFIXES = (".sqlite", ".json", ".json.gz")
STORE_VARIABLE = "TRACEVIEW_TEST_STORE"
MACHINE_CPUS = frozenset(os.sched_getaffinity(0))  # read before a worker is given its one core

requires_shared = pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces is not present")


def corpus() -> list[Path]:
    """Every trace file under nsys/ and torch/ of ../shared/traces, and every directory there as one multi-rank job."""
    targets = []
    for folder in ("nsys", "torch"):
        for path in sorted((SHARED_TRACES / folder).iterdir()) if (SHARED_TRACES / folder).is_dir() else []:
            if path.is_dir() or path.name.endswith(TRACE_SUFFIXES):
                targets.append(path)
    return targets


# ------------------------------------------------------------------ the session: no silent gaps, inputs untouched


def _under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow(seconds=N): end to end and long (wheel, cluster, fuzz, large traces); "
                                       "run last by ./dev test, the longest first, left out by -m 'not slow'")
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller did the rest
        _one_core_per_worker(config.workerinput)
        return
    if not SHARED_TRACES.is_dir():
        if _under_ci():
            raise pytest.UsageError(f"{SHARED_TRACES} is missing: under CI (CI=true) the real traces are required")
        config.stash[_MISSING] = True
        warnings.warn(f"{SHARED_TRACES} is missing: every test of a real trace is skipped", stacklevel=1)
    store = Path(tempfile.mkdtemp(prefix="traceview-tests-"))
    os.environ[STORE_VARIABLE] = str(store)  # the workers start after this and inherit it
    config.stash[_STORE] = store
    config.stash[_CHECKSUMS] = checksums()


def _one_core_per_worker(workerinput: dict) -> None:
    """With a worker per core, each worker keeps to a core of its own. traceview sizes its threads, its side-by-side
    statements and its renderer process from the cores it may run on, and two workers each using every core of a
    2-core machine spent 15% of the suite's CPU contending. Tests of the multi-core paths take `all_cores`, and the
    processes tests start run on every core (`on_all_cores`)."""
    if workerinput["workercount"] >= len(MACHINE_CPUS) > 1:
        cpus = sorted(MACHINE_CPUS)
        os.sched_setaffinity(0, {cpus[int(workerinput["workerid"].removeprefix("gw")) % len(cpus)]})


@contextmanager
def on_all_cores():
    """Every core of the machine inside the block, for the process started there (a child inherits its parent's
    cores) or for the code that sizes itself from them."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, MACHINE_CPUS)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


@pytest.fixture
def all_cores():
    """The test runs on every core of the machine, as a command would."""
    with on_all_cores():
        yield len(MACHINE_CPUS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests last (stable otherwise), so the rest of the suite has answered before they finish; of them the
    longest (their marker's `seconds`) first, so that the last to start is short and both workers end together."""
    def order(item: pytest.Item) -> tuple[bool, float]:
        slow = item.get_closest_marker("slow")
        return slow is not None, -(slow.kwargs.get("seconds", 0) if slow else 0)

    items.sort(key=order)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test may change a shared trace: the checksums of every file there, before and after the session."""
    config = session.config
    if hasattr(config, "workerinput") or _CHECKSUMS not in config.stash:
        return
    changed = sorted(set(config.stash[_CHECKSUMS].items()) ^ set(checksums().items()))
    if changed:
        config.stash[_CHANGED] = sorted({path for path, _ in changed})
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if config.stash.get(_MISSING, False):
        terminalreporter.section("TRACES MISSING", sep="!", red=True, bold=True)
        terminalreporter.line(f"{SHARED_TRACES} is not present: the tests of real traces were skipped, so this run "
                              "tested much less than the suite. CI=true makes this an error.", red=True, bold=True)
    for path in config.stash.get(_CHANGED, []):
        terminalreporter.line(f"a shared trace changed during the session: {path}", red=True, bold=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _STORE in config.stash:
        shutil.rmtree(config.stash[_STORE], ignore_errors=True)


_STORE = pytest.StashKey[Path]()
_CHECKSUMS = pytest.StashKey[dict]()
_CHANGED = pytest.StashKey[list]()
_MISSING = pytest.StashKey[bool]()


def checksums() -> dict[str, str]:
    """sha256 of every file under ../shared/traces."""
    if not SHARED_TRACES.is_dir():
        return {}
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(SHARED_TRACES.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ the store: built once, by whoever asks first


def store() -> Path:
    """The session's store, shared by every worker (a private one where pytest's own hooks did not run)."""
    if STORE_VARIABLE not in os.environ:
        os.environ[STORE_VARIABLE] = tempfile.mkdtemp(prefix="traceview-tests-")
    return Path(os.environ[STORE_VARIABLE])


def session_cache() -> Path:
    """The `--cache-dir` of the tests' own commands and shared traces: each trace is parsed once a session, and
    analysed once per set of options."""
    return store() / "ingest"


@contextmanager
def _locked(name: str):
    path = store() / "locks" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def built_once(name: str, build: Callable[[Path], Any]) -> Path:
    """The store's file or folder `name`, written by `build(path)` in the first worker to ask; the others wait for
    it, then read it. A build that fails leaves nothing behind, and the next to ask tries again."""
    target = store() / name
    done = target.with_name(f"{target.name}.done")
    with _locked(name.replace("/", "_") + ".lock"):
        if not done.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                build(target)
            except BaseException:
                if target.is_dir():
                    shutil.rmtree(target)
                else:
                    target.unlink(missing_ok=True)
                raise
            done.touch()
    return target


def trace_key(path: Path, options: dict | None = None) -> str:
    """A name for what the store keeps of a trace: its content and the analysis options."""
    options = options or {}
    return f"{content_key(path)}-{hashlib.sha256(repr(sorted(options.items())).encode()).hexdigest()[:12]}"


class SharedTrace(traceview.Trace):
    """A trace many tests read: analysing it with other options would change it under them, so that is refused."""

    def analyze(self, options=None, **kwargs) -> traceview.Trace:
        options = options or AnalysisOptions(**kwargs)
        if options != self.analysis_options:
            raise AssertionError(f"{self.source.name} is shared by many tests (analysed with {self.analysis_options}); "
                                 "load a trace of your own to analyse it otherwise")
        return self


_ingested: dict[Path, SharedTrace] = {}
_analysed: dict[tuple, SharedTrace] = {}
_reported: dict[tuple, tuple[SharedTrace, bytes]] = {}


@pytest.fixture(autouse=True)
def _shared_traces_left_clean():
    """A test that fetched part of a result from a shared trace leaves it open on the connection, where the next
    test's query would fail: each test ends with every shared connection's pending result dropped."""
    yield
    for trace in (*_ingested.values(), *_analysed.values()):
        trace.con.abort()


def ingested(path: Path) -> SharedTrace:
    """The trace as ingested, before any analysis; one per worker, parsed once a session."""
    if path not in _ingested:
        loaded = traceview.load(path, cache_dir=session_cache())
        _ingested[path] = SharedTrace(loaded.con, loaded.source)
    return _ingested[path]


def analysed(path: Path, **options) -> SharedTrace:
    """The trace analysed with `options` (AnalysisOptions fields): analysed once a session, by the first worker to
    ask, into the session's `--cache-dir`, then read by every worker as a copy of that database."""
    key = (path, tuple(sorted(options.items())))
    if key not in _analysed:
        def build(target: Path) -> None:
            with traceview.load(path, cache_dir=session_cache()) as fresh:
                fresh.analyze(**options)
            target.touch()

        built_once(f"analysed/{trace_key(path, options)}", build)
        loaded = traceview.load(path, cache_dir=session_cache()).analyze(**options)
        shared = SharedTrace(loaded.con, path)
        shared.analysis_options = AnalysisOptions(**options)
        _analysed[key] = shared
    return _analysed[key]


def reported(path: Path, **options) -> tuple[SharedTrace, dict]:
    """The analysed trace and its report document (the built-in rules, default configuration), built once a session;
    each caller gets a document of its own to change."""
    from traceview import workflow

    key = (path, tuple(sorted(options.items())))
    if key not in _reported:
        trace = analysed(path, **options)

        def build(target: Path) -> None:
            document = workflow.report(trace, workflow.CheckOptions.configured(AnalysisOptions(**options)))
            target.write_bytes(pickle.dumps(document))

        saved = built_once(f"reports/{trace_key(path, options)}.pickle", build)
        _reported[key] = (trace, saved.read_bytes())
    trace, document = _reported[key]
    return trace, pickle.loads(document)


def report_json(path: Path) -> Path:
    """The report of `reported(path)` as the JSON file `traceview report --format json` writes: a run that
    `traceview diff` reads without analysing the trace again."""
    from traceview.report import json_report

    return built_once(f"report-json/{trace_key(path)}.json",
                      lambda target: target.write_text(json_report.render(reported(path)[1]), encoding="utf-8"))


# ------------------------------------------------------------------ a browser


@pytest.fixture(scope="session")
def chromium() -> str:
    """Headless Chromium; installed once with apt-get when missing and running as root (one worker at a time:
    apt holds a lock), else skipped."""
    with _locked("chromium.lock"):
        path = shutil.which("chromium")
        if path is None and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            try:
                subprocess.run("apt-get update -qq && apt-get install -y -qq chromium", shell=True, env=env,
                               capture_output=True, timeout=600, check=False)
            except subprocess.TimeoutExpired:
                pass
            path = shutil.which("chromium")
    if path is None:
        pytest.skip("headless Chromium is not available (Debian: apt-get install -y chromium, as root)")
    return path


# ------------------------------------------------------------------ the whole corpus through the real command


@dataclass(frozen=True)
class CorpusAudit:
    returncode: int
    stderr: str
    json: str  # what --json and --junit wrote
    junit: str
    before: dict[str, str]  # checksums of the shared traces before the audit and after it
    after: dict[str, str]


def corpus_audit() -> CorpusAudit:
    """`traceview audit` of ../shared/traces on two worker processes, as CI runs it, once a session, with the
    session's ingest cache (test_reading_a_shared_trace_never_modifies_it reads traces without one)."""
    def build(target: Path) -> None:
        with tempfile.TemporaryDirectory() as folder:
            before = checksums()
            environment = {**os.environ, "TRACEVIEW_CACHE_DIR": str(session_cache())}
            with on_all_cores():
                result = subprocess.run([sys.executable, "-m", "traceview", "audit", str(SHARED_TRACES), "--jobs", "2",
                                         "--json", f"{folder}/a.json", "--junit", f"{folder}/a.xml"],
                                        capture_output=True, text=True, env=environment, timeout=900, check=False)
            written = [Path(folder, name).read_text() if Path(folder, name).exists() else "" for name in ("a.json", "a.xml")]
            target.write_bytes(pickle.dumps(CorpusAudit(result.returncode, result.stderr, *written, before, checksums())))

    return pickle.loads(built_once("corpus-audit.pickle", build).read_bytes())


# ------------------------------------------------------------------ the tests' own arithmetic


def union_ns(intervals) -> int:
    """Length of the union of [start, end) intervals, by a plain sweep: the tests' own arithmetic."""
    total, lo, hi = 0, None, None
    for start, end in sorted(intervals):
        if hi is None or start > hi:
            total += (hi - lo) if hi is not None else 0
            lo, hi = start, end
        else:
            hi = max(hi, end)
    return total + ((hi - lo) if hi is not None else 0)


def trace_id(path: Path) -> str:
    return path.name
