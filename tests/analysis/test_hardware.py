"""GPU spec files (hardware/*.toml) and device-name matching."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

import traceview
from traceview.analysis.hardware import DTYPES, default_hardware_dir, get_spec, load_specs, match_gpu
from traceview.testing import A100_80GB, Kernel, TraceSpec, write_kineto

REPO = Path(__file__).resolve().parents[2]
HARDWARE = REPO / "hardware"
SPECS = load_specs(HARDWARE)
BY_ID = {spec.id: spec for spec in SPECS}
GIB = 2**30

REQUIRED_IDS = """
    a100-sxm4-40gb a100-sxm4-80gb a100-pcie-40gb a100-pcie-80gb h100-sxm h100-pcie h100-nvl h200 h200-nvl
    h800 h20 b200 gb200 gh200 l40s l4 a10g a10 t4 v100-sxm2-16gb v100-sxm2-32gb rtx-3090 rtx-4090
    rtx-a5000 rtx-a2000 mi300x mi325x mi250x mi250 mi210
""".split()


# ------------------------------------------------------------------ the data files


def test_default_directory_is_the_repository_hardware_dir():
    assert default_hardware_dir() == HARDWARE


@pytest.mark.parametrize("path", sorted(HARDWARE.glob("*.toml")), ids=lambda p: p.stem)
def test_every_file_loads_and_validates(path):
    (spec,) = [s for s in SPECS if s.id == path.stem]
    assert spec.vendor in ("nvidia", "amd")
    assert spec.match and spec.peak_tflops
    assert set(spec.peak_tflops) <= set(DTYPES)
    assert spec.hbm_tbps > 0 and spec.memory_bytes > 0 and spec.sm_count > 0


def test_required_gpus_are_present():
    assert not set(REQUIRED_IDS) - set(BY_ID)


def test_ids_are_unique_and_equal_the_file_stem():
    assert len(BY_ID) == len(SPECS) == len(list(HARDWARE.glob("*.toml")))
    for spec in SPECS:
        assert (HARDWARE / f"{spec.id}.toml").is_file()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_every_number_has_a_source(spec):
    for dtype in spec.peak_tflops:
        assert spec.sources.get(f"peak_tflops.{dtype}", "").strip(), dtype
    for field in ("hbm_tbps", "memory_bytes", "sm_count", "boost_clock_mhz", "l2_bytes", "interconnect", "tdp_w"):
        if getattr(spec, field) is not None:
            assert spec.sources.get(field, "").strip(), field


def test_no_two_specs_share_a_match_string():
    seen = {}
    for spec in SPECS:
        for pattern in spec.match:  # fallback.names are generic and may be shared (MI250 / MI250X GCDs)
            key = " ".join(pattern.casefold().replace("-", " ").replace("_", " ").split())
            assert key not in seen, f"{pattern!r} in {spec.id} and {seen[key]}"
            seen[key] = spec.id


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_spec_is_consistent_with_its_own_fallback(spec):
    assert spec.fallback.sm_count == spec.sm_count
    assert spec.memory_bytes == pytest.approx(spec.fallback.memory_gib * GIB, rel=0.10)
    # every spec must match its own identity
    assert match_gpu(spec.match[0], spec.fallback.compute_major, spec.fallback.compute_minor,
                     spec.sm_count, spec.memory_bytes, specs=SPECS) is spec


# ------------------------------------------------------------------ numbers that are easy to get wrong


def test_h100_sxm_bf16_is_the_dense_peak_not_the_sparse_one():
    h100 = BY_ID["h100-sxm"]
    assert h100.peak_tflops["bf16"] == pytest.approx(989.4, abs=0.5)
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12, rel=1e-3)
    assert h100.ridge("bf16") == pytest.approx(295, abs=1)


@pytest.mark.parametrize("spec", [s for s in SPECS if "fp8" in s.peak_tflops], ids=lambda s: s.id)
def test_fp8_is_twice_bf16(spec):
    # L40S: NVIDIA's own dense figures are 362 (BF16) and 733 (FP8), 1.2 % off an exact 2x.
    assert spec.peak_tflops["fp8"] == pytest.approx(2 * spec.peak_tflops["bf16"], rel=0.02)


@pytest.mark.parametrize(
    "spec_id, dtype, tflops",
    [
        ("a100-sxm4-80gb", "bf16", 312),
        ("a100-sxm4-40gb", "tf32", 156),
        ("h100-pcie", "bf16", 756),
        ("h200", "bf16", 989.4),
        ("b200", "bf16", 2250),
        ("gb200", "bf16", 2500),
        ("mi300x", "bf16", 1307.4),
        ("l4", "bf16", 121),
        ("mi250", "bf16", 181.05),  # one GCD: half of the 362.1 package figure
    ],
)
def test_dense_peaks(spec_id, dtype, tflops):
    assert BY_ID[spec_id].peak_tflops[dtype] == pytest.approx(tflops, rel=1e-3)


def test_bandwidths_per_variant():
    assert BY_ID["a100-sxm4-40gb"].hbm_tbps == pytest.approx(1.555)
    assert BY_ID["a100-sxm4-80gb"].hbm_tbps == pytest.approx(2.039)
    assert BY_ID["h100-sxm"].hbm_tbps == pytest.approx(3.35)
    assert BY_ID["h200"].hbm_tbps == pytest.approx(4.8)
    assert BY_ID["l4"].hbm_tbps == pytest.approx(0.3)


# ------------------------------------------------------------------ matching


@pytest.mark.parametrize(
    "name, expected",
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        # HGX A100 SXM4 40GB board: same PCI device id (20B0) as A100-SXM4-40GB; traces show 108 SMs, ~39.4 GiB
        ("NVIDIA A100-PG509-200", "a100-sxm4-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("NVIDIA_A100-PCIe-40GB", "a100-pcie-40gb"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA B200", "b200"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
        ("NVIDIA Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
        ("Tesla V100-DGXS-32GB", "v100-sxm2-32gb"),  # DGX Station V100: the NVLink V100, 32 GB
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("NVIDIA RTX A5000", "rtx-a5000"),
        ("NVIDIA RTX A2000 12GB", "rtx-a2000"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI300X VF", "mi300x"),
        ("AMD Instinct MI210", "mi210"),
        ("AMD Instinct MI250X", "mi250x"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA A10", "a10"),
        ("nvidia a10", "a10"),
        ("Quadro RTX 6000", "quadro-rtx-6000"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "a100-sxm4-40gb"),
    ],
)
def test_match_by_name(name, expected):
    spec = match_gpu(name, specs=SPECS)
    assert spec is not None and spec.id == expected


@pytest.mark.parametrize("name", ["NVIDIA GH200 480GB", "NVIDIA GB200"])
def test_superchips_never_match_their_substrings(name):
    assert match_gpu(name, specs=SPECS).id not in ("h200", "b200")


@pytest.mark.parametrize("name", ["", None, "Some Unknown Accelerator", "NVIDIA B300 SXM6 AC"])
def test_unknown_names_without_properties_give_none(name):
    assert match_gpu(name, specs=SPECS) is None


# (name, computeMajor, computeMinor, numSms, totalGlobalMem) as recorded in real traces
@pytest.mark.parametrize(
    "props, expected",
    [
        (("", 9, 4, 304, 206141652992), "mi300x"),  # vLLM on ROCm: empty Kineto device name
        (("AMD Radeon Graphics", 9, 0, 104, 68702699520), "mi250"),  # MI250 GCD under ROCm 6.2
        (("AMD Instinct MI210", 9, 0, 104, 68702699520), "mi210"),
        (("NVIDIA A100-PG509-200", 8, 0, 108, 42297524224), "a100-sxm4-40gb"),
        (("NVIDIA H200", 9, 0, 132, 150137864192), "h200"),
        (("Tesla V100-DGXS-32GB", 7, 0, 80, 34084028416), "v100-sxm2-32gb"),
        (("NVIDIA GeForce RTX 3060", 8, 6, 28, 12626624512), "rtx-3060"),
        (("NVIDIA GeForce RTX 2070 SUPER", 7, 5, 40, 8368816128), "rtx-2070-super"),
        (("NVIDIA GeForce RTX 5060 Ti", 12, 0, 36, 16660430848), "rtx-5060-ti"),
        (("", 8, 0, 108, 85899345920), None),  # A100 80GB SXM4 and PCIe look the same
        (("", 9, 0, 104, 68702699520), None),  # MI210 and an MI250 GCD look the same
        (("", 9, 0, 132, 85018279936), None),  # H100 SXM and H800 look the same
        (("AMD Radeon Graphics", None, None, None, None), None),  # generic name alone says nothing
        (("NVIDIA GeForce RTX 3060 Laptop GPU", 8, 6, 30, 6441926656), None),  # not the desktop card
        (("NVIDIA H20-3e", 9, 0, 78, 141 * GIB), None),  # not the 96 GB H20
        (("NVIDIA H100 80GB HBM3", 9, 0, 304, 206141652992), None),  # properties contradict the name
    ],
)
def test_match_with_properties(props, expected):
    spec = match_gpu(*props, specs=SPECS)
    assert (spec.id if spec else None) == expected


def test_fallback_needs_sm_count_and_memory():
    assert match_gpu("", 9, 4, specs=SPECS) is None
    assert match_gpu("", sm_count=304, specs=SPECS) is None


def test_default_specs_are_used_when_none_given():
    assert match_gpu("NVIDIA H100 80GB HBM3").id == "h100-sxm"


# ------------------------------------------------------------------ --gpu override


@pytest.mark.parametrize("text", ["h100-sxm", "H100-SXM", "NVIDIA H100 80GB HBM3", "nvidia h100 80gb hbm3", "NVIDIA H100"])
def test_get_spec_by_id_or_match_string(text):
    assert get_spec(text, specs=SPECS).id == "h100-sxm"


def test_get_spec_unknown_lists_known_ids():
    with pytest.raises(ValueError) as info:
        get_spec("H9000", specs=SPECS)
    message = str(info.value)
    assert "H9000" in message and "h100-sxm" in message and "mi300x" in message


# ------------------------------------------------------------------ validation errors


GOOD = """
id = "x1"
name = "Test GPU"
vendor = "nvidia"
architecture = "hopper"
match = ["Test GPU X1"]
hbm_tbps = 1.0
memory_bytes = 1073741824
sm_count = 10

