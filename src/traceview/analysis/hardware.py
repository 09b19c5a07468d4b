"""GPU peak specs for the roofline: one TOML file per GPU, plus device-name matching.

The data lives in ``hardware/<id>.toml`` (see any file there for the layout). All
peaks are dense (no 2:4 sparsity) in TFLOP/s (TOP/s for int8); a dtype missing from
``peak_tflops`` means the GPU has no such unit or no sourced number for it. Memory
bandwidth is decimal TB/s; ``memory_bytes`` is the marketed capacity taken as GiB.
``l2_tbps`` (optional) is the L2 cache's peak read bandwidth in decimal TB/s, only where a
vendor or measured figure is published: above-HBM bandwidth is plausible only for data that fits L2.

Links (optional, each with a source; absent means not known, and every figure built on it is NULL):

* ``host_link``: how the GPU reaches host memory. ``{ kind = "pcie", generation = 5, lanes = 16 }``:
  its per-direction peak is derived, raw signalling after line encoding (GT/s x lanes x 8b/10b for
  generations 1-2, 128b/130b for 3-5, / 8): gen3 x16 = 15.75 GB/s, gen4 x16 = 31.51, gen5 x16 = 63.02.
  TLP/DLLP packet overhead is not taken off, so a DMA engine reaches some 80-90 % of it.
  ``{ kind = "nvlink-c2c", gb_per_s = 450 }`` (GH200, GB200: NVLink-C2C to the Grace CPU) gives the
  per-direction peak in decimal GB/s.
* ``gpu_link``: what one GPU can drive to one peer. ``{ kind = "nvlink", generation = 4, links = 18,
  gb_per_s = 450 }`` (NVSwitch systems give every pair the GPU's full NVLink), ``"nvlink-bridge"`` (two to
  four cards over a bridge), ``"infinity-fabric"`` (AMD xGMI; in a fully connected mesh one link per
  peer), each with its per-direction peak in decimal GB/s where a source gives one; ``{ kind = "none" }``:
  peers talk over PCIe (the host link's figure bounds them). Vendors quote NVLink and xGMI bidirectionally
  (H100: 900 GB/s = 450 per direction); the files hold the per-direction half.

Matching a trace's device name (CUDA / NVML / Kineto ``deviceProperties.name`` /
nsys ``TARGET_INFO_GPU.name``):

* Names and patterns are compared case-insensitively with ``-``, ``_`` and spaces
  treated alike, and a pattern must match whole words: ``NVIDIA H200`` does not
  match ``NVIDIA GH200 480GB`` and ``NVIDIA A10`` does not match ``NVIDIA A100-...``.
* The longest (most specific) matching pattern wins, unless the trace's own
  properties contradict that GPU (compute capability, SM/CU count, memory within
  ``MEMORY_TOLERANCE``): that keeps e.g. ``RTX 3060 Laptop GPU`` off the desktop
  ``RTX 3060``. MIG instances (``... MIG 1g.5gb``) are only checked on compute
  capability; their peaks are those of the whole GPU, the caller must scale them.
* With an empty or unknown name, the GPU is picked from (compute capability, SM
  count, memory), which must both be given, and only when exactly one spec fits.
  Generic names some drivers report (``AMD Radeon Graphics`` for an MI250 GCD) are
  listed under ``fallback.names`` and narrow that search.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from traceview.compat import tomllib
from traceview.resources import data_dir


__all__ = [
    "DTYPES",
    "MEMORY_TOLERANCE",
    "Fallback",
    "HardwareSpec",
    "default_hardware_dir",
    "get_spec",
    "load_specs",
    "match_gpu",
]

DTYPES = ("fp64", "fp64_tensor", "fp32", "fp32_tensor", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
VENDORS = ("nvidia", "amd")
MEMORY_TOLERANCE = 0.10  # drivers report 88-100 % of the marketed capacity
GIB = 2**30

_SOURCED_FIELDS = ("hbm_tbps", "memory_bytes", "sm_count", "boost_clock_mhz", "l2_bytes", "l2_tbps", "interconnect",
                   "tdp_w")
_OPTIONAL_FIELDS = ("boost_clock_mhz", "l2_bytes", "l2_tbps", "interconnect", "tdp_w", "notes", "host_link", "gpu_link")
_LINK_FIELDS = ("host_link", "gpu_link")
# PCIe generation -> (transfers per second per lane, line-code efficiency): PCI-SIG base specifications
PCIE_GENERATIONS = {1: (2.5e9, 8 / 10), 2: (5e9, 8 / 10), 3: (8e9, 128 / 130), 4: (16e9, 128 / 130),
                    5: (32e9, 128 / 130)}
PCIE_LANES = (1, 2, 4, 8, 16)
HOST_LINK_KINDS = ("pcie", "nvlink-c2c")
GPU_LINK_KINDS = ("nvlink", "nvlink-bridge", "infinity-fabric", "none")
_LINK_KEYS = {"kind", "generation", "lanes", "links", "gb_per_s"}
# Matrix-unit dtypes: a GPU with tensor (NVIDIA) or matrix (AMD) cores runs one of them faster than FP32.
TENSOR_DTYPES = ("tf32", "bf16", "fp16")
_TOP_LEVEL = {"id", "name", "vendor", "architecture", "match", "hbm_tbps", "memory_bytes", "sm_count",
              "fallback", "peak_tflops", "sources", *_OPTIONAL_FIELDS}
_ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_VENDOR_WORDS = {"nvidia": "nvidia", "geforce": "nvidia", "tesla": "nvidia", "quadro": "nvidia",
                 "amd": "amd", "radeon": "amd", "instinct": "amd"}


@dataclass(frozen=True)
class Fallback:
    """Properties that identify the GPU when the trace's device name does not."""

    compute_major: int  # CUDA compute capability; on AMD the gfx IP version (gfx942 -> 9.4)
    compute_minor: int
    sm_count: int  # SMs, or compute units on AMD (per device as a trace sees it)
    memory_gib: float
    names: tuple[str, ...] = ()  # generic names trusted only when the properties agree


