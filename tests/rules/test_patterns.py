"""The patterns a kernel-efficiency finding names as its evidence: each chain's kernels in order, cut after 8
(TV303) or 10 (TV304)."""

from __future__ import annotations

import pytest

from conftest import SHARED_TRACES, analysed
from traceview.rules import RuleConfig, load_rules
from traceview.rules.engine import run_rule

QWEN = SHARED_TRACES / "torch/tracelens__h100_hf_qwen1.5-0.5b-chat.json.gz"


def test_tv303_patterns_name_each_chains_first_8_kernels_in_order() -> None:
    """Hugging Face eager Qwen prefill: RMSNorm runs as add > to(fp32) > pow > mean > add eps > rsqrt > mul >
    to(bf16) > mul, 9 kernels, so its pattern names the first 8 and says how many there are; the shorter chains
    (rotary, residual copies) are named whole, one label per kernel."""
    if not QWEN.exists():
        pytest.skip(f"{QWEN} is not present")
    rule = next(r for r in load_rules() if r.id == "TV303")
    (finding,) = run_rule(analysed(QWEN).con, rule, RuleConfig(select=("TV303",)).params_for(rule), "warning", {})
    top, *others = finding.evidence["rows"]
    assert (top["pattern"], top["chains"], top["kernels"]) == (
        "aten::add > aten::copy_ > aten::pow > aten::mean > aten::add > aten::rsqrt > aten::mul > aten::copy_"
        " > ... (9 kernels)", 48, 432)
    whole = [row for row in others if " > ... (" not in row["pattern"]]
    assert len(whole) >= 3
    assert all(row["kernels"] == row["chains"] * len(row["pattern"].split(" > ")) for row in whole)


@pytest.mark.parametrize(("trace", "pattern"), [
    ("profile_small_fwd_A100", "aten::bmm > aten::div > aten::where > aten::where > reduce_kernel > aten::sub"
                               " > aten::exp > reduce_kernel > aten::div > aten::copy_ > aten::bmm"),
    ("profile_small_fwd_A100_cl4096", "aten::bmm > aten::div > aten::div > aten::where > aten::where > aten::where"
                                      " > reduce_kernel > reduce_kernel > aten::sub > aten::sub > aten::exp > ..."
                                      " > aten::bmm"),
], ids=["9-between", "16-between"])
def test_tv304_patterns_name_the_ops_between_the_gemms_in_order(trace: str, pattern: str) -> None:
    """The hand-written attention of bolongcheng's Transformer LM (nsys, NVTX-named ops): the 9 kernels between its
    two bmm GEMMs are named whole, in launch order; at 4,096 tokens each op runs as two kernels, 16 in all, and the
    pattern names the first 10 and marks the rest."""
    path = SHARED_TRACES / f"nsys/bolongcheng__assignment2-systems__{trace}.sqlite"
    if not path.exists():
        pytest.skip(f"{path} is not present")
    rule = next(r for r in load_rules() if r.id == "TV304")
    (finding,) = run_rule(analysed(path).con, rule, RuleConfig(select=("TV304",)).params_for(rule), "warning", {})
    (row,) = finding.evidence["rows"]
    assert (row["pattern"], row["chains"]) == (pattern, 12)
