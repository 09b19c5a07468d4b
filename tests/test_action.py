"""The GitHub action: action/run.py run as the runner would, and action.yml declaring what the script reads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, built_once
import traceview
from traceview import workflow
from traceview.report import REPORT
from traceview.testing import llm_serving_truth, serving_runs, write_kineto

ACTION = REPO / "action.yml"
SCRIPT = REPO / "action" / "run.py"
EARLIER_SUMMARY = "## Build\n\nbuilt in 3 min\n"
RUNS_A_SIDE = 3
DECODE_CHANGE_PCT = 10.0
SIDES = {"base": (11, {}), "slower": (12, {"decode": DECODE_CHANGE_PCT}), "same": (13, {})}


@dataclass(frozen=True)
class Runs:
    directory: Path
    traces: dict[str, list[Path]]
    reports: dict[str, list[Path]]
    decode_steps_per_run: int


@dataclass(frozen=True)
class ActionRun:
    returncode: int
    stderr: str
    summary: str
    outputs: dict[str, str]
    output_dir: Path


@pytest.fixture(scope="module")
def runs() -> Runs:
    """Three runs of each side as Kineto traces, and each as the JSON report `traceview report` would write;
    written once a session."""
    def build(directory: Path) -> None:
        directory.mkdir()
        options = workflow.CheckOptions.configured()
        for side, (seed, change_pct) in SIDES.items():
            for run, spec in enumerate(serving_runs(RUNS_A_SIDE, seed=seed, change_pct=change_pct, decode_steps=8)):
                trace = write_kineto(spec, directory / f"{side}{run}.pt.trace.json.gz")
                with traceview.load(trace) as loaded:
                    report = REPORT["json"].render(workflow.report(loaded, options))
                trace.with_name(f"{side}{run}.report.json").write_text(report, encoding="utf-8")

    directory = built_once("action-runs", build)
    traces = {side: [directory / f"{side}{run}.pt.trace.json.gz" for run in range(RUNS_A_SIDE)] for side in SIDES}
    reports = {side: [directory / f"{side}{run}.report.json" for run in range(RUNS_A_SIDE)] for side in SIDES}
    specs = serving_runs(RUNS_A_SIDE, seed=SIDES["base"][0], change_pct=SIDES["base"][1], decode_steps=8)
    return Runs(directory, traces, reports, llm_serving_truth(specs[0])["steps_by_phase"]["decode"])


def run_action(tmp_path: Path, cwd: Path, interpreter: Path | None = None, **inputs: str) -> ActionRun:
    """run.py with the runner's files and variables in tmp_path, inputs as action.yml passes them (INPUT_*);
    traceview runs under `interpreter` as action.yml's venv would, else under this one."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("INPUT_", "GITHUB_", "RUNNER_")) and key != "TRACEVIEW_PYTHON"}
    summary, outputs, runner_temp = tmp_path / "step_summary.md", tmp_path / "github_output", tmp_path / "runner-temp"
    summary.write_text(EARLIER_SUMMARY, encoding="utf-8")
    outputs.touch()
    runner_temp.mkdir()
    environment.update(GITHUB_STEP_SUMMARY=str(summary), GITHUB_OUTPUT=str(outputs), RUNNER_TEMP=str(runner_temp))
    environment.update({"INPUT_" + name.upper(): value for name, value in inputs.items()})
    if interpreter:
        environment["TRACEVIEW_PYTHON"] = str(interpreter)
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=cwd, env=environment, capture_output=True, text=True,
                          timeout=300)
    written = dict(line.split("=", 1) for line in outputs.read_text(encoding="utf-8").splitlines())
    return ActionRun(done.returncode, done.stderr, summary.read_text(encoding="utf-8"), written,
                     runner_temp / "traceview")


def lines(paths: list[Path]) -> str:
    return "\n".join(str(path) for path in paths)


def phase(diff: dict, name: str) -> dict:
    return next(p for p in diff["phases"] if p["phase"] == name)


