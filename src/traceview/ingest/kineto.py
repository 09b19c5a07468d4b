"""PyTorch profiler (Kineto) Chrome-trace JSON, gzip or plain, 2021 legacy categories to today.

A Kineto file is one JSON object holding a huge `traceEvents` array. Parsing it as one record is
slow, so the array is streamed (decompressing on the fly) into temporary part files cut at event
boundaries, and DuckDB reads them as arrays of records with declared column types, one part per
thread and without a Python object per event; each part is parsed as soon as it is written, while the
next one is still being decompressed. `ts`/`dur` are read as DECIMAL(38,3) microseconds, which is exact
to the nanosecond that Kineto prints; no rounding to whole microseconds. `args` is read as a struct of the
keys we use, so each value comes from DuckDB's one parse of the event; a file the struct cannot hold is read
with `args` as JSON text, and the tables are the same either way.
"""

from __future__ import annotations

import codecs
import gzip
import json
import os
import re
import tempfile
import threading
import zlib
from concurrent.futures import Future
from decimal import Decimal
from pathlib import Path
from typing import BinaryIO, Callable

import duckdb

from traceview import memory
from traceview.errors import TraceviewError
from traceview.ingest.reader import Reader
from traceview.model import db

GZIP_MAGIC = b"\x1f\x8b"
EVENTS_KEY = b'"traceEvents"'
READ_CHUNK = 8 << 20
TAIL_BYTES = 1 << 20
MAX_HEAD_BYTES = 64 << 20
SNIFF_BYTES = 1 << 20
SNIFF_CHUNK = 64 << 10
EPOCH_2001_US = 10**15
MAX_ORIGIN_US = db.MAX_TIMESTAMP_NS // 1000  # a later first time is corrupt: it only loses the fast conversion
# a time no conversion reaches: past db.MAX_TIMESTAMP_NS, so drop_implausible_times drops the event, and within
# BIGINT with a duration added
BEYOND_NS = 9 * 10**18
MAX_JSON_BYTES_ENV = "TRACEVIEW_MAX_JSON_BYTES"
DEFAULT_MAX_JSON_BYTES = 64 << 30  # decompressed JSON; a bigger one is almost surely a gzip bomb
SALVAGE_TRIES = 8
EVENT_BYTES = 16 << 20  # DuckDB's default maximum_object_size; it also sizes the reader's buffers
LARGE_EVENT_BYTES = 1 << 30
PART_BYTES = 64 << 20  # events per file that DuckDB parses on one thread
PART_TABLE = "_kineto_part_"
_EVENT_END = re.compile(rb"\}\s*[,\]]")
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_DUCKDB_AT_BYTE = re.compile(r"at byte (\d+) in record/value (\d+)")

LEGACY_CATEGORIES = {
    "Kernel": "kernel",
    "Runtime": "cuda_runtime",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Operator": "cpu_op",
}
RANGE_CATEGORIES = ("cpu_op", "user_annotation", "gpu_user_annotation", "python_function")

EVENT_COLUMNS = {
    "ph": "VARCHAR",
    "cat": "VARCHAR",
    "name": "VARCHAR",
    "pid": "JSON",
    "tid": "JSON",
    "ts": "DECIMAL(38,3)",
    "dur": "DECIMAL(38,3)",
    "args": "JSON",
}

# Argument keys read from every event, as `arg_<name>`: the value's text, a string unquoted (json_extract_string).
ARG_KEYS = {
    "correlation": "correlation",
    "external_id": "External id",
    "legacy_external_id": "external id",
    "device": "device",
    "stream": "stream",
    "grid": "grid",
    "block": "block",
    "registers": "registers per thread",
    "shared_memory": "shared memory",
    "bytes": "bytes",
    "size": "size",
    "kind": "kind",
    "graph_id": "graph id",
    "graph_node_id": "graph node id",
    "input_dims": "Input Dims",
    "input_types": "Input type",
    "input_values": "Concrete Inputs",
    "flops": "flops",
}


def _struct_keys() -> tuple[dict[str, str], list[bytes]]:
    """The keys a STRUCT type can hold (DuckDB's field names ignore case, JSON's keys do not), and the quoted
    text of the others: the struct read leaves those NULL, so it is only used on files without that text."""
    held: dict[str, str] = {}
    for name, key in ARG_KEYS.items():
        if key.lower() not in {k.lower() for k in held.values()}:
            held[name] = key
    return held, [json.dumps(key).encode() for name, key in ARG_KEYS.items() if name not in held]


