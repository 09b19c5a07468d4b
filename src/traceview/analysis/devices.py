"""Which GPU ran each kernel: every (rank, device_id) that kernels or memops use gets a `devices`
row, matched to a hardware/ spec where the trace says enough, else classed by its kernel names.

Three things go wrong in real traces and are repaired here, each with a diagnostic:

* Device ids that the device list lacks. ROCm Kineto writes the physical GPU index on kernels
  (6) while `deviceProperties` lists the visible devices 0..3 (HIP/ROCR/CUDA_VISIBLE_DEVICES).
  Each such id gets its own `devices` row copying the listed device it maps to
  (`maps_to_device_id`), so `kernels JOIN devices USING (rank, device_id)` finds every kernel's
  GPU. One id and one listed device: that one. All listed devices of one model: by order, cycling
  (any choice gives the same spec). Otherwise by order, the k-th unlisted id to the k-th listed
  device not used by kernels itself; ids left over stay unmatched.
* No device name (nsys exports without TARGET_INFO_GPU, empty Kineto names): the properties may
  still identify it (hardware.match_gpu); if not, the architecture class is inferred from kernel
  names (architectures.toml): `sm80_xmma_*` proves an sm80-or-newer GPU with tensor cores.
* `--gpu` overrides all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import duckdb

from traceview.analysis.hardware import VENDORS, HardwareSpec, get_spec, load_specs, match_gpu
from traceview.analysis.stage import Columns, Relation, Stage
from traceview.compat import tomllib
from traceview.errors import TraceviewError
from traceview.model import db


ARCHITECTURES_FILE = Path(__file__).with_name("architectures.toml")
DEVICE_COLUMNS = {  # column: (type, meaning)
    "spec_id": ("VARCHAR", "matched hardware/ file id (`h100-sxm`, `a100-sxm4-40gb`, `mi300x`, ...); NULL when "
                "unmatched (a `gpu_unknown` diagnostic says so and asks for `--gpu`)"),
    "spec_source": ("VARCHAR", "how the spec or class was found: `name` (device name), `properties` (compute "
                    "capability, SM count, memory), `override` (`--gpu`), `device_map` (a device id the device list "
                    "lacks, mapped onto a listed device), `kernel_names` (no spec: class inferred from kernel names)"),
    "architecture": ("VARCHAR", "the spec's architecture (`ampere`, `hopper`, `cdna3`, ...), or the inferred class "
                     "(`sm80+`, `sm90+`, `cdna3+`, ...)"),
    "tensor_cores": ("BOOLEAN", "the GPU has tensor/matrix cores (a TF32/BF16/FP16 peak above its FP32 peak, or a "
                     "class that always has them); NULL when not known"),
    "maps_to_device_id": ("INTEGER", "for a row added for a device id the device list lacks: the listed device "
                          "whose properties it copies"),
    "listed": ("BOOLEAN", "the trace's own device list has this device; false for rows the analysis added (an "
               "unlisted id, `--gpu` for a device the trace does not describe, a class inferred from kernel names)"),
}
PROPERTY_COLUMNS = ("name", "compute_major", "compute_minor", "sm_count", "memory_bytes")
EXAMPLE_CHARS = 80  # kernel names in diagnostics are cut to this length


@dataclass(frozen=True)
class ArchitectureClass:
    id: str
    vendor: str
    level: int  # NVIDIA SM version (80), AMD gfx IP as hex (0x90a)
    tensor_cores: bool | None
    covers: tuple[str, ...]


@dataclass(frozen=True)
class NamePattern:
    vendor: str
    pattern: str
    capture: bool
    level: int | None


def match_devices(con: duckdb.DuckDBPyConnection, gpu: str | None) -> HardwareSpec | None:
    """Give every used device a row, a spec where it can be told, else an inferred class; say what could not be.

    Returns the spec of the GPU that ran the most kernel time (the target for model accounting).
    """
    specs = load_specs()
    override = None
    if gpu:
        try:
            override = get_spec(gpu, specs)
        except ValueError as exc:
            raise TraceviewError(f"--gpu {gpu}: {exc}") from None
    _start_devices(con)
    _map_unlisted_ids(con, specs)
    if override:
        con.execute(
            f"""
            INSERT INTO _devices (rank, device_id, name, listed)
            SELECT rank, device_id, '', FALSE FROM ({_USED_IDS}) u
            WHERE NOT EXISTS (SELECT 1 FROM _devices d WHERE d.rank = u.rank AND d.device_id = u.device_id)
            """
        )
    rows = con.execute(
        "SELECT rank, device_id, maps_to_device_id, name, compute_major, compute_minor, sm_count, memory_bytes "
        "FROM _devices"
    ).fetchall()
    matches = {}
    for rank, device, maps_to, name, major, minor, sms, memory in rows:
        spec = override or match_gpu(name, major, minor, sms, memory, specs=specs)
        if spec:
            source = ("override" if override else "device_map" if maps_to is not None
                      else "name" if spec.matched_by_name(name) else "properties")
            matches[(rank, device)] = (spec, source)
    attach_gpu_specs(con, matches, specs)
    _infer_from_kernel_names(con)
    unknown = con.execute(
        """
        SELECT DISTINCT k.rank, k.device_id, d.name FROM kernels k
        LEFT JOIN _devices d ON d.rank = k.rank AND d.device_id = k.device_id
        WHERE d.spec_id IS NULL
        """
    ).fetchall()
    for rank, device, name in unknown:
        if name:
            message = f"GPU {device} '{name}' matches no file in hardware/: pass --gpu NAME for roofline numbers"
        else:
            message = f"GPU {device} has no device name in the trace: pass --gpu NAME for roofline numbers"
        db.add_diagnostic(con, rank, "analysis", "warning", "gpu_unknown", message)
    busiest = con.execute(
        """SELECT d.spec_id FROM kernels k JOIN _devices d ON d.rank = k.rank AND d.device_id = k.device_id
           WHERE d.spec_id IS NOT NULL GROUP BY d.spec_id ORDER BY sum(k.dur_ns) DESC LIMIT 1"""
    ).fetchall()
    con.execute("CREATE OR REPLACE TABLE devices AS SELECT * FROM _devices")
    con.execute("DROP TABLE _devices")
    return next((s for s in specs if busiest and s.id == busiest[0][0]), override)


def _start_devices(con: duckdb.DuckDBPyConnection) -> None:
    """`_devices`: the trace's own device rows with the analysis columns empty, to be filled and published.

    Rows an earlier analysis added (`listed` false) are left out, so analysing again starts from the trace.
    """
    contract = ", ".join(db.contract_columns("devices"))
    own_rows = "WHERE listed" if db.has_column(con, "devices", "listed") else ""
    added = ", ".join(f"NULL::{kind} AS {column}" for column, (kind, _) in DEVICE_COLUMNS.items() if column != "listed")
    con.execute(f"CREATE OR REPLACE TEMP TABLE _devices AS SELECT {contract}, {added}, TRUE AS listed "
                f"FROM devices {own_rows}")


def attach_gpu_specs(con: duckdb.DuckDBPyConnection, matches: dict[tuple[int, int], tuple[HardwareSpec, str]],
                     all_specs: list[HardwareSpec]) -> None:
    """Record each device's spec, where it came from, its architecture and tensor cores; write the spec tables."""
    rows = [(rank, device, spec.id, source, spec.architecture, spec.tensor_cores)
            for (rank, device), (spec, source) in matches.items()]
    matched = {"rank": "INTEGER", "device_id": "INTEGER", "spec_id": "VARCHAR", "spec_source": "VARCHAR",
               "architecture": "VARCHAR", "tensor_cores": "BOOLEAN"}
    with db.values_table(con, "_matches", matched, rows):
        con.execute("UPDATE _devices SET spec_id = m.spec_id, spec_source = m.spec_source, "
                    "architecture = m.architecture, tensor_cores = m.tensor_cores FROM _matches m "
                    "WHERE _devices.rank = m.rank AND _devices.device_id = m.device_id")
    peaks = [(s.id, dtype, tflops * 1e12) for s in all_specs for dtype, tflops in s.peak_tflops.items()]
    db.create_values_table(con, "gpu_peaks", {"spec_id": "VARCHAR", "dtype": "VARCHAR", "peak_flops": "DOUBLE"}, peaks)
    specs = {"spec_id": "VARCHAR", "name": "VARCHAR", "vendor": "VARCHAR", "architecture": "VARCHAR",
             "hbm_bytes_per_s": "DOUBLE", "memory_bytes": "BIGINT", "sm_count": "BIGINT", "l2_bytes": "BIGINT",
             "l2_bytes_per_s": "DOUBLE", "host_link": "VARCHAR", "host_link_bytes_per_s": "DOUBLE",
             "gpu_link": "VARCHAR", "gpu_link_bytes_per_s": "DOUBLE"}
    spec_rows = [(s.id, s.name, s.vendor, s.architecture, s.hbm_tbps * 1e12, s.memory_bytes, s.sm_count, s.l2_bytes,
                  s.l2_bytes_per_s, s.host_link and s.host_link.label, s.host_link and s.host_link.bytes_per_s,
                  s.gpu_link and s.gpu_link.label, s.gpu_link and s.gpu_link.bytes_per_s) for s in all_specs]
    db.create_values_table(con, "gpu_specs", specs, spec_rows)
    classes = load_architectures()[0]
    covers = [(c.id, s.id) for c in classes for s in all_specs if s.architecture in c.covers]
    db.create_values_table(con, "architecture_specs", {"architecture": "VARCHAR", "spec_id": "VARCHAR"}, covers)