@dataclass(frozen=True)
class Link:
    """A host or GPU-to-GPU link: what it is and its per-direction peak (None: not known, or no link)."""

    kind: str  # pcie, nvlink-c2c, nvlink, nvlink-bridge, infinity-fabric, none
    generation: int | None = None
    lanes: int | None = None  # PCIe lane width
    links: int | None = None  # NVLink / xGMI links
    bytes_per_s: float | None = None  # per direction

    @property
    def label(self) -> str:
        """'PCIe 5.0 x16', 'NVLink 4 x18', 'NVLink-C2C', 'none'."""
        if self.kind == "pcie":
            return f"PCIe {self.generation}.0 x{self.lanes}"
        name = {"nvlink": "NVLink", "nvlink-bridge": "NVLink bridge", "nvlink-c2c": "NVLink-C2C",
                "infinity-fabric": "Infinity Fabric", "none": "none"}[self.kind]
        generation = f" {self.generation}" if self.generation else ""
        links = f" x{self.links}" if self.links else ""
        return f"{name}{generation}{links}"


@dataclass(frozen=True)
class HardwareSpec:
    id: str
    name: str
    vendor: str
    architecture: str
    match: tuple[str, ...]
    peak_tflops: dict[str, float]
    hbm_tbps: float
    memory_bytes: int
    sm_count: int
    boost_clock_mhz: int | None
    l2_bytes: int | None
    interconnect: str | None
    sources: dict[str, str]  # "hbm_tbps", "peak_tflops.bf16", ... -> where the number comes from
    fallback: Fallback
    tdp_w: int | None = None
    notes: str | None = None
    l2_tbps: float | None = None
    host_link: Link | None = None
    gpu_link: Link | None = None

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak in FLOP/s (OP/s for int8), or None if this GPU has no such number."""
        tflops = self.peak_tflops.get(dtype)
        return None if tflops is None else tflops * 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12

    @property
    def l2_bytes_per_s(self) -> float | None:
        return None if self.l2_tbps is None else self.l2_tbps * 1e12

    @property
    def tensor_cores(self) -> bool:
        """Whether tensor/matrix cores run some dtype faster than the FP32 peak (unknown FP32: any such peak)."""
        fp32 = self.peak_tflops.get("fp32", 0.0)
        return any(self.peak_tflops.get(d, 0.0) > fp32 for d in TENSOR_DTYPES)

    def matched_by_name(self, name: str | None) -> bool:
        """Whether the device name itself names this GPU (else the properties identified it)."""
        norm = _norm(name or "")
        return bool(norm) and any(_contains(norm, _norm(p)) for p in self.match)

    def ridge(self, dtype: str = "bf16") -> float | None:
        """Roofline ridge point in FLOP per byte of DRAM traffic."""
        peak = self.peak_flops(dtype)
        return None if peak is None else peak / self.hbm_bytes_per_s


# ----------------------------------------------------------------------------- loading


def default_hardware_dir() -> Path:
    """The top-level ``hardware/``, as installed (:func:`traceview.resources.data_dir`)."""
    return data_dir("hardware")


def load_specs(directory: str | Path | None = None) -> list[HardwareSpec]:
    """Load and validate every ``*.toml`` in ``directory`` (default: :func:`default_hardware_dir`)."""
    path = Path(directory) if directory is not None else default_hardware_dir()
    return list(_load_dir(str(path.resolve())))


@lru_cache(maxsize=8)
def _load_dir(directory: str) -> tuple[HardwareSpec, ...]:
    files = sorted(Path(directory).glob("*.toml"))
    if not files:
        raise ValueError(f"{directory}: no GPU spec files (*.toml) found")
    specs = tuple(_load_file(f) for f in files)
    seen: dict[str, str] = {}
    for spec in specs:
        for pattern in spec.match:
            key = _norm(pattern)
            if key in seen:
                raise ValueError(
                    f"hardware/{spec.id}.toml: match: {pattern!r} is also a match string of {seen[key]!r}"
                )
            seen[key] = spec.id
    return specs


def _load_file(path: Path) -> HardwareSpec:
    where = f"{path.parent.name}/{path.name}"

    def fail(field: str, message: str) -> ValueError:
        return ValueError(f"{where}: {field}: {message}")

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where}: invalid TOML: {exc}") from exc

    for key in data:
        if key not in _TOP_LEVEL:
            raise fail(key, "unknown field")

    def get(table: dict[str, Any], key: str, kind: type | tuple[type, ...], prefix: str = "", *, optional=False):
        field = prefix + key
        if key not in table:
            if optional:
                return None
            raise fail(field, "missing")
        value = table[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise fail(field, f"expected {_kind_name(kind)}, got {value!r}")
        if isinstance(value, (int, float)) and value <= 0 and field != "fallback.compute_minor":
            raise fail(field, f"must be positive, got {value!r}")
        if isinstance(value, str) and not value.strip():
            raise fail(field, "must not be empty")
        return value

    spec_id = get(data, "id", str)
    if spec_id != path.stem:
        raise fail("id", f"{spec_id!r} must equal the file name {path.stem!r}")
    if not _ID_RE.match(spec_id):
        raise fail("id", f"{spec_id!r} is not kebab-case")
    vendor = get(data, "vendor", str)
    if vendor not in VENDORS:
        raise fail("vendor", f"must be one of {VENDORS}, got {vendor!r}")
    match = _str_list(get(data, "match", list), "match", fail)
    if not match:
        raise fail("match", "must list at least one device name")

    fb_table = get(data, "fallback", dict)
    for key in fb_table:
        if key not in ("compute_major", "compute_minor", "sm_count", "memory_gib", "names"):
            raise fail(f"fallback.{key}", "unknown field")
    fallback = Fallback(
        compute_major=get(fb_table, "compute_major", int, "fallback."),
        compute_minor=get(fb_table, "compute_minor", int, "fallback."),
        sm_count=get(fb_table, "sm_count", int, "fallback."),
        memory_gib=get(fb_table, "memory_gib", (int, float), "fallback."),
        names=_str_list(get(fb_table, "names", list, "fallback.", optional=True) or [], "fallback.names", fail),
    )
    if fallback.compute_minor < 0:
        raise fail("fallback.compute_minor", "must not be negative")

    peaks_table = get(data, "peak_tflops", dict)
    if not peaks_table:
        raise fail("peak_tflops", "must list at least one dtype")
    peaks = {}
    for dtype in peaks_table:
        if dtype not in DTYPES:
            raise fail(f"peak_tflops.{dtype}", f"unknown dtype (known: {', '.join(DTYPES)})")
        peaks[dtype] = float(get(peaks_table, dtype, (int, float), "peak_tflops."))

    fields = {
        "hbm_tbps": float(get(data, "hbm_tbps", (int, float))),
        "memory_bytes": get(data, "memory_bytes", int),
        "sm_count": get(data, "sm_count", int),
        "boost_clock_mhz": get(data, "boost_clock_mhz", int, optional=True),
        "l2_bytes": get(data, "l2_bytes", int, optional=True),
        "l2_tbps": _float_or_none(get(data, "l2_tbps", (int, float), optional=True)),
        "interconnect": get(data, "interconnect", str, optional=True),
        "tdp_w": get(data, "tdp_w", int, optional=True),
    }

    fields["host_link"] = _link(get(data, "host_link", dict, optional=True), "host_link", HOST_LINK_KINDS, fail)
    fields["gpu_link"] = _link(get(data, "gpu_link", dict, optional=True), "gpu_link", GPU_LINK_KINDS, fail)

    if fields["l2_tbps"] is not None and fields["l2_tbps"] <= fields["hbm_tbps"]:
        raise fail("l2_tbps", f"{fields['l2_tbps']} TB/s must exceed hbm_tbps {fields['hbm_tbps']} (L2 sits in front of HBM)")
    if fields["l2_tbps"] is not None and fields["l2_bytes"] is None:
        raise fail("l2_tbps", "needs l2_bytes: the bandwidth applies only to working sets that fit L2")

    sources = _flatten(get(data, "sources", dict), "", fail)
    wanted = ([f"peak_tflops.{d}" for d in peaks] + [f for f in _SOURCED_FIELDS if fields[f] is not None]
              + [f for f in _LINK_FIELDS if fields[f] is not None])
    for key in wanted:
        if key not in sources:
            raise fail(key, "missing source")
    for key in sources:
        if key not in wanted:
            raise fail(f"sources.{key}", "source for a field that has no value")

    return HardwareSpec(
        id=spec_id,
        name=get(data, "name", str),
        vendor=vendor,
        architecture=get(data, "architecture", str),
        match=match,
        peak_tflops=peaks,
        sources=sources,
        fallback=fallback,
        notes=get(data, "notes", str, optional=True),
        **fields,
    )


def _link(table: dict[str, Any] | None, field: str, kinds: tuple[str, ...], fail) -> Link | None:
    """A link table checked for its kind; a PCIe link's peak is derived from generation and lanes."""
    if table is None:
        return None
    for key in table:
        if key not in _LINK_KEYS:
            raise fail(f"{field}.{key}", "unknown field")
    kind = table.get("kind")
    if kind not in kinds:
        raise fail(f"{field}.kind", f"must be one of {kinds}, got {kind!r}")
    values = {key: table.get(key) for key in ("generation", "lanes", "links", "gb_per_s")}
    for key, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
                                  or (key != "gb_per_s" and not isinstance(value, int))):
            raise fail(f"{field}.{key}", f"expected a positive {'number' if key == 'gb_per_s' else 'integer'}, "
                                         f"got {value!r}")
    if kind == "none":
        if any(v is not None for v in values.values()):
            raise fail(field, "a link of kind 'none' takes no other field")
        return Link("none")
    if kind == "pcie":
        if values["generation"] not in PCIE_GENERATIONS:
            raise fail(f"{field}.generation", f"must be one of {tuple(PCIE_GENERATIONS)}, got {values['generation']!r}")
        if values["lanes"] not in PCIE_LANES:
            raise fail(f"{field}.lanes", f"must be one of {PCIE_LANES}, got {values['lanes']!r}")
        if values["gb_per_s"] is not None or values["links"] is not None:
            raise fail(field, "a PCIe link's bandwidth is derived from generation and lanes; give only those")
        transfers, code = PCIE_GENERATIONS[values["generation"]]
        return Link("pcie", values["generation"], values["lanes"], bytes_per_s=transfers * values["lanes"] * code / 8)
    if values["lanes"] is not None:
        raise fail(f"{field}.lanes", "only a PCIe link has lanes")
    gb_per_s = values["gb_per_s"]
    return Link(kind, values["generation"], links=values["links"],
                bytes_per_s=None if gb_per_s is None else float(gb_per_s) * 1e9)