STRUCT_ARG_KEYS, STRUCT_BLIND_KEYS = _struct_keys()
BLIND_KEY_BYTES = max(map(len, STRUCT_BLIND_KEYS), default=1) - 1  # a key split across two writes
# Arguments whose text is kept or compared as text. The others are only cast to numbers, and DuckDB's VARCHAR
# writes a bare number as `1e+16` where json_extract_string writes `10000000000000000.0`: the same number, other
# text. These are read as JSON, whose text json_extract_string unquotes where it is a string.
ARGS_KEPT_AS_TEXT = frozenset({"kind", "input_dims", "input_types", "input_values"})
# The same events read with `args` as a STRUCT of the keys and pid/tid as text: DuckDB then takes each value
# straight from its parse instead of keeping `args` as JSON text and parsing it again (the 10x vLLM trace: 3.2 ->
# 2.4 s on one thread). It fails where json_extract_string would not (args not an object, a key twice), and the
# JSON form then reads the file.
STRUCT_EVENT_COLUMNS = {
    **EVENT_COLUMNS, "pid": "VARCHAR", "tid": "VARCHAR",
    "args": "STRUCT({})".format(", ".join(f"{json.dumps(key)} {'JSON' if name in ARGS_KEPT_AS_TEXT else 'VARCHAR'}"
                                          for name, key in STRUCT_ARG_KEYS.items())),
}


def sniff(path: Path, head: bytes) -> bool:
    """Kineto's structure in the first SNIFF_BYTES (decompressed): a JSON object with a top-level
    `traceEvents` array, or the legacy bare array whose first element is an event with `ph` and `ts`.

    Only the values before `traceEvents` are parsed (real traces put it within the first 30 kB);
    a gzip of anything else, a package-lock.json or any other JSON is not a trace.
    """
    text = _sniff_prefix(path, head).decode("utf-8", "replace")
    i = _WHITESPACE.match(text).end()
    try:
        if text.startswith("[", i):
            first, _ = _DECODER.raw_decode(text, _WHITESPACE.match(text, i + 1).end())
            return isinstance(first, dict) and isinstance(first.get("ph"), str) and "ts" in first
        if not text.startswith("{", i):
            return False
        i += 1
        while True:
            key, i = _DECODER.raw_decode(text, _WHITESPACE.match(text, i).end())
            i = _WHITESPACE.match(text, i).end()
            if not isinstance(key, str) or not text.startswith(":", i):
                return False
            i = _WHITESPACE.match(text, i + 1).end()
            if key == "traceEvents":
                return text.startswith("[", i)
            _, i = _DECODER.raw_decode(text, i)
            i = _WHITESPACE.match(text, i).end()
            if not text.startswith(",", i):
                return False
            i += 1
    except (ValueError, RecursionError):  # not JSON, or a value longer than the prefix
        return False


def _sniff_prefix(path: Path, head: bytes) -> bytes:
    """The first SNIFF_BYTES of the JSON text; of a gzip cut short or damaged, as much as decompresses."""
    if not head.startswith(GZIP_MAGIC):
        with path.open("rb") as f:
            return f.read(SNIFF_BYTES)
    prefix = bytearray()
    try:
        with gzip.open(path, "rb") as f:
            while len(prefix) < SNIFF_BYTES and (chunk := f.read(SNIFF_CHUNK)):
                prefix += chunk
    except (EOFError, OSError, zlib.error):
        pass
    return bytes(prefix[:SNIFF_BYTES])


def _open(path: Path):
    with path.open("rb") as f:
        gzipped = f.read(2) == GZIP_MAGIC
    return gzip.open(path, "rb") if gzipped else path.open("rb")


_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"\s*")
_CLOSE_AT_END = re.compile(r"\s*\}\s*\Z")
_MEMBER_AFTER_ARRAY = re.compile(rb"\s*(,\s*\"|\}\s*\Z)")


def _object_rest(text: str, i: int) -> dict | None:
    """Parse `, "key": value, ... }` from text[i:] to the end; None when text[i:] is not exactly that.

    Uses raw_decode at an offset, so a wrong candidate fails after one value without copying.
    """
    members = {}
    while True:
        if _CLOSE_AT_END.match(text, i):
            return members
        i = _WHITESPACE.match(text, i).end()
        if text[i : i + 1] != ",":
            return None
        try:
            key, i = _DECODER.raw_decode(text, _WHITESPACE.match(text, i + 1).end())
            i = _WHITESPACE.match(text, i).end()
            if not isinstance(key, str) or text[i : i + 1] != ":":
                return None
            members[key], i = _DECODER.raw_decode(text, _WHITESPACE.match(text, i + 1).end())
        except ValueError:
            return None


def _ends_events(tail: bytes, pos: int) -> bool:
    """Whether the `]` at `pos` can close an array of events: its last non-blank byte before is `}` or `[`."""
    before = pos - 1
    while before >= 0 and tail[before] in b" \t\r\n":
        before -= 1
    return before >= 0 and tail[before] in b"}["


