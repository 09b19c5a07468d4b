"""`--profile`: one line per ingest, analysis stage, rule and output, with the rows each touched."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import traceview
from commands import traceview_cli, traceview_process
from traceview.analysis.pipeline import STAGES
from traceview.testing import llm_serving_spec, write_kineto

LINE = re.compile(r"^(\w+)\s+(.+?)\s+(\d+\.\d{3})\s+(\d+\.\d)%\s*([\d,]*)$")


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_kineto(llm_serving_spec(), tmp_path_factory.mktemp("profile") / "serve.json.gz")


def profile_rows(stderr: str) -> dict[tuple[str, str], tuple[float, int | None]]:
    rows = {}
    for line in stderr.splitlines():
        match = LINE.match(line)
        if match and not match.group(2).startswith("(total"):
            rows[(match.group(1), match.group(2))] = (float(match.group(3)),
                                                      int(match.group(5).replace(",", "")) if match.group(5) else None)
    return rows


def test_report_profile_names_every_stage_rule_and_output_with_its_rows(trace: Path, tmp_path: Path, all_cores) -> None:
    result = traceview_cli("report", trace, "--profile", "--format", "md,json", "-o", tmp_path / "r.md", cache=False)
    assert result.returncode == 0, result.stderr
    rows = profile_rows(result.stderr)
    assert {name for kind, name in rows if kind == "analysis"} == {stage.name for stage in STAGES}
    assert {("render", "md"), ("render", "json"), ("report", "timeline"), ("report", "findings"),
            ("rules", "savings ledger")} <= rows.keys()
    with traceview.load(trace) as loaded:
        loaded.analyze()
        kernels = loaded.scalar("SELECT count(*) FROM kernels")
        budget_rows = loaded.scalar("SELECT count(*) FROM step_budget")  # the stage's one table (and a view)
    assert rows[("ingest", trace.name)][1] == kernels == 2480
    assert rows[("analysis", "step_budget")][1] == budget_rows == 27  # 26 steps and the time outside them
    assert rows[("render", "md")][1] == len((tmp_path / "r.md").read_text())
    assert ("rules", "TV201") in rows and rows[("rules", "TV201")][1] == 1  # the rule's one finding
    total = float(re.search(r"^all\s+(\d+\.\d{3})$", result.stderr, re.M).group(1))
    kinds = {kind: (float(wall), label) for kind, label, wall in
             re.findall(r"^(\w+)\s+(\(total[^)]*\))\s+(\d+\.\d{3})", result.stderr, re.M)}
    assert sum(wall for wall, _ in kinds.values()) == pytest.approx(total, abs=0.001 * len(kinds))
    # rules run on several threads: their total is the time they took, at most the sum of their steps
    assert kinds["rules"][1] == "(total, steps overlapped)"
    # a trace this small runs independent analysis stages and the report's sections side by side (db.side_by_side)
    assert kinds["analysis"][1] == kinds["report"][1] == "(total, steps overlapped)"
    for kind in ("rules", "analysis", "report"):
        assert kinds[kind][0] <= sum(wall for (k, _), (wall, _) in rows.items() if k == kind) + 0.001 * len(rows)
    for kind in ("ingest", "render"):
        steps = sum(wall for (k, _), (wall, _) in rows.items() if k == kind)
        assert steps == pytest.approx(kinds[kind][0], abs=0.001 * len(rows))


def test_a_command_of_its_own_process_opens_its_profile_with_the_imports(trace: Path) -> None:
    """`traceview check` as a process counts its imports (the fixed cost every command pays) as a `startup` row that
    adds to the total; run inside another program, as the other tests run it, a command has no start-up of its own."""
    ran = traceview_process("check", trace, "--profile", "--format", "json", cache=False)
    assert ran.returncode == 0, ran.stderr
    rows = profile_rows(ran.stderr)
    imports = rows[("startup", "imports")][0]
    total = float(re.search(r"^all\s+(\d+\.\d{3})$", ran.stderr, re.M).group(1))
    assert 0.01 < imports < total and ran.stderr.splitlines()[1].startswith("startup")
    assert not [key for key in profile_rows(traceview_cli("check", trace, "--profile", "--format", "json",
                                                           cache=False).stderr) if key[0] == "startup"]


def test_check_profile_and_no_profile_without_the_flag(trace: Path) -> None:
    profiled = traceview_cli("check", trace, "--profile", "--format", "json", cache=False)
    assert profiled.returncode == 0, profiled.stderr
    assert ("rules", "TV202") in profile_rows(profiled.stderr) and profiled.stdout.startswith("{")
    plain = traceview_cli("check", trace, "--format", "json")
    assert profile_rows(plain.stderr) == {} and plain.stdout == profiled.stdout


def test_audit_profile_sums_the_workers_and_names_each_trace(trace: Path, tmp_path: Path) -> None:
    second = write_kineto(llm_serving_spec(seed=1), tmp_path / "other.json.gz")
    result = traceview_process("audit", trace, second, "--profile", "--jobs", "2", "--json", tmp_path / "a.json", cache=False)
    assert result.returncode == 0, result.stderr
    rows = profile_rows(result.stderr)
    assert "profile of 2 traces" in result.stderr
    with traceview.load(second) as loaded:
        other_kernels = loaded.scalar("SELECT count(*) FROM kernels")
    assert rows[("ingest", trace.name)][1] == 2480 and rows[("ingest", second.name)][1] == other_kernels
    audit = json.loads((tmp_path / "a.json").read_text())
    findings = sum(1 for row in audit["rows"] for f in row["findings"] if f["rule"] == "TV201")
    assert rows[("rules", "TV201")][1] == findings  # summed over both workers
    assert all("profile" not in row for row in audit["rows"])  # the profile goes to stderr only
    totals = re.findall(r"^\s*(\d+\.\d{3}) s  (\S+)$", result.stderr, re.M)
    assert sorted(path for _, path in totals) == sorted([str(trace), str(second)])
