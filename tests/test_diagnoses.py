"""The diagnoses end to end, through `traceview check` with every built-in rule: on generated traces whose
truth is set by hand, the main problem is the top finding, it names its cause, and per-rank figures are
exact; on real traces, the finding an expert would put first.

The generated traces come from tests/rules/fixtures_*.py, whose docstrings give the arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path

import fixtures_copies as copies
import fixtures_ranks as ddp
import fixtures_steady as steady
import fixtures_sync as sync
import traceview
from commands import traceview_cli
from conftest import SHARED_TRACES, analysed, requires_shared, union_ns
from traceview.testing import write_kineto, write_nsys


def findings(path: Path) -> list[dict]:
    result = traceview_cli("check", path, "--format", "json")
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)["findings"]


def test_a_copy_bound_run_is_diagnosed_as_copy_bound(tmp_path: Path) -> None:
    """Ten 1 GB pinned host-to-device copies at 25 GB/s on the compute stream, no step markers: copies fill
    84% of the span, and the host waits behind them in cudaStreamSynchronize."""
    (top, *rest) = findings(write_nsys(copies.copy_bound_run(), tmp_path / "copies.sqlite"))
    assert top["rule"] == "TV208", [(f["rule"], f["estimated_saving_ns"]) for f in (top, *rest)]
    for cause in ("400.0 ms, 84% of its 477.5 ms span", "HtoD", "Pinned host memory", "25.0 GB/s",
                  "PCIe 5.0 x16", "serialised with compute"):
        assert cause in top["message"]
    # per step, ranked by the link's peak (it beats the 5 ms overlap could hide): the 40 ms copy less
    # 1e9 B at 8192e9/130 B/s = 15,869,141 ns
    at_link_ns = round(copies.BATCH_BYTES * 130 / 8192)
    assert top["estimated_saving_ns"] == copies.STEPS * (copies.COPY_NS - at_link_ns)
    # the host's waits behind the copies are no saving of their own: the GPU was copying all along
    assert not [f for f in rest if f["rule"] == "TV204" and f["estimated_saving_ns"] > top["estimated_saving_ns"]]


def test_a_two_process_ddp_export_is_two_ranks_with_a_straggler(tmp_path: Path) -> None:
    """One nsys export, two training processes (GPU 1's has the lower pid), rank 1 computing 3x longer."""
    path = write_nsys(ddp.ddp_straggler(), tmp_path / "ddp.sqlite")
    trace = traceview.load(path).analyze()
    spec = ddp.ddp_straggler()
    for (pid, gpu), rank in zip(ddp.PROCESSES, (0, 1)):
        intervals = [(k.start_ns, k.end_ns) for k in spec.kernels if k.pid == pid]
        row = trace.sql(f"SELECT devices, busy_ns, span_ns FROM rank_summary WHERE rank = {rank}").rows()
        span = max(e for _, e in intervals) - min(s for s, _ in intervals)
        assert row == [([gpu], union_ns(intervals), span)]
    assert trace.scalar("SELECT count(*) FROM diagnostics WHERE code = 'ranks_from_processes'") == 1
    (top, *_) = findings(path)
    assert top["rule"] == "TV402"
    assert top["message"].startswith("Rank 1 (GPU 1, NVIDIA H100 80GB HBM3) is the straggler")
    # rank 0 reaches each all-reduce 4 GEMMs x 1 ms earlier: 4 ms of waiting per step, 10 steps
    assert top["estimated_saving_ns"] == ddp.STEPS * ddp.GEMMS * 1_000_000


def test_a_cold_first_iteration_is_not_priced_as_a_steady_step(tmp_path: Path) -> None:
    """Step 0 loads modules, grows the allocator and runs a one-time 12 ms broadcast; then 11 steps follow,
    each losing 2.7 ms to a late host before its first GEMM."""
    path = write_nsys(steady.cold_then_steady(), tmp_path / "cold.sqlite")
    trace = traceview.load(path).analyze()
    ((state, reason),) = trace.sql("SELECT state, reason FROM step_states WHERE step_id = 0").rows()
    assert state == "init" and "ncclDevKernel_Broadcast_RING_LL kernel 12.0 ms" in reason
    # the module loads and the allocation run on the host before the first GPU work: one-time, outside steps
    assert {"cuLibraryLoadData", "cuModuleLoadData", "cudaMalloc"} <= {
        name for (name,) in trace.sql("SELECT name FROM init_windows").rows()}
    (top, *rest) = findings(path)
    # the steady problem comes first: the host launches late in every steady step (9 priced gaps of 2.7 ms;
    # the gap after the init step belongs to it and is not priced)
    assert top["rule"] == "TV201" and "host launched late" in top["message"]
    assert top["estimated_saving_ns"] == 9 * 2_700_000
    (tv401,) = [f for f in rest if f["rule"] == "TV401"]
    assert "broadcast 12.00 ms/step" in tv401["message"]
    assert 0 not in {claim["step_id"] for claim in tv401["evidence"]["step_savings"]}
    assert tv401["estimated_saving_ns"] < 12_000_000


def test_a_sync_issued_by_item_is_the_top_finding_and_named(tmp_path: Path) -> None:
    (top, *_) = findings(write_kineto(sync.item_sync(), tmp_path / "item.json.gz"))
    assert top["rule"] == "TV204" and "issued by aten::item" in top["message"]
    # per step the GPU drains from the copy's end to the next kernel: 278 us, four steps
    assert top["estimated_saving_ns"] == 4 * 278_000


@requires_shared
def test_the_hta_nccl_traces_top_finding_names_the_ddp_ops_behind_its_gaps() -> None:
    """DDP training on A100: the GPU idles 73% of each step waiting on the host. TV201 prices the gaps over
    1 ms (DDP unflattening its buffers, 15.5-15.7 ms per step); TV202, the residual, the rest, and names what
    the host was doing under the longest idle, summed from idle_gap_context."""
    trace = analysed(SHARED_TRACES / "torch" / "hta__nccl_data_a100_ws2.json.gz")
    by_op = trace.sql("""
        SELECT coalesce(issuing_op, host_call) AS op, user_range, sum(dur_ns)::BIGINT FROM idle_gap_context
        WHERE step_id IS NOT NULL AND coalesce(issuing_op, host_call) IS NOT NULL
        GROUP BY ALL ORDER BY 3 DESC, 1 LIMIT 2""").rows()
    assert [(op, where) for op, where, _ in by_op] == [
        ("aten::batch_norm", "DistributedDataParallel.forward"),
        ("aten::unflatten_dense_tensors", "DistributedDataParallel.forward")]
    (top, second, *_) = findings(SHARED_TRACES / "torch" / "hta__nccl_data_a100_ws2.json.gz")
    assert (top["rule"], second["rule"]) == ("TV202", "TV201")
    for op, where, idle_ns in by_op:
        assert f"{op} [{where}] {idle_ns / 1e6:.2f} ms" in top["message"]
    assert "aten::unflatten_dense_tensors [DistributedDataParallel.forward]" in second["message"]
    # the two never count one nanosecond twice: TV201 first, TV202 what is left of the steps' idle
    assert top["estimated_saving_ns"] + second["estimated_saving_ns"] <= trace.scalar(
        "SELECT sum(wall_ns) FROM step_budget WHERE step_id IS NOT NULL")
