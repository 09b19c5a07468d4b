"""The analysis as declared stages: what each creates exists exactly as declared, order is enforced,
docs/analysis.md's table reference is the declarations', and analysing again starts from the trace."""

from __future__ import annotations

import subprocess
import threading
import time

import duckdb
import pytest

import traceview
from conftest import DLRM_DIR, REPO, SHARED_TRACES, VLLM_H100, requires_shared
from traceview.analysis import docs, pipeline
from traceview.analysis.stage import Context, Relation, Stage, run_stages, waits_for
from traceview.errors import TraceviewError
from traceview.model import db

SAMPLE = REPO / "sample_traces" / "llm_serving.pt.trace.json.gz"
NSYS_FWD = SHARED_TRACES / "nsys" / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite"


def columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [name for (name,) in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [table]).fetchall()]


def test_the_table_reference_in_docs_is_generated_from_the_declarations() -> None:
    page = (REPO / "docs" / "analysis.md").read_text(encoding="utf-8")
    assert docs.with_reference(page) == page, "run: python -m traceview.analysis.docs"


def test_no_stage_alters_a_schema_table() -> None:
    found = subprocess.run(["grep", "-rn", "ALTER TABLE", str(REPO / "src" / "traceview" / "analysis")],
                           capture_output=True, text=True).stdout
    assert found == ""


@requires_shared
@pytest.mark.parametrize("path", [VLLM_H100, NSYS_FWD], ids=lambda p: p.name)
def test_every_declared_relation_has_exactly_its_declared_columns(path) -> None:
    with traceview.load(path) as trace:
        trace.analyze()
        for stage in pipeline.STAGES:
            for relation in stage.creates:
                if relation.transient:
                    assert columns(trace.con, relation.name) == [], f"{relation.name} should be dropped"
                else:
                    assert columns(trace.con, relation.name) == list(relation.columns), relation.name
        for table in ("kernels", "memops", "devices"):
            added = [name for stage in pipeline.STAGES for add in stage.adds if add.table == table
                     for name in add.columns]
            assert columns(trace.con, table) == [*db.contract_columns(table), *added], table


def test_a_stage_waits_for_what_it_reads_and_for_the_readers_of_what_it_rewrites() -> None:
    after = waits_for(pipeline.STAGES)
    # the windows and work of steps read no label: they run beside the categories, the op costs and devices
    assert after["step_work"] == after["categories"] == after["devices"] == after["op_costs"] == []
    assert after["kernel_costs"] == ["categories", "op_costs", "devices"]
    assert after["step_roles"] == ["step_work", "categories"]
    assert "devices" not in after["steps"]
    # the user's kernel patterns are matched once per distinct name, read off the categories' labels
    assert after["steps"] == ["step_work", "categories", "op_costs", "step_roles"]
    # assemble rewrites kernels: every earlier stage reading the ingested kernels finishes first
    assert after["assemble"] == ["step_work", "categories", "step_roles", "devices", "kernel_costs", "steps"]
    assert after["step_budget"] == ["steps", "activity", "idle_gaps", "steady", "device_busy", "step_windows"]
    # what reads only the timeline starts beside the gaps and the busy unions read off it
    assert after["steady"] == ["steps", "assemble", "activity"]
    assert after["critical_path"] == ["steps", "assemble", "activity", "step_windows"]
    assert "devices" in after["step_accounting"]  # it prices steps on the GPU devices matched


@requires_shared
@pytest.mark.parametrize("path, options", [
    (SAMPLE, {}), (SAMPLE, {"model": "llama-3-8b", "batch": 8, "context": 1024}), (NSYS_FWD, {}), (DLRM_DIR, {}),
    (VLLM_H100, {})],  # 128 k host ranges: two stages at a time, each on every core
    ids=["sample", "sample-model", "nsys", "dlrm-8-ranks", "vllm-h100"])
