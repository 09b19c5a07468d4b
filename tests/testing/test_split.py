"""Splitting the generator by format (spec.py, plan.py, nsys_writer.py, kineto_writer.py) changed no byte.

The files the writers produce are compared, by digest of their content (the SQL dump of each export,
the JSON text of each Kineto file), with those the single-module generator wrote before the split
(commit f9228cf); the digests were pinned from that module and checked byte for byte when it was split.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import importlib.util
import sqlite3
from pathlib import Path

import pytest
from test_generator import small_spec

import traceview.testing as testing
from traceview.testing import NSYS_VERSIONS, llm_serving_spec, two_process_spec, write_kineto, write_nsys

SPECS = {
    "small": small_spec,
    "two_process": two_process_spec,
    "llm_serving": lambda: llm_serving_spec(prefill_batches=(2,), decode_steps=2),
}
DIAGNOSTICS = [(5_000, "warning", "CUDA trace buffer overflow"), (9_000, "error", "driver mismatch")]


def _cases() -> list[tuple[str, str, dict]]:
    """(spec, writer, keyword arguments): every nsys version and Kineto flavour, per process for Kineto."""
    cases = []
    for name in SPECS:
        for version in NSYS_VERSIONS:
            cases.append((name, "nsys", {"version": version}))
        pids = [None] if name != "two_process" else [41_001, 41_002]
        for flavour in ("modern", "legacy2021"):
            for pid in pids:
                cases.append((name, "kineto", {"flavour": flavour, "pid": pid}))
    cases.append(("small", "nsys", {"version": "2026.3", "diagnostics": DIAGNOSTICS}))
    cases.append(("small", "kineto", {"flavour": "modern", "gzip": True}))
    return cases


CASES = _cases()


def _case_id(case: tuple[str, str, dict]) -> str:
    name, writer, kwargs = case
    return "-".join([name, writer, *(f"{k}={v}" for k, v in kwargs.items() if k != "diagnostics")]
                    + (["diagnostics"] if "diagnostics" in kwargs else []))


# sha256 of the content each case writes, from the generator before the split
PINNED = {
    "small-nsys-version=2026.3":
        "a852390573d0c1225c5e1617d19bdf464833ef4613cb367bf35d0d0f0a1f3610",
    "small-nsys-version=2023.1":
        "25341d07201ba3493232cdbc986904c0de0f4b5f4a1b577c1089787e55466b12",
    "small-nsys-version=legacy":
        "3433c6e76ca65bb915e9e1fe4635186ea526cce28c8619b70f37efd1e0c23244",
    "small-kineto-flavour=modern-pid=None":
        "a2c16407ecfa8b517e78e191ff3931675dac46dbc2ca8747b1e97e645f2a5e4d",
    "small-kineto-flavour=legacy2021-pid=None":
        "a8e2a25fda9e99a4ec460e559c62cb0d885bbfe50abffbc921f267eb442b7e8e",
    "two_process-nsys-version=2026.3":
        "0f603dd4ada3b096ccd613aa9b18cdb6d8eb8471f40f2700d0f151589e32a248",
    "two_process-nsys-version=2023.1":
        "faafaff1f582d45b61bdf1bef8b77717b3789b1093dcf8447849b96689017801",
    "two_process-nsys-version=legacy":
        "42d22546c160186ecbc82c4e42ddc8524134b776a2e80c7a4df6199f25f5ba23",
    "two_process-kineto-flavour=modern-pid=41001":
        "93fee702f2241e94a0b5bc4c0904fc6f75018a6f612acc5e378157660878e082",
    "two_process-kineto-flavour=modern-pid=41002":
        "4264724619f1bcb9869b0930809249c5d2a863d0c668a6ef170549fd7aecdba2",
    "two_process-kineto-flavour=legacy2021-pid=41001":
        "b09b95df84715bd69efb1128bfb2f8e1b2432e920c5c2fc4bf4aa7bbf10388ff",
    "two_process-kineto-flavour=legacy2021-pid=41002":
        "5f5b14d89dcbd8a668e71de836c25412e53cd56e3c4eddc7dc6becf62fa68194",
    "llm_serving-nsys-version=2026.3":
        "81f9999c17984c5efae7bf00b3fc1874daa8a674fdd35899898abf1884445ea8",
    "llm_serving-nsys-version=2023.1":
        "5102446d2f4a2c8b7b2ebfa6210cd68af83214c165668461270208dc998c51bd",
    "llm_serving-nsys-version=legacy":
        "e9d6124d004bbfd7af50497ca837f000ec997b6ebaab210649dce97d65e2db3d",
    "llm_serving-kineto-flavour=modern-pid=None":
        "3c5fcd65ac87e6a7dc03a97d5471e06056f5b9fd128bdd22325666e8b69a1714",
    "llm_serving-kineto-flavour=legacy2021-pid=None":
        "49a41d4f6e0cc04617ef34660481c4723d6b333854ffbd7a2e5da870bbd9e3cf",
    "small-nsys-version=2026.3-diagnostics":
        "f824e3c05549e9e557b7a122295cc4ea67b228aa776675737f735ce29d2bbf34",
    "small-kineto-flavour=modern-gzip=True":
        "a2c16407ecfa8b517e78e191ff3931675dac46dbc2ca8747b1e97e645f2a5e4d",
}


def _write(module, case: tuple[str, str, dict], directory: Path) -> Path:
    name, writer, kwargs = case
    spec = _in_module(SPECS[name](), module)
    if writer == "nsys":
        return module.write_nsys(spec, directory / "t.sqlite", **kwargs)
    return module.write_kineto(spec, directory / ("t.json.gz" if kwargs.get("gzip") else "t.json"), **kwargs)


def _in_module(value, module):
    """The same spec built from `module`'s own dataclasses (the Kineto writer tells kernels apart by class)."""
    if dataclasses.is_dataclass(value):
        cls = getattr(module, type(value).__name__)
        return cls(**{f.name: _in_module(getattr(value, f.name), module) for f in dataclasses.fields(value)})
    if isinstance(value, tuple):
        return tuple(_in_module(v, module) for v in value)
    if isinstance(value, list):
        return [_in_module(v, module) for v in value]
    return value


def _content_digest(path: Path) -> str:
    """What the file holds, independent of the SQLite and zlib versions that wrote it."""
    if path.suffix == ".sqlite":
        con = sqlite3.connect(path)
        try:
            text = "\n".join(con.iterdump())
        finally:
            con.close()
        return hashlib.sha256(text.encode()).hexdigest()
    data = path.read_bytes()
    return hashlib.sha256(gzip.decompress(data) if path.suffix == ".gz" else data).hexdigest()


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_same_content_as_pinned_from_the_generator_before_the_split(case, tmp_path: Path) -> None:
    assert _content_digest(_write(testing, case, tmp_path)) == PINNED[_case_id(case)]


def test_each_writer_lives_in_its_own_module() -> None:
    assert write_nsys.__module__ == "traceview.testing.nsys_writer"
    assert write_kineto.__module__ == "traceview.testing.kineto_writer"
    assert testing.TraceSpec.__module__ == "traceview.testing.spec"
    assert importlib.util.find_spec("traceview.testing.generator") is None
