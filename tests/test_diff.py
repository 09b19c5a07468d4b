"""`traceview diff`: verdicts with intervals over repeated runs, comparability, attribution that adds up,
exactly the changed kernels, JSON baselines, the diff schema and the PR-comment size limit."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from commands import traceview_cli
from conftest import SHARED_TRACES, built_once, report_json, requires_shared
from traceview import api, workflow
from traceview.diff import build_diff, stats
from traceview.report import diff_markdown
from traceview.report.json_report import render as render_json
from traceview.testing import llm_serving_spec, serving_runs, write_kineto

SLOWER = "rotary_embedding_kernel"
REMOVED = "reshape_and_cache_flash_kernel"
RUNS = 5
DIFF_SCHEMA = json.loads(resources.files("traceview.report").joinpath("diff_schema.json").read_text())
GITHUB_COMMENT_LIMIT = 65_536


def sides(flag: str, paths: list[Path]) -> list[object]:
    return [item for path in paths for item in (flag, path)]


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


def _reports(directory: Path, name: str, specs) -> list[Path]:
    """Each run analysed once and saved as a JSON report: the diffs below read them as runs."""
    paths = []
    options = workflow.CheckOptions.configured()
    for i, spec in enumerate(specs):
        trace = write_kineto(spec, directory / f"{name}{i}.json.gz")
        with api.load(trace) as loaded:
            report = workflow.report(loaded, options)
        paths.append(directory / f"{name}{i}.json")
        paths[-1].write_text(render_json(report))
    return paths


RUN_SIDES = {
    "base": dict(seed=11),
    "head7": dict(seed=12, change_pct={"decode": 7.0}),
    "noisy_base": dict(seed=13, step_noise_pct=3.0),
    "noisy_head1": dict(seed=14, step_noise_pct=3.0, change_pct={"decode": 1.0}),
}


@pytest.fixture(scope="module")
def runs() -> dict[str, list[Path]]:
    """5 runs a side with the generator's noise (1.5% run to run, 2% step to step): a base, a head whose
    decode steps are 7% slower, and a base and head with 3% step noise whose decode differs by 1%. Built once a
    session, whichever worker asks first."""
    def build(folder: Path) -> None:
        folder.mkdir()
        for name, noise in RUN_SIDES.items():
            _reports(folder, name, serving_runs(RUNS, **noise))

    folder = built_once("diff-runs", build)
    return {name: [folder / f"{name}{i}.json" for i in range(RUNS)] for name in RUN_SIDES}


def _load(paths: list[Path]) -> list[dict]:
    return [json.loads(p.read_text()) for p in paths]


def test_seven_percent_decode_regression_fails_the_gate(runs: dict[str, list[Path]], tmp_path: Path) -> None:
    result = traceview_cli("diff", *sides("--base", runs["base"]), *sides("--head", runs["head7"]),
                       "--fail-on-regression", "5%", "--format", "json,md", "-o", tmp_path / "pr.json")
    assert result.returncode == 1, result.stderr
    assert "verdict: regression" in result.stderr
    diff = json.loads((tmp_path / "pr.json").read_text())
    jsonschema.validate(diff, DIFF_SCHEMA)
    decode = next(p for p in diff["phases"] if p["phase"] == "decode")
    low, high = decode["median_interval_pct"]
    assert diff["verdict"] == decode["verdict"] == "regression"
    assert 0 < low < 7.0 < high  # excludes zero and holds the true change
    assert (decode["base"]["runs"], decode["base"]["steps"], decode["head"]["steps"]) == (RUNS, 24 * RUNS, 24 * RUNS)
    assert decode["run_noise_measured"] and decode["significant"] and decode["p_value"] < 0.01
    assert diff["comparability"]["comparable"] and diff["comparability"]["score"] == 1.0
    prefill = next(p for p in diff["phases"] if p["phase"] == "prefill")
    assert prefill["verdict"] != "regression"  # prefill did not change
    assert diff["regressions"] == [f"decode median step time +{decode['median_change_pct']:.1f}% "
                                   f"[+{low:.1f}%, +{high:.1f}%]"]
    markdown = (tmp_path / "pr.md").read_text()
    assert "🔴 Regression" in markdown and f"[+{low:.1f}%, +{high:.1f}%]" in markdown
    assert diff["headline"].startswith("decode: kernels +") and "slower" in diff["headline"]


def test_median_change_is_the_pooled_medians_change(runs: dict[str, list[Path]]) -> None:
    base, head = _load(runs["base"]), _load(runs["head7"])
    diff = build_diff(base, head)
    decode = next(p for p in diff["phases"] if p["phase"] == "decode")

    def pooled_median(reports: list[dict]) -> float:
        values = sorted(s["owned_ns"] for r in reports for s in r["steps"] if s["phase"] == "decode" and s["priced"])
        middle = len(values) // 2
        return (values[middle - 1] + values[middle]) / 2 if len(values) % 2 == 0 else values[middle]

    assert decode["base"]["median_ns"] == pooled_median(base)
    assert decode["median_change_pct"] == pytest.approx(100 * (pooled_median(head) / pooled_median(base) - 1))


def test_attribution_parts_add_up_to_the_mean_step_change(runs: dict[str, list[Path]]) -> None:
    base, head = _load(runs["base"]), _load(runs["head7"])
    diff = build_diff(base, head)
    for phase in diff["phases"]:
        split = phase["attribution"]

        def mean_step(reports: list[dict]) -> float:  # mean over runs of each run's mean owned step time
            per_run = [[s["owned_ns"] for s in r["steps"] if s["phase"] == phase["phase"] and s["priced"]] for r in reports]
            return sum(sum(v) / len(v) for v in per_run) / len(per_run)

        assert split["base_mean_step_ns"] == pytest.approx(mean_step(base), rel=1e-12)
        assert split["head_mean_step_ns"] == pytest.approx(mean_step(head), rel=1e-12)
        assert sum(p["delta_ns"] for p in split["parts"]) == pytest.approx(split["delta_ns"], abs=1e-3)
        kernels = next(p for p in split["parts"] if p["name"] == "kernels")
        assert sum(c["delta_ns"] for c in split["categories"]) == pytest.approx(kernels["delta_ns"], abs=1e-3)
        assert sum(f["delta_ns"] for f in split["families"]) == pytest.approx(kernels["delta_ns"], abs=1e-3)
    decode = next(p for p in diff["phases"] if p["phase"] == "decode")["attribution"]
    kernels = next(p for p in decode["parts"] if p["name"] == "kernels")
    # every duration of a decode step grew 7%: kernels carry most of it, and they grew by about 7% themselves
    assert kernels["delta_ns"] > 0.6 * decode["delta_ns"]
    assert 100 * kernels["delta_ns"] / kernels["base_ns"] == pytest.approx(7.0, abs=1.5)


def test_one_percent_under_three_percent_noise_is_not_a_regression(runs: dict[str, list[Path]]) -> None:
    diff = build_diff(_load(runs["noisy_base"]), _load(runs["noisy_head1"]), fail_on_regression_pct=5.0)
    assert diff["verdict"] != "regression" and diff["exit_code"] == 0
    assert all(p["verdict"] != "regression" for p in diff["phases"])


def test_one_percent_under_noise_is_never_a_regression_over_many_seeds() -> None:
    """The same noise model as the generator (run 1.5%, step 3%), 5 runs of 24 decode steps a side."""
    rng = random.Random(2026)

    def side(change: float) -> list[list[float]]:
        runs = []
        for _ in range(RUNS):
            factor = 1 + 0.015 * rng.gauss(0, 1)
            runs.append([2.3e6 * factor * (1 + 0.03 * rng.gauss(0, 1)) * (1 + change) for _ in range(24)])
        return runs

    verdicts = [stats.decide(stats.compare(side(0.0), side(0.01)), 5.0)[0] for _ in range(60)]
    assert "regression" not in verdicts and verdicts.count("neutral") > 20


def test_identical_sides_are_neutral_under_a_tight_gate(runs: dict[str, list[Path]]) -> None:
    result = traceview_cli("diff", *sides("--base", runs["base"]), *sides("--head", runs["base"]),
                       "--fail-on-regression", "1%", "--format", "json")
    assert result.returncode == 0, result.stderr
    diff = json.loads(result.stdout)
    assert diff["verdict"] == "neutral" and diff["kernels"] == [] and diff["regressions"] == []
    assert all(p["identical"] and p["median_interval_pct"] == [0.0, 0.0] for p in diff["phases"])
    assert diff["conclusion"]["identical"]


def test_diff_names_exactly_the_changed_kernels(pair: tuple[Path, Path]) -> None:
    result = traceview_cli("diff", *pair, "--format", "json")
    assert result.returncode == 0, result.stderr
    diff = json.loads(result.stdout)
    changes = {(k["kernel"], k["status"]) for k in diff["kernels"]}
    assert changes == {(SLOWER, "slower"), (REMOVED, "gone")}
    slower = next(k for k in diff["kernels"] if k["kernel"] == SLOWER)
    assert slower["change_pct"] == pytest.approx(20.0, abs=0.1)
    assert not diff["gpu_changed"]


def test_diff_against_itself_is_neutral(pair: tuple[Path, Path]) -> None:
    base = report_json(pair[0])
    result = traceview_cli("diff", base, base, "--fail-on-regression", "1%", "--format", "json")
    assert result.returncode == 0, result.stderr
    diff = json.loads(result.stdout)
    assert diff["verdict"] == "neutral" and diff["kernels"] == [] and diff["regressions"] == []
    assert {p["phase"]: p["verdict"] for p in diff["phases"]} == {"decode": "neutral", "prefill": "inconclusive"}
    assert "too few steps" in next(p["reason"] for p in diff["phases"] if p["phase"] == "prefill")


def test_json_report_is_a_run_and_one_run_a_side_says_run_noise_is_unmeasured(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, head = pair
    report = tmp_path / "base.json"
    assert traceview_cli("report", base, "--format", "json", "-o", report).returncode == 0
    result = traceview_cli("diff", report, head, "--format", "md", "-o", "-")
    assert result.returncode == 0, result.stderr
    assert f"| {REMOVED.replace('_', chr(92) + '_')} | kv\\_cache\\_write | gone |" in result.stdout
    assert "run-to-run noise is not measured" in result.stdout


def test_different_workloads_are_not_comparable(tmp_path: Path) -> None:
    """Twice the requests: tokens per step differ, so no verdict is drawn from the step times."""
    base = _reports(tmp_path, "small", serving_runs(1, seed=3))
    head = _reports(tmp_path, "large", serving_runs(1, seed=4, prefill_batches=(8, 8)))
    diff = build_diff(_load(base), _load(head), fail_on_regression_pct=5.0)
    tokens = next(c for c in diff["comparability"]["checks"] if c["check"] == "tokens_per_step")
    assert not tokens["passed"] and tokens["similarity"] == pytest.approx(0.5)
    assert "decode 8 → 16" in tokens["detail"] and "prefill 1024 → 2048" in tokens["detail"]
    assert diff["verdict"] == "inconclusive" and diff["exit_code"] == 0
    assert all(p["verdict"] == "inconclusive" and p["reason"].startswith("not comparable") for p in diff["phases"])


@requires_shared
def test_hta_trace_diff_pair_is_inconclusive_because_the_gpu_changed() -> None:
    torch = SHARED_TRACES / "torch"
    result = traceview_cli("diff", report_json(torch / "hta__trace_diff_control_a100.json.gz"),
                           report_json(torch / "hta__trace_diff_test_v100.json.gz"), "--format", "json",
                           "--fail-on-regression", "5%")
    assert result.returncode == 0, result.stderr
    diff = json.loads(result.stdout)
    jsonschema.validate(diff, DIFF_SCHEMA)
    assert diff["verdict"] == "inconclusive" and diff["gpu_changed"]
    assert any(reason.startswith("not comparable: GPU changed: NVIDIA A100") for reason in diff["verdict_reasons"])
    assert [c["check"] for c in diff["comparability"]["checks"] if not c["passed"]] == ["gpu"]
    assert diff["comparability"]["score"] == 0.0


@requires_shared
def test_a_shared_trace_diffed_with_itself_is_neutral() -> None:
    report = report_json(SHARED_TRACES / "torch" / "tracemap__vllm_h100_tp4_rank0_isl1000_osl10_c32.pt.trace.json.gz")
    diff = json.loads(traceview_cli("diff", report, report, "--format", "json").stdout)
    assert diff["verdict"] == "neutral" and diff["comparability"]["score"] == 1.0
    assert diff["conclusion"]["identical"]


@requires_shared
def test_diff_h200_against_h100_reports_the_gpu_change() -> None:
    nsys = SHARED_TRACES / "nsys"
    result = traceview_cli("diff", report_json(nsys / "NVIDIA__Fuser__report2.sqlite"),
                           report_json(nsys / "NVIDIA__Fuser__report2_df8f397.sqlite"), "--format", "json")
    diff = json.loads(result.stdout)
    assert diff["gpu_changed"] and (diff["base"]["spec_id"], diff["head"]["spec_id"]) == ("h200", "h100-sxm")
    assert diff["verdict"] == "inconclusive"
    statuses = {k["kernel"]: k["status"] for k in diff["kernels"]}
    assert statuses["nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT"] == "gone"
    assert statuses["nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN"] == "new"
    assert all(k["delta_ns"] == k["head_time_ns"] - k["base_time_ns"] for k in diff["kernels"])


def _largest_shared_trace() -> Path:
    candidates = [p for p in SHARED_TRACES.rglob("*") if p.is_file() and p.name.endswith((".sqlite", ".json", ".json.gz"))]
    return max(candidates, key=lambda p: (p.stat().st_size, p.name))


@requires_shared
def test_markdown_fits_a_github_comment_on_the_largest_shared_trace(pair: tuple[Path, Path]) -> None:
    """Against a different workload, so its kernel families are new or gone and its findings differ; then the
    same diff with ten thousand changed kernels and a thousand new findings, each with a long name."""
    largest = _largest_shared_trace()
    diff = json.loads(traceview_cli("diff", report_json(pair[0]), report_json(largest), "--format", "json").stdout)
    markdown = diff_markdown.render(diff)
    assert markdown.startswith("## traceview diff") and len(markdown) < GITHUB_COMMENT_LIMIT
    assert diff["kernels"] and diff["findings"]["new"]
    kernel, finding = diff["kernels"][0], diff["findings"]["new"][0]
    diff["kernels"] = [{**kernel, "kernel": f"{'x' * 400}_{i}"} for i in range(10_000)]
    diff["findings"]["new"] = [{**finding, "message": "m" * 2_000} for _ in range(1_000)]
    huge = diff_markdown.render(diff)
    assert len(huge) < GITHUB_COMMENT_LIMIT
    assert f"| {10_000 - diff_markdown.MAX_KERNELS} more families" in huge


def test_diff_writes_html_beside_markdown(pair: tuple[Path, Path], tmp_path: Path) -> None:
    result = traceview_cli("diff", *map(report_json, pair), "--format", "md,html", "-o", tmp_path / "pr.md")
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "pr.html").read_text()
    assert SLOWER in page and REMOVED in page and "Content-Security-Policy" in page


def test_diff_usage_errors(pair: tuple[Path, Path]) -> None:
    base, head = map(report_json, pair)
    for args, fragment in (((base, head, "--fail-on-regression", "five"), "expected a percentage"),
                           ((base, head, "--format", "pdf"), "choose from md, json, html"),
                           ((base, head, "--confidence", "high"), "expected a level"),
                           ((base, head, "--confidence", "20%"), "between 50% and 99.9%"),
                           ((base, head, "--base", base), "not both"),
                           ((base, head, head), "got 3 path(s)"),
                           (("--base", base), "at least one --base and one --head"),
                           (("--base", base, "--head", head.with_name("missing.json.gz")), "missing.json.gz")):
        result = traceview_cli("diff", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert fragment in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_stats_match_known_values() -> None:
    for dof, table in ((2, 4.303), (3, 3.182), (4, 2.776), (8, 2.306), (20, 2.086)):
        assert stats.t_quantile(0.975, dof) == pytest.approx(table, rel=0.01)
    assert stats.quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5 and stats.quantile([1.0, 2.0, 3.0, 4.0], 0.9) == pytest.approx(3.7)
    assert stats.small_sample_factor(1, 1, 0.95) == 1.0
    assert stats.small_sample_factor(3, 3, 0.95) == pytest.approx((1.5 ** 0.5) * 2.776 / 1.95996, rel=1e-3)
    runs = [[100.0 + i + r for i in range(10)] for r in range(3)]
    assert stats.compare(runs, [[v * 1.1 for v in run] for run in runs]) == stats.compare(runs, [[v * 1.1 for v in run] for run in runs])
    few = stats.compare([[1.0, 2.0]], [[1.0, 2.5]])
    assert stats.decide(few, 5.0) == ("inconclusive", "too few steps to decide: base 2, head 2 (at least 5 a side)")
