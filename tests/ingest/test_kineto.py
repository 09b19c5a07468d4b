"""Kineto JSON ingest, checked against facts read by hand from real traces."""

from __future__ import annotations

import gzip
import json

import pytest

import traceview
from conftest import DLRM_DIR, SHARED_TRACES, VLLM_H100, ingested, requires_shared

pytestmark = requires_shared
TORCH = SHARED_TRACES / "torch"


def test_vllm_h100_graph_replays_and_exact_totals() -> None:
    trace = ingested(VLLM_H100)
    rows = dict(trace.con.execute("SELECT launch_kind, count(*) FROM kernels GROUP BY ALL").fetchall())
    assert rows == {"graph": 8667, "eager": 4841}
    assert trace.scalar("SELECT sum(dur_ns) FROM kernels") == 233_133_565
    assert trace.scalar("SELECT count(*) FROM kernels WHERE launch_kind = 'graph' AND external_id IS NOT NULL") == 0
    assert trace.scalar("SELECT count(DISTINCT correlation_id) FROM kernels WHERE launch_kind = 'graph'") == 729
    assert trace.scalar("SELECT count(*) FROM kernels WHERE launch_api IS NULL") == 0


def test_vllm_h100_timestamps_are_exact_nanoseconds() -> None:
    """`ts` 3676599926928.728 µs after baseTimeNanoseconds is exactly ...928728 ns: no µs rounding."""
    trace = ingested(VLLM_H100)
    with gzip.open(VLLM_H100, "rt") as f:
        data = json.load(f)
    first = min((e for e in data["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    assert first["ts"] == 3676599926928.728
    expected = data["baseTimeNanoseconds"] + 3_676_599_926_928_728
    assert trace.scalar("SELECT min(start_ns) FROM kernels") == expected
    assert trace.scalar("SELECT dur_ns FROM kernels WHERE kernel_id = 0") == 3200


def test_times_far_from_the_first_are_exact_nanoseconds(tmp_path) -> None:
    """Times within 10^12 µs of the first are converted through 64-bit decimals, the rest through 128-bit ones:
    an epoch time, a negative one and times either side of the bound are all exact. Times no 64-bit nanosecond
    count holds (a corrupt trace's) are dropped with the diagnostic, not a failed load."""
    from decimal import Decimal

    import traceview

    times = [("0.001", "1.5"), ("1733000000000000.123", "0.001"), ("-5.5", "2"), ("12.25", "0.004"),
             ("999999999999.999", "999999999999.999"), ("1000000000000.002", "0")]
    corrupt = [("100000000000000000", "1"), ("-100000000000000000", "1"), ("3", "100000000000000000"),
               ("-90000000000000000000000000000000000", "1")]
    text = ",".join(f'{{"ph": "X", "cat": "kernel", "name": "k{i}", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, '
                    f'"args": {{"correlation": {i}, "device": 0, "stream": 7}}}}'
                    for i, (ts, dur) in enumerate(times + corrupt))
    path = tmp_path / "far.json"
    path.write_text(f'{{"baseTimeNanoseconds": 1000, "traceEvents": [{text}]}}')
    trace = traceview.load(path)
    rows = trace.con.execute("SELECT start_ns, end_ns FROM kernels ORDER BY correlation_id").fetchall()
    assert rows == [(1000 + int(Decimal(ts) * 1000), 1000 + int((Decimal(ts) + Decimal(dur)) * 1000))
                    for ts, dur in times]
    assert trace.scalar("SELECT message FROM diagnostics WHERE code = 'implausible_times'").startswith("4 events")


def test_vllm_h100_metadata_devices_and_rank() -> None:
    trace = ingested(VLLM_H100)
    info = trace.sql("SELECT * FROM trace_info").to_dicts()[0]
    assert (info["rank"], info["world_size"], info["time_base"]) == (0, 4, "unix_epoch")
    devices = trace.sql("SELECT name, sm_count, compute_major FROM devices").rows()
    assert len(devices) == 8 and set(devices) == {("NVIDIA H100 80GB HBM3", 132, 9)}


def test_api_names_keep_their_own_version_suffix() -> None:
    """`_v2` is part of the CUDA API's name; only nsys's four-digit tags are stripped."""
    names = set(ingested(VLLM_H100).sql("SELECT DISTINCT name FROM api_calls")["name"])
    assert "cudaStreamGetCaptureInfo_v2" in names
    assert {"cudaLaunchKernel", "cudaGraphLaunch", "cuLaunchKernel"} <= names


def test_vllm_execute_model_windows_are_python_function_ranges() -> None:
    trace = ingested(VLLM_H100)
    windows = trace.scalar(
        "SELECT count(*) FROM ranges WHERE kind = 'python_function' AND name GLOB '*gpu_model_runner.py*: execute_model'"
    )
    assert windows == 11


def test_range_ids_and_depths_belong_to_their_own_ranges() -> None:
    """HF BERT's 1,866 ranges are listed out of start order, so the row a range is staged in is not its id: each
    range's id is its place in (start, end descending, kind, name, pid, tid), and its depth is the count, found by a
    self-join, of the ranges of its thread and kind open just before it opens (opened earlier, or at the same
    instant with a lower id; ending after it opens, or a zero-length range at that instant)."""
    trace = ingested(TORCH / "tracelens__h100_hf_bert-small.json.gz")
    misnumbered = trace.scalar("""
        SELECT count(*) FROM (
            SELECT range_id, row_number() OVER (ORDER BY start_ns, end_ns DESC, kind, name, pid, tid) - 1 AS place
            FROM ranges)
        WHERE range_id <> place""")
    depths = trace.con.execute("""
        WITH open_before AS (
            SELECT c.range_id, count(*) AS open
            FROM ranges c
            JOIN ranges p ON p.rank = c.rank AND p.pid IS NOT DISTINCT FROM c.pid AND p.tid IS NOT DISTINCT FROM c.tid
                         AND p.kind = c.kind AND p.range_id <> c.range_id
            WHERE (p.start_ns, p.range_id) < (c.start_ns, c.range_id)
              AND (p.end_ns > c.start_ns OR (p.end_ns = c.start_ns AND p.start_ns = p.end_ns))
            GROUP BY c.range_id)
        SELECT count(*), count(*) FILTER (WHERE r.depth <> coalesce(o.open, 0)), max(r.depth)
        FROM ranges r LEFT JOIN open_before o USING (range_id)""").fetchall()
    assert misnumbered == 0
    assert depths == [(1866, 0, 35)]


def test_legacy_2021_categories_map_to_the_modern_schema() -> None:
    trace = ingested(TORCH / "kineto-tbplugin__resnet50_2021_legacy.pt.trace.json.gz")
    assert trace.scalar("SELECT count(*) FROM kernels") == 8772
    assert trace.scalar("SELECT count(*) FROM kernels WHERE launch_api IS NULL") == 0
    assert trace.scalar("SELECT count(*) FROM ranges WHERE kind = 'cpu_op' AND external_id IS NOT NULL") == 23646
    assert trace.scalar("SELECT count(*) FROM memops WHERE kind = 'memcpy'") > 0


def test_amd_hip_graph_replays_are_graph_launched() -> None:
    trace = ingested(TORCH / "tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz")
    rows = dict(trace.con.execute("SELECT launch_api, count(*) FROM kernels WHERE launch_kind = 'graph' GROUP BY ALL").fetchall())
    assert rows == {"hipGraphLaunch": 361}
    assert trace.scalar("SELECT name FROM devices LIMIT 1") == ""


def test_cpu_only_trace_has_no_devices_and_says_so() -> None:
    trace = ingested(TORCH / "hta__cpu_only_rank34.json.gz")
    assert trace.scalar("SELECT count(*) FROM devices") == 0
    assert trace.scalar("SELECT rank FROM trace_info") == 34
    assert trace.scalar("SELECT world_size FROM trace_info") == 300


def test_trace_with_lists_after_trace_events_keeps_its_metadata() -> None:
    """Some traces carry an INFO log list after traceEvents; the array end must not be taken from it."""
    trace = ingested(TORCH / "hta__triton_example_a100.json.gz")
    assert trace.scalar("SELECT count(*) FROM kernels") == 1
    assert trace.scalar("SELECT time_base FROM trace_info") == "unix_epoch"


def test_rank_directory_is_one_database_with_a_rank_column() -> None:
    trace = ingested(DLRM_DIR)
    per_rank = dict(trace.con.execute("SELECT rank, count(*) FROM kernels GROUP BY rank").fetchall())
    expected = {rank: ingested(path).scalar("SELECT count(*) FROM kernels")
                for rank, path in enumerate(sorted(DLRM_DIR.glob("worker*.json")))}
    assert per_rank == expected
    assert sum(per_rank.values()) == 245 + 310 + 246 + 315 + 251 + 245 + 246 + 246
    assert trace.scalar("SELECT count(DISTINCT world_size) FROM trace_info") == 1


@pytest.mark.parametrize("name", ["hta__sampled_rank-0.json.gz", "hta__sampled_rank-1.json.gz"])
def test_integer_microsecond_traces_without_device_properties(name: str) -> None:
    trace = traceview.load(TORCH / name)  # as ingested: the analysis adds a device row for the used id
    assert trace.scalar("SELECT count(*) FROM devices") == 0
    assert trace.scalar("SELECT min(start_ns) % 1000 FROM kernels") == 0


TABLES = ("trace_info", "devices", "kernels", "memops", "api_calls", "ranges", "diagnostics")


def _contents(trace) -> dict[str, list[tuple]]:
    return {table: trace.con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall() for table in TABLES}


@pytest.mark.slow(seconds=20)
@pytest.mark.parametrize("trace_path", [VLLM_H100, DLRM_DIR], ids=["vllm-h100", "dlrm-8-ranks"])
def test_events_parsed_in_parts_give_the_same_tables_as_one_file(trace_path, monkeypatch) -> None:
    """Cutting the array into part files (parsed in parallel) must not change a single row."""
    import traceview
    from traceview.ingest import kineto

    monkeypatch.setattr(kineto, "PART_BYTES", 1 << 40)
    whole = _contents(traceview.load(trace_path))
    parts, whole_files = [], []
    real_parse, real_read = kineto._parse_part, kineto._read_events_file
    monkeypatch.setattr(kineto, "_parse_part", lambda con, part, *rest: parts.append(part) or real_parse(con, part, *rest))
    monkeypatch.setattr(kineto, "_read_events_file", lambda con, file, *rest: whole_files.append(file) or real_read(con, file, *rest))
    monkeypatch.setattr(kineto, "PART_BYTES", 64 << 10)
    assert _contents(traceview.load(trace_path)) == whole
    files = len(list(trace_path.iterdir())) if trace_path.is_dir() else 1
    assert len(parts) > 2 * files and not whole_files  # every file in parts, none read whole


@pytest.mark.parametrize("cores", [1, 3])
def test_parts_parsed_while_decompressing_keep_the_file_order(tmp_path, monkeypatch, cores) -> None:
    """Parts parse as they are written (on this thread with one core) and the view reads them in file order."""
    import duckdb

    from traceview import memory
    from traceview.ingest import kineto

    monkeypatch.setattr(memory, "cores", lambda: cores)
    monkeypatch.setattr(kineto, "PART_BYTES", 4000)
    path = tmp_path / "parts.json.gz"
    with gzip.open(path, "wt") as f:  # start times run backwards: only the file says the order
        json.dump({"traceEvents": _kernel_events(3000, start=lambda i: 10_000 - i)}, f)
    con = duckdb.connect()
    meta, notes = kineto._load_event_parts(con, path)
    assert meta == {} and notes == []
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE starts_with(table_name, '_kineto_part_')").fetchall()[0][0] > 20
    assert [name for (name,) in con.execute("SELECT name FROM _kineto_events").fetchall()] == [f"k{i}" for i in range(3000)]
    kineto._drop_events(con)
    assert con.execute("SELECT count(*) FROM duckdb_tables()").fetchall()[0][0] == 0


def _kernel_events(count: int, name=lambda i: f"k{i}", args=lambda i: {}, start=lambda i: 1000 + i) -> list[dict]:
    return [{"ph": "X", "cat": "kernel", "name": name(i), "pid": 0, "tid": 7, "ts": start(i), "dur": 1,
             "args": {"correlation": i, "device": 0, "stream": 7, **args(i)}} for i in range(count)]


def test_a_cut_inside_an_event_falls_back_to_one_file(tmp_path, monkeypatch) -> None:
    """`},{` also occurs inside args (a list of objects); a part cut there does not parse, the whole file does."""
    import traceview
    from traceview.ingest import kineto

    monkeypatch.setattr(kineto, "PART_BYTES", 1000)
    parts, whole_files = [], []
    real_parse, real_read = kineto._parse_part, kineto._read_events_file
    monkeypatch.setattr(kineto, "_parse_part", lambda con, part, *rest: parts.append(part) or real_parse(con, part, *rest))
    monkeypatch.setattr(kineto, "_read_events_file", lambda con, file, *rest: whole_files.append(file) or real_read(con, file, *rest))
    events = _kernel_events(2000, args=lambda i: {"blocks": [{"x": i}, {"y": i}]})
    path = tmp_path / "nested.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = traceview.load(path)
    assert len(parts) > 1 and len(whole_files) == 1  # the parts failed, the whole file did not
    assert trace.scalar("SELECT count(*) FROM duckdb_tables() WHERE starts_with(table_name, '_kineto')") == 0
    assert trace.scalar("SELECT count(*) FROM kernels") == 2000
    assert trace.scalar("SELECT sum(correlation_id) FROM kernels") == sum(range(2000))


def test_a_trace_the_parts_cannot_parse_falls_back_to_the_file_and_its_repairs(tmp_path, monkeypatch) -> None:
    """Invalid UTF-8 fails the parallel parse; the one-file path repairs it and says so."""
    import traceview
    from traceview.ingest import kineto

    monkeypatch.setattr(kineto, "PART_BYTES", 64 << 10)
    events = _kernel_events(20000, name=lambda i: f"k\udcff{i}" if i == 5000 else f"k{i}")
    path = tmp_path / "bad_utf8.pt.trace.json"
    path.write_bytes(json.dumps({"traceEvents": events}, ensure_ascii=False).encode("utf-8", "surrogateescape"))
    trace = traceview.load(path)
    assert trace.scalar("SELECT count(*) FROM kernels") == 20000
    assert trace.scalar("SELECT count(*) FROM diagnostics WHERE code = 'invalid_utf8'") == 1
    assert trace.scalar("SELECT name FROM kernels WHERE correlation_id = 5000") == "k\ufffd5000"


def _tricky_events() -> list[dict]:
    """Events whose arguments are of every JSON type, bare numbers DuckDB writes in other text (`1e+16`), strings
    with escapes, keys missing, and a key that differs from a read one only by case."""
    def event(cat: str, name: str, ts: int, args, pid=0, tid=7) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": 2, "args": args}
    return [
        event("cpu_op", "aten::mm", 10, {"External id": 1e16, "Input Dims": 1e-7, "Input type": ["float", "\"q\""],
                                         "Concrete Inputs": "a\"b\u00e9", "flops": 1e300}, pid=1, tid="main"),
        event("cpu_op", "aten::add", 20, {"External id": 5, "EXTERNAL ID": 6, "Input Dims": [[1, 2], [], [3e21]],
                                          "Concrete Inputs": ["", "0.5"], "flops": 1.5e12}, pid="1", tid=1.0),
        event("cuda_runtime", "cudaLaunchKernel", 11, {"correlation": 1e16, "External id": 1e16}, pid=1, tid="main"),
        event("kernel", "k", 30, {"correlation": 1e16, "device": 0.0, "stream": "7", "grid": [1, 2.0, 1e21],
                                  "block": "[4, 1, 1]", "registers per thread": True, "shared memory": None,
                                  "graph id": 1e300, "kind": "Dispatch Task"}),
        event("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 40, {"bytes": 1e16, "kind": 1e300, "device": 0}),
        event("gpu_memset", "Memset (Device)", 50, {"size": "5", "kind": {"k": [1, 2]}, "device": "0"}),
        event("kernel", "k2", 60, {}),
    ]


@pytest.mark.parametrize("trace", ["vllm-h100", "tricky-args"])
def test_args_read_as_a_struct_give_the_tables_json_gives(tmp_path, monkeypatch, trace) -> None:
    """Every table must be the same whether `args` is read as a struct or as JSON text."""
    import traceview
    from traceview.ingest import kineto

    path = VLLM_H100 if trace == "vllm-h100" else tmp_path / "tricky.json"
    if trace == "tricky-args":
        path.write_text(json.dumps({"traceEvents": _tricky_events()}))
    forms = []
    real_read = kineto._read_events_file
    monkeypatch.setattr(kineto, "_read_events_file", lambda *args: forms.append(args[-1]) or real_read(*args))
    struct = _contents(traceview.load(path))
    assert forms[0] is True
    real_create = kineto._create_events_table
    monkeypatch.setattr(kineto, "_create_events_table",
                        lambda con, index, file, size, struct_args: real_create(con, index, file, size, False))
    assert struct == _contents(traceview.load(path))
    if trace == "tricky-args":
        assert struct["ranges"][0][11:] == (10**16, "1e-7", '["float","\\"q\\""]', 'a"bé', 1e300)
        assert struct["memops"][0][4] == 10**16
        assert struct["kernels"][0][19:21] == (10**16, "graph")


def test_memop_kinds_come_from_the_name_else_from_args(tmp_path) -> None:
    """A copy's kind and memories come from its name ('Memcpy HtoD (Pinned -> Device)'), a memset's memory from
    'Memset (Device)', as nsys gives them; a copy whose name does not say its kind takes `args.kind`, as ROCm
    traces write it ('HtoD')."""
    def event(cat: str, name: str, ts: int, args: dict) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 2,
                "args": {"device": 0, "stream": 7, "bytes": 64, **args}}
    path = tmp_path / "memops.json"
    path.write_text(json.dumps({"traceEvents": [
        event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 10, {"kind": "DtoD"}),
        event("gpu_memset", "Memset (Device)", 20, {}),
        event("gpu_memcpy", "hipMemcpyAsync", 30, {"kind": "DtoH"}),
        event("gpu_memcpy", "copy", 40, {}),
    ]}))
    rows = traceview.load(path).con.execute(
        "SELECT kind, copy_kind, src_kind, dst_kind FROM memops ORDER BY start_ns").fetchall()
    assert rows == [("memcpy", "HtoD", "Pinned", "Device"), ("memset", None, None, "Device"),
                    ("memcpy", "DtoH", None, None), ("memcpy", None, None, None)]


@pytest.mark.parametrize("args, expected", [
    ({"correlation": 3, "correlation": 4}, 3),  # noqa: F601 - a key twice: json_extract_string takes the first
    ("not an object", None),
], ids=["key-twice", "args-a-string"])
def test_args_the_struct_cannot_hold_are_read_as_json(tmp_path, args, expected) -> None:
    """Where DuckDB's struct read refuses an event, the JSON form reads the file, with the same values."""
    import traceview

    events = _kernel_events(50)
    path = tmp_path / "odd_args.json"
    text = json.dumps({"traceEvents": events})
    odd = '{"correlation": 3, "correlation": 4}' if isinstance(args, dict) else json.dumps(args)
    path.write_text(text.replace('"args": {"correlation": 49, "device": 0, "stream": 7}', f'"args": {odd}'))
    trace = traceview.load(path)
    assert trace.scalar("SELECT count(*) FROM kernels") == 50
    assert trace.scalar("SELECT correlation_id FROM kernels WHERE name = 'k49'") == expected


def test_a_legacy_key_in_a_late_part_reads_the_file_as_json(tmp_path, monkeypatch) -> None:
    """`external id` (2021 traces) cannot sit in the struct beside `External id`: where its text appears, even
    in the last part after the first ones were parsed as structs, the JSON form reads the file."""
    import traceview
    from traceview.ingest import kineto

    for name, size in (("PART_BYTES", 4000), ("READ_CHUNK", 4000), ("TAIL_BYTES", 1000)):
        monkeypatch.setattr(kineto, name, size)
    forms = []
    real_parse = kineto._parse_part
    monkeypatch.setattr(kineto, "_parse_part", lambda *args: forms.append(args[-1]) or real_parse(*args))
    events = _kernel_events(3000)
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5000, "dur": 1,
                   "args": {"external id": 42}})
    path = tmp_path / "legacy_key.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = traceview.load(path)
    assert forms[0] is True and forms[-1] is False
    assert trace.scalar("SELECT external_id FROM ranges WHERE name = 'aten::mm'") == 42
    assert trace.scalar("SELECT count(*) FROM kernels") == 3000


@pytest.mark.slow
def test_an_event_larger_than_the_parse_buffer_still_loads(tmp_path) -> None:
    """DuckDB's reader refuses records over its object-size limit; one huge `args` must not fail the trace."""
    import traceview

    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::cat", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
               "args": {"External id": 1, "Input Dims": [[1, 2]] * 3_000_000}}]
    events += [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 20 + i, "dur": 1,
                "args": {"correlation": i, "device": 0, "stream": 7}} for i in range(100)]
    path = tmp_path / "huge_event.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert path.stat().st_size > 17 << 20
    trace = traceview.load(path)
    assert trace.scalar("SELECT count(*) FROM kernels") == 100
    assert trace.scalar("SELECT len(input_dims) FROM ranges WHERE name = 'aten::cat'") > 16 << 20