def _split_tail(tail: bytes) -> tuple[int, dict] | None:
    """Find the `]` closing traceEvents in the last bytes of the file: the leftmost `]` after which
    the rest is a valid end of the top-level object (other lists may follow traceEvents)."""
    found = None
    text = tail.decode("latin-1")
    pos = len(tail)
    while (pos := tail.rfind(b"]", 0, pos)) >= 0:
        # an array of events ends after an event's `}` (or opens empty): the many `]` of argument lists
        # (`"Input Dims": [[1, 2]]`) are passed over without parsing what follows them
        if (_ends_events(tail, pos) and _MEMBER_AFTER_ARRAY.match(tail, pos + 1)
                and _object_rest(text, pos + 1) is not None):
            found = pos + 1
    if found is None:
        return None
    return found, _object_rest(tail[found:].decode("utf-8", "replace"), 0)


def _head_metadata(head: bytes, path: Path) -> dict:
    """Parse the top-level keys written before traceEvents."""
    text = head.decode("utf-8", "replace").rstrip().rstrip(",") + "}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceviewError(f"{path}: invalid JSON in the trace metadata ({exc.msg})") from None
    return value if isinstance(value, dict) else {}


def max_json_bytes() -> int:
    """The decompressed-size limit: $TRACEVIEW_MAX_JSON_BYTES, else 64 GiB (guards against gzip bombs)."""
    text = os.environ.get(MAX_JSON_BYTES_ENV)
    if not text:
        return DEFAULT_MAX_JSON_BYTES
    try:
        value = int(text)
    except ValueError:
        raise TraceviewError(f"{MAX_JSON_BYTES_ENV}={text!r}: expected a number of bytes") from None
    if value <= 0:
        raise TraceviewError(f"{MAX_JSON_BYTES_ENV}={text!r}: must be positive")
    return value


def _salvage_cuts(tail: bytes, tail_start: int) -> list[int]:
    """Offsets in the events file just after the last complete-looking events, latest first.

    A `}` followed by `,` or `]` ends an event, or an object nested in one; read() tries each cut.
    """
    ends = [m.start() + 1 for m in _EVENT_END.finditer(tail)]
    return [tail_start + end for end in reversed(ends)][:SALVAGE_TRIES]


