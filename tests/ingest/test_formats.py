"""Input formats are declared by their readers: sniffing by structure, and everything built from the declarations."""

from __future__ import annotations

import dataclasses
import gzip
import json
from importlib import resources
from pathlib import Path

import duckdb
import pytest
from commands import traceview_cli
from conftest import SHARED_TRACES, requires_shared

from traceview import ingest
from traceview.errors import TraceviewError
from traceview.ingest import kineto, nsys
from traceview.model import db, docs
from traceview.testing import llm_serving_spec, summarize, write_kineto

BUILT_IN = (nsys.READER, kineto.READER)
# with the built-in readers alone: a format added to READERS adds its own description, not an edit here
NOT_A_TRACE = ("not a trace (expected an Nsight Systems SQLite export or a PyTorch profiler JSON trace with "
               "traceEvents, plain or gzip)")
SMALL = llm_serving_spec(prefill_batches=(2,), decode_steps=2)


def _package_lock(packages: int) -> str:
    entries = {f"node_modules/pkg-{i}": {"version": f"1.{i}.0", "resolved": f"https://registry.npmjs.org/pkg-{i}",
                                         "integrity": "sha512-" + "A" * 86, "dev": True} for i in range(packages)}
    return json.dumps({"name": "app", "version": "1.0.0", "lockfileVersion": 3, "requires": True,
                       "packages": {"": {"name": "app", "version": "1.0.0"}, **entries}}, indent=2)


NOT_TRACES = {
    "gzip_of_text.json.gz": gzip.compress(b"2024-05-01 12:00:00 training started\n" * 50),
    "gzip_of_json.json.gz": gzip.compress(b'{"loss": [0.5, 0.4], "step": 2}'),
    "object.json": b'{"a": 1, "b": [1, 2]}',
    "numbers.json": b"[1, 2, 3]",
    "objects_without_ph_ts.json": b'[{"name": "x", "value": 1}]',
    "empty_array.json": b"[]",
    "package-lock.json": _package_lock(3).encode(),
    "big-package-lock.json": _package_lock(20_000).encode(),  # `packages` runs past the sniffed prefix
    "README.md": b"# Traces\n\nProfiles of the nightly run; see the wiki.\n",
    "nested_traceEvents.json": b'{"meta": {"traceEvents": []}, "x": 1}',
    "traceEvents_in_a_string.json": b'{"note": "\\"traceEvents\\": [", "x": 1}',
    "traceEvents_not_a_list.json": b'{"schemaVersion": 1, "traceEvents": {"ph": "X"}}',
    "bom.json": b'\xef\xbb\xbf{"traceEvents": []}',  # the reader cannot take a BOM either
}