[fallback]
compute_major = 9
compute_minor = 0
sm_count = 10
memory_gib = 1

[peak_tflops]
bf16 = 100.0

[sources]
hbm_tbps = "doc"
memory_bytes = "doc"
sm_count = "doc"

[sources.peak_tflops]
bf16 = "doc"
"""


def _write(tmp_path, text, stem="x1"):
    directory = tmp_path / "hardware"
    directory.mkdir(exist_ok=True)
    (directory / f"{stem}.toml").write_text(text)
    return directory


def test_a_minimal_file_loads(tmp_path):
    (spec,) = load_specs(_write(tmp_path, GOOD))
    assert spec.id == "x1" and spec.peak_tflops == {"bf16": 100.0} and spec.l2_bytes is None
    assert match_gpu("test gpu x1", specs=[spec]) is spec


@pytest.mark.parametrize(
    "edit, field, message",
    [
        (lambda t: t.replace('bf16 = "doc"\n', ""), "peak_tflops.bf16", "missing source"),
        (lambda t: t.replace('hbm_tbps = "doc"\n', ""), "hbm_tbps", "missing source"),
        (lambda t: t.replace('id = "x1"', 'id = "x2"'), "id", "file name"),
        (lambda t: t.replace('vendor = "nvidia"', 'vendor = "intel"'), "vendor", "must be one of"),
        (lambda t: t.replace("bf16 = 100.0", "bf16 = 100.0\nbf17 = 1.0"), "peak_tflops.bf17", "unknown dtype"),
        (lambda t: t.replace("bf16 = 100.0", "bf16 = -1.0"), "peak_tflops.bf16", "positive"),
        (lambda t: t.replace("sm_count = 10\n\n", ""), "sm_count", "missing"),
        (lambda t: t.replace("memory_gib = 1", 'memory_gib = "1"'), "fallback.memory_gib", "expected"),
        (lambda t: t.replace("hbm_tbps = 1.0", "hbm_tbps = 1.0\nl2_byte = 5"), "l2_byte", "unknown field"),
        (lambda t: t.replace('sm_count = "doc"', 'sm_count = "doc"\ntdp_w = "doc"'), "sources.tdp_w", "no value"),
        (lambda t: t.replace('match = ["Test GPU X1"]', "match = []"), "match", "at least one"),
        (lambda t: t.replace("hbm_tbps = 1.0", "hbm_tbps = 1.0\nl2_bytes = 4\nl2_tbps = 0.5")
         .replace('sm_count = "doc"', 'sm_count = "doc"\nl2_bytes = "doc"\nl2_tbps = "doc"'), "l2_tbps", "must exceed"),
        (lambda t: t.replace("hbm_tbps = 1.0", "hbm_tbps = 1.0\nl2_tbps = 5.0")
         .replace('sm_count = "doc"', 'sm_count = "doc"\nl2_tbps = "doc"'), "l2_tbps", "needs l2_bytes"),
        (lambda t: t.replace("hbm_tbps = 1.0", "hbm_tbps = 1.0\nl2_bytes = 4\nl2_tbps = 5.0")
         .replace('sm_count = "doc"', 'sm_count = "doc"\nl2_bytes = "doc"'), "l2_tbps", "missing source"),
    ],
)
def test_bad_files_name_the_file_and_the_field(tmp_path, edit, field, message):
    directory = _write(tmp_path, edit(GOOD))
    with pytest.raises(ValueError) as info:
        load_specs(directory)
    text = str(info.value)
    assert text.startswith(f"hardware/x1.toml: {field}:"), text
    assert message in text


def test_duplicate_match_strings_across_files_are_rejected(tmp_path):
    directory = _write(tmp_path, GOOD)
    _write(tmp_path, GOOD.replace('id = "x1"', 'id = "x2"'), stem="x2")
    with pytest.raises(ValueError, match="Test GPU X1"):
        load_specs(directory)


def test_invalid_toml_names_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"^hardware/x1\.toml: invalid TOML"):
        load_specs(_write(tmp_path, "id = "))


# ------------------------------------------------------------------ real traces (skipped without them)

TRACES = REPO.parent / "shared" / "traces" / "torch"
EXPECTED_FROM_TRACES = {
    "hta__critical_path_alexnet_a100.json.gz": "a100-sxm4-40gb",
    "hta__mi250_rocm6.2_minitoy.json.gz": "mi250",
    "hta__negative_queue_a100_ws16_rank0.json.gz": "a100-sxm4-80gb",
    "hta__ns_resolution_v100.pt.trace.json.gz": "v100-sxm2-32gb",
    "hta__trace_diff_test_v100.json.gz": "v100-sxm2-16gb",
    "kineto-tbplugin__resnet50_2021_legacy.pt.trace.json.gz": "v100-sxm2-32gb",
    "tracelens__h100_hf_bert-small.json.gz": "h100-sxm",
    "tracelens__mi210_gpu_only_trace.json.gz": "mi210",
    "tracelens__mi300_torch_compile_triton.json.gz": "mi300x",
    "tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz": "mi300x",
}


@pytest.mark.parametrize("file_name, expected", sorted(EXPECTED_FROM_TRACES.items()))
def test_device_properties_of_real_traces(file_name, expected):
    path = TRACES / file_name
    if not path.is_file():
        pytest.skip("shared traces not available")
    with gzip.open(path, "rt") as fh:
        devices = json.load(fh)["deviceProperties"]
    for dev in devices:
        spec = match_gpu(dev["name"], dev["computeMajor"], dev["computeMinor"], dev["numSms"], dev["totalGlobalMem"])
        assert spec is not None and spec.id == expected, dev
        assert math.isfinite(spec.ridge(next(iter(spec.peak_tflops))))


def test_l2_bandwidth_is_sourced_above_hbm_and_in_gpu_specs(tmp_path):
    a100 = BY_ID["a100-sxm4-40gb"]
    assert a100.l2_tbps == pytest.approx(5120 * 1410e6 / 1e12, abs=1e-3)  # whitepaper bytes/clk x boost clock
    for spec in SPECS:
        assert spec.l2_tbps is None or (spec.l2_tbps > spec.hbm_tbps and spec.l2_bytes), spec.id
    trace = traceview.load(write_kineto(TraceSpec(gpus=(A100_80GB,), kernels=(Kernel("k", 1000, 10),)),
                                        tmp_path / "t.json")).analyze()
    rows = dict(trace.sql("SELECT spec_id, struct_pack(b := l2_bytes, s := l2_bytes_per_s) FROM gpu_specs").rows())
    assert rows["a100-sxm4-40gb"] == {"b": 41_943_040, "s": pytest.approx(7.219e12)}
    assert rows["h100-sxm"] == {"b": BY_ID["h100-sxm"].l2_bytes, "s": None}  # no published L2 bandwidth
    assert rows["rtx-5060-ti"] == {"b": None, "s": None}
