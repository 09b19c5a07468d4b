"""The `traceview` command line: parse arguments, call the API, print results. No analysis here."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import click
import duckdb

from traceview import IMPORTED_AT, api, memory, profiling, workflow
from traceview.analysis.pipeline import AnalysisOptions
from traceview.errors import TraceviewError
from traceview.files import write_atomically
from traceview.ingest import describe_formats
from traceview.report import AUDIT, CHECK, DIFF, INFO, REPORT, Registry, Renderer
from traceview.report.data import check_document, trace_summary
from traceview.report.json_report import json_default
from traceview.resources import data_dir
from traceview.rules.docs import explain_text
from traceview.rules.loader import SEVERITIES

if TYPE_CHECKING:  # polars (0.1 s to import) only for the commands that print tables
    import polars as pl

TRACE_HELP = f"{describe_formats()}, a directory of per-rank traces, or a .duckdb from `traceview ingest`."


def _trace_argument(func):
    return click.argument("trace", type=click.Path(path_type=Path))(func)


def _analysis_options(func):
    """The flags that tell the analysis what the trace does not say (shared by every analysing command)."""
    options = [
        click.option("--gpu", help="GPU id or name from `traceview gpus`; overrides the trace's device name."),
        click.option("--model", help="Model preset or Hugging Face config.json, for per-step accounting."),
        click.option("--dtype", default="bf16", show_default=True, help="Model weights dtype for accounting."),
        click.option("--tp", default=1, show_default=True, type=click.IntRange(min=1), help="Tensor-parallel size."),
        click.option("--batch", type=click.IntRange(min=1), help="Decode batch when the trace has no token counts."),
        click.option("--context", type=click.IntRange(min=1), help="Decode context length when the trace does not say."),
        click.option("--step-regex", help="Regex over range names that marks one step each (overrides detection)."),
        click.option("--step-gap-ms", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
                     help="Idle gap that separates steps when nothing else marks them."),
        click.option("--phase-kernel", "phase_kernels", multiple=True, metavar="PHASE=REGEX",
                     help="Kernels whose name matches REGEX mark their step as PHASE (prefill or decode); repeatable."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _analysis(kwargs: dict) -> AnalysisOptions:
    return AnalysisOptions(
        gpu=kwargs.pop("gpu"), model=kwargs.pop("model"), dtype=kwargs.pop("dtype"), tp=kwargs.pop("tp"),
        batch=kwargs.pop("batch"), context=kwargs.pop("context"), step_regex=kwargs.pop("step_regex"),
        step_gap_ns=round(kwargs.pop("step_gap_ms") * 1e6), phase_kernels=_phase_kernels(kwargs.pop("phase_kernels")),
    )


def _phase_kernels(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    mapping = []
    for text in values:
        phase, sep, regex = text.partition("=")
        if not sep or phase not in ("prefill", "decode") or not regex:
            raise TraceviewError(f"--phase-kernel {text!r}: expected prefill=REGEX or decode=REGEX")
        mapping.append((phase, regex))
    return tuple(mapping)


def _print_frame(frame: pl.DataFrame, fmt: str) -> None:
    import polars as pl

    if fmt == "csv":
        click.echo(frame.write_csv(), nl=False)
    elif fmt == "json":
        click.echo(json.dumps(frame.to_dicts(), default=json_default, indent=1))
    else:
        with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=120, tbl_width_chars=200,
                       tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
            click.echo(str(frame))


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=f"TRACE: {TRACE_HELP}")
@click.version_option(package_name="traceview")
@click.option("--debug", is_flag=True, help="Show the full traceback when something fails.")
@click.option("--memory-limit", envvar="TRACEVIEW_MEMORY_LIMIT",
              help="Cap DuckDB's memory, e.g. 8GB (default: sized from the trace and the machine, "
                   "docs/performance.md); work past it spills to disk.")
@click.option("--cache-dir", envvar="TRACEVIEW_CACHE_DIR", type=click.Path(path_type=Path, file_okay=False),
              help="Keep ingested and analysed traces here, keyed by content (an analysis also by its options "
                   "and traceview's code), so the next command skips ingest and analysis.")
@click.pass_context
def cli(ctx: click.Context, debug: bool, memory_limit: str | None, cache_dir: Path | None) -> None:
    """Turn GPU profiler traces into answers.

    Reads every input format (TRACE, below) into one DuckDB schema (docs/schema.md).

    \b
    Example:
      traceview info run.sqlite
    """
    ctx.obj = {"debug": debug}
    # exported so audit's worker processes inherit them; api.load reads both
    for name, value in (("TRACEVIEW_MEMORY_LIMIT", memory_limit), ("TRACEVIEW_CACHE_DIR", cache_dir)):
        if value:
            os.environ[name] = str(value)


@cli.command()
@_trace_argument
@click.option("--format", "fmt", type=click.Choice(INFO.names()), default="text", show_default=True)
@_analysis_options
def info(trace: Path, fmt: str, **kwargs) -> None:
    """Describe TRACE: format, producer version, GPUs, time span, rows, steps per phase, diagnostics.

    \b
    Example:
      traceview info trace.pt.trace.json.gz
    """
    with api.load(trace) as loaded:
        loaded.analyze(_analysis(kwargs))
        summary = trace_summary(loaded.con)
    click.echo(INFO[fmt].render(summary), nl=False)


@cli.command()
@_trace_argument
@click.argument("sql")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@_analysis_options
def query(trace: Path, sql: str, fmt: str, **kwargs) -> None:
    """Run a read-only SQL query over TRACE's tables and analysis views (docs/schema.md, docs/analysis.md).

    \b
    Example:
      traceview query run.sqlite "SELECT launch_kind, count(*) FROM kernels GROUP BY ALL"
      traceview query run.sqlite "SELECT phase, count(*), sum(gpu_time_ns) FROM steps GROUP BY ALL"
    """
    with api.load(trace) as loaded:
        loaded.analyze(_analysis(kwargs))
        frame = workflow.query(loaded, sql, nested_as_json=fmt == "csv")
    _print_frame(frame, fmt)


@cli.command()
@_trace_argument
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="DuckDB file to write; later commands accept it as TRACE.")
def ingest(trace: Path, output: Path) -> None:
    """Ingest TRACE once and save it as a DuckDB database for fast reuse.

    \b
    Example:
      traceview ingest run.sqlite -o run.duckdb && traceview info run.duckdb
    """
    with api.load(trace) as loaded:
        _make_parent(output)
        try:
            loaded.save(output)
        except (OSError, duckdb.Error) as exc:
            raise TraceviewError(f"{output}: cannot write ({exc})") from None
        kernels = loaded.scalar("SELECT count(*) FROM kernels")
    click.echo(f"wrote {output} ({kernels:,} kernels)", err=True)


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def gpus(fmt: str) -> None:
    """List the GPUs in hardware/: dense peak TFLOP/s per dtype, bandwidth, ridge points.

    \b
    Example:
      traceview gpus --format csv
    """
    from traceview.analysis.hardware import load_specs

    rows = [
        {
            "id": spec.id, "name": spec.name, "sm_count": spec.sm_count,
            "memory_gib": round(spec.memory_bytes / 2**30, 1), "hbm_tbps": spec.hbm_tbps,
            **{f"{dtype}_tflops": spec.peak_tflops.get(dtype) for dtype in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")},
            "ridge_bf16": round(spec.ridge("bf16"), 1) if spec.ridge("bf16") else None,
            "match": "; ".join(spec.match),
        }
        for spec in sorted(load_specs(), key=lambda s: s.id)
    ]
    import polars as pl

    frame = pl.DataFrame(rows)
    _print_frame(frame.drop("match") if fmt == "table" else frame, fmt)


@cli.command()
@click.option("--model", "model", help="A preset (llama-3-8b, qwen2.5-72b, mixtral-8x7b, ...) or a Hugging Face config.json.")
@click.option("--params", type=float, help="Generic dense model: parameter count, e.g. 7e9 (instead of --model).")
@click.option("--layers", type=int, help="With --params: layers, for the KV-cache and attention terms.")
@click.option("--hidden", type=int, help="With --params: hidden size.")
@click.option("--kv-heads", type=int, help="With --params: KV heads (GQA).")
@click.option("--gpu", required=True, help="GPU id or device name from `traceview gpus`, e.g. h100-sxm.")
@click.option("--dtype", default="fp16", show_default=True,
              type=click.Choice(["fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4"]))
@click.option("--batch", default=1, show_default=True, type=click.IntRange(min=1), help="Requests in the step.")
@click.option("--context", type=click.IntRange(min=1), help="Context length per request in tokens (decode: including the new token).")
@click.option("--prompt-tokens", type=click.IntRange(min=1), help="Prefill: new tokens per request (default: the whole context).")
@click.option("--phase", default="decode", show_default=True, type=click.Choice(["decode", "prefill"]))
@click.option("--tp", default=1, show_default=True, type=click.IntRange(min=1), help="Tensor-parallel size; results are per GPU.")
@click.option("--utilization", default=1.0, show_default=True, type=click.FloatRange(0, 1, min_open=True),
              help="Fraction of the spec peaks reachable (e.g. 0.8 for MAMF-like ceilings).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def estimate(model, params, layers, hidden, kv_heads, gpu, dtype, batch, context, prompt_tokens, phase, tp,
             utilization, fmt) -> None:
    """Estimate a step's floor on paper: max(bytes / bandwidth, FLOPs / peak), no trace needed.

    \b
    Example:
      traceview estimate --model llama-2-7b --gpu a100-sxm4-80gb --batch 14 --context 8192
      traceview estimate --params 7e9 --gpu a100-sxm4-80gb --format json
    """
    from traceview.analysis.estimate import estimate as run_estimate
    from traceview.analysis.estimate import format_estimate_text

    if (model is None) == (params is None):
        raise TraceviewError("estimate: give exactly one of --model or --params")
    try:
        result = run_estimate(
            model, gpu, dtype=dtype, batch=batch, context=context, phase=phase, tp=tp,
            prompt_tokens=prompt_tokens, utilization=utilization, params=params, layers=layers,
            hidden=hidden, kv_heads=kv_heads,
        )
    except (ValueError, OSError) as exc:
        raise TraceviewError(f"estimate: {exc}") from None
    if fmt == "json":
        click.echo(json.dumps(result.to_dict(), indent=1, sort_keys=True))
    else:
        click.echo(format_estimate_text(result))


def _rule_config_options(func):
    """Selection, parameters, severities, team rules and baseline: the flags of every rule-running command."""
    options = [
        click.option("--select", multiple=True, help="Run only these rule ids or prefixes (repeatable), e.g. TV3."),
        click.option("--ignore", multiple=True, help="Skip these rule ids or prefixes (repeatable)."),
        click.option("--param", "params", multiple=True, help="Override a parameter: RULE.PARAM=VALUE (repeatable)."),
        click.option("--severity", "severities", multiple=True, help="Override a severity: RULE=LEVEL (repeatable)."),
        click.option("--rules-dir", "rules_dirs", multiple=True, type=click.Path(path_type=Path, file_okay=False),
                     help="A directory of your own rule files (repeatable)."),
        click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False),
                     help="traceview.toml or pyproject.toml to read (default: the nearest one from here)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _rule_setup(kwargs: dict, **extra):
    """Load the configuration (file, then flags) and the rules it names."""
    from traceview.rules import find_config, load_config, load_rules, with_flags

    path = kwargs.pop("config_path") or find_config(Path.cwd())
    config = with_flags(
        load_config(path), select=kwargs.pop("select"), ignore=kwargs.pop("ignore"), params=kwargs.pop("params"),
        severity=kwargs.pop("severities"), rules_dirs=kwargs.pop("rules_dirs"), **extra,
    )
    rules = load_rules(config.rules_dirs)
    config.validate(rules)
    return config, rules


@cli.group(invoke_without_command=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@_rule_config_options
@click.pass_context
def rules(ctx: click.Context, fmt: str, **kwargs) -> None:
    """List the rules: id, title, severity, tags (docs/rules.md).

    \b
    Example:
      traceview rules --select TV3
      traceview rules explain TV301
    """
    if ctx.invoked_subcommand:
        ctx.obj["rule_options"] = kwargs
        return
    config, loaded = _rule_setup(kwargs)
    rows = [{"id": r.id, "name": r.name, "severity": config.severity_for(r), "title": r.title,
             "tags": ", ".join(r.tags)} for r in loaded if config.selects(r)]
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
    else:
        import polars as pl

        _print_frame(pl.DataFrame(rows), "table")


@rules.command()
@click.argument("rule_id")
@click.pass_context
def explain(ctx: click.Context, rule_id: str) -> None:
    """Print a rule's full text: what it flags, why it matters, how to fix it, parameters, query.

    \b
    Example:
      traceview rules explain TV301
    """
    config, loaded = _rule_setup(dict(ctx.obj["rule_options"]))
    matches = [r for r in loaded if rule_id.upper() == r.id or rule_id == r.name]
    if not matches:
        raise TraceviewError(f"no rule {rule_id!r} (see `traceview rules`)")
    click.echo(explain_text(matches[0], config))


def _profile_option(func):
    return click.option("--profile", "profile", is_flag=True,
                        help="Print on stderr where the time went: wall time and rows per start-up (imports), "
                             "ingest, analysis stage, rule, report section and output.")(func)


@contextmanager
def _profiled(enabled: bool):
    """Collect the command's profile and print it on stderr when it succeeds (`--profile`)."""
    if not enabled:
        yield
        return
    with profiling.collect() as profile:
        profiling.record_startup()
        yield
    click.echo(profile.table(), err=True, nl=False)


