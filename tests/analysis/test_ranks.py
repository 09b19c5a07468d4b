"""Ranks from processes (nsys ingest) and ranks side by side (analysis/ranks.py, TV402), against known truth.

The generated DDP runs (tests/rules/fixtures_ranks.py) give every number by construction; the 8-rank
DLRM job is checked against waits computed here from its raw Kineto JSON.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path

import pytest
from commands import traceview_cli
from conftest import DLRM_DIR, NSYS_TRACES, analysed, ingested, requires_shared, union_ns

import fixtures_ranks as ddp

import traceview
from traceview.rules import RuleConfig, check, load_rules
from traceview.testing import write_nsys

RANK_OF_GPU = {0: 0, 1: 1}  # ranks are numbered by GPU ordinal, whatever the pids


@pytest.fixture(scope="module")
def straggler(tmp_path_factory) -> tuple[traceview.Trace, object, Path]:
    spec = ddp.ddp_straggler()
    path = write_nsys(spec, tmp_path_factory.mktemp("ddp") / "ddp.sqlite")
    return traceview.load(path).analyze(), spec, path


def _by_rank(spec) -> dict[int, list]:
    kernels = defaultdict(list)
    for k in spec.kernels:
        kernels[RANK_OF_GPU[k.device_id]].append(k)
    return kernels


def test_each_process_with_gpu_work_is_a_rank(straggler) -> None:
    trace, spec, _ = straggler
    truth = _by_rank(spec)
    assert trace.sql("SELECT rank, world_size FROM trace_info ORDER BY rank").rows() == [(0, 2), (1, 2)]
    assert trace.sql("SELECT rank, pid, device_id, count(*), min(kernel_id), max(kernel_id) FROM kernels "
                     "GROUP BY ALL ORDER BY rank").rows() == [
        (0, 5200, 0, len(truth[0]), 0, len(truth[0]) - 1), (1, 5100, 1, len(truth[1]), 0, len(truth[1]) - 1)]
    assert len(truth[0]) == len(truth[1]) == 60
    # every rank lists the export's GPUs; the launcher's call stays on rank 0
    assert trace.sql("SELECT rank, list(device_id ORDER BY device_id) FROM devices GROUP BY rank ORDER BY rank"
                     ).rows() == [(0, [0, 1]), (1, [0, 1])]
    assert trace.sql("SELECT rank FROM api_calls WHERE pid = 5000").rows() == [(0,)]
    for rank, kernels in truth.items():
        busy = trace.scalar(f"SELECT busy_ns FROM rank_summary WHERE rank = {rank}")
        assert busy == union_ns((k.start_ns, k.end_ns) for k in kernels) == 63_400_000


def test_the_inferred_mapping_is_a_diagnostic(straggler) -> None:
    trace, _, _ = straggler
    assert trace.sql("SELECT rank, source, severity, code, message FROM diagnostics").rows() == [(
        0, "ingest", "info", "ranks_from_processes",
        "2 processes ran GPU work, one rank each (inferred: numbered by the lowest GPU ordinal each used, then pid): "
        "pid 5200 -> rank 0 (GPU 0), pid 5100 -> rank 1 (GPU 1); 1 process without GPU work (pid 5000) is no rank: "
        "its API calls and ranges are kept on rank 0")]


def test_the_exports_mpi_ranks_win(tmp_path: Path) -> None:
    path = write_nsys(ddp.ddp_straggler(), tmp_path / "mpi.sqlite", mpi_ranks={5100: 0, 5200: 1})
    trace = traceview.load(path)
    assert trace.sql("SELECT rank, pid, device_id FROM kernels GROUP BY ALL ORDER BY rank").rows() == [
        (0, 5100, 1), (1, 5200, 0)]
    assert trace.sql("SELECT rank, world_size FROM trace_info ORDER BY rank").rows() == [(0, 2), (1, 2)]
    message = trace.scalar("SELECT message FROM diagnostics WHERE code = 'ranks_from_processes'")
    assert message.startswith("2 processes ran GPU work, one rank each (from the export's MPI_RANKS): "
                              "pid 5100 -> rank 0 (GPU 1), pid 5200 -> rank 1 (GPU 0)")


def test_a_directory_of_multi_process_exports_numbers_ranks_without_collisions(tmp_path: Path) -> None:
    for node in ("node0", "node1"):
        write_nsys(ddp.ddp_straggler(), tmp_path / "job" / f"{node}.sqlite")
    trace = traceview.load(tmp_path / "job")
    assert trace.sql("SELECT rank, pid, device_id, count(*) FROM kernels GROUP BY ALL ORDER BY rank").rows() == [
        (0, 5200, 0, 60), (1, 5100, 1, 60), (2, 5200, 0, 60), (3, 5100, 1, 60)]
    assert trace.sql("SELECT rank, code FROM diagnostics ORDER BY rank").rows() == [
        (0, "ranks_from_processes"), (2, "ranks_from_processes")]


@requires_shared
@pytest.mark.parametrize("path", NSYS_TRACES, ids=lambda p: p.name)
def test_a_single_process_export_stays_one_rank(path: Path) -> None:
    trace = ingested(path)
    assert trace.sql("SELECT rank FROM trace_info").rows() == [(0,)]
    assert trace.scalar("SELECT count(*) FROM diagnostics WHERE code = 'ranks_from_processes'") == 0
    assert trace.scalar("SELECT count(DISTINCT pid) FROM kernels") <= 1


def test_collectives_are_matched_and_waits_measured(straggler) -> None:
    trace, spec, _ = straggler
    truth = _by_rank(spec)
    rows = trace.sql("""SELECT family, occurrence, rank, dur_ns, wait_ns, last_to_arrive, arrival_lag_ns
                        FROM collective_waits ORDER BY family, occurrence, rank""").rows()
    expected = []
    for family, name in (("broadcast", ddp.BROADCAST), ("nccl_all_reduce", ddp.ALL_REDUCE)):
        runs = {rank: [k for k in kernels if k.name == name] for rank, kernels in truth.items()}
        for n in range(ddp.STEPS):
            durs = {rank: runs[rank][n].dur_ns for rank in runs}
            starts = {rank: runs[rank][n].start_ns for rank in runs}
            waited = max(durs.values()) > min(durs.values())
            last = min(durs, key=lambda r: (durs[r], r))
            expected += [(family, n, rank, durs[rank], durs[rank] - min(durs.values()), waited and rank == last,
                          max(starts.values()) - starts[rank]) for rank in sorted(runs)]
    assert rows == expected
    assert trace.sql("SELECT rank, wait_ns FROM collective_waits WHERE family = 'nccl_all_reduce' "
                     "GROUP BY ALL ORDER BY rank").rows() == [(0, 4_000_000), (1, 0)]
    assert trace.sql("SELECT family, count(*), sum(wait_ns), list(DISTINCT last_rank), bool_and(shared_clock) "
                     "FROM collectives GROUP BY family ORDER BY family").rows() == [
        ("broadcast", 10, 0, [None], True), ("nccl_all_reduce", 10, 40_000_000, [1], True)]


def test_rank_summary_and_stragglers_per_step(straggler) -> None:
    trace, _, _ = straggler
    assert trace.sql("SELECT rank, devices, collectives, wait_ns, last_arrivals, caused_wait_ns FROM rank_summary "
                     "ORDER BY rank").rows() == [(0, [0], 20, 40_000_000, 0, 0), (1, [1], 20, 0, 10, 40_000_000)]
    # rank 0: 40 us broadcast + 4 x 500 us GEMMs + 4,300 us all-reduce per step; rank 1: 40 + 4 x 1,500 + 300
    steps = trace.sql("""SELECT rank, count(*), list(DISTINCT gpu_time_ns), list(DISTINCT wait_ns),
                                list(DISTINCT work_ns), list(DISTINCT slowest_rank), list(DISTINCT skew_ns)
                         FROM rank_steps GROUP BY rank ORDER BY rank""").rows()
    assert steps == [(0, 10, [6_340_000], [4_000_000], [2_340_000], [1], [4_000_000]),
                     (1, 10, [6_340_000], [0], [6_340_000], [1], [4_000_000])]


def test_tv402_names_the_straggler_and_prices_the_wait(straggler) -> None:
    trace, _, _ = straggler
    findings = check(trace.con, [r for r in load_rules() if r.id == "TV402"], RuleConfig()).findings
    assert len(findings) == 1
    finding = findings[0]
    assert finding.message.startswith(
        "Rank 1 (GPU 1, NVIDIA H100 80GB HBM3) is the straggler: it arrived last in 10 collectives and the other "
        "ranks waited 40.00 ms for it there. In all, 1 ranks waited 40.00 ms")
    assert "rank 0 40.00 ms (4.00 ms/step over 10 steps, worst 4.00 ms" in finding.message
    assert finding.estimated_saving_ns == 10 * 4_000_000
    assert finding.evidence["step_savings"] == [
        {"rank": 0, "step_id": step, "bucket": "communication", "ns": 4_000_000} for step in range(10)]


def test_tv402_is_the_top_finding_of_check(straggler) -> None:
    _, _, path = straggler
    result = traceview_cli("check", path, "--format", "json")
    findings = json.loads(result.stdout)["findings"]
    assert findings[0]["rule"] == "TV402", [(f["rule"], f["estimated_saving_ns"]) for f in findings[:4]]
    assert findings[0]["estimated_saving_ns"] == 40_000_000


def test_balanced_ranks_wait_for_nobody(tmp_path: Path) -> None:
    trace = traceview.load(write_nsys(ddp.ddp_balanced(), tmp_path / "even.sqlite")).analyze()
    assert trace.scalar("SELECT sum(wait_ns) FROM collective_waits") == 0
    assert trace.scalar("SELECT count(*) FROM collectives WHERE last_rank IS NOT NULL") == 0
    assert trace.sql("SELECT DISTINCT skew_ns FROM rank_steps").rows() == [(0,)]


def _dlrm_comm_kernels() -> dict[int, list[tuple[str, int, int]]]:
    """(name, start ns, dur ns) of each rank's NCCL kernels, in start order, straight from the JSON."""
    out = {}
    for path in sorted(DLRM_DIR.glob("*.json")):
        doc = json.loads(path.read_text())
        kernels = sorted((e["ts"] * 1000, e["dur"] * 1000, e["name"]) for e in doc["traceEvents"]
                         if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_"))
        out[doc["distributedInfo"]["rank"]] = [(name, ts, dur) for ts, dur, name in kernels]
    return out


@requires_shared
def test_dlrm_8_rank_waits_match_the_raw_json() -> None:
    runs = _dlrm_comm_kernels()
    assert sorted(runs) == list(range(8))
    expected, caused = {}, defaultdict(int)
    for name in {n for kernels in runs.values() for n, _, _ in kernels}:
        per_rank = {rank: [dur for n, _, dur in kernels if n == name] for rank, kernels in runs.items()}
        assert len({len(d) for d in per_rank.values()}) == 1  # every rank ran it equally often: all matched
        for i in range(len(per_rank[0])):
            durs = {rank: d[i] for rank, d in per_rank.items()}
            shortest = min(durs.values())
            for rank, dur in durs.items():
                expected[(name, i, rank)] = dur - shortest
            caused[min(durs, key=lambda r: (durs[r], r))] += sum(dur - shortest for dur in durs.values())
    trace = analysed(DLRM_DIR)
    got = {(name, n, rank): wait for name, n, rank, wait in
           trace.sql("SELECT name, occurrence, rank, wait_ns FROM collective_waits").rows()}
    assert got == expected and len(got) == 8 * 8
    # separate files: no shared clock, so no start skew
    assert trace.sql("SELECT DISTINCT shared_clock, start_skew_ns FROM collectives").rows() == [(False, None)]
    assert max(caused, key=lambda r: (caused[r], -r)) == 7 and caused[7] == 35_543_000
    assert trace.sql("SELECT rank, caused_wait_ns FROM rank_summary WHERE caused_wait_ns > 0 ORDER BY rank"
                     ).rows() == sorted(caused.items())
    findings = check(trace.con, [r for r in load_rules() if r.id == "TV402"], RuleConfig()).findings
    assert len(findings) == 1 and findings[0].evidence["straggler_rank"] == 7
    assert findings[0].evidence["wait_ms"] == pytest.approx(sum(expected.values()) / 1e6)


def test_collectives_run_unequally_often_are_not_paired(tmp_path: Path) -> None:
    spec = ddp.ddp_straggler()
    last = max((k for k in spec.kernels if k.device_id == 1 and k.name == ddp.ALL_REDUCE), key=lambda k: k.start_ns)
    spec = dataclasses.replace(spec, kernels=tuple(k for k in spec.kernels if k is not last))
    trace = traceview.load(write_nsys(spec, tmp_path / "uneven.sqlite")).analyze()
    assert trace.sql("SELECT DISTINCT family FROM collective_waits").rows() == [("broadcast",)]
    assert trace.sql("SELECT rank, severity, message FROM diagnostics WHERE code = 'unmatched_collectives'").rows() == [
        (0, "info", "1 communication kernel name ran on several ranks or devices but not equally often, so their "
                    "n-th runs cannot be paired and no wait is measured for them: nccl_all_reduce "
                    f"{ddp.ALL_REDUCE[:60]} (2 participants, 9 to 10 runs)")]