def _float_or_none(value: int | float | None) -> float | None:
    return None if value is None else float(value)


def _str_list(values: list, field: str, fail) -> tuple[str, ...]:
    for value in values:
        if not isinstance(value, str) or not value.strip():
            raise fail(field, f"expected non-empty strings, got {value!r}")
    return tuple(values)


def _flatten(table: dict[str, Any], prefix: str, fail) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}.", fail))
        elif isinstance(value, str) and value.strip():
            out[prefix + key] = value
        else:
            raise fail(f"sources.{prefix}{key}", f"expected a non-empty string, got {value!r}")
    return out


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "integer", float: "number", str: "string", list: "list", dict: "table"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


# ----------------------------------------------------------------------------- matching


def _norm(text: str) -> str:
    """Case-fold and turn every run of separators into one space ('NVIDIA_A100-PCIe' -> 'nvidia a100 pcie')."""
    return " ".join(re.sub(r"[^0-9a-z.]+", " ", text.casefold()).split())


def _contains(name: str, pattern: str) -> bool:
    """Whole-word containment of normalized strings."""
    return f" {pattern} " in f" {name} "


def _agrees(spec: HardwareSpec, major, minor, sm_count, memory_bytes, *, mig: bool = False) -> bool:
    fb = spec.fallback
    if major is not None and major != fb.compute_major:
        return False
    if minor is not None and minor != fb.compute_minor:
        return False
    if mig:  # a MIG slice has a fraction of the SMs and memory
        return True
    if sm_count is not None and sm_count != fb.sm_count:
        return False
    if memory_bytes is not None and abs(memory_bytes / GIB - fb.memory_gib) > MEMORY_TOLERANCE * fb.memory_gib:
        return False
    return True