# ----------------------------------------------------------------------------- device-id mapping

_USED_IDS = """
    SELECT DISTINCT rank, device_id FROM kernels WHERE device_id IS NOT NULL
    UNION SELECT DISTINCT rank, device_id FROM memops WHERE device_id IS NOT NULL
"""


def _map_unlisted_ids(con: duckdb.DuckDBPyConnection, specs: list[HardwareSpec]) -> None:
    """Give each used device id the device list lacks a row copying the listed device it stands for."""
    ranks = con.execute(
        f"""
        SELECT u.rank, list(u.device_id ORDER BY u.device_id) FILTER (WHERE d.device_id IS NULL) AS unlisted,
               list(u.device_id ORDER BY u.device_id) FILTER (WHERE d.device_id IS NOT NULL) AS used_listed
        FROM ({_USED_IDS}) u LEFT JOIN _devices d USING (rank, device_id)
        GROUP BY u.rank
        HAVING count(*) FILTER (WHERE d.device_id IS NULL) > 0
        """
    ).fetchall()
    mapping = []
    for rank, unlisted, used_listed in ranks:
        listed = con.execute(
            f"SELECT device_id, {', '.join(PROPERTY_COLUMNS)} FROM _devices WHERE rank = ? ORDER BY device_id",
            [rank],
        ).fetchall()
        if not listed:
            continue
        models = set()
        for _, name, major, minor, sms, memory in listed:
            spec = match_gpu(name, major, minor, sms, memory, specs=specs)
            models.add(spec.id if spec else (name, major, minor, sms, memory))
        free = [row[0] for row in listed if row[0] not in set(used_listed or [])] or [row[0] for row in listed]
        if len(unlisted) == 1 and len(listed) == 1:
            pairs, how, severity = [(unlisted[0], free[0])], "the only listed device", "info"
        elif len(models) == 1:
            pairs = [(device, free[k % len(free)]) for k, device in enumerate(unlisted)]
            how, severity = "all listed devices are one model, so the spec is the same", "info"
        else:
            pairs = list(zip(unlisted, free))
            how, severity = "by order; the listed devices differ, so this is a guess", "warning"
        mapping += [(rank, device, target) for device, target in pairs]
        left = [device for device in unlisted if device not in {d for d, _ in pairs}]
        message = (f"kernels use device ids the trace's device list lacks (visible-devices renumbering): "
                   f"{', '.join(f'{d} -> {t}' for d, t in pairs)} ({how})"
                   + (f"; ids {', '.join(map(str, left))} have no listed device left" if left else ""))
        db.add_diagnostic(con, rank, "analysis", severity, "device_ids_mapped", message)
    if not mapping:
        return
    with db.values_table(con, "_device_map", {"rank": "INTEGER", "device_id": "INTEGER", "maps_to": "INTEGER"},
                         list(mapping)):
        con.execute(
            """
            INSERT INTO _devices BY NAME
            SELECT d.* EXCLUDE (device_id, maps_to_device_id, listed), m.device_id, m.maps_to AS maps_to_device_id,
                   FALSE AS listed
            FROM _devices d JOIN _device_map m ON d.rank = m.rank AND d.device_id = m.maps_to
            """
        )