def _fail_on_option(func):
    return click.option("--fail-on", type=click.Choice(SEVERITIES),
                        help="Exit 1 when a finding reaches this severity (default: error, or fail-on in the config).")(func)


def _make_parent(path: Path) -> None:
    """`-o out/new/run.html`: the missing directories are created (a file in the way is one line)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TraceviewError(f"{path}: cannot create the directory {path.parent} ({exc.strerror or exc})") from None


def _write(outputs: dict[Renderer, Path | None], document, renders: dict[Renderer, Callable] | None = None) -> None:
    """Each format of a document to its file, or to stdout (None); `renders` holds the render functions
    already started (Renderer.start)."""
    renders = renders or {}
    # a format that renders in a process of its own gets the document first; the others render here meanwhile
    sent = {renderer: renders[renderer].send(document)
            for renderer in outputs if hasattr(renders.get(renderer), "send")}
    contents: dict[Renderer, str | bytes] = {}
    for renderer in sorted(outputs, key=lambda r: r in sent):
        render = sent.get(renderer) or functools.partial(renders.get(renderer, renderer.render), document)
        with profiling.step("render", renderer.name, lambda: len(contents[renderer])):
            contents[renderer] = render()
    for renderer, target in outputs.items():
        content = contents[renderer]
        if target is None:
            if renderer.binary:
                sys.stdout.buffer.write(content)
            else:
                click.echo(content, nl=False)
            continue
        _make_parent(target)
        write_atomically(target, content)
        click.echo(f"wrote {target}", err=True)


@cli.command()
@_trace_argument
@click.option("--format", "fmt", type=click.Choice(CHECK.names()), default="text", show_default=True)
@_fail_on_option
@click.option("--baseline", type=click.Path(path_type=Path, dir_okay=False),
              help="Suppress the findings recorded in this baseline file.")
@click.option("--write-baseline", type=click.Path(path_type=Path, dir_okay=False),
              help="Record the current findings as the baseline and exit 0.")
@_profile_option
@_rule_config_options
@_analysis_options
def check(trace: Path, fmt: str, fail_on: str | None, baseline: Path | None, write_baseline: Path | None,
          profile: bool, **kwargs) -> None:
    """Run the rules on TRACE and print findings ranked by the time fixing them could save.

    Exit code 0 when no finding reaches --fail-on, 1 when one does, 2 on bad input.

    \b
    Example:
      traceview check run.sqlite --fail-on warning
      traceview check trace.json.gz --select TV2 --param TV201.min_gap_ms=5 --format json
    """
    from traceview.rules.baseline import write_baseline as save_baseline

    analysis = _analysis(kwargs)
    config, loaded = _rule_setup(kwargs, fail_on=fail_on, baseline=baseline)
    options = workflow.CheckOptions.configured(analysis, config, loaded, baseline=not write_baseline)
    with _profiled(profile):
        with api.load(trace) as loaded_trace:
            result = workflow.check(loaded_trace, options)
        if write_baseline:
            save_baseline(write_baseline, result.findings)
            click.echo(f"wrote {write_baseline} ({len(result.findings)} findings)", err=True)
            return
        _write({CHECK[fmt]: None}, check_document(str(trace), result))
    if result.reaches(config.fail_on):
        sys.exit(1)


SAMPLE_TRACE = "llm_serving.pt.trace.json.gz"  # in sample_traces/, which a wheel carries too


def _inputs(loaded: api.Trace, given: Path) -> list[Path]:
    """The files a report reads, which no output may overwrite."""
    return [Path(f) for (f,) in loaded.con.execute("SELECT file FROM trace_info").fetchall()] + [given]


def _formats_help(registry: Registry) -> str:
    return "Comma-separated formats: " + ", ".join(registry.names()) + "."


@cli.command()
@click.argument("trace", type=click.Path(path_type=Path), required=False)
@click.option("-o", "--output", help="The report file; its extension picks its format (run.md: Markdown), the other "
                                     "formats land beside it; missing directories are created. '-' = stdout.")
@click.option("--format", "formats", default=",".join(REPORT.defaults()), show_default=True, help=_formats_help(REPORT))
@click.option("--focus-step", metavar="STEP",
              help="Also draw this step in the timeline: N (step N of the lowest rank) or RANK:N.")
@_profile_option
@_rule_config_options
@_analysis_options
def report(trace: Path | None, output: str | None, formats: str, focus_step: str | None, profile: bool,
           **kwargs) -> None:
    """Write the report for TRACE: one self-contained HTML file, a Markdown summary, versioned JSON.

    With no TRACE it runs on the bundled sample trace. Findings in the configuration's baseline are
    left out, as `check` leaves them out. The timeline draws the slowest step of each phase, and the
    --focus-step.

    \b
    Example:
      traceview report run.sqlite -o run.html          # run.html, run.md, run.json
      traceview report trace.json.gz --format md -o -  # Markdown for a PR comment on stdout
      traceview report run.sqlite --focus-step 0:14    # step 14 of rank 0 in the timeline too
    """
    from traceview.report.timeline import FocusStep

    focus = FocusStep.parse(focus_step) if focus_step is not None else None
    if trace is None:
        trace = data_dir("sample_traces") / SAMPLE_TRACE
        if not trace.exists():
            raise TraceviewError("no TRACE given and the bundled sample trace is not available")
    chosen = REPORT.parse(formats)
    options = workflow.CheckOptions.configured(_analysis(kwargs), *_rule_setup(kwargs))
    with _profiled(profile):
        # what the formats render with loads while the trace is read and analysed
        renders = {renderer: renderer.start() for renderer in chosen}
        with api.load(trace) as loaded:
            outputs = REPORT.targets(output, chosen, "report", _inputs(loaded, trace))
            data = workflow.report(loaded, options, focus_step=focus)
        _write(outputs, data, renders)


def _given(ctx: click.Context, name: str) -> bool:
    """Whether the user set option `name` (on the command line or in the environment), not its default."""
    return ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)


def _audit_outputs(func):
    """One `--FLAG PATH` per audit format that has a flag in the registry (--json, --junit, --markdown)."""
    for renderer in reversed([r for r in AUDIT.renderers.values() if r.flag]):
        func = click.option(f"--{renderer.flag}", f"{renderer.flag}_path", type=click.Path(path_type=Path, dir_okay=False),
                            help=f"Write the audit as {renderer.description}.")(func)
    return func


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--jobs", type=click.IntRange(min=1), help="Worker processes (default: the number of cores).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Run on this Dask scheduler's workers instead (tcp://HOST:PORT; needs traceview[dask] and a "
                   "filesystem the workers share; docs/scale-out.md). Not with --jobs.")
@_fail_on_option
@click.option("--baseline", type=click.Path(path_type=Path, dir_okay=False), help="Suppress known findings.")
@_audit_outputs
@click.option("--reports-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Write each trace's report (" + ", ".join(REPORT.defaults()) + ") into this directory.")
@_rule_config_options
@_analysis_options
@click.option("--profile", "profile", is_flag=True,
              help="Print on stderr where the time went, summed over the traces (each worker times its own), "
                   "and each trace's total.")
def audit(paths: tuple[str, ...], jobs: int | None, scheduler: str | None, fail_on: str | None, baseline: Path | None,
          reports_dir: Path | None, profile: bool, **kwargs) -> None:
    """Audit many traces (files, directories, globs; nsys and Kineto mixed) in parallel, for CI.

    A directory of per-rank traces is audited as one job with per-rank rows and a straggler view.
    Files in a directory that are not traces (a README, a lock file) are listed as skipped.
    Exit code: 0 clean, 1 a finding at or above --fail-on, 2 bad usage or an unreadable trace.

    \b
    Example:
      traceview audit traces/ --junit audit.xml --markdown audit.md --fail-on warning
      traceview audit /shared/traces/ --scheduler tcp://10.0.0.5:8786 --json audit.json
    """
    from traceview import audit as auditing

    if scheduler and jobs:
        raise TraceviewError("--scheduler and --jobs are exclusive: on a cluster, the workers set the parallelism")
    files = {r: kwargs.pop(f"{r.flag}_path") for r in AUDIT.renderers.values() if r.flag}
    analysis = _analysis(kwargs)
    config, loaded_rules = _rule_setup(kwargs, fail_on=fail_on, baseline=baseline)
    outputs = {renderer: path for renderer, path in files.items() if path}
    for path in outputs.values():
        _make_parent(path)
    if reports_dir:
        reports_dir.mkdir(parents=True, exist_ok=True)
    targets, missing, skipped = auditing.discover(list(paths))
    options = auditing.AuditOptions(check=workflow.CheckOptions.configured(analysis, config, loaded_rules),
                                    reports_dir=str(reports_dir) if reports_dir else None, profile=profile)
    interactive = sys.stderr.isatty()

    def progress(done: int, total: int, row: dict) -> None:
        status = "error" if row["status"] == "error" else f"{len(row['findings'])} findings"
        if interactive:
            width = 30
            bar = "#" * (width * done // total) + "-" * (width - width * done // total)
            click.echo(f"\r[{bar}] {done}/{total} {Path(row['path']).name[:40]:<40}", err=True, nl=done == total)
        else:
            click.echo(f"audit {done}/{total} {row['path']}: {status}", err=True)

    if scheduler:
        rows = auditing.run_on_cluster(targets, options, scheduler, progress) + missing
    else:
        rows = auditing.run(targets, options, jobs or auditing.default_jobs(), progress) + missing
    if profile:
        _print_audit_profile(rows)
    document = auditing.summarise(sorted(rows, key=lambda r: r["path"]), config.fail_on, tuple(loaded_rules), skipped)
    _write(outputs, document)
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        with open(summary_file, "a", encoding="utf-8") as f:
            f.write(AUDIT["md"].render(document))
    _write({AUDIT["text"]: None}, document)
    sys.exit(document["exit_code"])


def _print_audit_profile(rows: list[dict]) -> None:
    """The audit's profile: every trace's steps summed, then each trace's own total (slowest first)."""
    profiles = {row["path"]: row.pop("profile") for row in rows if "profile" in row}
    click.echo(f"profile of {len(profiles)} traces (wall time in each worker, summed):", err=True)
    click.echo(profiling.merged(list(profiles.values())).table(), err=True, nl=False)
    totals = {path: profiling.merged([profile]).total_s() for path, profile in profiles.items()}
    for path, total in sorted(totals.items(), key=lambda item: (-item[1], item[0])):
        click.echo(f"{total:>8.3f} s  {path}", err=True)


