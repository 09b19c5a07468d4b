"""Kernel-efficiency rules say which step their saving comes from (issue 14, savings that add up).

Each rule's `step_savings` claims must add up to its estimated_saving_ns to the nanosecond, name only steps
of the rank (or NULL: kernels launched outside every step) in the 'compute' bucket, and carry per step what
the rule's own formula gives for that step's kernels. The per-step values are recomputed here from
`kernels` (and the GPU's datasheet peaks), not from the rule's SQL, on real shared traces where each rule
fires; the findings are taken before the ledger grants them (tests/rules/test_engine.py covers that).
"""

from __future__ import annotations

import re
from itertools import groupby

import pytest

import traceview
from conftest import SHARED_TRACES, analysed
from traceview.rules import RuleConfig, load_rules
from traceview.rules.engine import Finding, run_rule

RULES = {rule.id: rule for rule in load_rules()}
H100_BF16_PEAK = 989.4e12  # dense FLOP/s, H100 SXM datasheet
H100_FP32_PEAK = 66.9e12
H100_HBM = 3.35e12  # bytes/s
A100_FP32_OVER_TF32 = 19.5 / 156  # A100 dense FP32 vs TF32 TFLOP/s

def _trace(name: str, **options) -> traceview.Trace:
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} is not present")
    return analysed(path, **options)


def _findings(trace: traceview.Trace, rule_id: str, **params) -> list[Finding]:
    """The rule's findings as its query states them, before the ledger grants their claims."""
    rule = RULES[rule_id]
    config = RuleConfig(select=(rule_id,), params={f"{rule_id}.{k}": v for k, v in params.items()})
    findings = run_rule(trace.con, rule, config.params_for(rule), "warning", {})
    assert findings, f"{rule_id} did not fire"
    return findings


def _per_step(finding: Finding) -> dict[int | None, int]:
    """The finding's claims by step, after checking the contract every claim must meet."""
    assert sum(c.ns for c in finding.claims) == finding.estimated_saving_ns > 0
    assert {c.bucket for c in finding.claims} == {"compute"}
    assert {c.rank for c in finding.claims} == {finding.evidence["rank"]}
    steps = [c.step_id for c in finding.claims]
    assert len(steps) == len(set(steps)), "one claim per step"
    return {c.step_id: c.ns for c in finding.claims}


def _assert_steps_exist(trace: traceview.Trace, finding: Finding) -> None:
    rank = finding.evidence["rank"]
    known = {s for (s,) in trace.con.execute("SELECT step_id FROM steps WHERE rank = ?", [rank]).fetchall()}
    assert {c.step_id for c in finding.claims} - {None} <= known


@pytest.mark.parametrize("rule_id", ["TV301", "TV302", "TV303", "TV304", "TV305", "TV501", "TV502"])
def test_step_savings_column_type(rule_id: str) -> None:
    """The column the engine reads has the contract's type (DESCRIBE of the rule's query)."""
    trace = _trace("torch/hta__trace_diff_control_a100.json.gz")
    rule = RULES[rule_id]
    params = {k: v for k, v in RuleConfig(select=(rule_id,)).params_for(rule).items()
              if re.search(rf"\${k}\b", rule.query)}
    described = trace.con.execute(f"DESCRIBE SELECT step_savings FROM ({rule.query})", params).fetchall()
    assert described[0][1] == "STRUCT(rank INTEGER, step_id BIGINT, bucket VARCHAR, ns BIGINT)[]"


def test_tv301_claims_each_training_step() -> None:
    # A100 training, 6 steps, 125 fp32 GEMMs each: saving = fp32 GEMM time x (1 - 19.5 / 156) per step
    trace = _trace("torch/hta__trace_diff_control_a100.json.gz")
    (finding,) = _findings(trace, "TV301")
    claims = _per_step(finding)
    _assert_steps_exist(trace, finding)
    assert sorted(claims, key=str) == [0, 1, 2, 3, 4, 5]
    fp32_ns = trace.scalar("SELECT sum(dur_ns) FROM kernels WHERE rank = 3 AND step_id = 2 "
                           "AND category = 'gemm' AND dtype = 'fp32'")
    assert fp32_ns == 2_682_000
    assert claims[2] == round(fp32_ns * (1 - A100_FP32_OVER_TF32)) == 2_346_750


