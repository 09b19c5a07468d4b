"""Invariants that must hold on every real trace in ../shared/traces, including ones added later.

Each trace is analysed once and every analysis table and view is checked against physics and the
documented vocabularies: nothing above its roof, no percentage without costs, a bound wherever a
percentage is, every kernel on a listed device, phases from the documented set, training steps never
judged as prefill or decode.
"""

from __future__ import annotations

import re

import pytest

import traceview
from traceview.analysis.budget import BUCKETS
from conftest import REPO, analysed, corpus, reported, requires_shared

pytestmark = requires_shared
STEP_PHASES = {"prefill", "decode", "mixed", "train", "empty", "unknown"}
KERNEL_PHASES = STEP_PHASES | {"other"}
AGGREGATES = ("roofline_by_category", "roofline_by_phase", "roofline_by_step", "phase_summary")
# relative slack for float sums: a ratio of sums of per-kernel values each at most 1
EPSILON = 1e-9


@pytest.fixture(params=corpus(), ids=lambda p: p.name)
def trace(request) -> traceview.Trace:
    return analysed(request.param)


def violations(trace: traceview.Trace, sql: str) -> list[tuple]:
    return trace.sql(sql).rows()


def test_no_kernel_cost_above_what_its_gpu_can_do(trace) -> None:
    assert violations(trace, f"""
        SELECT r.kernel_id, r.name, r.achieved_tbps, s.hbm_bytes_per_s / 1e12
        FROM roofline_kernels r
        JOIN kernels k USING (rank, kernel_id)
        JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
        JOIN gpu_specs s USING (spec_id)
        WHERE (NOT r.l2_resident AND r.achieved_tbps * 1e12 > s.hbm_bytes_per_s * (1 + {EPSILON}))
           OR (r.l2_resident AND r.bytes > s.l2_bytes)
           OR (r.l2_resident AND r.achieved_tbps * 1e12 > s.l2_bytes_per_s * (1 + {EPSILON}))
        """) == []
    assert violations(trace, f"""
        SELECT r.kernel_id, r.name, r.dtype, r.achieved_tflops, p.peak_flops / 1e12
        FROM roofline_kernels r
        JOIN kernels k USING (rank, kernel_id)
        JOIN devices d ON d.rank = k.rank AND d.device_id = k.device_id
        JOIN gpu_peaks p ON p.spec_id = d.spec_id AND p.dtype = r.dtype
        WHERE r.achieved_tflops * 1e12 > p.peak_flops * (1 + {EPSILON})
        """) == []
    fastest = trace.scalar("SELECT max(hbm_bytes_per_s) FROM gpu_specs")
    assert violations(trace, f"""
        SELECT kernel_id, name, bytes / dur_ns FROM kernels
        WHERE cost_status = 'accepted' AND bytes / dur_ns * 1e9 > {fastest} * (1 + {EPSILON})""") == []