def _percent_option(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise TraceviewError(f"--fail-on-regression {text!r}: expected a percentage such as 5%") from None
    if value < 0:
        raise TraceviewError(f"--fail-on-regression {text!r}: must not be negative")
    return value


def _confidence_option(text: str) -> float:
    """'95', '95%' or '0.95' → 0.95; between 50% and 99.9%."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise TraceviewError(f"--confidence {text!r}: expected a level such as 95% or 0.95") from None
    value = value / 100.0 if value > 1.0 else value
    if not 0.5 <= value <= 0.999:
        raise TraceviewError(f"--confidence {text!r}: must lie between 50% and 99.9%")
    return value


def _diff_sides(runs: tuple[Path, ...], base: tuple[Path, ...], head: tuple[Path, ...]) -> tuple[list[Path], list[Path]]:
    if runs and (base or head):
        raise TraceviewError("diff: give BASE HEAD, or --base RUN ... --head RUN ..., not both")
    if runs:
        if len(runs) != 2:
            raise TraceviewError(f"diff: expected BASE and HEAD, got {len(runs)} path(s); "
                                 "for several runs a side, repeat --base and --head")
        return [runs[0]], [runs[1]]
    if not base or not head:
        raise TraceviewError("diff: give BASE HEAD, or at least one --base and one --head")
    return list(base), list(head)


@cli.command()
@click.argument("runs", nargs=-1, type=click.Path(path_type=Path), metavar="[BASE HEAD]")
@click.option("--base", "base_runs", multiple=True, type=click.Path(path_type=Path), metavar="RUN",
              help="A run of the base side (trace, rank directory or JSON report); repeat for several runs.")
@click.option("--head", "head_runs", multiple=True, type=click.Path(path_type=Path), metavar="RUN",
              help="A run of the head side; repeat for several runs.")
@click.option("-o", "--output", help="The diff file; its extension picks its format (d.html: HTML, d.json: JSON), "
                                     "other --format formats land beside it. Default: stdout for one format.")
@click.option("--format", "formats", default=",".join(DIFF.defaults()), show_default=True, help=_formats_help(DIFF))
@click.option("--fail-on-regression", "fail_on_regression", metavar="PCT",
              help="Exit 1 when a phase's median step time is slower by PCT or more (e.g. 5%) with confidence: its "
                   "interval excludes zero. The step verdicts are then decided at PCT.")
@click.option("--fail-on-inconclusive", is_flag=True,
              help="Exit 1 also when the verdict is inconclusive (runs not comparable, too few steps, or an interval "
                   "too wide to decide).")
@click.option("--confidence", "confidence", default="95%", show_default=True, metavar="LEVEL",
              help="Confidence level of the step-time intervals (e.g. 95%, 0.99).")
@click.option("--threshold", default=5.0, show_default=True, type=click.FloatRange(min=0),
              help="Smallest change, in percent, worth reporting for kernels, and for steps without a gate.")
@click.option("--jobs", type=click.IntRange(min=1), help="Runs analysed in parallel (default: the number of cores).")
@_rule_config_options
@_analysis_options
def diff(runs: tuple[Path, ...], base_runs: tuple[Path, ...], head_runs: tuple[Path, ...], output: str | None,
         formats: str, fail_on_regression: str | None, fail_on_inconclusive: bool, confidence: str, threshold: float,
         jobs: int | None, **kwargs) -> None:
    """Compare BASE with HEAD: one run a side, or several with --base/--head (traces, rank directories or JSON
    reports from `traceview report`). Verdict: regression, improvement, neutral or inconclusive.

    \b
    Example:
      traceview diff main.json.gz pr.json.gz --fail-on-regression 5%
      traceview diff --base main1.json --base main2.json --base main3.json \\
                     --head pr1.sqlite --head pr2.sqlite --head pr3.sqlite --format md -o -
    """
    from traceview.audit import default_jobs
    from traceview.diff import build_diff

    limit = _percent_option(fail_on_regression)
    level = _confidence_option(confidence)
    base, head = _diff_sides(runs, base_runs, head_runs)
    chosen = DIFF.chosen(formats, output, _given(click.get_current_context(), "formats"))
    options = workflow.CheckOptions.configured(_analysis(kwargs), *_rule_setup(kwargs))
    if output is None and len(chosen) == 1:
        output = "-"
    outputs = DIFF.targets(output, chosen, "diff", [*base, *head])
    reports = workflow.reports_for([*base, *head], options, jobs or default_jobs())
    result = build_diff(reports[:len(base)], reports[len(base):],
                        threshold_pct=threshold, kernel_threshold_pct=threshold, fail_on_regression_pct=limit,
                        confidence=level, fail_on_inconclusive=fail_on_inconclusive)
    _write(outputs, result)
    click.echo(f"verdict: {result['verdict']}", err=True)
    for regression in result["regressions"]:
        click.echo(f"regression: {regression}", err=True)
    sys.exit(result["exit_code"])


@cli.command()
@_trace_argument
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="The trace-event JSON to write; a name ending in .gz is gzipped. Missing directories are created.")
@_rule_config_options
@_analysis_options
def export(trace: Path, output: Path, **kwargs) -> None:
    """Write TRACE as Chrome trace-event JSON, to open in Perfetto's UI or chrome://tracing (docs/export.md).

    Host processes and threads, GPUs and streams become tracks; kernels, copies, API calls and ranges are
    slices with their step, phase and exact ns in the args; launch calls point at their kernels; steps and
    the findings of `check` get tracks of their own.

    \b
    Example:
      traceview export run.sqlite -o run.json.gz
    """
    options = workflow.CheckOptions.configured(_analysis(kwargs), *_rule_setup(kwargs))
    with api.load(trace) as loaded:
        if output.resolve() in {path.resolve() for path in _inputs(loaded, trace)}:
            raise TraceviewError(f"{output}: refusing to overwrite the input trace")
        _make_parent(output)
        summary = workflow.export(loaded, options, output)
    click.echo(f"wrote {output} ({summary.events:,} events: {summary.kernels:,} kernels, {summary.memops:,} copies "
               f"and memsets, {summary.flows:,} launch flows, {summary.findings:,} findings)", err=True)


def main() -> None:
    """Entry point: every failure is one line on stderr and exit code 2; `--debug` shows the traceback.

    Once the command is done the process leaves without tearing the interpreter down: every file is written
    and closed, every trace's database closed and every worker joined by then, and unloading DuckDB, altair's
    modules and the report's objects one by one cost the sample report 0.05 s of its 1 s."""
    profiling.process_started(IMPORTED_AT)
    code = run()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that closed the pipe (`| head`) has what it wanted
            pass
    os._exit(code)


def run(args: list[str] | None = None) -> int:
    """Run one command line (`args`, else the process's own) and return its exit code, never raising: the
    whole command as `main` runs it, short of leaving the process (so tests can run it in theirs)."""
    debug = "--debug" in (sys.argv[1:] if args is None else args)
    interrupts = []

    def interrupt(signum, frame):
        interrupts.append(signum)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, interrupt)
    try:
        cli.main(args=args, standalone_mode=False)
        return 0
    except SystemExit as exc:  # a command's own exit code (1: findings at --fail-on)
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        click.echo(exc.code, err=True)
        return 1
    except click.exceptions.Abort:
        click.echo("traceview: interrupted", err=True)
        return 130
    except click.ClickException as exc:
        if debug and isinstance(exc, TraceviewError):
            traceback.print_exc()
        click.echo(f"traceview: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the last line of defence against a traceback
        if interrupts:  # DuckDB turns a Ctrl-C during a query into RuntimeError("Query interrupted")
            click.echo("traceview: interrupted", err=True)
            return 130
        if debug:
            traceback.print_exc()
        if memory.is_out_of_memory(exc):
            click.echo(f"traceview: {memory.out_of_memory_message(exc)}", err=True)
            return 2
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        click.echo(f"traceview: unexpected error: {message} (rerun with --debug for the traceback)", err=True)
        return 2