def test_gated_regression_fails_the_step_and_reports_to_the_job(runs: Runs, tmp_path: Path) -> None:
    result = run_action(tmp_path, runs.directory, base=lines(runs.reports["base"]), head="slower*.pt.trace.json.gz",
                        fail_on_regression="5%")
    assert result.returncode == 1, result.stderr
    assert set(result.outputs) == set(action_section(ACTION.read_text(encoding="utf-8"), "outputs"))
    assert result.outputs["verdict"] == "regression"
    markdown, diff_json = Path(result.outputs["markdown"]), Path(result.outputs["json"])
    assert (markdown, diff_json) == (result.output_dir / "diff.md", result.output_dir / "diff.json")
    assert Path(result.outputs["html"]).read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    diff = json.loads(diff_json.read_text(encoding="utf-8"))
    assert (diff["verdict"], diff["exit_code"], diff["thresholds"]["fail_on_regression_pct"]) == ("regression", 1, 5.0)
    decode = phase(diff, "decode")
    assert (decode["base"]["runs"], decode["head"]["runs"]) == (RUNS_A_SIDE, RUNS_A_SIDE)
    assert decode["head"]["steps"] == RUNS_A_SIDE * runs.decode_steps_per_run
    low, high = decode["median_interval_pct"]
    assert decode["verdict"] == "regression" and 5.0 < low <= DECODE_CHANGE_PCT <= high
    assert result.summary == EARLIER_SUMMARY + markdown.read_text(encoding="utf-8").rstrip("\n") + "\n\n"
    assert "verdict: regression" in result.stderr.splitlines()


def test_without_a_gate_a_regression_is_reported_but_passes(runs: Runs, tmp_path: Path) -> None:
    result = run_action(tmp_path, runs.directory, base=" ".join(map(str, runs.reports["base"])),
                        head=" ".join(map(str, runs.reports["slower"])))
    diff = json.loads(Path(result.outputs["json"]).read_text(encoding="utf-8"))
    assert result.returncode == 0, result.stderr
    assert (result.outputs["verdict"], diff["verdict"], diff["thresholds"]["fail_on_regression_pct"]) == \
        ("regression", "regression", None)
    assert result.summary.startswith(EARLIER_SUMMARY + "## ")


@pytest.mark.parametrize(("fail_on_inconclusive", "returncode"), [("false", 0), ("true", 1)])
def test_no_change_passes_the_gate_unless_inconclusive_fails(runs: Runs, tmp_path: Path, fail_on_inconclusive: str,
                                                            returncode: int) -> None:
    result = run_action(tmp_path, runs.directory, base=lines(runs.reports["base"]), head=lines(runs.reports["same"]),
                        fail_on_regression="5%", fail_on_inconclusive=fail_on_inconclusive, confidence="90%")
    diff = json.loads(Path(result.outputs["json"]).read_text(encoding="utf-8"))
    assert result.returncode == returncode, result.stderr
    low, high = phase(diff, "decode")["median_interval_pct"]
    assert diff["regressions"] == [] and low <= 0.0 <= high
    # two prefill steps a run: three runs leave the prefill interval wider than the 5% gate
    assert phase(diff, "prefill")["verdict"] == "inconclusive"
    assert (result.outputs["verdict"], diff["thresholds"]["confidence"]) == ("inconclusive", 0.9)


def test_audit_follows_the_diff_in_the_summary_and_its_failure_fails_the_step(runs: Runs, tmp_path: Path) -> None:
    audited = runs.traces["base"][0]
    result = run_action(tmp_path, runs.directory, base=lines(runs.reports["base"]), head=lines(runs.reports["same"]),
                        fail_on_regression="5%", audit=str(audited), audit_fail_on="warning")
    assert result.returncode == 1, result.stderr
    audit = json.loads((result.output_dir / "audit.json").read_text(encoding="utf-8"))
    assert ([row["path"] for row in audit["rows"]], audit["fail_on"], audit["exit_code"]) == ([str(audited)], "warning", 1)
    assert json.loads(Path(result.outputs["json"]).read_text(encoding="utf-8"))["exit_code"] == 0
    diff_markdown = Path(result.outputs["markdown"]).read_text(encoding="utf-8").rstrip("\n")
    audit_markdown = (result.output_dir / "audit.md").read_text(encoding="utf-8").rstrip("\n")
    assert result.summary == EARLIER_SUMMARY + diff_markdown + "\n\n" + audit_markdown + "\n\n"