def test_stages_side_by_side_give_exactly_the_tables_of_one_at_a_time(path, options, monkeypatch, all_cores) -> None:
    relations = ["kernels", "memops", "devices", "diagnostics", *sorted(
        relation.name for stage in pipeline.STAGES for relation in stage.creates if not relation.transient)]

    def tables() -> dict[str, list[tuple]]:
        with traceview.load(path) as trace:
            trace.analyze(**options)
            return {name: trace.con.execute(f"SELECT * FROM {name} ORDER BY ALL").fetchall() for name in relations}

    with traceview.load(path) as trace:
        assert db.side_by_side(trace.con, stages=True) > 1
    side_by_side = tables()
    monkeypatch.setattr(db, "side_by_side", lambda con, stages=False: 1)
    assert tables() == side_by_side
    assert len(side_by_side["kernels"]) > 600 and side_by_side["steps"]


@requires_shared
@pytest.mark.parametrize("path", [SAMPLE, NSYS_FWD], ids=["sample", "nsys"])
def test_a_small_trace_skips_the_large_data_optimizers_and_gets_the_same_tables(path, monkeypatch) -> None:
    relations = ["kernels", "memops", "devices", "diagnostics", *sorted(
        relation.name for stage in pipeline.STAGES for relation in stage.creates if not relation.transient)]

    def tables() -> tuple[str, dict[str, list[tuple]]]:
        with traceview.load(path) as trace:
            trace.analyze()
            skipped = trace.scalar("SELECT current_setting('disabled_optimizers')")
            return skipped, {name: trace.con.execute(f"SELECT * FROM {name} ORDER BY ALL").fetchall()
                             for name in relations}

    skipped, fast = tables()
    assert set(skipped.split(",")) == set(db.SMALL_TRACE_SKIPPED_OPTIMIZERS)
    monkeypatch.setattr(db, "SMALL_TRACE_SKIPPED_OPTIMIZERS", ("statistics_propagation", "no_such_optimizer"))
    with traceview.load(path) as trace:  # a name this DuckDB does not know is left out, not an error
        assert trace.scalar("SELECT current_setting('disabled_optimizers')") == "statistics_propagation"
    monkeypatch.setattr(db, "SMALL_TRACE_SKIPPED_OPTIMIZERS", ())
    skipped, planned = tables()
    assert skipped == ""
    assert planned == fast


def test_of_the_stages_ready_when_a_thread_frees_the_first_listed_starts() -> None:
    """`slow` and `quick` take both threads; when `quick` ends, `after_quick` (now ready) and `free` (ready from
    the start) wait, and the list order, not the order they became ready in, picks `after_quick`."""
    con = duckdb.connect()
    db.create_schema(con)
    started: list[str] = []
    slow_may_end = threading.Event()

    def stage(name: str, creates: str, requires: tuple[str, ...] = ("kernels",), wait: bool = False) -> Stage:
        def run(cursor, context) -> None:
            started.append(name)
            if wait:
                slow_may_end.wait(5)
            else:
                time.sleep(0.01)
            cursor.execute(f"CREATE OR REPLACE TABLE {creates} AS SELECT 1 AS x")
            if name == "after_quick":
                slow_may_end.set()
        return Stage(name, name, requires=requires, creates=(Relation(creates, "x", {"x": "x"}),), run=run)

    stages = (stage("slow", "t_slow", wait=True), stage("quick", "t_quick"),
              stage("after_quick", "t_after", requires=("t_quick",)), stage("free", "t_free"))
    run_stages(con, stages, Context(None), threads=2)
    assert started[:2] in (["slow", "quick"], ["quick", "slow"])
    assert started[2:] == ["after_quick", "free"]