# ----------------------------------------------------------------------------- kernel-name inference


def _infer_from_kernel_names(con: duckdb.DuckDBPyConnection) -> None:
    """Class each used device that has no spec by the most advanced architecture its kernel names prove."""
    classes, patterns = load_architectures()
    arch_classes = {"architecture": "VARCHAR", "vendor": "VARCHAR", "class_level": "BIGINT", "tensor_cores": "BOOLEAN"}
    arch_patterns = {"vendor": "VARCHAR", "pattern": "VARCHAR", "capture": "BOOLEAN", "level": "BIGINT"}
    with db.values_table(con, "_arch_classes", arch_classes,
                         [(c.id, c.vendor, c.level, c.tensor_cores) for c in classes]), \
            db.values_table(con, "_arch_patterns", arch_patterns,
                            [(p.vendor, p.pattern, p.capture, p.level) for p in patterns]):
        inferred = con.execute(
            """
            WITH unknown AS (
                SELECT DISTINCT k.rank, k.device_id FROM kernels k
                LEFT JOIN _devices d ON d.rank = k.rank AND d.device_id = k.device_id
                WHERE k.device_id IS NOT NULL AND d.spec_id IS NULL
            ),
            names AS (
                SELECT k.rank, k.device_id, k.name, sum(k.dur_ns) AS time_ns
                FROM kernels k JOIN unknown u ON u.rank = k.rank AND u.device_id = k.device_id
                GROUP BY ALL
            ),
            hits AS (
                SELECT n.rank, n.device_id, n.name, n.time_ns, p.vendor,
                       CASE WHEN NOT p.capture THEN p.level
                            WHEN p.vendor = 'amd' THEN ('0x' || regexp_extract(n.name, p.pattern, 1))::BIGINT
                            ELSE regexp_extract(n.name, p.pattern, 1)::BIGINT END AS level
                FROM names n JOIN _arch_patterns p ON regexp_matches(n.name, p.pattern)
            ),
            classed AS (
                SELECT h.*, c.architecture, c.class_level, c.tensor_cores
                FROM hits h ASOF JOIN _arch_classes c ON c.vendor = h.vendor AND h.level >= c.class_level
            ),
            vendors AS (  -- the vendor whose names cover the most kernel time
                SELECT rank, device_id, arg_max(vendor, vendor_ns) AS vendor
                FROM (SELECT rank, device_id, vendor, sum(time_ns) AS vendor_ns
                      FROM (SELECT DISTINCT rank, device_id, vendor, name, time_ns FROM classed) GROUP BY ALL)
                GROUP BY rank, device_id
            )
            SELECT c.rank, c.device_id,
                   arg_max(struct_pack(a := c.architecture, t := c.tensor_cores, n := c.name),
                           struct_pack(l := c.class_level, ns := c.time_ns)) AS pick
            FROM classed c JOIN vendors v ON v.rank = c.rank AND v.device_id = c.device_id AND v.vendor = c.vendor
            GROUP BY c.rank, c.device_id
            ORDER BY c.rank, c.device_id
            """
        ).fetchall()
    for rank, device, pick in inferred:
        exists = con.execute("SELECT count(*) FROM _devices WHERE rank = ? AND device_id = ?", [rank, device]).fetchall()
        if not exists[0][0]:
            con.execute("INSERT INTO _devices (rank, device_id, name, listed) VALUES (?, ?, '', FALSE)", [rank, device])
        con.execute(
            "UPDATE _devices SET spec_source = 'kernel_names', architecture = ?, tensor_cores = ? "
            "WHERE rank = ? AND device_id = ?", [pick["a"], pick["t"], rank, device])
        cores = {True: "with tensor/matrix cores", False: "without tensor/matrix cores",
                 None: "tensor cores not known"}[pick["t"]]
        example = pick["n"] if len(pick["n"]) <= EXAMPLE_CHARS else pick["n"][:EXAMPLE_CHARS] + "..."
        db.add_diagnostic(con, rank, "analysis", "info", "gpu_inferred",
                          f"GPU {device} inferred as {pick['a']} ({cores}) from kernel names, e.g. {example}")