def _default_specs() -> tuple[HardwareSpec, ...]:
    return _load_dir(str(default_hardware_dir().resolve()))


def match_gpu(
    name: str | None,
    compute_major: int | None = None,
    compute_minor: int | None = None,
    sm_count: int | None = None,
    memory_bytes: int | None = None,
    specs: Iterable[HardwareSpec] | None = None,
) -> HardwareSpec | None:
    """The spec for a trace's device, or None when it cannot be told with confidence.

    ``name`` is the device name as recorded; the other arguments are the device
    properties the trace records next to it (Kineto ``computeMajor``/``computeMinor``/
    ``numSms``/``totalGlobalMem``, nsys ``TARGET_INFO_GPU``), all optional.
    """
    specs = tuple(specs) if specs is not None else _default_specs()
    props = (compute_major, compute_minor, sm_count, memory_bytes)
    norm = _norm(name or "")

    if norm:
        mig = _contains(norm, "mig")
        hits = sorted(
            ((len(_norm(p)), spec.id, spec) for spec in specs for p in spec.match if _contains(norm, _norm(p))),
            key=lambda hit: (-hit[0], hit[1]),
        )
        for _, _, spec in hits:
            if _agrees(spec, *props, mig=mig):
                return spec

    # Name empty, unknown, or contradicted by the properties: identify by properties alone.
    if sm_count is None or memory_bytes is None:
        return None
    pool = [s for s in specs if norm and any(_contains(norm, _norm(n)) for n in s.fallback.names)] or list(specs)
    vendors = {_VENDOR_WORDS[w] for w in norm.split() if w in _VENDOR_WORDS}
    if len(vendors) == 1:
        pool = [s for s in pool if s.vendor in vendors]
    candidates = [s for s in pool if _agrees(s, *props)]
    return candidates[0] if len(candidates) == 1 else None


def get_spec(id_or_name: str, specs: Iterable[HardwareSpec] | None = None) -> HardwareSpec:
    """The spec for a ``--gpu`` override: an id or any match string, case-insensitive."""
    specs = tuple(specs) if specs is not None else _default_specs()
    key = _norm(id_or_name)
    for spec in specs:
        if key and (key == _norm(spec.id) or any(key == _norm(p) for p in spec.match)):
            return spec
    known = ", ".join(sorted(s.id for s in specs))
    raise ValueError(f"unknown GPU {id_or_name!r}; known ids: {known}")
