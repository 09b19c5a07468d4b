"""`traceview audit`: every file processed, JUnit that a parser reads back, per-rank jobs, exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from commands import traceview_process
from conftest import DLRM_DIR, SHARED_TRACES, corpus_audit, requires_shared
from traceview.testing import llm_serving_spec, write_kineto, write_nsys

BOLONGCHENG_FWD = SHARED_TRACES / "nsys" / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite"


def audit(*args: object, env: dict | None = None) -> subprocess.CompletedProcess:
    """A real process: audit's --jobs runs worker processes, which the tests' own process must not fork."""
    return traceview_process("audit", *args, env=env)


@requires_shared
@pytest.mark.slow(seconds=70)
def test_audit_of_the_shared_traces() -> None:
    audited = corpus_audit()
    document = json.loads(audited.json)
    files = [p for p in SHARED_TRACES.rglob("*") if p.is_file() and DLRM_DIR not in p.parents]
    assert document["skipped"] == [str(SHARED_TRACES / "README.md")]  # walked past: not a trace, not an error
    assert document["traces"] == len(files) - 1 + 1  # every trace file, plus the 8-rank job as one target
    assert [r for r in document["rows"] if r["status"] == "error"] == []
    assert audited.returncode == document["exit_code"] == (1 if document["findings"]["error"] else 0)
    suites = ET.fromstring(audited.junit)
    cases = suites.findall("testsuite/testcase")
    assert int(suites.get("tests")) == len(cases)
    assert int(suites.get("errors")) == 0 == len(suites.findall("testsuite/testcase/error"))  # the README is skipped
    failures = suites.findall("testsuite/testcase/failure")
    assert int(suites.get("failures")) == len(failures)
    assert len(failures) == sum(
        len({f["rule"] for f in r["findings"] if f["severity"] == "error"}) for r in document["rows"] if r["status"] == "ok"
    )
    assert int(suites.get("skipped")) == sum(len(r["skipped"]) for r in document["rows"] if r["status"] == "ok")


@requires_shared
def test_rank_directory_is_one_job_with_a_straggler_view(tmp_path: Path) -> None:
    result = audit(DLRM_DIR, "--json", tmp_path / "a.json", "--markdown", tmp_path / "a.md")
    assert result.returncode in (0, 1), result.stderr
    row = json.loads((tmp_path / "a.json").read_text())["rows"][0]
    assert (row["kind"], row["ranks"], [r["rank"] for r in row["rank_rows"]]) == ("job", 8, list(range(8)))
    assert [r["kernels"] for r in row["rank_rows"]] == [245, 310, 246, 315, 251, 245, 246, 246]
    view = row["stragglers"]
    comm = [r["comm_time_ns"] for r in row["rank_rows"]]
    assert view["collective_wait"]["max_ns"] == max(comm)
    assert view["straggler_rank"] == max(row["rank_rows"], key=lambda r: r["compute_time_ns"])["rank"]
    assert "Straggler: rank" in (tmp_path / "a.md").read_text()


def test_exit_codes_junit_and_step_summary(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    good = write_kineto(llm_serving_spec(), traces / "good.json.gz")
    write_nsys(llm_serving_spec(), traces / "good.sqlite")
    summary = tmp_path / "summary.md"
    summary.write_text("# before\n")
    clean = audit(traces, "--jobs", "2", "--json", tmp_path / "1.json", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert summary.read_text().startswith("# before\n## traceview audit")
    strict = audit(traces, "--fail-on", "warning")
    assert strict.returncode == 1  # the sample's per-step cudaStreamSynchronize is a warning
    audit(traces / "good.sqlite", good, "--jobs", "1", "--json", tmp_path / "2.json")
    assert json.loads((tmp_path / "1.json").read_text())["rows"] == json.loads((tmp_path / "2.json").read_text())["rows"]
    (traces / "broken.json").write_text('{"traceEvents": [')
    broken = audit(traces, "--json", tmp_path / "3.json")
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    rows = {Path(r["path"]).name: r for r in json.loads((tmp_path / "3.json").read_text())["rows"]}
    assert rows["broken.json"]["status"] == "error" and rows["good.sqlite"]["status"] == "ok"
    missing = audit(tmp_path / "nope.sqlite")
    assert missing.returncode == 2


def test_audit_is_deterministic(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    for i in range(3):
        write_kineto(llm_serving_spec(seed=i), traces / f"t{i}.json.gz")
    first = audit(traces, "--jobs", "2", "--json", tmp_path / "a.json", "--junit", tmp_path / "a.xml")
    a_json, a_xml = (tmp_path / "a.json").read_bytes(), (tmp_path / "a.xml").read_bytes()
    second = audit(traces / "t*.json.gz", "--jobs", "1", "--json", tmp_path / "a.json", "--junit", tmp_path / "a.xml")
    assert first.returncode == second.returncode
    assert (tmp_path / "a.json").read_bytes() == a_json and (tmp_path / "a.xml").read_bytes() == a_xml


@requires_shared
def test_a_folder_with_a_readme_and_a_lock_file_audits_clean(tmp_path: Path) -> None:
    """Files beside the traces that are not traces are listed as skipped; named on the command line, one is an error."""
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(BOLONGCHENG_FWD, folder / BOLONGCHENG_FWD.name)
    (folder / "README.md").write_text("# traces of the nightly run\n")
    (folder / "upload.lock").write_text("")
    (folder / "package-lock.json").write_text('{"name": "app", "lockfileVersion": 3, "packages": {}}')
    result = audit(folder, "--json", tmp_path / "a.json")
    document = json.loads((tmp_path / "a.json").read_text())
    assert result.returncode == 0 == document["exit_code"], result.stdout + result.stderr
    assert document["skipped"] == [str(folder / "README.md"), str(folder / "package-lock.json"),
                                   str(folder / "upload.lock")]
    assert [(Path(r["path"]).name, r["status"], r["kernels"]) for r in document["rows"]] == [
        (BOLONGCHENG_FWD.name, "ok", 632)]
    assert "1 traces, 0 unreadable, 3 skipped (not traces)" in result.stdout
    named = audit(folder / "README.md", "--json", tmp_path / "b.json")
    rows = json.loads((tmp_path / "b.json").read_text())["rows"]
    assert named.returncode == 2 and rows[0]["status"] == "error" and "not a trace" in rows[0]["error"]
