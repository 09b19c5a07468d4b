"""Collectives as an expert reads them (analysis/sql/collectives.sql): kind, parallelism, bus bandwidth and the
critical path, on generated runs whose every number is known by construction (tests/rules/fixtures_ranks.py) and
on the shared multi-GPU traces."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import DLRM_DIR, SHARED_TRACES, VLLM_H100, analysed, requires_shared

import fixtures_ranks as runs

import traceview
from traceview.rules import RuleConfig, check, load_rules
from traceview.testing import write_kineto

US = 1_000
H100_NVLINK_BYTES_PER_S = 450e9  # hardware/h100-sxm.toml gpu_link: 900 GB/s bidirectional, per direction


def _trace(tmp_path, fixture) -> traceview.Trace:
    return traceview.load(write_kineto(fixture(), tmp_path / f"{fixture.__name__}.json")).analyze()


def _tv401(trace: traceview.Trace):
    rules = [r for r in load_rules() if r.id == "TV401"]
    return check(trace.con, rules, RuleConfig()).findings


def test_rccl_generic_all_reduce_is_tensor_parallel_and_never_priced(tmp_path) -> None:
    trace = _trace(tmp_path, runs.rccl_generic_serving)
    assert trace.sql("SELECT phase, kind, kind_source, host_op, parallelism, serial, count(*), sum(exposed_ns) "
                     "FROM collective_calls GROUP BY ALL ORDER BY phase DESC").rows() == [
        ("prefill", "all_reduce", "host_op", "vllm::all_reduce", "tensor", True, 2, 60_000),
        ("decode", "all_reduce", "host_op", "vllm::all_reduce", "tensor", True, 6, 48_000)]
    assert trace.sql("SELECT * FROM parallelism").rows() == [
        (0, "tensor", "2 all-reduces per decode step, 2 all-reduces per prefill step")]
    assert trace.sql("SELECT kind, workload, calls, total_ns, max_ns, variability, algorithm, bus_bytes_per_s, "
                     "on_critical_path FROM collective_summary").rows() == [
        ("all_reduce", "serving", 8, 108_000, 30_000, 30_000 / 13_500, None, None, True)]
    [finding] = _tv401(trace)
    assert finding.estimated_saving_ns == 0
    assert finding.evidence["serial_ms"] == pytest.approx(0.108)
    assert "tensor parallel" in finding.message
    assert "exposed:tensor" in finding.fix_facts


def test_ddp_gradient_all_reduce_is_data_parallel_priced_with_exact_bus_bandwidth(tmp_path) -> None:
    trace = _trace(tmp_path, runs.ddp_backward_all_reduce)
    assert trace.sql("SELECT * FROM parallelism").rows() == [(0, "data", "4 all-reduces in backward over 4 steps")]
    bytes_ = runs.GRAD_ELEMENTS * 2
    bus = bytes_ / (runs.GRAD_ALL_REDUCE_NS / 1e9) * 2 * (2 - 1) / 2
    assert trace.sql("SELECT kind, message_bytes, workload, calls, algorithm, protocol, group_size, bus_bytes_per_s, "
                     "link_bytes_per_s, pct_of_link, parallelism, exposed_ns, on_critical_path FROM collective_summary"
                     ).rows() == [("all_reduce", 8_388_608, "train", 4, "RING", "LL", 2, pytest.approx(bus),
                                   H100_NVLINK_BYTES_PER_S, pytest.approx(100 * bus / H100_NVLINK_BYTES_PER_S),
                                   "data", 400_000, True)]
    assert bus == pytest.approx(55.924e9, rel=1e-4)
    [finding] = _tv401(trace)
    assert finding.evidence["serial_ms"] is None
    assert finding.estimated_saving_ns > 0  # 100 us exposed per steady step, hideable under backward
    assert "data parallel" in finding.message
    assert "exposed:data" in finding.fix_facts


def test_infinity_fabric_bus_peak_is_one_link_per_peer(tmp_path) -> None:
    """On an MI300X mesh each peer has a link of its own (hardware/mi300x.toml: 7 links of 64 GB/s per
    direction), so an 8-rank all-reduce can drive min(n - 1, 7) = 7 of them: 448 GB/s, not one link's 64."""
    spec = replace(runs.ddp_backward_all_reduce(), world_size=8)
    trace = traceview.load(write_kineto(spec, tmp_path / "mi300x.json")).analyze(gpu="mi300x")
    assert trace.sql("SELECT gpu_link_kind, gpu_links, gpu_link_bytes_per_s FROM gpu_specs WHERE spec_id = 'mi300x'"
                     ).rows() == [("infinity-fabric", 7, 64e9)]
    bus = runs.GRAD_ELEMENTS * 2 / (runs.GRAD_ALL_REDUCE_NS / 1e9) * 2 * (8 - 1) / 8
    assert trace.sql("SELECT group_size, link, link_bytes_per_s, bus_bytes_per_s, pct_of_link FROM collective_summary"
                     ).rows() == [(8, "Infinity Fabric x7", 7 * 64e9, pytest.approx(bus),
                                   pytest.approx(100 * bus / (7 * 64e9)))]


