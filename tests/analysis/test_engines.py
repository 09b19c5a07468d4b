"""Engines per device (analysis/engines.py), the links in hardware/ they are measured against, and TV208.

Generated runs (tests/rules/fixtures_copies.py) carry known truth; a real OpenMP-offload trace is checked
against unions the test sweeps itself from the trace's own memops and kernels.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import traceview
from commands import traceview_cli
from conftest import SHARED_TRACES, analysed, requires_shared, union_ns
from traceview.analysis.hardware import PCIE_GENERATIONS, load_specs
from traceview.rules import RuleConfig, check, load_rules
from traceview.testing import GpuSpec, Kernel, Memop, TraceSpec, write_kineto, write_nsys

import fixtures_copies as fc

REPO = Path(__file__).resolve().parents[2]
SPECS = {spec.id: spec for spec in load_specs(REPO / "hardware")}
PCIE5_X16 = 32e9 * 16 * 128 / 130 / 8  # 63.015 GB/s per direction
RAJA = SHARED_TRACES / "nsys"
OPENMP = [RAJA / f"RajaATAli__SC23_Programming-Your-GPU-with-OpenMP_Tutorial__report{n}.sqlite" for n in (3, 4)]
TV208 = [rule for rule in load_rules() if rule.id == "TV208"]


# ------------------------------------------------------------------ links in hardware/


@pytest.mark.parametrize(("generation", "lanes", "gb_per_s"),
                         [(3, 16, 15.754), (4, 16, 31.508), (5, 16, 63.015), (5, 8, 31.508), (2, 16, 8.0)])
def test_pcie_peak_is_raw_signalling_after_line_encoding(generation, lanes, gb_per_s):
    transfers, code = PCIE_GENERATIONS[generation]
    assert transfers * lanes * code / 8 / 1e9 == pytest.approx(gb_per_s, abs=5e-4)


def test_links_per_gpu():
    assert SPECS["h100-sxm"].host_link.label == "PCIe 5.0 x16"
    assert SPECS["h100-sxm"].host_link.bytes_per_s == pytest.approx(PCIE5_X16)
    assert SPECS["h100-sxm"].gpu_link.bytes_per_s == 450e9  # 900 GB/s bidirectional
    assert SPECS["t4"].host_link.bytes_per_s == pytest.approx(8e9 * 16 * 128 / 130 / 8)
    assert SPECS["t4"].gpu_link.kind == "none" and SPECS["t4"].gpu_link.bytes_per_s is None
    assert SPECS["rtx-5060-ti"].host_link.label == "PCIe 5.0 x8"
    assert SPECS["gh200"].host_link.label == "NVLink-C2C" and SPECS["gh200"].host_link.bytes_per_s == 450e9
    assert SPECS["b200"].host_link is None  # no sourced figure: NULL downstream, never a guess
    for spec in SPECS.values():
        for field in ("host_link", "gpu_link"):
            if getattr(spec, field) is not None:
                assert spec.sources.get(field, "").strip(), (spec.id, field)


def _write_spec(tmp_path: Path, extra: str, source: str = 'host_link = "a datasheet"') -> Path:
    text = (REPO / "hardware" / "t4.toml").read_text()
    text = text.replace('host_link = { kind = "pcie", generation = 3, lanes = 16 }\n', extra + "\n")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("host_link = \"")) + "\n"
    text = text.replace("\n[sources]\n", f"\n[sources]\n{source}\n" if source else "\n[sources]\n")
    directory = tmp_path / "hw"
    directory.mkdir()
    (directory / "t4.toml").write_text(text)
    return directory


@pytest.mark.parametrize(("extra", "source", "error"), [
    ('host_link = { kind = "pcie", generation = 4, lanes = 16, gb_per_s = 32 }', 'host_link = "x"', "derived"),
    ('host_link = { kind = "pcie", generation = 7, lanes = 16 }', 'host_link = "x"', "host_link.generation"),
    ('host_link = { kind = "pcie", generation = 4, lanes = 12 }', 'host_link = "x"', "host_link.lanes"),
    ('host_link = { kind = "nvlink", gb_per_s = 32 }', 'host_link = "x"', "host_link.kind"),
    ('host_link = { kind = "pcie", generation = 4, lanes = 16 }', "", "host_link: missing source"),
])
def test_bad_links_are_rejected_with_the_field(tmp_path, extra, source, error):
    with pytest.raises(ValueError, match=error):
        load_specs(_write_spec(tmp_path, extra, source))


# ------------------------------------------------------------------ a generated copy-bound run


@pytest.fixture(scope="module")
def copy_bound(tmp_path_factory) -> traceview.Trace:
    path = write_nsys(fc.copy_bound_run(), tmp_path_factory.mktemp("copy-bound") / "t.sqlite")
    return traceview.load(path).analyze(step_regex=fc.STEP_REGEX)


def test_engine_figures_of_a_copy_bound_run(copy_bound):
    span = (fc.STEPS - 1) * (50_000 + fc.COPY_NS + 4 * fc.KERNEL_NS + 10_000 + fc.HOST_PREP_NS) \
        + fc.COPY_NS + 4 * fc.KERNEL_NS
    (device,) = copy_bound.sql("SELECT * FROM device_engines").to_dicts()
    assert device | {"copy_only_pct": None} == {
        "rank": 0, "device_id": 0, "span_ns": span, "kernel_ns": fc.STEPS * 4 * fc.KERNEL_NS,
        "copy_ns": fc.STEPS * fc.COPY_NS, "memset_ns": 0, "idle_ns": span - fc.STEPS * (fc.COPY_NS + 4 * fc.KERNEL_NS),
        "copy_only_ns": fc.STEPS * fc.COPY_NS, "copy_only_pct": None, "copies": fc.STEPS,
        "copy_bytes": fc.STEPS * fc.BATCH_BYTES, "compute_stream_copy_ns": fc.STEPS * fc.COPY_NS,
        "side_stream_copy_ns": 0, "spec_id": "h100-sxm", "host_link": "PCIe 5.0 x16",
        "host_link_bytes_per_s": pytest.approx(PCIE5_X16), "gpu_link": "NVLink 4 x18", "gpu_link_bytes_per_s": 450e9}
    assert device["copy_only_pct"] == pytest.approx(100 * fc.STEPS * fc.COPY_NS / span)

    (direction,) = copy_bound.sql("SELECT * FROM copy_directions").to_dicts()
    assert direction["direction"] == "HtoD" and direction["copies"] == fc.STEPS
    assert direction["bytes"] == fc.STEPS * fc.BATCH_BYTES
    assert direction["busy_ns"] == direction["copy_only_ns"] == direction["compute_stream_ns"] == fc.STEPS * fc.COPY_NS
    assert (direction["pinned_copies"], direction["pageable_copies"], direction["host_kinds"]) == (10, 0, "Pinned")
    assert direction["achieved_bytes_per_s"] == pytest.approx(25e9)
    assert direction["pct_of_link"] == pytest.approx(100 * 25e9 / PCIE5_X16)  # 39.67 %
    assert (direction["link"], direction["link_source"]) == ("PCIe 5.0 x16", "hardware/h100-sxm.toml")

    (kinds,) = copy_bound.sql("SELECT * FROM copy_kinds").to_dicts()
    assert (kinds["src_kind"], kinds["dst_kind"], kinds["dur_ns"]) == ("Pinned", "Device", fc.STEPS * fc.COPY_NS)

    steps = copy_bound.sql("SELECT * FROM copy_steps ORDER BY step_id").to_dicts()
    at_link = round(fc.BATCH_BYTES * 130 / 8192)  # 1 GB / (8192e9/130 B/s) in ns: 15,869,140.625
    assert [s["step_id"] for s in steps] == list(range(fc.STEPS))
    assert {(s["kernel_ns"], s["copy_ns"], s["copy_only_ns"], s["bytes"], s["copy_at_link_ns"]) for s in steps} == {
        (4 * fc.KERNEL_NS, fc.COPY_NS, fc.COPY_NS, fc.BATCH_BYTES, at_link)}


def test_copy_steps_price_three_tiers(copy_bound):
    """Per step X = C = 40 ms, K = 5 ms, C' = 15,869,141 ns: overlap hides X - (C - K) = 5 ms (= min(X, K)), the
    link's peak wins min(X, C - C') = 24,130,859 ns, moving less up to all of X."""
    at_link = round(fc.BATCH_BYTES * 130 / 8192)
    tiers = copy_bound.sql("SELECT DISTINCT overlap_ns, link_peak_ns, move_less_ns FROM copy_steps").rows()
    assert tiers == [(4 * fc.KERNEL_NS, fc.COPY_NS - at_link, fc.COPY_NS)]


def test_tv208_ranks_by_the_link_peak_when_it_beats_overlap(copy_bound):
    (finding,) = check(copy_bound.con, TV208, RuleConfig()).findings
    kernels, at_link = 4 * fc.KERNEL_NS, round(fc.BATCH_BYTES * 130 / 8192)
    per_step = fc.COPY_NS - at_link  # 24,130,859: more than the 5 ms the kernels could hide
    claims = [(c.step_id, c.bucket, c.ns) for c in finding.claims]
    assert claims == [(step, "copy", per_step) for step in range(fc.STEPS)]
    priced = {s for (s,) in copy_bound.con.execute("SELECT step_id FROM step_budget WHERE priced").fetchall()}
    assert finding.estimated_saving_ns == per_step * len(priced & set(range(fc.STEPS)))
    assert finding.evidence["basis"] == "link_peak"
    assert finding.evidence["overlap_ms"] == pytest.approx(fc.STEPS * kernels / 1e6)
    assert finding.evidence["link_peak_ms"] == pytest.approx(fc.STEPS * per_step / 1e6)
    assert finding.evidence["move_less_ms"] == pytest.approx(fc.STEPS * fc.COPY_NS / 1e6)
    assert finding.evidence["saving_ms"] == pytest.approx(fc.STEPS * per_step / 1e6)
    assert "serialised with compute" in finding.message


def test_tv208_is_the_top_finding_of_check(tmp_path):
    path = write_nsys(fc.copy_bound_run(), tmp_path / "t.sqlite")
    findings = json.loads(traceview_cli("check", path, "--step-regex", fc.STEP_REGEX, "--format", "json").stdout)["findings"]
    assert findings[0]["rule"] == "TV208", [(f["rule"], f["estimated_saving_ns"]) for f in findings]
    assert findings[0]["estimated_saving_ns"] == 10 * (fc.COPY_NS - round(fc.BATCH_BYTES * 130 / 8192))


# ------------------------------------------------------------------ two GPUs, one copy-bound


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory) -> traceview.Trace:
    path = write_nsys(fc.copy_bound_two_gpus(), tmp_path_factory.mktemp("two-gpus") / "t.sqlite")
    return traceview.load(path).analyze(step_regex=fc.STEP_REGEX)


def test_pinned_share_is_by_bytes_per_gpu_and_direction(two_gpus):
    rows = two_gpus.sql("SELECT device_id, direction, bytes, pinned_bytes, pageable_bytes, pinned_pct "
                        "FROM copy_directions ORDER BY device_id, direction").rows()
    assert rows == [(0, "HtoD", 23_500_000_000, 23_500_000_000, 0, 100.0),
                    (1, "DtoD", 10_000_000_000, None, None, None),  # no host side: unknown, not 0 % pinned
                    (1, "DtoH", 1_000_000_000, 0, 1_000_000_000, 0.0)]


def test_a_gpu_copying_940_of_969_ms_is_priced_at_the_link_not_by_its_29_ms_of_kernels(two_gpus):
    """GPU 0: per step X = C = 94 ms beside K = 2.9 ms; at PCIe 5.0 x16 the 2.35 GB take 2.35e9 x 130 / 8192 =
    37,292,480.47 ns, so the link's peak wins 94 ms - 37,292,480 = 56,707,520 ns a step, 567.08 ms in all,
    where overlap could hide only the 29 ms of kernels. GPU 1 (copy-only 5.7 %) is not reported."""
    (finding,) = check(two_gpus.con, TV208, RuleConfig()).findings
    at_link = round(fc.GPU0_BYTES * 130 / 8192)
    per_step = fc.GPU0_COPY_NS - at_link
    assert (at_link, per_step) == (37_292_480, 56_707_520)
    assert finding.evidence["device_id"] == 0 and finding.evidence["basis"] == "link_peak"
    assert [(c.step_id, c.ns) for c in finding.claims] == [(step, per_step) for step in range(fc.STEPS)]
    assert finding.estimated_saving_ns == fc.STEPS * per_step == 567_075_200
    assert finding.evidence["overlap_ms"] == pytest.approx(29.0)
    assert finding.evidence["move_less_ms"] == pytest.approx(940.0)
    assert "940.0 ms, 97% of its 969.0 ms span" in finding.message
    assert ("Ranked by the link's peak: 567.1 ms if each step's bytes crossed at 63.0 GB/s; overlap with compute "
            "instead 29.0 ms (at most the 29.0 ms of kernels beside them); moving less data up to 940.0 ms") in finding.message
    assert "up to 29" not in finding.message and "up to 22" not in finding.message
    # pinned copies: the fix checks the link and never advises pinning
    assert {"direction:h2d", "basis:link_peak", "copies:pinned", "overlap_possible"} <= set(finding.fix_facts)
    assert "link_bound" not in finding.fix_facts  # 39.7 % of the link
    assert finding.fix_summary.startswith("pinned copies run far below the link's peak")
    assert not re.search(r"pin_memory|cudaHostAlloc|cudaMallocHost|hipHostMalloc|\bpin the\b", finding.fix)


def test_copies_at_the_link_peak_are_ranked_by_overlap_or_nothing(tmp_path):
    """Copies at the link's peak win nothing from it: with kernels beside them the finding ranks by overlap
    (min(X, K) per step), and the fix is to move less data (link_bound)."""
    peak = 8192e9 / 130
    copy_ns, kernel_ns, nbytes = 40 * fc.MS, 10 * fc.MS, round(peak * 0.040)  # 40 ms at the peak
    kernels, memops, ranges = [], [], []
    for i in range(fc.STEPS):
        t = fc.START + i * 60 * fc.MS
        ranges.append(fc._step(i, t - 100_000, t + 60 * fc.MS - 100_000))
        memops.append(Memop("memcpy", t, copy_ns, nbytes, "HtoD", "Pinned", "Device", pid=fc.PID, tid=fc.PID,
                            launch_start_ns=t - 90_000, launch_dur_ns=8_000))
        kernels.append(Kernel(fc.GEMM, t + copy_ns, kernel_ns, pid=fc.PID, tid=fc.PID, launch_start_ns=t - 80_000,
                              launch_dur_ns=4_000, grid=(132, 1, 1), block=(256, 1, 1)))
    spec = TraceSpec(gpus=(fc.H100_SXM,), kernels=tuple(kernels), memops=tuple(memops), ranges=tuple(ranges),
                     process_names={fc.PID: "python"}, thread_names={(fc.PID, fc.PID): "python"})
    trace = traceview.load(write_nsys(spec, tmp_path / "t.sqlite")).analyze(step_regex=fc.STEP_REGEX)
    (finding,) = check(trace.con, TV208, RuleConfig()).findings
    assert finding.evidence["basis"] == "overlap" and finding.evidence["link_peak_ms"] == 0
    assert [c.ns for c in finding.claims] == [kernel_ns] * fc.STEPS
    assert {"link_bound", "copies:pinned"} <= set(finding.fix_facts)
    assert finding.fix_summary.startswith("the copies already run near the link's peak: move less data")


@pytest.mark.parametrize("writer", [write_nsys, write_kineto], ids=["nsys", "kineto"])
def test_prefetch_on_a_side_stream_hides_all_but_the_first_copy(tmp_path, writer):
    path = writer(fc.prefetched_copies(), tmp_path / ("t.sqlite" if writer is write_nsys else "t.json.gz"))
    trace = traceview.load(path).analyze(step_regex=fc.STEP_REGEX)
    (device,) = trace.sql("SELECT * FROM device_engines").to_dicts()
    assert (device["copy_ns"], device["copy_only_ns"]) == (fc.STEPS * fc.COPY_NS, fc.COPY_NS)
    assert (device["compute_stream_copy_ns"], device["side_stream_copy_ns"]) == (0, fc.STEPS * fc.COPY_NS)
    assert device["copy_only_pct"] == pytest.approx(100 * 40 / 540)
    assert not check(trace.con, TV208, RuleConfig()).findings


# ------------------------------------------------------------------ links by direction, and unknown links

US = 1_000


def _one_of_each(gpu: GpuSpec) -> TraceSpec:
    """One copy per direction (1 MB in 100 us: 10 GB/s) and a memset, all on a side stream, no kernel beside."""
    memops = [Memop("memcpy", 1_000 * US + i * 200 * US, 100 * US, 1_000_000, kind, src, dst, stream_id=13)
              for i, (kind, src, dst) in enumerate([("HtoD", "Pageable", "Device"), ("DtoH", "Device", "Pinned"),
                                                    ("DtoD", "Device", "Device"), ("PtoP", "Device", "Device")])]
    memops.append(Memop("memset", 2_000 * US, 30 * US, 1_000_000, "", "", "Device", stream_id=13))
    kernel = Kernel("void at::native::vectorized_elementwise_kernel<4>(int)", 2_100 * US, 50 * US)
    return TraceSpec(gpus=(gpu,), kernels=(kernel,), memops=tuple(memops))


def test_each_direction_is_set_against_its_own_link(tmp_path):
    t4 = GpuSpec("Tesla T4", 40, 15_843_721_216, 7, 5)
    trace = traceview.load(write_nsys(_one_of_each(t4), tmp_path / "t.sqlite")).analyze()
    rows = {r["direction"]: r for r in trace.sql("SELECT * FROM copy_directions").to_dicts()}
    pcie3 = 8e9 * 16 * 128 / 130 / 8
    assert rows["HtoD"]["link"] == "PCIe 3.0 x16" and rows["HtoD"]["pageable_copies"] == 1
    assert rows["DtoH"]["pct_of_link"] == pytest.approx(100 * 10e9 / pcie3)
    assert rows["PtoP"]["link"] == "PCIe 3.0 x16 (peer over PCIe)"
    assert rows["PtoP"]["link_bytes_per_s"] == pytest.approx(pcie3)
    assert rows["DtoD"]["link"] == "HBM (read + write)"
    assert rows["DtoD"]["link_bytes_per_s"] == pytest.approx(SPECS["t4"].hbm_tbps * 1e12 / 2)
    assert rows["DtoD"]["host_kinds"] is None
    (device,) = trace.sql("SELECT memset_ns, copy_ns, copy_only_ns, kernel_ns FROM device_engines").to_dicts()
    assert device == {"memset_ns": 30 * US, "copy_ns": 400 * US, "copy_only_ns": 400 * US, "kernel_ns": 50 * US}


def test_an_unknown_gpu_has_no_link_and_no_percentage(tmp_path):
    mystery = GpuSpec("Mystery Accelerator 9000", 77, 33_000_000_000, 9, 9)
    trace = traceview.load(write_nsys(_one_of_each(mystery), tmp_path / "t.sqlite")).analyze()
    rows = trace.sql("SELECT direction, achieved_bytes_per_s, link, link_bytes_per_s, pct_of_link, link_source "
                     "FROM copy_directions").to_dicts()
    assert {r["direction"] for r in rows} == {"HtoD", "DtoH", "DtoD", "PtoP"}
    for row in rows:
        assert row["achieved_bytes_per_s"] == pytest.approx(10e9)
        assert (row["link"], row["link_bytes_per_s"], row["pct_of_link"], row["link_source"]) == (None,) * 4


# ------------------------------------------------------------------ a real trace


def _own_figures(trace: traceview.Trace) -> dict:
    """Copy unions, bytes and copy-only time swept here from the trace's memops and kernels."""
    copies = trace.con.execute("SELECT copy_kind, start_ns, end_ns, bytes FROM memops WHERE kind = 'memcpy'").fetchall()
    kernels = [(s, e) for s, e in trace.con.execute("SELECT start_ns, end_ns FROM kernels").fetchall()]
    kernel_ns = union_ns(kernels)
    figures = {}
    for direction in sorted({c[0] for c in copies}):
        spans = [(s, e) for d, s, e, _ in copies if d == direction]
        figures[direction] = {"copies": len(spans), "bytes": sum(b for d, _, _, b in copies if d == direction),
                              "busy_ns": union_ns(spans), "copy_only_ns": union_ns(spans + kernels) - kernel_ns}
    every = [(s, e) for _, s, e, _ in copies]
    figures["device"] = {"copy_ns": union_ns(every), "copy_only_ns": union_ns(every + kernels) - kernel_ns,
                         "kernel_ns": kernel_ns}
    return figures


@requires_shared
@pytest.mark.parametrize("path", OPENMP, ids=lambda p: p.stem[-7:])
def test_openmp_offload_copies_match_the_trace(path):
    trace = analysed(path)
    own = _own_figures(trace)
    (device,) = trace.sql("SELECT copy_ns, copy_only_ns, kernel_ns FROM device_engines").to_dicts()
    assert device == own["device"]
    pcie3 = 8e9 * 16 * 128 / 130 / 8  # Tesla T4
    for row in trace.sql("SELECT * FROM copy_directions").to_dicts():
        mine = own[row["direction"]]
        assert {k: row[k] for k in mine} == mine, row["direction"]
        assert row["pageable_copies"] == row["copies"]  # OpenMP maps plain host arrays
        assert row["achieved_bytes_per_s"] == pytest.approx(mine["bytes"] * 1e9 / mine["busy_ns"])
        assert row["pct_of_link"] == pytest.approx(100 * mine["bytes"] * 1e9 / mine["busy_ns"] / pcie3)
