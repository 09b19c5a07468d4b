"""The command line as a user meets it: exit codes, one-line errors, no tracebacks."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from commands import Ran, traceview_cli, traceview_process
from conftest import DLRM_DIR, MACHINE_CPUS, SHARED_TRACES, VLLM_H100, on_all_cores, requires_shared

NSYS_NO_CUDA = SHARED_TRACES / "nsys" / "amir-ghz__DynamicViT__nsys_profile.sqlite"
BOLONGCHENG_FWD = SHARED_TRACES / "nsys" / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite"


def assert_one_line_error(result: Ran | subprocess.CompletedProcess, fragment: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceview: ") and fragment in lines[0], result.stderr


@requires_shared
def test_query_counts_graph_and_eager_kernels_on_vllm_h100() -> None:
    result = traceview_cli("query", VLLM_H100,
                       "SELECT launch_kind, count(*) AS n FROM kernels GROUP BY ALL ORDER BY 1", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"launch_kind": "eager", "n": 4841}, {"launch_kind": "graph", "n": 8667}]


@requires_shared
def test_query_csv_format() -> None:
    result = traceview_cli("query", BOLONGCHENG_FWD, "SELECT count(*) AS kernels FROM kernels", "--format", "csv")
    assert (result.returncode, result.stdout) == (0, "kernels\n632\n")


@requires_shared
@pytest.mark.parametrize("sql", ["DELETE FROM kernels", "CREATE TABLE x AS SELECT 1", "COPY kernels TO 'x.csv'"])
def test_query_is_read_only(sql: str) -> None:
    assert_one_line_error(traceview_cli("query", BOLONGCHENG_FWD, sql), "read-only")


@requires_shared
def test_query_sql_error_is_one_line() -> None:
    assert_one_line_error(traceview_cli("query", BOLONGCHENG_FWD, "SELECT nope FROM kernels"), "SQL error")


@requires_shared
def test_info_reports_missing_cuda_data() -> None:
    result = traceview_cli("info", NSYS_NO_CUDA)
    assert result.returncode == 0, result.stderr
    assert "[no_kernels]" in result.stdout and "kernels 0" in result.stdout


@requires_shared
def test_info_json_for_a_rank_directory() -> None:
    result = traceview_cli("info", DLRM_DIR, "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert [t["rank"] for t in summary["traces"]] == list(range(8))
    assert summary["rows"]["kernels"] == 2104


@requires_shared
def test_ingest_then_reuse_the_duckdb_file(tmp_path: Path) -> None:
    before = hashlib.sha256(BOLONGCHENG_FWD.read_bytes()).hexdigest()
    out = tmp_path / "fwd.duckdb"
    result = traceview_cli("ingest", BOLONGCHENG_FWD, "-o", out)
    assert result.returncode == 0, result.stderr
    assert hashlib.sha256(BOLONGCHENG_FWD.read_bytes()).hexdigest() == before
    again = traceview_cli("query", out, "SELECT count(*) AS n, sum(dur_ns) AS t FROM kernels", "--format", "json")
    assert json.loads(again.stdout) == [{"n": 632, "t": 43541000}]
    assert_one_line_error(traceview_cli("query", out, "DROP TABLE kernels"), "read-only")
    assert not list(tmp_path.glob("*.tmp"))


@requires_shared
def test_a_trace_saved_from_python_under_a_string_path_loads_again(tmp_path: Path) -> None:
    import traceview
    from traceview.errors import TraceviewError

    with traceview.load(BOLONGCHENG_FWD) as trace:
        trace.save(str(tmp_path / "fwd.duckdb"))  # the README's call: a str, not a Path
        with pytest.raises(TraceviewError, match="refusing to overwrite the input trace"):
            trace.save(str(BOLONGCHENG_FWD))
    with traceview.load(str(tmp_path / "fwd.duckdb")) as saved:
        assert saved.scalar("SELECT count(*) FROM kernels") == 632
    assert [p.name for p in tmp_path.iterdir()] == ["fwd.duckdb"]


def test_the_process_leaves_with_the_commands_exit_status_and_keeps_stdout_clean(tmp_path: Path) -> None:
    """`python -m traceview` ends through os._exit: findings at --fail-on are 1, a usage error 2, success 0, and
    only the document reaches stdout."""
    from traceview.testing import llm_serving_spec, write_kineto

    trace = write_kineto(llm_serving_spec(), tmp_path / "serve.json")
    assert traceview_process("check", trace, "--fail-on", "warning").returncode == 1
    assert_one_line_error(traceview_process("check", trace, "--fail-on", "never"), "--fail-on")
    result = traceview_process("report", trace, "--format", "md", "-o", "-")
    assert (result.returncode, result.stdout.startswith("## traceview report"), result.stderr) == (0, True, "")


def test_nsys_report_file_asks_for_an_export(tmp_path: Path) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"\x00" * 64)
    assert_one_line_error(traceview_cli("info", report), "nsys export --type sqlite")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(b"", "empty file"), (b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "not a trace"), (b"hello world\n", "not a trace")],
)
def test_files_that_are_not_traces(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "input.json"
    path.write_bytes(content)
    assert_one_line_error(traceview_cli("info", path), fragment)


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    assert_one_line_error(traceview_cli("info", tmp_path / "absent.sqlite"), "no such file")
    assert_one_line_error(traceview_cli("info", tmp_path), "no trace files")


def test_ingest_into_missing_directory_creates_it(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    result = traceview_cli("ingest", trace, "-o", tmp_path / "no" / "x.duckdb")
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"wrote {tmp_path / 'no' / 'x.duckdb'} (0 kernels)\n"


def test_cli_reference_is_current() -> None:
    from conftest import REPO
    from traceview.cli_docs import reference_markdown

    expected = (REPO / "docs" / "cli.md").read_text()
    assert reference_markdown() == expected, "run: python -c 'from traceview.cli_docs import reference_markdown; print(reference_markdown(), end=\"\")' > docs/cli.md"


def test_estimate_json_worked_example() -> None:
    """7e9 parameters in FP16 on A100-80GB: 14 GB / 2039 GB/s ≈ 6.9 ms per token, ridge ≈ 153 FLOP/byte."""
    result = traceview_cli("estimate", "--params", "7e9", "--gpu", "a100-sxm4-80gb", "--dtype", "fp16", "--format", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["step_time_floor_s"] == pytest.approx(6.9e-3, rel=0.05)
    assert out["ridge_flop_per_byte"] == pytest.approx(153, rel=0.05)
    assert (out["bound"], out["memory_time_s"] > out["compute_time_s"]) == ("memory", True)
    assert out["tokens_per_s"] == pytest.approx(1 / out["step_time_floor_s"])


def test_estimate_usage_errors() -> None:
    assert_one_line_error(traceview_cli("estimate", "--gpu", "h100-sxm"), "exactly one of --model or --params")
    assert_one_line_error(traceview_cli("estimate", "--model", "no-such-model", "--gpu", "h100-sxm"), "estimate:")
    assert_one_line_error(traceview_cli("estimate", "--params", "7e9", "--gpu", "h1000"), "unknown GPU")


def test_gpus_lists_dense_peaks() -> None:
    result = traceview_cli("gpus", "--format", "json")
    rows = {row["id"]: row for row in json.loads(result.stdout)}
    assert rows["h100-sxm"]["bf16_tflops"] == pytest.approx(989.4, rel=0.01)
    assert rows["a100-sxm4-80gb"]["hbm_tbps"] == pytest.approx(2.039)
    assert {"h200", "gh200", "b200", "gb200", "mi300x", "l4", "l40s"} <= rows.keys()


@requires_shared
def test_info_shows_matched_gpu_and_phases() -> None:
    result = traceview_cli("info", VLLM_H100)
    assert result.returncode == 0, result.stderr
    assert "-> h100-sxm" in result.stdout
    assert "phase      decode: 9 steps" in result.stdout and "memory-bound" in result.stdout
    assert "phase      prefill: 1 steps" in result.stdout


def test_unknown_gpu_override_is_a_usage_error(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_kineto

    trace = write_kineto(llm_serving_spec(), tmp_path / "s.json.gz")
    assert_one_line_error(traceview_cli("info", trace, "--gpu", "a9000"), "--gpu a9000")
    assert_one_line_error(traceview_cli("info", trace, "--model", "gpt-9"), "--model gpt-9")


def test_report_writes_each_format_beside_the_named_file(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_nsys

    trace = write_nsys(llm_serving_spec(), tmp_path / "serve.sqlite")
    before = hashlib.sha256(trace.read_bytes()).hexdigest()
    result = traceview_cli("report", trace, "-o", tmp_path / "out" / "run.md", "--format", "md,json")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["run.json", "run.md"]
    data = json.loads((tmp_path / "out" / "run.json").read_text())
    assert data["summary"]["kernels"] == 2480 and data["schema_version"] == 1
    assert hashlib.sha256(trace.read_bytes()).hexdigest() == before


def test_report_to_stdout_and_input_protection(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_kineto

    trace = write_kineto(llm_serving_spec(), tmp_path / "serve.json")
    result = traceview_cli("report", trace, "--format", "md", "-o", "-")
    assert result.returncode == 0 and result.stdout.startswith("## traceview report")
    assert_one_line_error(traceview_cli("report", trace, "--format", "md,json", "-o", "-"), "writes one format")
    assert_one_line_error(traceview_cli("report", trace, "--format", "json", "-o", trace), "refusing to overwrite")
    assert_one_line_error(traceview_cli("report", trace, "--format", "pdf"), "choose from html, md, json")


def test_report_without_trace_uses_the_bundled_sample(tmp_path: Path) -> None:
    result = traceview_cli("report", "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["trace"]["files"][0].endswith("sample_traces/llm_serving.pt.trace.json.gz")


def test_cache_dir_reuses_an_ingest_keyed_by_content(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_kineto

    import traceview

    trace = write_kineto(llm_serving_spec(), tmp_path / "s.json.gz")
    cache = tmp_path / "cache"
    first = traceview.load(trace, cache_dir=cache)
    assert [p.suffix for p in cache.iterdir()] == [".duckdb"]
    again = traceview.load(trace, cache_dir=cache)
    query = "SELECT count(*), sum(dur_ns), sum(start_ns) FROM kernels"
    assert again.sql(query).rows() == first.sql(query).rows()
    assert again.source == trace and len(list(cache.iterdir())) == 1
    write_kineto(llm_serving_spec(seed=1), trace)  # new content, new key
    traceview.load(trace, cache_dir=cache)
    assert len(list(cache.iterdir())) == 2


def test_cache_dir_keeps_each_analysis_keyed_by_its_options_and_names_the_trace_read_now(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_kineto

    trace = write_kineto(llm_serving_spec(), tmp_path / "a" / "s.json.gz")
    cache = tmp_path / "cache"

    def report(path: Path, name: str, *options: str) -> tuple[bytes, str]:
        result = traceview_cli("report", path, "--format", "json", "-o", tmp_path / name, "--profile", *options,
                               env={"TRACEVIEW_CACHE_DIR": str(cache)})
        assert result.returncode == 0, result.stderr
        return (tmp_path / name).read_bytes(), result.stderr

    fresh, fresh_profile = report(trace, "1.json")
    assert "(cached)" not in fresh_profile and "analysis  critical_path" in fresh_profile
    assert sorted(p.name.count("-analysed-") for p in cache.iterdir()) == [0, 1]  # the ingest and its analysis
    again, again_profile = report(trace, "2.json")
    assert again == fresh  # the copy reports byte for byte what the analysis did
    assert "analysis  (cached)" in again_profile and "analysis  critical_path" not in again_profile
    other, _ = report(trace, "3.json", "--gpu", "a100-sxm4-80gb")  # other options: analysed again, kept apart
    assert json.loads(other)["gpu"]["spec_id"] == "a100-sxm4-80gb" != json.loads(fresh)["gpu"]["spec_id"]
    assert len(list(cache.glob("*-analysed-*.duckdb"))) == 2
    moved = tmp_path / "b" / "s.json.gz"  # the same bytes elsewhere: the cached analysis, the path read now
    moved.parent.mkdir()
    moved.write_bytes(trace.read_bytes())
    copied, copied_profile = report(moved, "4.json")
    assert "(cached)" in copied_profile and len(list(cache.iterdir())) == 3
    assert json.loads(copied)["trace"]["files"] == [str(moved.resolve())]
    assert json.loads(fresh)["trace"]["files"] == [str(trace.resolve())]


def test_a_kept_analysis_is_keyed_by_the_options_the_model_config_and_traceviews_code(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    from traceview import api
    from traceview.analysis.pipeline import AnalysisOptions

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
                                  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                                  "vocab_size": 128256, "model_type": "llama"}))
    cache = api.TraceCache(tmp_path, "content", None)
    plain, with_model = AnalysisOptions(), AnalysisOptions(model=str(config))
    keys = {cache.analysed(plain), cache.analysed(with_model), cache.analysed(AnalysisOptions(tp=2))}
    assert len(keys) == 3 and cache.analysed(AnalysisOptions()) == cache.analysed(plain)
    before = cache.analysed(with_model)
    config.write_text(config.read_text().replace('"num_hidden_layers": 32', '"num_hidden_layers": 40'))
    assert cache.analysed(with_model) != before  # the same path, other values
    monkeypatch.setattr(api, "code_key", lambda: "an edited checkout")
    assert cache.analysed(plain) not in keys


def test_memory_limit_flag(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_kineto

    trace = write_kineto(llm_serving_spec(), tmp_path / "s.json.gz")
    result = traceview_cli("--memory-limit", "1GB", "query", trace, "SELECT current_setting('memory_limit') AS m",
                       "--format", "csv")
    assert result.returncode == 0 and result.stdout.splitlines()[1].endswith("MiB")
    assert_one_line_error(traceview_cli("--memory-limit", "lots", "info", trace), "expected a size")


def wrote(result: Ran) -> list[str]:
    return [line.removeprefix("wrote ") for line in result.stderr.splitlines() if line.startswith("wrote ")]


def test_output_extension_names_the_format(tmp_path: Path) -> None:
    """-o run.md is the Markdown (the bug: HTML written there, then overwritten); the rest land beside it."""
    from traceview.testing import llm_serving_spec, write_kineto

    trace = write_kineto(llm_serving_spec(), tmp_path / "serve.json")
    result = traceview_cli("report", trace, "-o", tmp_path / "run.md")
    assert result.returncode == 0, result.stderr
    assert wrote(result) == [str(tmp_path / f"run.{ext}") for ext in ("html", "md", "json")]
    assert (tmp_path / "run.md").read_text().startswith("## traceview report\n")
    assert (tmp_path / "run.html").read_text().lstrip().lower().startswith("<!doctype html>")
    assert json.loads((tmp_path / "run.json").read_text())["summary"]["kernels"] == 2480

    result = traceview_cli("report", trace, "--format", "json", "-o", tmp_path / "only.json")
    assert (result.returncode, wrote(result)) == (0, [str(tmp_path / "only.json")])
    assert json.loads((tmp_path / "only.json").read_text())["schema_version"] == 1

    nested = tmp_path / "out" / "new" / "run.html"
    result = traceview_cli("report", trace, "--format", "html", "-o", nested)
    assert (result.returncode, wrote(result)) == (0, [str(nested)])
    assert sorted(p.name for p in nested.parent.iterdir()) == ["run.html"]
    assert "<html" in nested.read_text()

    assert_one_line_error(traceview_cli("report", trace, "--format", "html", "-o", tmp_path / "x.md"),
                          "x.md: a .md file is the md format, which --format html does not include")
    assert not (tmp_path / "x.md").exists()


def test_diff_output_follows_its_registry(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_kineto

    base = write_kineto(llm_serving_spec(), tmp_path / "base.json")
    result = traceview_cli("diff", base, base, "--format", "md,html", "-o", tmp_path / "d" / "diff.html")
    assert result.returncode == 0, result.stderr
    assert wrote(result) == [str(tmp_path / "d" / "diff.md"), str(tmp_path / "d" / "diff.html")]
    markdown, page = (tmp_path / "d" / "diff.md").read_text(), (tmp_path / "d" / "diff.html").read_text()
    assert "**⚪ Neutral**" in markdown
    assert "- Base and head did the same GPU work, to the nanosecond." in markdown
    assert "Base and head did the same GPU work, to the nanosecond." in page


def test_diff_output_extension_picks_the_format_when_none_is_given(tmp_path: Path) -> None:
    """`diff -o d.html` is the HTML page, `-o d.json` the JSON, `-o d.md` the Markdown (the default format),
    each alone; an explicit --format that excludes the extension is still a one-line error."""
    from traceview.testing import llm_serving_spec, write_kineto

    base = write_kineto(llm_serving_spec(), tmp_path / "base.json")
    for name, starts in (("d.html", "<!doctype html>"), ("d.json", "{"), ("d.md", "## traceview diff")):
        target = tmp_path / name
        result = traceview_cli("diff", base, base, "-o", target)
        assert (result.returncode, wrote(result)) == (0, [str(target)]), result.stderr
        assert target.read_text().lstrip().lower().startswith(starts.lower())
    assert json.loads((tmp_path / "d.json").read_text())["verdict"] == "neutral"
    assert_one_line_error(traceview_cli("diff", base, base, "--format", "md", "-o", tmp_path / "x.html"),
                          "x.html: a .html file is the html format, which --format md does not include")


def test_query_csv_writes_nested_cells_as_json(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_kineto

    trace = write_kineto(llm_serving_spec(), tmp_path / "serve.json")
    sql = "SELECT 7 AS n, [1, 2] AS ids, {'phase': 'decode', 'steps': 24} AS s, NULL::INT[] AS none"
    result = traceview_cli("query", trace, sql, "--format", "csv")
    assert (result.returncode, result.stdout) == (0, 'n,ids,s,none\n7,"[1,2]","{""phase"":""decode"",""steps"":24}",\n')
    result = traceview_cli("query", trace, "SELECT rank, list(step_id ORDER BY step_id)[1:3] AS first FROM steps GROUP BY rank",
                       "--format", "csv")
    assert (result.returncode, result.stdout) == (0, 'rank,first\n0,"[0,1,2]"\n')


def test_report_applies_the_baseline_as_check_does(tmp_path: Path) -> None:
    from traceview.testing import llm_serving_spec, write_kineto

    trace = write_kineto(llm_serving_spec(), tmp_path / "serve.json")
    before = traceview_cli("check", trace, "--format", "json")
    findings = json.loads(before.stdout)["findings"]
    assert findings  # the sample's per-step cudaStreamSynchronize at least
    assert traceview_cli("check", trace, "--write-baseline", tmp_path / "known.json").returncode == 0
    (tmp_path / "traceview.toml").write_text('baseline = "known.json"\n')
    config = ("--config", tmp_path / "traceview.toml")
    after = json.loads(traceview_cli("check", trace, "--format", "json", *config).stdout)
    assert (after["findings"], after["suppressed_by_baseline"]) == ([], len(findings))
    result = traceview_cli("report", trace, "--format", "json", "-o", "-", *config)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["findings"] == []
    plain = json.loads(traceview_cli("report", trace, "--format", "json", "-o", "-").stdout)
    assert [f["fingerprint"] for f in plain["findings"]] == [f["fingerprint"] for f in findings]


@requires_shared
def test_info_pools_ranks_as_the_report_does(tmp_path: Path) -> None:
    """info's per-phase figures are the report's Σ/Σ rows (report.data.phase_rows), not means across ranks."""
    info = json.loads(traceview_cli("info", DLRM_DIR, "--format", "json").stdout)
    report = json.loads(traceview_cli("report", DLRM_DIR, "--format", "json", "-o", "-").stdout)
    assert [{k: v for k, v in p.items() if k != "wall_ns"} for p in info["phases"]] == report["phases"]
    assert [p["wall_ns"] for p in info["phases"]] == [p["time_ns"] for p in report["phases"]]
    assert sum(p["steps"] for p in info["phases"]) == len(report["steps"])


@requires_shared
@pytest.mark.skipif(not hasattr(os, "killpg") or len(MACHINE_CPUS) < 2, reason="needs process groups and a renderer process")
@pytest.mark.parametrize("after_s", [0.0, 0.4, 0.8, 1.2])  # reading, analysing, the rules and sections on 2 cores
def test_ctrl_c_during_a_report_is_one_line_from_the_command_and_none_from_its_renderer(tmp_path: Path,
                                                                                        after_s: float) -> None:
    with on_all_cores():
        process = subprocess.Popen([sys.executable, "-m", "traceview", "report", VLLM_H100, "-o", tmp_path / "r.html"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while not (renderer := subprocess.run(["pgrep", "-P", str(process.pid), "-f", "traceview.report.worker"],
                                          capture_output=True, text=True).stdout.split()):
        assert time.monotonic() < deadline and process.poll() is None  # interrupted once its renderer runs
        time.sleep(0.02)
    time.sleep(after_s)  # a Ctrl-C inside a DuckDB query arrives as its RuntimeError("Query interrupted")
    os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    _, stderr = process.communicate(timeout=60)
    assert (process.returncode, stderr.decode().strip()) == (130, "traceview: interrupted")  # click adds a newline
    while True:  # and the renderer, its pipe closed, ends too
        try:
            os.kill(int(renderer[0]), 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
