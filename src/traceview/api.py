"""The Python API: `traceview.load(path)` gives a Trace whose `.sql()` returns polars frames."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from traceview import __version__
from traceview import memory, profiling
from traceview.errors import TraceviewError
from traceview.ingest import ingest
from traceview.model import db

if TYPE_CHECKING:  # polars (0.1 s to import) only where a frame is asked for
    import polars as pl

    from traceview.analysis.pipeline import AnalysisOptions

DUCKDB_MAGIC_OFFSET = 8
DUCKDB_MAGIC = b"DUCK"


def is_duckdb_file(path: Path) -> bool:
    """A DuckDB database file carries 'DUCK' at byte 8."""
    try:
        with path.open("rb") as f:
            return f.read(DUCKDB_MAGIC_OFFSET + 4)[DUCKDB_MAGIC_OFFSET:] == DUCKDB_MAGIC
    except OSError:
        return False


class Trace:
    """An ingested trace: one DuckDB database holding the traceview schema."""

    def __init__(self, con: duckdb.DuckDBPyConnection, source: Path, cache: TraceCache | None = None):
        self.con = con
        self.source = source
        self.analysis_options = None  # what the trace was last analysed with; None: not analysed
        self._cache = cache

    @property
    def analyzed(self) -> bool:
        return self.analysis_options is not None

    def _analysed_if_needed(self, run):
        """Run a query; one that names an analysis table or column (`steps`, `kernels.phase`, ...) on a
        trace not yet analysed runs the analysis with default options first."""
        try:
            return run()
        except (duckdb.CatalogException, duckdb.BinderException) as exc:
            if self.analyzed or not _names_analysis(str(exc)):
                raise
        self.analyze()
        return run()

    def sql(self, query: str, params: list | dict | None = None) -> pl.DataFrame:
        """Run SQL over the schema and return a polars DataFrame (empty for statements without rows)."""
        import polars as pl

        relation = self._analysed_if_needed(lambda: self.con.sql(query, params=params))
        return relation.pl() if relation is not None else pl.DataFrame()

    def scalar(self, query: str, params: list | dict | None = None):
        """First value of the first row (DuckDB needs every result fetched to the end)."""
        rows = self._analysed_if_needed(lambda: self.con.execute(query, params).fetchall())
        return rows[0][0] if rows else None

    def analyze(self, options=None, **kwargs) -> Trace:
        """Add the analysis tables (categories, GPU match, steps, phases, roofline); see docs/analysis.md.

        `options` is an analysis.AnalysisOptions; keyword arguments build one. Analysing again with
        other options replaces every analysis result; with the same options it does nothing. A trace
        loaded through a cache directory reads an analysis kept there (TraceCache) into a new `con`,
        or keeps the one it runs: read `trace.con` after analysing, not before.
        """
        from traceview.analysis.pipeline import AnalysisOptions, analyze

        options = options or AnalysisOptions(**kwargs)
        if options != self.analysis_options:
            self.analysis_options = None
            kept = self._cache.analysed(options) if self._cache else None
            if kept is not None and kept.exists():
                with profiling.step("analysis", "(cached)"):
                    self._reopen(kept)
            else:
                analyze(self.con, options)
                if kept is not None:
                    self._cache.keep(self, kept)
            self.analysis_options = options
        return self

    def _reopen(self, saved: Path) -> None:
        """Swap this trace's database for a cached copy of it (the same trace, already analysed)."""
        con = self._cache.open(saved, self.source)
        self.con.close()
        self.con = con

    def save(self, target: str | os.PathLike) -> None:
        """Persist every table and view to a DuckDB file, written beside and renamed into place."""
        target = Path(target).resolve()
        if target.exists() and target.samefile(self.source):
            raise TraceviewError(f"{target}: refusing to overwrite the input trace")
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        os.unlink(tmp_name)
        try:
            self.con.execute("ATTACH ? AS _out", [tmp_name])
            self.con.execute("COPY FROM DATABASE memory TO _out")
            self.con.execute("DETACH _out")
            os.replace(tmp_name, target)
        finally:
            for leftover in (tmp_name, tmp_name + ".wal"):
                if os.path.exists(leftover):
                    os.unlink(leftover)

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _names_analysis(error: str) -> bool:
    """Whether a DuckDB catalog/binder error is about a table or column the analysis creates."""
    from traceview.analysis.pipeline import analysis_names

    return any(re.search(rf"\b{re.escape(name)}\b", error) for name in analysis_names())


