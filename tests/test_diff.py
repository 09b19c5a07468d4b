"""`traceview diff`: exactly the changed kernels, no change against itself, GPU changes, JSON baselines."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import SHARED_TRACES, requires_shared
from traceview.testing import llm_serving_spec, write_kineto

SLOWER = "rotary_embedding_kernel"
REMOVED = "reshape_and_cache_flash_kernel"


def traceview(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceview", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    directory = tmp_path_factory.mktemp("diff")
    base = llm_serving_spec()
    kernels = []
    for k in base.kernels:
        if REMOVED in k.name:
            continue
        kernels.append(replace(k, dur_ns=round(k.dur_ns * 1.2)) if SLOWER in k.name else k)
    return write_kineto(base, directory / "base.json.gz"), write_kineto(replace(base, kernels=tuple(kernels)),
                                                                        directory / "head.json.gz")


def test_diff_names_exactly_the_changed_kernels(pair: tuple[Path, Path], tmp_path: Path) -> None:
    result = traceview("diff", *pair, "--format", "json")
    assert result.returncode == 0, result.stderr
    diff = json.loads(result.stdout)
    changes = {(k["kernel"], k["status"]) for k in diff["kernels"]}
    assert changes == {(SLOWER, "slower"), (REMOVED, "gone")}
    slower = next(k for k in diff["kernels"] if k["kernel"] == SLOWER)
    assert slower["change_pct"] == pytest.approx(20.0, abs=0.1)
    assert not diff["gpu_changed"]


def test_diff_against_itself_is_clean_under_a_tight_gate(pair: tuple[Path, Path]) -> None:
    result = traceview("diff", pair[0], pair[0], "--fail-on-regression", "1%", "--format", "json")
    assert result.returncode == 0, result.stderr
    diff = json.loads(result.stdout)
    assert diff["kernels"] == [] and diff["regressions"] == []
    assert {p["verdict"] for p in diff["phases"]} == {"unchanged"}


def test_regression_gate_uses_gpu_time_and_json_report_as_base(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, head = pair
    report = tmp_path / "base.json"
    assert traceview("report", head, "--format", "json", "-o", report).returncode == 0
    gate = traceview("diff", report, base, "--fail-on-regression", "0.5%", "--format", "md", "-o", "-")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "regression: total GPU busy time" in gate.stderr
    assert f"| {REMOVED.replace('_', chr(92) + '_')} | kv\\_cache\\_write | new |" in gate.stdout


@requires_shared
def test_diff_h200_against_h100_reports_the_gpu_change() -> None:
    nsys = SHARED_TRACES / "nsys"
    result = traceview("diff", nsys / "NVIDIA__Fuser__report2.sqlite", nsys / "NVIDIA__Fuser__report2_df8f397.sqlite",
                       "--format", "json")
    diff = json.loads(result.stdout)
    assert diff["gpu_changed"] and (diff["base"]["spec_id"], diff["head"]["spec_id"]) == ("h200", "h100-sxm")
    statuses = {k["kernel"]: k["status"] for k in diff["kernels"]}
    assert statuses["nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT"] == "gone"
    assert statuses["nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN"] == "new"
    assert all(k["delta_ns"] == k["head_time_ns"] - k["base_time_ns"] for k in diff["kernels"])


def test_diff_writes_html_beside_markdown(pair: tuple[Path, Path], tmp_path: Path) -> None:
    result = traceview("diff", *pair, "--format", "md,html", "-o", tmp_path / "pr.md")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "pr.html").read_text()
    assert SLOWER in page and REMOVED in page and "Content-Security-Policy" in page


def test_diff_usage_errors(pair: tuple[Path, Path]) -> None:
    for args, fragment in (((*pair, "--fail-on-regression", "five"), "expected a percentage"),
                           ((*pair, "--format", "pdf"), "choose from md, json, html")):
        result = traceview("diff", *args)
        assert result.returncode == 2 and fragment in result.stderr and "Traceback" not in result.stderr