def test_tv302_claims_the_sgemm_time_of_each_step() -> None:
    # the same trace: 18 ampere_sgemm kernels per step in fp32 while the model runs tf32
    trace = _trace("torch/hta__trace_diff_control_a100.json.gz")
    (finding,) = _findings(trace, "TV302")
    claims = _per_step(finding)
    _assert_steps_exist(trace, finding)
    rows = dict(trace.con.execute(
        "SELECT step_id, sum(dur_ns) FROM kernels WHERE rank = 3 AND category = 'gemm' "
        "AND coalesce(dtype, cost_dtype) = 'fp32' AND short_name LIKE 'ampere_sgemm%' GROUP BY step_id").fetchall())
    assert trace.scalar("SELECT count(*) FROM kernels WHERE rank = 3 AND category = 'gemm' "
                        "AND coalesce(dtype, cost_dtype) = 'fp32' AND short_name LIKE 'ampere_sgemm%'") == 108
    assert claims == {step: round(ns * (1 - A100_FP32_OVER_TF32)) for step, ns in rows.items()}
    assert claims[2] == 1_548_750


def _pointwise_chain_saving(trace: traceview.Trace, rank: int, step_id: int) -> int:
    """TV303's formula by hand: runs of 3+ short pointwise kernels per stream, (time - longest) x phase weight."""
    rows = trace.con.execute(
        "SELECT device_id, stream_id, dur_ns, category, short_name, name, phase FROM kernels "
        "WHERE rank = ? AND step_id = ? ORDER BY device_id, stream_id, start_ns, kernel_id", [rank, step_id]).fetchall()

    def fusable(row) -> bool:
        _, _, dur, category, short_name, _, _ = row
        pointwise = (category in ("elementwise", "norm", "activation", "rotary")
                     or (category == "memory" and re.fullmatch(r"(vectorized_|unrolled_)?elementwise_kernel", short_name))
                     or (category == "reduction_softmax" and short_name == "reduce_kernel"))
        return bool(pointwise) and dur < 100_000

    saving = 0.0
    for _, stream in groupby(rows, key=lambda r: r[:2]):
        stream = list(stream)
        i = 0
        while i < len(stream):
            j = i
            while j < len(stream) and fusable(stream[j]):
                j += 1
            if j - i >= 3:
                chain = stream[i:j]
                softmax = any(re.search(r"(?i)softmax|(^|[^a-z])exp_kernel|ExpFunctor|MaxOps", k[5]) for k in chain)
                between_gemms = i > 0 and j < len(stream) and stream[i - 1][3] == stream[j][3] == "gemm"
                if not (softmax and between_gemms):
                    weight = 1.0 if chain[0][6] == "decode" else 0.3
                    saving += (sum(k[2] for k in chain) - max(k[2] for k in chain)) * weight
            i = max(j, i + 1)
    return round(saving)


def test_tv303_claims_each_steps_chains() -> None:
    trace = _trace("torch/hta__trace_diff_control_a100.json.gz")
    (finding,) = _findings(trace, "TV303")
    claims = _per_step(finding)
    _assert_steps_exist(trace, finding)
    assert len(claims) == 6
    assert claims[2] == _pointwise_chain_saving(trace, 3, 2) == 1_971_000


def test_tv303_kernels_without_a_launch_claim_the_step_they_ran_in() -> None:
    # HF Qwen prefill: the trace lost the launches of 436 kernels; they ran inside the one step's window, so they
    # belong to it (the 6 kernels after the window belong to no step)
    trace = _trace("torch/tracelens__h100_hf_qwen1.5-0.5b-chat.json.gz")
    assert trace.scalar("SELECT count(*) FROM kernels WHERE step_id IS NULL") == 6
    (finding,) = _findings(trace, "TV303")
    claims = _per_step(finding)
    _assert_steps_exist(trace, finding)
    assert set(claims) == {0}
    assert claims[0] == _pointwise_chain_saving(trace, 0, 0)
    assert finding.estimated_saving_ns == 4_676_454