def fake_interpreter(directory: Path) -> Path:
    """An interpreter without traceview, as a broken install would leave: Python's own message, exit 1."""
    path = directory / "python-without-traceview"
    path.write_text("#!/bin/sh\necho 'No module named traceview' >&2\nexit 1\n", encoding="utf-8")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(("inputs", "message"), [
    ({"head": "slower0.pt.trace.json.gz"}, "base: give at least one trace, rank directory or traceview JSON report"),
    ({"base": "base0.pt.trace.json.gz", "head": "missing.json.gz"}, "head: missing.json.gz: no such file or directory"),
    ({"base": "nothing-*.json.gz", "head": "slower0.pt.trace.json.gz"}, "base: nothing-*.json.gz matches no file"),
    ({"base": "base0.pt.trace.json.gz", "head": "slower0.pt.trace.json.gz", "fail_on_inconclusive": "maybe"},
     "fail-on-inconclusive: 'maybe' is neither true nor false"),
    ({"base": "base0.pt.trace.json.gz", "head": "slower0.pt.trace.json.gz", "audit": "gone/"},
     "audit: gone/: no such file or directory"),
    ({"base": "base0.report.json", "head": "slower0.report.json", "fail_on_regression": "five"},
     "traceview: --fail-on-regression 'five': expected a percentage such as 5%"),
    ({"base": "base0.report.json", "head": "slower0.report.json", "interpreter": "broken"}, "No module named traceview"),
], ids=["no-base", "missing-head", "empty-glob", "bad-flag", "missing-audit", "bad-percentage", "broken-install"])
def test_input_errors_are_one_annotated_line_and_exit_2(runs: Runs, tmp_path: Path, inputs: dict[str, str],
                                                        message: str) -> None:
    interpreter = fake_interpreter(tmp_path) if inputs.pop("interpreter", None) else None
    result = run_action(tmp_path, runs.directory, interpreter, **inputs)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"::error title=traceview::{message.replace('%', '%25')}"]
    assert (result.summary, result.outputs) == (EARLIER_SUMMARY, {})


def action_section(text: str, section: str) -> dict[str, dict[str, str]]:
    """A top-level mapping's entries (two-space keys) and their one-line fields (four spaces): all the YAML
    action.yml uses in `inputs` and `outputs`; folded descriptions' continuation lines are skipped."""
    entries: dict[str, dict[str, str]] = {}
    inside, current = False, None
    for line in filter(str.strip, text.splitlines()):
        if not line.startswith(" "):
            inside, current = line.rstrip() == f"{section}:", None
        elif inside and (entry := re.fullmatch(r" {2}([\w-]+):\s*", line)):
            current = entries.setdefault(entry[1], {})
        elif inside and current is not None and (field := re.fullmatch(r" {4}([\w-]+):\s*(.*)", line)):
            current[field[1]] = field[2].strip().strip('"')
    return entries


def test_action_yml_declares_what_the_script_reads_and_writes() -> None:
    text = ACTION.read_text(encoding="utf-8")
    declared = action_section(text, "inputs")
    read = set(re.findall(r'_(?:input|paths|flag)\("([a-z-]+)"', SCRIPT.read_text(encoding="utf-8")))
    assert read == set(declared) - {"python"}
    passed = dict(re.findall(r"^ +INPUT_([A-Z_]+): \$\{\{ inputs\.([\w-]+) \}\}$", text, flags=re.MULTILINE))
    assert passed == {name.upper().replace("-", "_"): name for name in read}
    assert "TRACEVIEW_BOOTSTRAP_PYTHON: ${{ inputs.python }}" in text
    assert {name: entry.get("default") for name, entry in declared.items() if name not in ("base", "head")} == {
        "fail-on-regression": "", "fail-on-inconclusive": "false", "confidence": "95%", "audit": "",
        "audit-fail-on": "error", "python": "python3", "output-dir": ""}
    outputs = action_section(text, "outputs")
    assert {name: entry["value"] for name, entry in outputs.items()} == {
        name: "${{ steps.diff.outputs.%s }}" % name for name in ("verdict", "markdown", "json", "html")}
    assert re.search(r"^ +using: composite$", text, flags=re.MULTILINE)
    assert re.search(r'-m pip install .*"\$GITHUB_ACTION_PATH"$', text, flags=re.MULTILINE)
    assert '"$GITHUB_ACTION_PATH/action/run.py"' in text