def copy_events(path: Path, sink: BinaryIO) -> tuple[dict, list[int] | None]:
    """Stream the traceEvents array of `path` into `sink`; return the other top-level keys.

    The last TAIL_BYTES are held back until the end of the file, where the `]` closing the array is
    found, so the sink only ever receives the array and never has to take bytes back.
    The second value is None for a complete file. For a file cut off inside traceEvents (a killed
    profiler), the sink gets everything, and the value lists candidate offsets at which it can be
    cut and closed so that only complete events remain (see _salvage_events).
    """
    head = bytearray()
    held = bytearray()
    found = top_level_list = False
    limit = max_json_bytes()
    total = written = 0
    try:
        with _open(path) as src:
            while chunk := src.read(READ_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise TraceviewError(
                        f"{path}: JSON text exceeds the {limit:,}-byte limit (a gzip bomb?); "
                        f"set {MAX_JSON_BYTES_ENV} to a larger number of bytes to read it")
                if not found:
                    head += chunk
                    text_start = head.lstrip()[:1]
                    if text_start == b"[":
                        found = top_level_list = True
                        chunk, head = bytes(head), bytearray()
                    elif (key := head.find(EVENTS_KEY)) >= 0 and (start := head.find(b"[", key)) >= 0:
                        found = True
                        chunk, head = bytes(head[start:]), head[:key]
                    elif len(head) > MAX_HEAD_BYTES or (text_start and text_start != b"{"):
                        break
                    else:
                        continue
                held += chunk
                if len(held) > TAIL_BYTES:
                    sink.write(memoryview(held)[:-TAIL_BYTES])
                    written += len(held) - TAIL_BYTES
                    del held[:-TAIL_BYTES]
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceviewError(f"{path}: damaged gzip stream ({exc})") from None
    except OSError as exc:
        raise TraceviewError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not found:
        raise TraceviewError(f"{path}: not a PyTorch profiler trace (no traceEvents array)")
    tail = bytes(held)
    if top_level_list:
        sink.write(tail)
        return {}, None
    split = _split_tail(tail)
    if split is None:
        sink.write(tail)
        return _head_metadata(bytes(head), path), _salvage_cuts(tail, written)
    end, tail_metadata = split
    sink.write(tail[:end])
    return {**_head_metadata(bytes(head), path), **tail_metadata}, None


def _int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def read(path: Path, con: duckdb.DuckDBPyConnection, rank: int | None = None) -> int:
    """Stage one Kineto trace's rows; its rank is the trace's own `distributedInfo.rank`, else `rank`, else 0."""
    meta, notes = _load_event_parts(con, path)
    dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    own_rank = _int_or_none(dist.get("rank"))
    rank = own_rank if own_rank is not None else (rank or 0)
    base_ns = _int_or_none(meta.get("baseTimeNanoseconds")) or 0
    first_ts = con.execute("SELECT min(ts) FROM _kineto_events WHERE ts > 0").fetchall()[0][0]
    _insert_trace_info(con, path, meta, rank, base_ns, first_ts, _int_or_none(dist.get("world_size")))
    _insert_devices(con, meta, rank)
    _stage_events(con, rank, base_ns, first_ts if first_ts is not None and first_ts < MAX_ORIGIN_US else 0)
    _add_diagnostics(con, rank)
    for code, message in notes:
        db.add_diagnostic(con, rank, "ingest", "warning", code, message)
    _drop_events(con)
    return rank


class _PartFiles:
    """A sink that cuts the events array into files of about PART_BYTES at event boundaries.

    DuckDB parses one JSON file on one thread but several files in parallel. Each part is closed
    with `]` and the next opened with `[`, so every part is an array of whole events, and handed to
    `finished` as soon as the next one opens. A cut that lands inside an event (a `},{` within args
    or a string) leaves a part that does not parse; the caller then reads the trace as one file.
    `struct_args` stays true while none of STRUCT_BLIND_KEYS has been written: the parts so far can be read
    with `args` as a struct.
    """

    def __init__(self, directory: Path, finished: Callable[[Path], None]):
        self.directory, self.finished, self.paths, self.file, self.size = directory, finished, [], None, 0
        self.struct_args, self._last = True, b""
        self._next_part()

    def _next_part(self) -> None:
        if self.file is not None:
            self.file.close()
            self.finished(self.paths[-1])
        self.paths.append(self.directory / f"events-{len(self.paths)}.json")
        self.file, self.size = self.paths[-1].open("wb"), 0

    def write(self, data) -> None:
        data, done = bytes(data), 0
        if self.struct_args:
            edge = self._last + data[:BLIND_KEY_BYTES]
            self.struct_args = not any(key in data or key in edge for key in STRUCT_BLIND_KEYS)
            self._last = data[len(data) - BLIND_KEY_BYTES:]
        while (start := done + max(PART_BYTES - self.size, 0)) < len(data) and (
                cut := _EVENT_BOUNDARY.search(data, start)):
            self.file.write(data[done:cut.start() + 1])
            self.file.write(b"]")
            self._next_part()
            self.file.write(b"[")
            done, self.size = cut.end() - 1, 1
        self.file.write(data[done:])
        self.size += len(data) - done

    def close(self) -> None:
        self.file.close()


def _load_event_parts(con: duckdb.DuckDBPyConnection, path: Path) -> tuple[dict, list[tuple[str, str]]]:
    """Read the events into the view _kineto_events; returns the top-level metadata and diagnostics to add.

    The array is decompressed into part files, each parsed by DuckDB into a table of its own on
    another core while the next is decompressed (the last once the file ends); the view holds the
    parts in file order. A trace that needs repairs (invalid UTF-8, an array cut off by a killed
    profiler) or whose parts do not parse is read again as one file, where the repairs and exact
    error messages live.
    """
    cores = memory.cores()
    # while this thread decompresses, the parts take the other cores; then every core
    while_decompressing = max(1, cores - 1)
    gate = threading.Semaphore(while_decompressing)
    with tempfile.TemporaryDirectory(prefix="traceview-") as tmp:
        parsed: list[Future] = []
        with db.cursor_pool(con, cores) as submit:
            def parse(part: Path) -> None:
                parsed.append(submit(_parse_part, part, len(parsed), gate, parts.struct_args))

            parts = _PartFiles(Path(tmp), parse)
            try:
                meta, cuts = copy_events(path, parts)
            finally:
                parts.close()
                if cores > while_decompressing:
                    gate.release(cores - while_decompressing)
            if cuts is None and len(parts.paths) > 1:
                parse(parts.paths[-1])
        if (len(parsed) == len(parts.paths) and cuts is None and all(f.result() is None for f in parsed)
                and parts.struct_args):
            _view_parts(con, len(parsed))
            return meta, []
        _drop_events(con)
        if len(parts.paths) == 1:
            events_file = parts.paths[0]
        else:
            events_file = Path(tmp) / "events.json"
            with events_file.open("wb") as sink:
                meta, cuts = copy_events(path, sink)
        if cuts is None:
            notes = _load_events(con, events_file, path, parts.struct_args)
        else:
            notes = _salvage_events(con, events_file, path, cuts, parts.struct_args)
    _view_parts(con, 1)
    return meta, notes


def _parse_part(con: duckdb.DuckDBPyConnection, part: Path, index: int,
                gate: threading.Semaphore, struct_args: bool) -> duckdb.Error | None:
    """One part's events into its table, in the main schema (a temporary table is its cursor's alone), once
    `gate` lets it run; the error of a part that does not parse is returned, not raised: the trace is then
    read as one file."""
    with gate:
        try:
            _create_events_table(con, index, part, EVENT_BYTES, struct_args)
        except duckdb.Error as exc:
            return exc
    return None


def _view_parts(con: duckdb.DuckDBPyConnection, parts: int) -> None:
    """_kineto_events: the parts' events in file order (a view: copying them costs a third of their parse)."""
    con.execute("CREATE OR REPLACE TEMP VIEW _kineto_events AS "
                + " UNION ALL ".join(f"SELECT * FROM {db.ident(PART_TABLE + str(i))}" for i in range(parts)))


def _drop_events(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the view _kineto_events and every part table it may read."""
    con.execute("DROP VIEW IF EXISTS _kineto_events")
    for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE starts_with(table_name, ?)",
                               [PART_TABLE]).fetchall():
        con.execute(f"DROP TABLE {db.ident(name)}")


def _salvage_events(con, events_file: Path, path: Path, cuts: list[int],
                    struct_args: bool) -> list[tuple[str, str]]:
    """Keep the complete events of a trace whose traceEvents array was never closed.

    A profiler killed mid-write leaves a valid prefix; cutting after the last complete event and
    closing the array recovers everything it wrote. Each candidate cut is tried, latest first.
    """
    for cut in cuts:
        with events_file.open("r+b") as f:
            f.truncate(cut)
            f.seek(cut)
            f.write(b"]")
        try:
            notes = _load_events(con, events_file, path, struct_args)
        except TraceviewError:
            continue
        kept = con.execute(f"SELECT count(*) FROM {db.ident(PART_TABLE + '0')}").fetchall()[0][0]
        message = (f"the file ends inside traceEvents (profiler killed while writing?): kept the {kept} "
                   "complete events before the cut; later events are missing")
        return [*notes, ("truncated_trace", message)]
    raise TraceviewError(f"{path}: truncated trace: the traceEvents array is never closed "
                         "and no complete event could be recovered")


def _load_events(con: duckdb.DuckDBPyConnection, events_file: Path, path: Path,
                 struct_args: bool) -> list[tuple[str, str]]:
    """Read the events into _kineto_events; returns diagnostics (code, message) to add.

    With `struct_args` the struct form is tried first; where it fails, the JSON form reads the file and
    gives the errors. DuckDB rejects invalid UTF-8, which real traces carry in truncated kernel names: the
    file is then rewritten with U+FFFD replacements and read again, with an `invalid_utf8` diagnostic.
    """
    if struct_args:
        try:
            _read_events_file(con, events_file, EVENT_BYTES, True)
            return []
        except duckdb.Error:
            pass
    try:
        _read_events_file_any_size(con, events_file)
        return []
    except duckdb.Error as exc:
        message = str(exc).splitlines()[0]
        if "invalid UTF-8" not in message:
            raise _read_error(path, exc) from None
    _replace_invalid_utf8(events_file)
    try:
        _read_events_file_any_size(con, events_file)
    except duckdb.Error as exc:
        raise _read_error(path, exc) from None
    return [("invalid_utf8", "trace holds bytes that are not UTF-8; they were replaced with U+FFFD")]


def _read_error(path: Path, exc: duckdb.Error) -> TraceviewError:
    """A failed read: the trace's fault, unless DuckDB ran out of memory (the limit's, said so)."""
    if memory.is_out_of_memory(exc):
        return TraceviewError(f"{path}: {memory.out_of_memory_message(exc)}")
    return TraceviewError(f"{path}: invalid trace JSON ({_clean_duckdb_message(str(exc).splitlines()[0])})")


def _clean_duckdb_message(message: str) -> str:
    """DuckDB's message without the temporary file's name, saying where in traceEvents it failed."""
    message = re.sub(r"^[A-Za-z ]+Error: ", "", message)
    message = re.sub(r' in file "[^"]*"', "", message).strip().rstrip(".").strip()
    at = _DUCKDB_AT_BYTE.search(message)
    if at:
        rest = message[at.end():].lstrip(": ")
        message = f"traceEvents record {at.group(2)}, byte {at.group(1)} of the array" + (f": {rest}" if rest else "")
    return message.replace(", in record/value", " in traceEvents record")


def _replace_invalid_utf8(events_file: Path) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fixed = events_file.with_suffix(".utf8.json")
    with events_file.open("rb") as src, fixed.open("w", encoding="utf-8") as dst:
        while chunk := src.read(READ_CHUNK):
            dst.write(decoder.decode(chunk))
        dst.write(decoder.decode(b"", final=True))
    os.replace(fixed, events_file)


def _read_events_file_any_size(con: duckdb.DuckDBPyConnection, events_file: Path) -> None:
    """Read with DuckDB's usual event-size limit, which sizes its buffers, and again with a far larger
    one if a single event exceeds it (a huge `args`): a large limit costs about 400 MB of peak memory, more
    than a small trace's default memory limit leaves, so that read may use the machine's ceiling."""
    try:
        _read_events_file(con, events_file)
    except duckdb.Error as exc:
        # under a small limit DuckDB's buffer growth for the large event fails first
        if "maximum_object_size" not in str(exc) and "failed to allocate" not in str(exc):
            raise
        memory.widen_for_parse(con)
        _read_events_file(con, events_file, LARGE_EVENT_BYTES)


def _read_events_file(con: duckdb.DuckDBPyConnection, events_file: Path,
                      max_event_bytes: int = EVENT_BYTES, struct_args: bool = False) -> None:
    """Parse the whole events file into the first part's table."""
    _create_events_table(con, 0, events_file, max_event_bytes, struct_args)


def _create_events_table(con: duckdb.DuckDBPyConnection, index: int, events_file: Path, max_event_bytes: int,
                         struct_args: bool) -> None:
    """Parse one file of events into the part table `index`, with `args` read as a struct or as JSON text."""
    con.execute(f"CREATE OR REPLACE TABLE {db.ident(PART_TABLE + str(index))} AS {_events_sql(struct_args)}",
                _events_params([str(events_file)], max_event_bytes, struct_args))


def _events_sql(struct_args: bool) -> str:
    """The events of the JSON files listed in $files, with the argument values we read, each `arg_<name>` as
    text (None where the event lacks it) and pid/tid as text; _events_params gives the parameters: the columns
    and their types, the argument keys, the legacy category names and the event size limit. With
    `struct_args`, `args` is read as STRUCT_EVENT_COLUMNS' struct, else as JSON text, whose values
    json_extract_string returns: the same text either way."""
    if struct_args:
        args_sql = ", ".join(f"{_struct_arg_sql(name)} AS {db.ident('arg_' + name)}" for name in ARG_KEYS)
        values_sql, hosts_sql = "", "pid, tid"
    else:
        args_sql = ", ".join(f"a[$at_{name}] AS {db.ident('arg_' + name)}" for name in ARG_KEYS)
        values_sql = ", json_extract_string(args, $arg_paths) AS a"
        hosts_sql = "json_extract_string(pid, '$') AS pid, json_extract_string(tid, '$') AS tid"
    legacy_sql = " ".join(f"WHEN $legacy_{i} THEN $category_{i}" for i in range(len(LEGACY_CATEGORIES)))
    return f"""
        SELECT ph, coalesce(map_cat, cat) AS cat, name, {hosts_sql}, ts, dur, {args_sql}
        FROM (
            SELECT *{values_sql}, CASE cat {legacy_sql} END AS map_cat
            FROM read_json($files, format = 'array', columns = $columns, maximum_object_size = $max_event_bytes)
            WHERE ph IN ('X', 'i', 'I')
        )
        """


def _struct_arg_sql(name: str) -> str:
    """One argument of the struct form as the text json_extract_string gives."""
    if name not in STRUCT_ARG_KEYS:
        return "NULL::VARCHAR"
    value_sql = f"args[$key_{name}]"
    if name in ARGS_KEPT_AS_TEXT:
        return (f"CASE WHEN starts_with({value_sql}, '\"') THEN json_extract_string({value_sql}, '$') "
                f"ELSE {value_sql}::VARCHAR END")
    return value_sql


def _events_params(files: list[str], max_event_bytes: int, struct_args: bool) -> dict:
    """The parameters of _events_sql(struct_args) for these files."""
    if struct_args:
        keys = {"columns": STRUCT_EVENT_COLUMNS, **{f"key_{name}": key for name, key in STRUCT_ARG_KEYS.items()}}
    else:
        keys = {"columns": EVENT_COLUMNS, "arg_paths": [f"$.{json.dumps(key)}" for key in ARG_KEYS.values()],
                **{f"at_{name}": i for i, name in enumerate(ARG_KEYS, 1)}}
    return {"files": files, "max_event_bytes": max_event_bytes, **keys,
            **{f"legacy_{i}": legacy for i, legacy in enumerate(LEGACY_CATEGORIES)},
            **{f"category_{i}": category for i, category in enumerate(LEGACY_CATEGORIES.values())}}


def _insert_trace_info(con, path: Path, meta: dict, rank: int, base_ns: int, first_ts: Decimal | None,
                       world_size: int | None) -> None:
    if base_ns or (first_ts is not None and first_ts > EPOCH_2001_US):
        time_base, origin = "unix_epoch", 0
    else:
        time_base, origin = "profiler", None
    version = meta.get("schemaVersion")
    con.execute(
        "INSERT INTO trace_info VALUES (?, 'kineto', 'pytorch-profiler', ?, NULL, ?, ?, ?, ?, ?, NULL, NULL)",
        [rank, None if version is None else str(version), str(path.resolve()), path.stat().st_size,
         world_size, time_base, origin],
    )


def _insert_devices(con, meta: dict, rank: int) -> None:
    props = meta.get("deviceProperties")
    rows = []
    for index, dev in enumerate(props if isinstance(props, list) else []):
        if not isinstance(dev, dict):
            continue
        rows.append([
            rank,
            _int_or_none(dev.get("id")) if dev.get("id") is not None else index,
            str(dev.get("name") or "").strip(),
            _int_or_none(dev.get("numSms")),
            _int_or_none(dev.get("totalGlobalMem")),
            _int_or_none(dev.get("computeMajor")),
            _int_or_none(dev.get("computeMinor")),
            _int_or_none(dev.get("warpSize")),
        ])
    db.insert_rows(con, "devices", [[*row[:7], None, None, None, row[7]] for row in rows])


def _stage_events(con: duckdb.DuckDBPyConnection, rank: int, base_ns: int, origin: Decimal) -> None:
    """Split the raw events into the staged contract tables, with times in integer ns. `origin`, any time in µs
    (the trace's first), only makes the conversion fast."""
    params = {"rank": rank, "base_ns": base_ns, "origin": origin, "origin_ns": int(origin * 1000),
              "beyond_ns": BEYOND_NS}
    # ts and dur are exact decimals with 3 places, so the end in ns is the start plus the duration, each exact; the
    # start computed once (DuckDB shares the repeated expression). A DECIMAL(38,3) cast to BIGINT divides 128-bit
    # integers, which cost 0.2 s per million events; DECIMAL(18,3) is a BIGINT, so a time within 10^12 µs of the
    # origin and a duration under 10^12 µs are converted through it (the 10x vLLM trace's 1.3 M ranges:
    # 0.28 -> 0.06 s for their starts), and only the others as DECIMAL(38,3). A time BIGINT ns cannot hold
    # becomes BEYOND_NS (its sign kept), which drop_implausible_times drops with its diagnostic
    start_sql = """CASE WHEN ts IS NOT NULL THEN coalesce(
        TRY($base_ns::BIGINT + $origin_ns::BIGINT
            + CAST(CAST(TRY_CAST(ts - $origin::DECIMAL(38,3) AS DECIMAL(15,3)) AS DECIMAL(18,3)) * 1000 AS BIGINT)),
        TRY($base_ns::BIGINT + CAST(ts * 1000 AS BIGINT)),
        sign(ts)::BIGINT * $beyond_ns::BIGINT) END"""
    dur_sql = """coalesce(CAST(CAST(TRY_CAST(dur AS DECIMAL(15,3)) AS DECIMAL(18,3)) * 1000 AS BIGINT),
                          TRY(CAST(dur * 1000 AS BIGINT)), $beyond_ns::BIGINT)"""
    times_sql = f"""
        {start_sql} AS start_ns,
        CASE WHEN ts IS NOT NULL
             THEN coalesce(TRY({start_sql} + CASE WHEN dur > 0 THEN {dur_sql} ELSE 0 END), $beyond_ns::BIGINT)
        END AS end_ns"""
    host_ids_sql = "TRY_CAST(pid AS BIGINT) AS pid, TRY_CAST(tid AS BIGINT) AS tid"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _stage_api_calls AS
        SELECT $rank AS rank, {host_ids_sql}, name,
               CASE WHEN cat = 'cuda_driver' THEN 'driver' ELSE 'runtime' END AS api, {times_sql},
               TRY_CAST(arg_correlation AS BIGINT) AS correlation_id,
               TRY_CAST(coalesce(arg_external_id, arg_legacy_external_id) AS BIGINT) AS external_id
        FROM _kineto_events WHERE ph = 'X' AND cat IN ('cuda_runtime', 'cuda_driver')
        """,
        params,
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _stage_kernels AS
        SELECT $rank AS rank,
               coalesce(TRY_CAST(arg_device AS INTEGER), TRY_CAST(pid AS INTEGER)) AS device_id,
               coalesce(TRY_CAST(arg_stream AS BIGINT),
                        TRY_CAST(regexp_extract(tid, '([0-9]+)', 1) AS BIGINT)) AS stream_id,
               NULL::BIGINT AS pid, {times_sql}, coalesce(name, '') AS name, NULL::VARCHAR AS short_name,
               TRY_CAST(json_extract_string(arg_grid, '$[0]') AS BIGINT) AS grid_x,
               TRY_CAST(json_extract_string(arg_grid, '$[1]') AS BIGINT) AS grid_y,
               TRY_CAST(json_extract_string(arg_grid, '$[2]') AS BIGINT) AS grid_z,
               TRY_CAST(json_extract_string(arg_block, '$[0]') AS BIGINT) AS block_x,
               TRY_CAST(json_extract_string(arg_block, '$[1]') AS BIGINT) AS block_y,
               TRY_CAST(json_extract_string(arg_block, '$[2]') AS BIGINT) AS block_z,
               TRY_CAST(arg_registers AS BIGINT) AS registers_per_thread,
               TRY_CAST(arg_shared_memory AS BIGINT) AS shared_memory_bytes,
               TRY_CAST(arg_correlation AS BIGINT) AS correlation_id,
               (arg_kind = 'Dispatch Task' OR TRY_CAST(arg_graph_node_id AS BIGINT) > 0) AS graph_replay,
               TRY_CAST(arg_graph_id AS BIGINT) AS graph_id,
               TRY_CAST(arg_graph_node_id AS BIGINT) AS graph_node_id,
               TRY_CAST(coalesce(arg_external_id, arg_legacy_external_id) AS BIGINT) AS external_id
        FROM _kineto_events WHERE ph = 'X' AND cat = 'kernel'
        """,
        params,
    )
    db.add_short_names(con, "_stage_kernels")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _stage_memops AS
        WITH launches AS (
            SELECT correlation_id, any_value(pid) AS pid FROM _stage_api_calls
            WHERE correlation_id IS NOT NULL GROUP BY correlation_id
        ),
        m AS (
            SELECT CASE WHEN cat = 'gpu_memcpy' THEN 'memcpy' ELSE 'memset' END AS kind, name, {times_sql},
                   -- regexp_extract gives '' where the name does not match, which coalesce would keep
                   coalesce(nullif(regexp_extract(name, '^Memcpy (\\S+)', 1), ''), arg_kind) AS copy_kind,
                   regexp_extract(name, '\\((.+) -> ', 1) AS src_kind,
                   coalesce(nullif(regexp_extract(name, '-> (.+)\\)$', 1), ''),
                            regexp_extract(name, '^Memset \\((.+)\\)$', 1)) AS dst_kind,
                   TRY_CAST(coalesce(arg_bytes, arg_size) AS BIGINT) AS bytes,
                   coalesce(TRY_CAST(arg_device AS INTEGER), TRY_CAST(pid AS INTEGER)) AS device_id,
                   TRY_CAST(arg_stream AS BIGINT) AS stream_id,
                   TRY_CAST(arg_correlation AS BIGINT) AS correlation_id
            FROM _kineto_events WHERE ph = 'X' AND cat IN ('gpu_memcpy', 'gpu_memset')
        )
        SELECT $rank AS rank, m.kind,
               CASE WHEN m.kind = 'memcpy' THEN nullif(m.copy_kind, '') END AS copy_kind, m.bytes,
               nullif(m.src_kind, '') AS src_kind, nullif(m.dst_kind, '') AS dst_kind,
               m.device_id, m.stream_id, l.pid, m.start_ns, m.end_ns, m.correlation_id, m.name
        FROM m LEFT JOIN launches l USING (correlation_id)
        """,
        params,
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _stage_ranges AS
        SELECT $rank AS rank, {host_ids_sql}, coalesce(name, '') AS name,
               CASE WHEN cat = 'user_annotation' AND name GLOB 'ProfilerStep#*' THEN 'profiler_step' ELSE cat END AS kind,
               NULL::VARCHAR AS domain, {times_sql},
               TRY_CAST(coalesce(arg_external_id, arg_legacy_external_id) AS BIGINT) AS external_id,
               arg_input_dims AS input_dims, arg_input_types AS input_types, arg_input_values AS input_values,
               TRY_CAST(arg_flops AS DOUBLE) AS flops
        FROM _kineto_events WHERE ph = 'X' AND list_contains($range_categories, cat)
        """,
        {**params, "range_categories": list(RANGE_CATEGORIES)},
    )