@pytest.mark.parametrize("view", AGGREGATES)
def test_no_aggregate_above_its_roof_or_a_percentage_without_costs(trace, view) -> None:
    # a % of roof always comes with the wall it is measured against: the group's where costs decide it, else
    # (roofline views, costs under half the time) the costed kernels' own
    wall = "bound" if view == "phase_summary" else "coalesce(bound, costed_bound)"
    assert violations(trace, f"""
        SELECT * FROM {view}
        WHERE pct_of_roof > 100 * (1 + {EPSILON}) OR pct_of_roof < 0
           OR (pct_of_roof IS NOT NULL AND {wall} IS NULL)
           OR coverage_pct > 100 * (1 + {EPSILON})
        """) == []
    if view != "phase_summary":
        assert violations(trace, f"""
            SELECT * FROM {view}
            WHERE bound IS DISTINCT FROM CASE WHEN costed_time_ns >= 0.5 * time_ns THEN costed_bound END
            """) == []
    if view != "phase_summary":
        assert violations(trace, f"""
            SELECT * FROM {view}
            WHERE (pct_of_roof IS NOT NULL OR achieved_tbps IS NOT NULL OR achieved_tflops IS NOT NULL)
              AND NOT costed_time_ns > 0
            """) == []
    else:
        assert violations(trace, """
            SELECT * FROM phase_summary
            WHERE (pct_of_roof IS NOT NULL AND bound_source NOT IN ('measured', 'model'))
               OR (bound_source = 'measured' AND NOT costed_time_ns > 0)
               OR (pct_of_roof IS NULL AND no_roof_reason IS NULL)
            """) == []
    rank_roofs = """
        SELECT d.rank, max(s.hbm_bytes_per_s) AS hbm, max(p.peak_flops) AS peak
        FROM devices d JOIN gpu_specs s USING (spec_id) JOIN gpu_peaks p ON p.spec_id = d.spec_id
        GROUP BY d.rank"""
    assert violations(trace, f"""
        SELECT v.* FROM {view} v JOIN ({rank_roofs}) r USING (rank)
        WHERE v.achieved_tbps * 1e12 > r.hbm * (1 + {EPSILON}) OR v.achieved_tflops * 1e12 > r.peak * (1 + {EPSILON})
        """) == []


def test_every_kernel_runs_on_a_listed_device_with_its_spec(trace) -> None:
    orphans = violations(trace, """
        SELECT DISTINCT k.rank, k.device_id FROM kernels k
        WHERE k.rank IN (SELECT rank FROM devices)
          AND NOT EXISTS (SELECT 1 FROM devices d WHERE d.rank = k.rank AND d.device_id = k.device_id)
        """)
    assert orphans == []
    lost = violations(trace, """
        SELECT DISTINCT k.rank, k.device_id FROM kernels k JOIN devices d USING (rank, device_id)
        WHERE d.spec_id IS NULL
          AND k.rank IN (SELECT rank FROM devices WHERE spec_id IS NOT NULL)
        """)
    assert lost == []


def test_row_ids_run_in_start_order(trace) -> None:
    """docs/schema.md: kernel, call and range ids run in start order within a rank; the idle gaps' first call
    of a correlation id is its lowest call id because of it."""
    for table, key in (("api_calls", "call_id"), ("kernels", "kernel_id"), ("ranges", "range_id")):
        backwards = violations(trace, f"""
            SELECT rank, {key} FROM (SELECT rank, {key}, start_ns,
                                            lag(start_ns) OVER (PARTITION BY rank ORDER BY {key}) AS before
                                     FROM {table})
            WHERE start_ns < before
            """)
        assert backwards == [], table


def test_busy_time_is_the_same_union_whichever_way_it_is_taken(trace) -> None:
    """busy_time_sql sums what each interval adds past the running max of earlier ends; device_activity takes
    the same union as the span less the idle gaps. Both must agree on every device, and stay within the span."""
    from traceview.analysis.intervals import busy_time_sql

    busy = busy_time_sql("SELECT rank, device_id, start_ns, end_ns FROM gpu_activity", ("rank", "device_id"))
    assert violations(trace, f"""
        SELECT d.rank, d.device_id, d.busy_ns, d.span_ns, b.busy_ns
        FROM device_activity d FULL JOIN ({busy}) b USING (rank, device_id)
        WHERE b.busy_ns IS DISTINCT FROM d.busy_ns OR b.busy_ns > d.span_ns OR b.busy_ns < 0
        """) == []


def test_phases_come_from_the_documented_set(trace) -> None:
    steps = set(trace.sql("SELECT DISTINCT phase FROM steps")["phase"].to_list())
    kernels = set(trace.sql("SELECT DISTINCT phase FROM kernels")["phase"].to_list())
    assert steps <= STEP_PHASES
    assert kernels <= KERNEL_PHASES
    assert trace.scalar("SELECT count(*) FROM kernels WHERE phase IS NULL") == 0