@pytest.mark.parametrize("name", sorted(NOT_TRACES))
def test_sniff_rejects_what_only_looks_like_json(name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_bytes(NOT_TRACES[name])
    with pytest.raises(TraceviewError) as error:
        ingest.reader_for(path)
    assert str(error.value) == ingest.not_a_trace(path)


TRACES = {
    "empty_events.json": b'{"traceEvents": []}',
    "legacy_array.json": b'[{"name": "aten::mm", "ph": "X", "ts": 10, "dur": 5, "pid": 1, "tid": 1}]',
    "late_events.json": json.dumps({"schemaVersion": 1, "metadata": {"notes": ["x" * 1000] * 200},
                                    "traceEvents": []}).encode(),  # 200 kB of metadata first
    "spaced.json": b'\n  {\n "deviceProperties" : [ ] ,\n  "traceEvents" :\n [ ]}',
}


@pytest.mark.parametrize("name", sorted(TRACES))
def test_sniff_accepts_kineto_structure(name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_bytes(TRACES[name])
    assert ingest.reader_for(path) is kineto.READER


@pytest.mark.parametrize("flavour", ["modern", "legacy2021"])
def test_a_truncated_gzip_is_still_kineto_so_its_damage_is_reported(flavour: str, tmp_path: Path) -> None:
    whole = write_kineto(SMALL, tmp_path / "whole.json.gz", flavour=flavour).read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    assert ingest.reader_for(cut) is kineto.READER
    with pytest.raises(TraceviewError, match="damaged gzip stream"):
        ingest.ingest(cut, duckdb.connect())


def _corpus() -> list[Path]:
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.is_file() and p.name != "README.md")


@requires_shared
def test_every_shared_trace_is_recognised_by_its_reader() -> None:
    found = {path.relative_to(SHARED_TRACES).as_posix(): ingest.reader_for(path).name for path in _corpus()}
    assert len(found) == 61
    assert {path for path, name in found.items() if name == "nsys"} == {p for p in found if p.startswith("nsys/")}
    assert {path for path, name in found.items() if name == "kineto"} == {p for p in found if p.startswith("torch/")}
    assert sum(name == "nsys" for name in found.values()) == 32


@requires_shared
def test_the_shared_readme_is_not_a_trace() -> None:
    with pytest.raises(TraceviewError, match="not a trace"):
        ingest.reader_for(SHARED_TRACES / "README.md")


@pytest.mark.parametrize("name", ["package-lock.json", "gzip_of_text.json.gz"])
def test_the_cli_says_so_in_one_line_with_exit_2(name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_bytes(NOT_TRACES[name])
    result = traceview_cli("info", path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"traceview: {ingest.not_a_trace(path)}"]


def test_what_the_registry_builds_comes_from_the_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ingest.READERS[:len(BUILT_IN)] == BUILT_IN
    assert (ingest.TRACE_SUFFIXES, ingest.REPORT_SUFFIXES) == (ingest.trace_suffixes(), ingest.report_suffixes())
    monkeypatch.setattr(ingest, "READERS", BUILT_IN)
    assert ingest.trace_suffixes() == (".sqlite", ".json", ".json.gz", ".gz")
    assert ingest.report_suffixes() == (".nsys-rep", ".qdrep")
    assert ingest.describe_formats() == ("an Nsight Systems SQLite export (.sqlite) or a PyTorch profiler JSON trace "
                                         "with traceEvents, plain or gzip (.json, .json.gz, .gz)")
    assert ingest.not_a_trace(Path("x")) == f"x: {NOT_A_TRACE}"
    assert nsys.READER.launch_link is db.LaunchLink.PROCESS_AND_CORRELATION
    assert kineto.READER.launch_link is db.LaunchLink.CORRELATION
    for reader in ingest.READERS:
        assert set(reader.sources) == set(db.CONTRACT_TABLES), reader.name
    rows = docs.render().splitlines()
    assert "| devices | TARGET_INFO_GPU | deviceProperties |" in rows
    assert ("| kernels | CUPTI_ACTIVITY_KIND_KERNEL + StringIds, launch call on (pid, correlation id) "
            "| `kernel` events (legacy `Kernel`), launch call on correlation id |") in rows
    assert ("| `source_format` | VARCHAR | the name of the reader that read the file: 'nsys' (Nsight Systems export), "
            "'kineto' (PyTorch profiler (Kineto)) |") in rows


def test_the_report_schema_names_every_registered_format() -> None:
    """READERS is the one list of formats: the report's `trace.format` enum is a static JSON Schema file that
    consumers read as it is, so a test holds it to the registry instead of generating it."""
    schema = json.loads(resources.files("traceview.report").joinpath("schema.json").read_text())
    names = [reader.name for reader in ingest.READERS]
    assert schema["properties"]["trace"]["properties"]["format"]["enum"] == [*names, None], (
        f"set trace.format's enum in src/traceview/report/schema.json to {[*names, None]}")


@pytest.fixture
def third_format(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Register a made-up format ("FAKE1" then Kineto JSON) the way a real one is: a declaration in READERS."""

    def read(path: Path, con: duckdb.DuckDBPyConnection, rank: int | None) -> int:
        inner = tmp_path / f"{path.name}.inner.json"
        inner.write_bytes(path.read_bytes()[len(b"FAKE1\n"):])
        rank = kineto.read(inner, con, rank)
        con.execute("UPDATE trace_info SET source_format = 'fake' WHERE source_format = 'kineto'")
        return rank

    fake = dataclasses.replace(
        kineto.READER, name="fake", title="Fake profiler", description="a FAKE1 capture", suffixes=(".fake",),
        sniff=lambda path, head: head.startswith(b"FAKE1\n"), read=read,
        sources={table: f"fake {table}" for table in db.CONTRACT_TABLES}, export_first={".fakerep": "convert {name}"})
    monkeypatch.setattr(ingest, "READERS", (*BUILT_IN, fake))
    return fake


def test_a_third_format_is_one_declaration(third_format, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    text = write_kineto(SMALL, tmp_path / "k.json").read_bytes()
    for rank in (0, 1):
        (runs / f"rank{rank}.fake").write_bytes(b"FAKE1\n" + text)
    con = duckdb.connect()
    ingest.ingest(runs, con)
    assert con.execute("SELECT rank, count(*) FROM kernels GROUP BY rank ORDER BY rank").fetchall() == [
        (0, summarize(SMALL)["kernel_count"]), (1, summarize(SMALL)["kernel_count"])]
    assert con.execute("SELECT count(*) FROM kernels WHERE launch_api IS NULL").fetchall() == [(0,)]
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(TraceviewError) as error:
        ingest.reader_for(other)
    assert str(error.value).endswith(
        "(expected an Nsight Systems SQLite export, a PyTorch profiler JSON trace with traceEvents, plain or gzip "
        "or a FAKE1 capture)")
    with pytest.raises(TraceviewError, match=r"run\.fakerep: convert run\.fakerep$"):
        ingest.reader_for(tmp_path / "run.fakerep")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceviewError, match=r"no trace files \(\*\.sqlite, \*\.json, \*\.json\.gz, \*\.gz, \*\.fake\)"):
        ingest.trace_files(empty)
    assert ingest.describe_formats().endswith(" or a FAKE1 capture (.fake)")
    assert "| table | Nsight Systems export | PyTorch profiler (Kineto) | Fake profiler |" in docs.render().splitlines()