def test_the_stages_running_at_once_share_the_cores(all_cores: int) -> None:
    """`first` and `second` start together on half the cores each, `last` (after both) runs alone on all of them,
    and the setting the rules and sections after are sized for is put back; without sharing it is left alone."""
    con = duckdb.connect()
    db.create_schema(con)
    seen: dict[str, int] = {}
    # the two side by side read their setting before either ends: on a busy machine `second` could start so late
    # that `first` had ended and handed it all the cores
    both_read = threading.Barrier(2, timeout=60)

    def stage(name: str, requires: tuple[str, ...] = ("kernels",)) -> Stage:
        def run(cursor, context) -> None:
            seen[name] = cursor.execute("SELECT current_setting('threads')").fetchall()[0][0]
            if name != "last":
                both_read.wait()
            cursor.execute(f"CREATE OR REPLACE TABLE t_{name} AS SELECT 1 AS x")
        return Stage(name, name, requires=requires, creates=(Relation(f"t_{name}", "x", {"x": "x"}),), run=run)

    stages = (stage("first"), stage("second"), stage("last", requires=("t_first", "t_second")))
    half = max(1, all_cores // 2)
    db.share_cores(con, 2)  # as db.fit_to_size sizes a trace whose statements run two at a time
    run_stages(con, stages, Context(None), threads=2, share_cores=True)
    assert seen == {"first": half, "second": half, "last": all_cores}
    assert con.execute("SELECT current_setting('threads')").fetchall()[0][0] == half
    con.execute("SET threads = 3")
    run_stages(con, stages, Context(None), threads=2)
    assert seen == {"first": 3, "second": 3, "last": 3}


def test_a_stage_whose_prerequisite_is_missing_is_an_error_not_nulls() -> None:
    con = duckdb.connect()
    db.create_schema(con)
    ran = []
    late = Stage("late", "needs steps", requires=("kernels", "steps"), run=lambda c, ctx: ran.append(1))
    with pytest.raises(TraceviewError, match="analysis stage late needs steps, which no earlier stage created"):
        run_stages(con, (late,), Context(None))
    assert ran == []


def test_analysing_again_with_other_options_equals_a_fresh_analysis() -> None:
    regex = {"step_regex": r"^execute_context_[1-9]"}
    fresh = traceview.load(SAMPLE).analyze(**regex)
    expected = fresh.sql("SELECT * FROM steps ORDER BY rank, step_id").rows()
    kernels = fresh.sql("SELECT kernel_id, step_id, phase FROM kernels ORDER BY kernel_id").rows()
    devices = fresh.sql("SELECT * FROM devices ORDER BY device_id").rows()
    diagnostics = fresh.sql("SELECT * FROM diagnostics ORDER BY ALL").rows()
    assert fresh.scalar("SELECT count(*) FROM steps") == 2  # only the prefill windows match

    again = traceview.load(SAMPLE).analyze().analyze(gpu="a100-sxm4-80gb").analyze(**regex)
    assert again.sql("SELECT * FROM steps ORDER BY rank, step_id").rows() == expected
    assert again.sql("SELECT kernel_id, step_id, phase FROM kernels ORDER BY kernel_id").rows() == kernels
    assert again.sql("SELECT * FROM devices ORDER BY device_id").rows() == devices
    assert again.sql("SELECT * FROM diagnostics ORDER BY ALL").rows() == diagnostics


def test_the_same_options_do_not_analyse_twice() -> None:
    trace = traceview.load(SAMPLE).analyze()
    trace.con.execute("DROP TABLE phase_summary")
    trace.analyze()
    with pytest.raises(duckdb.CatalogException):
        trace.con.execute("SELECT * FROM phase_summary")


def test_a_loaded_trace_analyses_itself_when_a_query_names_the_analysis() -> None:
    trace = traceview.load(SAMPLE)
    assert not trace.analyzed
    assert trace.sql("SELECT phase, count(*) AS n FROM steps GROUP BY phase ORDER BY phase").rows() == [
        ("decode", 24), ("prefill", 2)]
    assert trace.analyzed
    other = traceview.load(SAMPLE)
    assert other.scalar("SELECT count(*) FROM kernels WHERE phase = 'other'") == 0
    with pytest.raises(duckdb.CatalogException):
        traceview.load(SAMPLE).sql("SELECT * FROM no_such_table")