def test_no_training_step_is_judged_as_inference(trace) -> None:
    """A step that launches backward or optimizer work is training, whatever its shapes or graphs say."""
    backward = violations(trace, r"""
        SELECT s.rank, s.step_id, s.phase FROM steps s
        WHERE s.phase IN ('prefill', 'decode', 'mixed')
          AND EXISTS (SELECT 1 FROM ranges r
                      WHERE r.rank = s.rank AND r.start_ns >= s.cpu_start_ns AND r.start_ns < s.cpu_end_ns
                        AND regexp_matches(r.name, '(?i)backward|optimizer\.step'))
        """)
    assert backward == []


def test_the_grep_of_the_brief_finds_no_least_or_greatest_in_sql() -> None:
    """DuckDB's least/greatest skip NULLs, so `least(100, NULL)` is 100: no SQL of ours may use them."""
    pattern = re.compile(r"\b(least|greatest)\s*\(", re.IGNORECASE)
    files = [*(REPO / "src").rglob("*.py"), *(REPO / "src").rglob("*.sql"), *(REPO / "rules").glob("*.toml")]
    hits = [f"{path.relative_to(REPO)}:{number}" for path in files
            for number, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_copy_and_memset_rates_stay_under_the_gpus_memory_bandwidth(trace) -> None:
    """The report's copy figures are Σbytes/Σtime per device and kind: no GPU moves them faster than its HBM."""
    assert violations(trace, f"""
        SELECT m.rank, m.device_id, m.kind, coalesce(m.copy_kind, m.dst_kind) AS kind_of_copy,
               sum(m.bytes) / sum(m.dur_ns) FILTER (WHERE m.bytes IS NOT NULL) AS gb_per_s
        FROM memops m JOIN devices d USING (rank, device_id) JOIN gpu_specs s USING (spec_id)
        GROUP BY ALL
        HAVING sum(m.bytes) / sum(m.dur_ns) FILTER (WHERE m.bytes IS NOT NULL) * 1e9
               > any_value(s.hbm_bytes_per_s) * (1 + {EPSILON})
        """) == []


def test_the_reports_phase_figures_stay_under_the_roof(trace) -> None:
    """What the report prints per phase (pooled over ranks) obeys the same bounds as the tables it pools."""
    from traceview.report.data import phase_rows

    # the trace's GPUs, or with none matched the fastest GPU in hardware/
    hbm, peak = trace.sql("""
        SELECT coalesce(max(s.hbm_bytes_per_s), (SELECT max(hbm_bytes_per_s) FROM gpu_specs)),
               coalesce(max(p.peak_flops), (SELECT max(peak_flops) FROM gpu_peaks))
        FROM devices d JOIN gpu_specs s USING (spec_id) JOIN gpu_peaks p ON p.spec_id = d.spec_id""").rows()[0]
    for phase in phase_rows(trace.con):
        if phase["pct_of_roof"] is not None:
            assert 0 <= phase["pct_of_roof"] <= 100 * (1 + EPSILON) and phase["bound"], phase
        else:
            assert phase["roofline_gap"], phase
        if phase["achieved_tbps"] is not None:
            assert phase["achieved_tbps"] * 1e12 <= hbm * (1 + EPSILON), phase
        if phase["achieved_tflops"] is not None:
            assert phase["achieved_tflops"] * 1e12 <= peak * (1 + EPSILON), phase


def test_the_step_budget_adds_up_to_every_step_and_the_trace_span(trace) -> None:
    """The ledger's buckets partition each window exactly, and the windows (steps, less what a later
    overlapping step owns, and the time outside every step) tile each rank's span."""
    columns = " + ".join(f"{bucket}_ns" for bucket in BUCKETS)
    assert violations(trace, f"""
        SELECT rank, step_id, wall_ns, {columns} FROM step_budget
        WHERE wall_ns <> {columns} OR {" OR ".join(f"{b}_ns < 0" for b in BUCKETS)}
        """) == []
    assert violations(trace, """
        SELECT b.rank, b.step_id, b.wall_ns, s.end_ns - s.start_ns FROM step_budget b
        JOIN steps s USING (rank, step_id) WHERE b.wall_ns > s.end_ns - s.start_ns
        """) == []
    assert violations(trace, """
        SELECT t.rank, t.end_ns - t.start_ns, sum(b.wall_ns) FROM trace_info t JOIN step_budget b USING (rank)
        GROUP BY ALL HAVING sum(b.wall_ns) <> t.end_ns - t.start_ns
        """) == []


def test_each_piece_of_the_timeline_belongs_to_the_latest_starting_step_over_it(trace) -> None:
    """step_windows gives each piece the step a plain range join finds: of the steps whose window holds the piece's
    start, the latest-starting (the lower id of equals); none outside every step."""
    assert violations(trace, """
        SELECT w.rank, w.start_ns, w.step_id, arg_max(s.step_id, (s.start_ns, -s.step_id)) AS expected
        FROM step_windows w LEFT JOIN steps s ON s.rank = w.rank AND s.start_ns <= w.start_ns AND s.end_ns > w.start_ns
        GROUP BY w.rank, w.start_ns, w.step_id
        HAVING w.step_id IS DISTINCT FROM arg_max(s.step_id, (s.start_ns, -s.step_id))
        """) == []


def test_savings_never_exceed_the_time_they_come_from(trace) -> None:
    """Every priced finding of the report says where its saving lies, and no step is promised more than it lasted."""
    _, document = reported(trace.source)
    walls = dict(((rank, step), wall) for rank, step, wall in trace.sql(
        "SELECT rank, step_id, wall_ns FROM step_budget").rows())
    claimed: dict[tuple, int] = {}
    for finding in document["findings"]:
        if not finding["estimated_saving_ns"]:
            continue
        step_savings = finding["evidence"].get("step_savings")
        assert step_savings, f"{finding['rule']} prices {finding['estimated_saving_ns']} ns with no step_savings"
        by_rank: dict[int, int] = {}
        for claim in step_savings:
            by_rank[claim["rank"]] = by_rank.get(claim["rank"], 0) + claim["ns"]
        # ranks run side by side: the saving is the largest rank's part
        assert max(by_rank.values()) == finding["estimated_saving_ns"], finding["rule"]
        for claim in step_savings:
            window = (claim["rank"], claim["step_id"])
            claimed[window] = claimed.get(window, 0) + claim["ns"]
    assert {window: ns for window, ns in claimed.items() if ns > walls.get(window, 0)} == {}


def test_the_diffs_time_split_adds_up_to_each_phases_priced_steps(trace) -> None:
    """What `traceview diff` attributes a change to: per phase, kernels + copies + idle + outside GPU work is
    the priced steps' owned time, and the categories (plus any unattributed kernel time) and the families
    each add up to the kernel part."""
    from traceview.report.data import phase_time_split, step_rows

    split = phase_time_split(trace.con)
    owned: dict[str, list[int]] = {}
    for step in step_rows(trace.con):
        if step["priced"]:
            owned.setdefault(step["phase"], []).append(step["owned_ns"])
    assert {row["phase"]: (row["steps"], row["wall_ns"]) for row in split} == \
        {phase: (len(values), sum(values)) for phase, values in owned.items()}
    for row in split:
        assert row["wall_ns"] == row["kernel_ns"] + row["copy_ns"] + row["idle_ns"] + row["outside_gpu_ns"], row["phase"]
        categories = sum(c["ns"] for c in row["categories"])
        assert categories + row["unattributed_kernel_ns"] == pytest.approx(row["kernel_ns"], abs=1e-3)
        assert sum(f["ns"] for f in row["families"]) == pytest.approx(categories, abs=1e-3)
        assert row["unattributed_kernel_ns"] >= -1e-3, row["phase"]