def test_send_recv_is_pipeline(tmp_path) -> None:
    trace = _trace(tmp_path, runs.pipeline_send_recv)
    assert trace.sql("SELECT * FROM parallelism").rows() == [(0, "pipeline", "3 send/recvs over 3 steps")]
    assert trace.sql("SELECT kind, kind_source, serial FROM collective_calls GROUP BY ALL").rows() == [
        ("send_recv", "host_op", False)]


def test_a_bandwidth_above_the_link_is_rejected(tmp_path) -> None:
    """A 1 GiB bucket in 150 us would be 7.2 TB/s of bus bandwidth over a 450 GB/s NVLink: rejected, never clamped."""
    spec = runs.ddp_backward_all_reduce()
    big = [r if r.name != "nccl:all_reduce" else replace(r, input_dims=[[1 << 29]])
           for r in spec.ranges]
    trace = traceview.load(write_kineto(replace(spec, ranges=tuple(big)),
                                        tmp_path / "big.json")).analyze()
    assert trace.sql("SELECT message_bytes, bus_bytes_per_s, pct_of_link FROM collective_summary").rows() == [
        (1 << 30, None, None)]
    [(message,)] = trace.sql("SELECT message FROM diagnostics WHERE code = 'collective_bandwidth_rejected'").rows()
    assert "4 all_reduce calls of 1073741824 bytes over 2 ranks" in message and "7158.3 GB/s" in message


@requires_shared
@pytest.mark.parametrize(("trace", "expected"), [
    ("torch/hta__nccl_data_a100_ws2.json.gz", [(0, "data", "15 all-reduces in backward over 3 steps")]),
    ("torch/tracemap__vllm_h100_tp4_rank0_isl1000_osl10_c32.pt.trace.json.gz",
     [(0, "tensor", "161 all-reduces per decode step, 161 all-reduces per prefill step, "
                    "1 all-gather per decode step, 1 all-gather per prefill step")]),
])
def test_parallelism_of_shared_traces(trace, expected) -> None:
    assert analysed(SHARED_TRACES / trace).sql("SELECT * FROM parallelism").rows() == expected


@requires_shared
def test_dlrm_job_is_data_and_all_to_all_parallel() -> None:
    """DDP gradient all-reduces from AccumulateGrad nodes, and the embedding all-to-alls that NCCL runs as
    SendRecv kernels (the `nccl:all_to_all` op names the kind) beside fbgemm's pooled embedding lookups and no
    mixture-of-experts work: embedding sharding, not expert parallelism; the all-reduce message size is the
    `nccl:all_reduce` annotation's `Input Dims` [[394241]] float = 1,576,964 bytes."""
    trace = analysed(DLRM_DIR)
    assert trace.sql("SELECT kind, evidence, count(*) FROM parallelism GROUP BY ALL ORDER BY kind").rows() == [
        ("data", "3 all-reduces in backward over 1 step", 8), ("embedding", "5 all-to-alls over 1 step", 8)]
    assert trace.sql("SELECT DISTINCT name, kind FROM collective_calls WHERE kind = 'all_to_all'").rows() == [
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "all_to_all")]
    assert 1_576_964 in trace.sql("SELECT DISTINCT message_bytes FROM collective_calls WHERE kind = 'all_reduce'"
                                  ).to_series().to_list()


@requires_shared
@pytest.mark.parametrize("path", [VLLM_H100, DLRM_DIR], ids=["vllm_h100", "dlrm_8rank"])
def test_each_collectives_host_op_matches_a_join_of_its_launch_with_every_range_of_its_thread(path) -> None:
    """The innermost communication range around each launch (the latest-starting, then the shortest) and whether a
    backward range encloses it, found here by a join of the launch with every range of its thread, equal what the
    analysis finds joining on the launch's time bucket too."""
    trace = analysed(path)
    expected = trace.sql("""
        WITH c AS (SELECT g.rank, g.activity_id AS kernel_id, a.pid, a.tid, a.start_ns AS t
                   FROM gpu_activity g JOIN api_calls a ON a.rank = g.rank AND a.call_id = g.launch_call_id
                   WHERE g.kind = 'kernel' AND g.category = 'communication'),
        h AS (SELECT rank, pid, tid, name, start_ns, end_ns,
                     regexp_matches(name, '(?i)backward|autograd::engine::evaluate_function|accumulategrad') AS backward
              FROM ranges WHERE kind IN ('cpu_op', 'user_annotation', 'nvtx'))
        SELECT c.rank, c.kernel_id,
               arg_max(h.name, (h.start_ns, -h.end_ns)) FILTER (WHERE h.name IN (
                   SELECT host_op FROM collective_calls WHERE host_op IS NOT NULL)),
               coalesce(bool_or(h.backward), false)
        FROM c LEFT JOIN h ON h.rank = c.rank AND h.pid = c.pid AND h.tid = c.tid
                          AND h.start_ns <= c.t AND h.end_ns >= c.t
        GROUP BY ALL ORDER BY ALL""").rows()
    found = trace.sql("SELECT rank, kernel_id, host_op, in_backward FROM collective_calls WHERE kernel_id IN "
                      "(SELECT activity_id FROM gpu_activity WHERE launch_call_id IS NOT NULL) ORDER BY ALL").rows()
    assert len(found) >= 64 and found == expected
    assert any(op is not None for _, _, op, _ in found)