def test_tv304_claims_the_kernels_between_the_gemms() -> None:
    # A100 LM forward, one step: the fp32 GEMMs already beat a flash kernel at half the fp32 peak, so the
    # saving is the kernels launched inside the 12 'scaled dot product attention' NVTX ranges, less the GEMMs
    trace = _trace("nsys/bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite")
    (finding,) = _findings(trace, "TV304")
    claims = _per_step(finding)
    _assert_steps_exist(trace, finding)
    between = dict(trace.con.execute("""
        SELECT k.step_id, sum(k.dur_ns) FILTER (WHERE k.category <> 'gemm')
        FROM kernels k JOIN api_calls a ON a.rank = k.rank AND a.call_id = k.launch_call_id
        JOIN ranges r ON r.rank = a.rank AND r.tid = a.tid AND a.start_ns >= r.start_ns AND a.start_ns < r.end_ns
        WHERE r.name = 'scaled dot product attention'
        GROUP BY k.step_id""").fetchall())
    assert claims == between == {0: 6_124_888}


def test_tv305_claims_the_hotspots_time_above_its_roofline() -> None:
    # BERT-small on H100: 22 bf16 cuBLAS Kernel2 GEMMs with shapes; floor = max(FLOPs / peak, bytes / HBM)
    trace = _trace("torch/tracelens__h100_hf_bert-small.json.gz")
    (finding,) = _findings(trace, "TV305")
    claims = _per_step(finding)
    _assert_steps_exist(trace, finding)
    rows = trace.con.execute("SELECT dur_ns, flops, bytes FROM kernels "
                             "WHERE rank = 0 AND step_id = 0 AND short_name = 'Kernel2'").fetchall()
    assert len(rows) == 22
    above = sum(dur - max(flops / H100_BF16_PEAK, nbytes / H100_HBM) * 1e9 for dur, flops, nbytes in rows)
    assert claims == {0: pytest.approx(round(above), abs=1)}


def test_tv501_claims_each_decode_steps_share_of_busy_time() -> None:
    # vLLM TP=4 decode with the Llama-3-70B accounting: busy x (1 - pct / 80) for each of the 9 decode steps
    trace = _trace("torch/tracemap__vllm_h100_tp4_rank0_isl1000_osl10_c32.pt.trace.json.gz",
                   model="llama-3-70b", tp=4, batch=32, context=1005)
    (finding,) = _findings(trace, "TV501", min_pct=80.0)
    claims = _per_step(finding)
    _assert_steps_exist(trace, finding)
    assert sorted(claims) == list(range(1, 10))
    pct = trace.scalar("SELECT 100.0 * sum(roofline_floor_ns) / sum(gpu_busy_ns) FROM step_accounting "
                       "WHERE rank = 0 AND phase = 'decode'")
    intervals = trace.con.execute("SELECT start_ns, end_ns FROM kernels WHERE rank = 0 AND step_id = 3 UNION ALL "
                                  "SELECT start_ns, end_ns FROM memops WHERE rank = 0 AND step_id = 3 "
                                  "ORDER BY 1").fetchall()
    busy, reach = 0, None
    for start, end in intervals:
        if reach is None or start > reach:
            busy, reach = busy + end - start, end
        elif end > reach:
            busy, reach = busy + end - reach, end
    assert busy == 16_587_752
    assert claims[3] == pytest.approx(round(busy * (1 - pct / 80.0)), abs=1)
    assert finding.estimated_saving_ns == 22_164_545


def test_tv502_claims_the_prefill_flop_kernels_time() -> None:
    # HF Qwen1.5 prefill on H100 at a 60% bar, one step: 192 bf16 GEMM/attention kernels and the fp32 rotary
    # bmm, each kernel's FLOPs at its own dtype's dense peak
    trace = _trace("torch/tracelens__h100_hf_qwen1.5-0.5b-chat.json.gz")
    (finding,) = _findings(trace, "TV502", min_pct=60.0)
    claims = _per_step(finding)
    _assert_steps_exist(trace, finding)
    rows = trace.con.execute("SELECT dur_ns, flops, cost_dtype FROM kernels "
                             "WHERE rank = 0 AND step_id = 0 AND phase = 'prefill' AND flops > 0").fetchall()
    assert len(rows) == 193
    peaks = {"bf16": H100_BF16_PEAK, "fp32": H100_FP32_PEAK}
    time_ns = sum(dur for dur, _, _ in rows)
    pct = 100.0 * sum(flops / peaks[dtype] * 1e9 for _, flops, dtype in rows) / time_ns
    assert time_ns == 11_580_932
    assert claims == {0: pytest.approx(round(time_ns * (1 - pct / 60.0)), abs=1)}
    assert finding.estimated_saving_ns == 1_877_606