@lru_cache(maxsize=1)
def load_architectures(path: Path = ARCHITECTURES_FILE) -> tuple[tuple[ArchitectureClass, ...], tuple[NamePattern, ...]]:
    """The architecture classes and kernel-name patterns of architectures.toml, validated."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    classes = tuple(
        ArchitectureClass(c["id"], c["vendor"], c["level"], c.get("tensor_cores"), tuple(c["covers"]))
        for c in data["classes"]
    )
    patterns = tuple(NamePattern(p["vendor"], p["pattern"], bool(p.get("capture")), p.get("level"))
                     for p in data["patterns"])
    for item in (*classes, *patterns):
        if item.vendor not in VENDORS:
            raise ValueError(f"{path.name}: vendor {item.vendor!r} is not one of {VENDORS}")
    for pattern in patterns:
        if pattern.capture == (pattern.level is not None):
            raise ValueError(f"{path.name}: pattern {pattern.pattern!r} needs either capture = true or a level")
    return tuple(sorted(classes, key=lambda c: (c.vendor, c.level))), patterns


STAGE = Stage(
    name="devices",
    doc="Which GPU ran each kernel: every (rank, device_id) that kernels or memops use gets a `devices` row, "
        "matched to a hardware/ spec where the trace says enough (or `--gpu`), else classed by its kernel names.",
    requires=("devices", "kernels", "memops"),
    creates=(
        Relation("gpu_specs", "file in hardware/", {
            "spec_id": "the file's id", "name": "marketing name", "vendor": "nvidia or amd",
            "architecture": "ampere, hopper, cdna3, ...", "hbm_bytes_per_s": "peak HBM bandwidth, bytes/s",
            "memory_bytes": "device memory", "sm_count": "SMs or CUs",
            "l2_bytes": "L2 size; NULL where hardware/ has no sourced number",
            "l2_bytes_per_s": "peak L2 bandwidth; NULL where hardware/ has no sourced number",
            "host_link": "link to host memory: `PCIe 5.0 x16`, `NVLink-C2C`; NULL where hardware/ has no sourced link",
            "host_link_bytes_per_s": "its peak per direction, bytes/s: PCIe raw signalling after line encoding "
                                     "(gen3 x16 15.75e9, gen4 x16 31.51e9, gen5 x16 63.02e9), no packet overhead "
                                     "taken off; NULL when the link is not known",
            "gpu_link": "GPU-to-GPU link: `NVLink 4 x18`, `NVLink bridge 3 x4`, `Infinity Fabric x7`, `none` (peers "
                        "over PCIe); NULL where hardware/ has no sourced link",
            "gpu_link_bytes_per_s": "what one GPU can drive to one peer per direction, bytes/s (half the vendor's "
                                    "bidirectional figure); NULL when not known or `none`"}),
        Relation("gpu_peaks", "(spec, dtype) with a published dense peak", {
            "spec_id": "`gpu_specs.spec_id`", "dtype": "fp64 ... fp4", "peak_flops": "dense peak, FLOP/s"}),
        Relation("architecture_specs", "(inferred class, spec it can be)", {
            "architecture": "an inferred class (`sm80+`, `cdna3+`, ...)",
            "spec_id": "a hardware/ spec of that class; rules that need a number without a spec take the least "
                       "favourable one (TV301: the smallest FP32 → TF32/BF16/FP16 speed-up)"}),
    ),
    adds=(Columns("devices", {column: meaning for column, (_, meaning) in DEVICE_COLUMNS.items()}),),
    run=lambda con, context: setattr(context, "gpu", match_devices(con, context.options.gpu)),
    rewrites=("devices",),
)