def _add_diagnostics(con: duckdb.DuckDBPyConnection, rank: int) -> None:
    counts = dict(con.execute("SELECT cat, count(*) FROM _kineto_events GROUP BY cat").fetchall())
    if not counts.get("kernel"):
        if counts.get("cuda_profiler_range"):
            message = (f"trace holds {counts['cuda_profiler_range']} CUPTI range-profiler events "
                       "instead of kernel events: kernel timing was not recorded")
        else:
            message = "trace has no GPU kernel events: CPU-only run, or CUDA activity tracing was off"
        db.add_diagnostic(con, rank, "ingest", "warning", "no_kernels", message)
    negative = con.execute("SELECT count(*) FROM _kineto_events WHERE dur < 0").fetchall()[0][0]
    if negative:
        db.add_diagnostic(con, rank, "ingest", "warning", "negative_durations",
                          f"{negative} events have negative durations; they are treated as instants")


READER = Reader(
    name="kineto",
    title="PyTorch profiler (Kineto)",
    description="a PyTorch profiler JSON trace with traceEvents, plain or gzip",
    suffixes=(".json", ".json.gz", ".gz"),
    sniff=sniff,
    read=read,
    # one file is one process, and its kernels carry the GPU's pid: correlation ids alone are unique
    launch_link=db.LaunchLink.CORRELATION,
    sources={
        "trace_info": "schemaVersion, distributedInfo, baseTimeNanoseconds",
        "devices": "deviceProperties",
        "kernels": "`kernel` events (legacy `Kernel`)",
        "memops": "`gpu_memcpy`, `gpu_memset` (legacy `Memcpy`, `Memset`)",
        "api_calls": "`cuda_runtime`, `cuda_driver` (legacy `Runtime`)",
        "ranges": "`cpu_op` (legacy `Operator`), `user_annotation`, `gpu_user_annotation`, `python_function`, "
                  "`ProfilerStep#N`",
        "diagnostics": "missing kernel events, range-profiler mode, negative durations",
    },
)