def connect(memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory database that spills to a private temporary directory past `memory_limit`
    (else $TRACEVIEW_MEMORY_LIMIT, else DuckDB's default until `load` sizes it: traceview.memory).

    DuckDB's progress bar is off: it would write to stdout and corrupt JSON output.
    """
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    con.execute(f"SET temp_directory = '{tempfile.gettempdir()}/traceview-spill-{os.getpid()}'")
    limit = _user_limit(memory_limit)
    if limit:
        if not memory.SIZE.match(limit):
            con.close()
            raise TraceviewError(f"--memory-limit {limit!r}: expected a size such as 8GB or 512MiB")
        con.execute(f"SET memory_limit = '{limit.strip()}'")
    return con


def _user_limit(memory_limit: str | None) -> str | None:
    return memory_limit or os.environ.get("TRACEVIEW_MEMORY_LIMIT")


def _size_memory(con: duckdb.DuckDBPyConnection, limit: int) -> None:
    con.execute(f"SET memory_limit = '{memory.as_setting(limit)}'")
    memory.hold_blocks(con, limit)
    memory.sized(con)


def _connect_for(source: Path, memory_limit: str | None) -> duckdb.DuckDBPyConnection:
    """A connection whose limit, unless the user set one, fits parsing `source` (traceview.memory)."""
    con = connect(memory_limit)
    if not _user_limit(memory_limit):
        _size_memory(con, memory.parse_limit(source))
    return con


def _size_for_analysis(con: duckdb.DuckDBPyConnection, memory_limit: str | None) -> None:
    """Once the rows are known, the limit follows what the analysis will hold (traceview.memory); under the
    user's limit only the blocks DuckDB keeps for reuse do, up to that limit."""
    counts = db.EventCounts.of(con)
    limit = memory.analysis_limit(counts.device_rows, counts.host_rows, table_bytes=db.table_bytes(con))
    user = _user_limit(memory_limit)
    if user:
        memory.hold_blocks(con, min(limit, memory.setting_bytes(user)))
    else:
        _size_memory(con, limit)


def content_key(source: Path) -> str:
    """Cache key: the bytes of the trace (every file of a rank directory), the traceview version and schema."""
    digest = hashlib.sha256(f"{__version__}\0{db.schema_sql()}".encode())
    files = sorted(p for p in source.iterdir() if p.is_file()) if source.is_dir() else [source]
    for file in files:
        digest.update(file.name.encode() + b"\0")
        with file.open("rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class TraceCache:
    """`--cache-dir`: a trace's ingest (`ingested`) and each of its analyses (`analysed`), keyed by the trace's
    content; an analysis also by its options (a model config by its values) and traceview's own code and data, so
    a changed option, model file, hardware/ file or traceview version analyses again."""

    directory: Path
    content: str  # content_key of the trace
    memory_limit: str | None

    @property
    def ingested(self) -> Path:
        return self.directory / f"{self.content}.duckdb"

    def analysed(self, options: AnalysisOptions) -> Path:
        model = options.model_options()
        digest = hashlib.sha256(f"{code_key()}\0{options!r}\0{model!r}".encode()).hexdigest()[:16]
        return self.directory / f"{self.content}-analysed-{digest}.duckdb"

    def open(self, saved: Path, source: Path) -> duckdb.DuckDBPyConnection:
        """A kept database, copied into memory, naming the files read now: it names the ones first read with
        these bytes (trace_info.file is each input file's absolute path; a rank directory's files keep their
        names, which the key holds)."""
        con = _open_saved(saved, self.memory_limit)
        if source.is_dir():
            for (old,) in con.execute("SELECT DISTINCT file FROM trace_info").fetchall():
                con.execute("UPDATE trace_info SET file = ? WHERE file = ?", [str(source.resolve() / Path(old).name), old])
        else:
            con.execute("UPDATE trace_info SET file = ?", [str(source.resolve())])
        return con

    def keep(self, trace: Trace, target: Path) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TraceviewError(f"{self.directory}: cannot create the cache directory ({exc.strerror})") from None
        try:
            trace.save(target)
        except (OSError, duckdb.Error) as exc:
            raise TraceviewError(f"{target}: cannot write the cache ({str(exc).splitlines()[0]})") from None


@lru_cache(maxsize=None)
def code_key() -> str:
    """A digest of what an analysis is computed by: traceview's version and every file of its installed package,
    its hardware/ folder, and DuckDB's version. An edited checkout gets a new key without a version bump."""
    from traceview.resources import data_dir

    digest = hashlib.sha256(f"{__version__}\0{duckdb.__version__}".encode())
    for root in (Path(__file__).parent, data_dir("hardware")):
        for file in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".pyc"):
            digest.update(f"{file.relative_to(root)}\0".encode() + file.read_bytes())
    return digest.hexdigest()


def _open_saved(source: Path, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """Copy a saved database into memory: the file is only ever read, and analysis can add to the copy."""
    con = _connect_for(source, memory_limit)
    try:
        con.execute("ATTACH ? AS saved (READ_ONLY)", [str(source)])
        tables = {name for (name,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'saved'").fetchall()}
        missing = [t for t in db.CONTRACT_TABLES if t not in tables]
        if missing:
            raise TraceviewError(f"{source}: DuckDB file is not a traceview database (missing {', '.join(missing)})")
        con.execute("COPY FROM DATABASE saved TO memory")
        con.execute("DETACH saved")
    except duckdb.Error as exc:
        con.close()
        raise TraceviewError(f"{source}: cannot open DuckDB database ({str(exc).splitlines()[0]})") from None
    except TraceviewError:
        con.close()
        raise
    _size_for_analysis(con, memory_limit)
    db.fit_to_size(con)
    return con


def load(path: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
         memory_limit: str | None = None) -> Trace:
    """Ingest a trace (nsys .sqlite, Kineto .json[.gz], a directory of ranks) or open a saved .duckdb.

    Everything lives in memory (a saved database is attached read-only and copied), so nothing a
    query or an analysis does can reach the input file. With `cache_dir` (or $TRACEVIEW_CACHE_DIR)
    the ingested tables are kept there, keyed by the trace's content, so the next load is a copy, and so is
    each analysis (`Trace.analyze`: TraceCache), so the next command with the same options skips it.
    `memory_limit` (or $TRACEVIEW_MEMORY_LIMIT) caps DuckDB's memory; past it, work spills to disk.
    """
    source = Path(path)
    if not source.exists():
        raise TraceviewError(f"{source}: no such file or directory")
    if source.is_file() and is_duckdb_file(source):
        return Trace(_open_saved(source, memory_limit), source)
    cache_root = cache_dir or os.environ.get("TRACEVIEW_CACHE_DIR")
    cache = TraceCache(Path(cache_root), content_key(source), memory_limit) if cache_root else None
    if cache and cache.ingested.exists():
        return Trace(cache.open(cache.ingested, source), source, cache)
    con = _connect_for(source, memory_limit)
    try:
        with profiling.step("ingest", source.name, lambda: con.execute("SELECT count(*) FROM kernels").fetchone()[0]):
            ingest(source, con)
    except BaseException:
        con.close()
        raise
    _size_for_analysis(con, memory_limit)
    db.fit_to_size(con)
    trace = Trace(con, source, cache)
    if cache:
        cache.keep(trace, cache.ingested)
    return trace
