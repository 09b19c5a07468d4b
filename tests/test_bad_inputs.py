"""Bad inputs through the real CLI: one line on stderr naming the file and the problem, exit code 2.

Also: damaged-but-usable traces ingest with a diagnostic, the shared traces are never modified,
and hostile names in a trace cannot run script in the HTML report. docs/reliability.md has the matrix.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from commands import Ran, traceview_cli, traceview_process
from conftest import DLRM_DIR, KINETO_TRACES, NSYS_TRACES, SHARED_TRACES, checksums, corpus_audit, requires_shared
from traceview.testing import Range, llm_serving_spec, write_kineto, write_nsys

from test_html import run_chromium

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"


def assert_clean_failure(result: Ran | subprocess.CompletedProcess[str], name: str, *words: str) -> str:
    """Exit 2, exactly one stderr line that names the file and says what is wrong, no traceback."""
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert name in lines[0], lines[0]
    for word in words:
        assert word.lower() in lines[0].lower(), lines[0]
    assert "unexpected error" not in lines[0], lines[0]
    return lines[0]


def small_spec(**kwargs):
    return llm_serving_spec(prefill_batches=(2,), decode_steps=2, **kwargs)


@pytest.fixture(scope="module")
def kineto_text(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return write_kineto(small_spec(), tmp_path_factory.mktemp("k") / "ok.json", gzip=False).read_bytes()


@pytest.fixture(scope="module")
def nsys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_nsys(small_spec(), tmp_path_factory.mktemp("n") / "ok.sqlite")


# --- inputs that must fail cleanly -------------------------------------------------------------

def _gzip_bomb(path: Path, _: bytes) -> None:
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(b'{"traceEvents": [')
        for _ in range(64):
            f.write(b" " * (1 << 20))
        f.write(b"]}")


def _invalid_json(path: Path, text: bytes) -> None:
    at = text.index(b'"name": "', text.index(b'"cat": "kernel"')) + len(b'"name": "')
    path.write_bytes(text[:at] + b'bad"quote' + text[at:])


def _truncated_gzip(path: Path, text: bytes) -> None:
    data = gzip.compress(text)
    path.write_bytes(data[: len(data) // 2])


BAD_FILES = {
    # name: (file name, writer(path, valid kineto bytes), words the message must hold)
    "empty": ("empty.json", lambda p, t: p.write_bytes(b""), ["empty"]),
    "png": ("image.png", lambda p, t: p.write_bytes(PNG), ["not a trace"]),
    "text": ("notes.txt", lambda p, t: p.write_text("hello, this is not a trace\n"), ["not a trace"]),
    "random": ("noise.bin", lambda p, t: p.write_bytes(bytes(range(7, 256)) * 8), ["not a trace"]),
    "truncated_gzip": ("cut.json.gz", _truncated_gzip, ["gzip"]),
    "invalid_json": ("quote.json", _invalid_json, ["invalid", "record", "byte"]),
    "json_object": ("a.json", lambda p, t: p.write_text('{"a": 1}'), ["traceEvents"]),
    "json_list": ("list.json", lambda p, t: p.write_text("[1, 2]"), ["not a trace"]),
    "events_not_list": ("five.json", lambda p, t: p.write_text('{"traceEvents": 5}'), ["traceEvents"]),
    "gzip_bomb": ("bomb.json.gz", _gzip_bomb, ["limit", "TRACEVIEW_MAX_JSON_BYTES"]),
    "nsys_rep": ("run.nsys-rep", lambda p, t: p.write_bytes(b"\x00" * 64), ["nsys export"]),
    "qdrep": ("old.qdrep", lambda p, t: p.write_bytes(b"\x00" * 64), ["nsys export"]),
}


@pytest.mark.parametrize("command", ["info", "report"])
@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_file(case: str, command: str, kineto_text: bytes, tmp_path: Path) -> None:
    name, write, words = BAD_FILES[case]
    path = tmp_path / name
    write(path, kineto_text)
    args = [command, str(path)] + (["-o", str(tmp_path / "out.html")] if command == "report" else [])
    result = traceview_cli(*args, env={"TRACEVIEW_MAX_JSON_BYTES": str(32 << 20)})
    assert_clean_failure(result, name, *words)
    assert not (tmp_path / "out.html").exists()


@pytest.mark.parametrize("case", ["empty", "nsys_rep", "gzip_bomb"])
def test_a_bad_file_fails_cleanly_from_the_real_process(case: str, kineto_text: bytes, tmp_path: Path) -> None:
    """The same failure from `python -m traceview`: exit status 2 and one stderr line, the process's own."""
    name, write, words = BAD_FILES[case]
    path = tmp_path / name
    write(path, kineto_text)
    result = traceview_process("report", path, "-o", tmp_path / "out.html", env={"TRACEVIEW_MAX_JSON_BYTES": str(32 << 20)})
    assert_clean_failure(result, name, *words)
    assert result.stdout == "" and not (tmp_path / "out.html").exists()


def test_sqlite_that_is_not_nsys(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    assert_clean_failure(traceview_cli("info", str(path)), "app.sqlite", "not an Nsight Systems export")


@requires_shared
def test_corrupted_sqlite_page(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.sqlite"
    shutil.copy(SHARED_TRACES / "nsys" / "NVIDIA__Fuser__report2.sqlite", path)
    size = path.stat().st_size
    with path.open("r+b") as f:  # a third of the pages, from a third in, overwritten
        f.seek(size // 3 // 4096 * 4096)
        f.write(b"\xff" * (size // 3 // 4096 * 4096))
    assert_clean_failure(traceview_cli("info", str(path)), "corrupt.sqlite", "malformed")


def test_directory_without_traces(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("nothing here")
    assert_clean_failure(traceview_cli("info", str(tmp_path)), tmp_path.name, "no trace files")


def test_missing_file(tmp_path: Path) -> None:
    assert_clean_failure(traceview_cli("info", str(tmp_path / "gone.json")), "gone.json", "no such file")


@pytest.mark.parametrize("fixture", ["kineto_text", "nsys_file"])
def test_a_read_out_of_memory_blames_the_limit_not_the_trace(fixture: str, request, tmp_path: Path) -> None:
    """A limit too small to parse in is DuckDB's out-of-memory error: the trace is not called damaged or invalid."""
    trace = request.getfixturevalue(fixture)
    if isinstance(trace, bytes):
        trace = tmp_path / "ok.json"
        trace.write_bytes(request.getfixturevalue(fixture))
    line = assert_clean_failure(traceview_cli("--memory-limit", "1MB", "info", trace, cache=False), trace.name,
                                "out of memory", "--memory-limit", "used)")
    assert "damaged" not in line and "invalid" not in line


def test_an_analysis_out_of_memory_is_one_line(monkeypatch, nsys_file: Path) -> None:
    """Past the reader, DuckDB's error from any step is the same one line (exit 2), with DuckDB's figures."""
    import duckdb

    from traceview import workflow

    def exhausted(*args, **kwargs):
        raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block of size 256.0 KiB "
                                          "(408.9 MiB/409.0 MiB used)\n\nPossible solutions: ...")

    monkeypatch.setattr(workflow, "report", exhausted)
    result = traceview_cli("report", nsys_file, "-o", nsys_file.with_suffix(".html"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "traceview: out of memory: a step needed more than DuckDB's memory limit (408.9 MiB/409.0 MiB used); rerun "
        "with a larger --memory-limit (or $TRACEVIEW_MEMORY_LIMIT), or on a machine with more memory"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="running as root: root reads files whatever their permissions")
def test_unreadable_file(nsys_file: Path, tmp_path: Path) -> None:
    path = tmp_path / "locked.sqlite"
    shutil.copy(nsys_file, path)
    path.chmod(0)
    assert_clean_failure(traceview_cli("info", str(path)), "locked.sqlite", "permission denied")


@pytest.mark.parametrize("target", ["/proc/x/report.html", "under_a_file"])
def test_unwritable_output(target: str, nsys_file: Path, tmp_path: Path) -> None:
    if target == "under_a_file":
        (tmp_path / "plain").write_text("a regular file")
        target = str(tmp_path / "plain" / "report.html")
    result = traceview_cli("report", str(nsys_file), "-o", target)
    assert_clean_failure(result, "report.html")


# --- damaged but usable: exit 0 with a diagnostic -------------------------------------------------

def diagnostics(path: Path) -> dict[str, str]:
    result = traceview_cli("query", str(path), "SELECT code, message FROM diagnostics", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return {row["code"]: row["message"] for row in json.loads(result.stdout)}


def kernel_count(path: Path) -> int:
    result = traceview_cli("query", str(path), "SELECT count(*) AS n FROM kernels", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]["n"]


def test_truncated_kineto_is_salvaged(kineto_text: bytes, tmp_path: Path) -> None:
    """A killed profiler leaves traceEvents unclosed: the complete events before the cut are kept."""
    full = tmp_path / "full.json"
    full.write_bytes(kineto_text)
    cut = tmp_path / "killed.json"
    cut.write_bytes(kineto_text[: len(kineto_text) * 2 // 3])
    found = diagnostics(cut)
    assert "truncated_trace" in found and "kept the" in found["truncated_trace"]
    assert 0 < kernel_count(cut) < kernel_count(full)
    assert traceview_cli("info", str(cut)).returncode == 0


def test_truncated_kineto_without_a_complete_event(kineto_text: bytes, tmp_path: Path) -> None:
    path = tmp_path / "early.json"
    path.write_bytes(kineto_text[: kineto_text.index(b'"traceEvents"') + 40])
    assert_clean_failure(traceview_cli("info", str(path)), "early.json", "truncated")


def test_unknown_nsys_schema_version(nsys_file: Path, tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    shutil.copy(nsys_file, path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE META_DATA_EXPORT SET value = '9.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION'")
    assert "9.0.0" in diagnostics(path)["unknown_schema_version"]
    assert kernel_count(path) == kernel_count(nsys_file)
    assert traceview_cli("info", str(path)).returncode == 0


def test_non_utf8_and_long_names_kineto(kineto_text: bytes, tmp_path: Path) -> None:
    long_name = b"void kernel_" + b"x" * 100_000 + b"()"
    text = kineto_text.replace(b'"name": "void at::native', b'"name": "\xff\xfe\x80void at::native', 1)
    at = text.index(b'"name": "', text.index(b'"cat": "kernel"', len(text) // 2)) + len(b'"name": "')
    end = text.index(b'"', at)
    path = tmp_path / "names.json"
    path.write_bytes(text[:at] + long_name + text[end:])
    assert "invalid_utf8" in diagnostics(path)
    longest = traceview_cli("query", str(path), "SELECT max(length(name)) AS n FROM kernels", "--format", "json")
    assert json.loads(longest.stdout)[0]["n"] == len(long_name)
    assert traceview_cli("info", str(path)).returncode == 0


def test_non_utf8_and_long_names_nsys(nsys_file: Path, tmp_path: Path) -> None:
    path = tmp_path / "names.sqlite"
    shutil.copy(nsys_file, path)
    with sqlite3.connect(path) as conn:
        ids = [i for (i,) in conn.execute("SELECT DISTINCT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 2")]
        conn.execute("UPDATE StringIds SET value = CAST(X'fffe80' || CAST('kernel' AS BLOB) AS TEXT) WHERE id = ?", [ids[0]])
        conn.execute("UPDATE StringIds SET value = ? WHERE id = ?", ["k" * 100_000, ids[1]])
    assert "invalid_utf8" in diagnostics(path)
    assert kernel_count(path) == kernel_count(nsys_file)
    assert traceview_cli("info", str(path)).returncode == 0


def _kineto_events(text: bytes) -> tuple[dict, list[dict]]:
    doc = json.loads(text)
    return doc, doc["traceEvents"]


def test_negative_zero_durations_out_of_order_and_duplicates(kineto_text: bytes, tmp_path: Path) -> None:
    """Kept as recorded; negative durations and exact duplicate kernels are flagged, order does not matter."""
    doc, events = _kineto_events(kineto_text)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    kernels[0]["dur"] = -5
    kernels[1]["dur"] = 0
    events.append(dict(kernels[2]))  # an exact duplicate
    events.reverse()  # out of time order
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    found = diagnostics(path)
    assert "negative_durations" in found
    assert "duplicate_events" in found and found["duplicate_events"].startswith("1 ")
    assert kernel_count(path) == len(kernels) + 1  # duplicates are kept (documented)
    assert traceview_cli("info", str(path)).returncode == 0


def test_kernels_without_launch(kineto_text: bytes, tmp_path: Path) -> None:
    doc, events = _kineto_events(kineto_text)
    doc["traceEvents"] = [e for e in events if e.get("cat") not in ("cuda_runtime", "cuda_driver")]
    path = tmp_path / "nolaunch.json"
    path.write_text(json.dumps(doc))
    assert "unmatched_kernels" in diagnostics(path)


# --- nothing lost: the inputs are never written ---------------------------------------------------

@requires_shared
@pytest.mark.parametrize("trace", NSYS_TRACES[:2] + [p for p in KINETO_TRACES if p.parent != DLRM_DIR][:1] + [DLRM_DIR],
                         ids=lambda p: p.name)
def test_reading_a_shared_trace_never_modifies_it(trace: Path, tmp_path: Path) -> None:
    """report, ingest and query each read the trace itself (no ingest cache); the session also checks every
    shared file before and after the whole run (conftest.py)."""
    before = checksums()  # nothing written to, nothing new beside it (no -journal, no -wal)
    assert traceview_cli("report", trace, "-o", tmp_path / "report.html", cache=False).returncode == 0
    assert traceview_cli("ingest", trace, "-o", tmp_path / "trace.duckdb", cache=False).returncode == 0
    assert traceview_cli("query", trace, "SELECT count(*) FROM kernels", cache=False).returncode == 0
    assert checksums() == before


@requires_shared
@pytest.mark.slow
def test_shared_traces_are_never_modified() -> None:
    """The audit of every shared trace on two worker processes leaves every file as it was."""
    audited = corpus_audit()
    assert audited.returncode in (0, 1), audited.stderr[-2000:]
    assert audited.after == audited.before


# --- safe output: hostile names cannot run script in the report ----------------------------------

HOSTILE = [
    "<script>document.body.dataset.pwned='1'</script>",
    "<img src=x onerror=\"document.body.dataset.pwned='1'\">",
    "javascript:document.body.dataset.pwned='1'",
]


def test_hostile_names_do_not_run_in_the_report(chromium: str, tmp_path: Path) -> None:  # noqa: F811
    spec = small_spec()
    kernels = [dataclasses.replace(k, name=HOSTILE[i % 3] + k.name) if i < 30 else k for i, k in enumerate(spec.kernels)]
    ranges = [dataclasses.replace(r, name=HOSTILE[i % 3] + " " + r.name) if i < 30 else r for i, r in enumerate(spec.ranges)]
    first = spec.ranges[0]
    ranges.append(Range(HOSTILE[0], first.start_ns, first.start_ns + 10, pid=first.pid, tid=first.tid,
                        kind="user_annotation"))
    hostile = dataclasses.replace(spec, kernels=kernels, ranges=ranges)
    for writer, name in ((write_kineto, "hostile.json"), (write_nsys, "hostile.sqlite")):
        trace = writer(hostile, tmp_path / name)
        page = tmp_path / (name + ".html")
        result = traceview_cli("report", str(trace), "-o", str(page), "--format", "html")
        assert result.returncode == 0, result.stderr
        text = page.read_text(encoding="utf-8")
        assert "<script>document.body" not in text and "<img src=x" not in text
        assert 'href="javascript:' not in text.lower()
        dom = run_chromium(chromium, page, "--dump-dom").stdout
        assert "<body" in dom
        assert "data-pwned" not in dom


def test_impossible_timestamps_are_dropped_with_a_diagnostic(tmp_path: Path) -> None:
    """A corrupt export with a kernel at 2^62 ns would overflow the analysis' interval sums."""
    import traceview
    from traceview.testing import GpuSpec, Kernel, TraceSpec, write_nsys

    gpu = GpuSpec("NVIDIA H100 80GB HBM3", 132, 85_899_345_920, 9, 0)
    kernels = (Kernel("good", 1_000_000, 5_000), Kernel("corrupt", 2**62, 5_000), Kernel("also_good", 2_000_000, 5_000))
    trace = traceview.load(write_nsys(TraceSpec(gpus=(gpu,), kernels=kernels), tmp_path / "t.sqlite")).analyze()
    assert trace.sql("SELECT name FROM kernels ORDER BY kernel_id")["name"].to_list() == ["good", "also_good"]
    # the kernel and its launch call, both placed at 2^62 ns
    assert trace.scalar("SELECT message FROM diagnostics WHERE code = 'implausible_times'").startswith("2 events")
