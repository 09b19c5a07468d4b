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

from traceview.analysis import sql_module
from traceview.analysis.hardware import VENDORS, HardwareSpec, get_spec, load_specs, match_gpu
from traceview.compat import tomllib
from traceview.errors import TraceviewError
from traceview.model import db


ARCHITECTURES_FILE = Path(__file__).with_name("architectures.toml")
EXAMPLE_CHARS = 80  # kernel names in diagnostics are cut to this length
MODULE = sql_module.load("devices")


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


def _columns(relation: str, rows: list[tuple]) -> dict[str, list]:
    """Rows in the order of a relation's declared columns, as the one list a column its statement takes."""
    names = next(r.columns for r in MODULE.creates if r.name == relation)
    lists = [list(column) for column in zip(*rows)] if rows else [[] for _ in names]
    return dict(zip(names, lists))


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
        MODULE.run(con, "override")
    matches = {}
    for rank, device, maps_to, name, major, minor, sms, memory in MODULE.query(con, "properties"):
        spec = override or match_gpu(name, major, minor, sms, memory, specs=specs)
        if spec:
            source = ("override" if override else "device_map" if maps_to is not None
                      else "name" if spec.matched_by_name(name) else "properties")
            matches[(rank, device)] = (spec, source)
    attach_gpu_specs(con, matches, specs)
    _infer_from_kernel_names(con)
    for rank, device, name in MODULE.query(con, "unknown"):
        if name:
            message = f"GPU {device} '{name}' matches no file in hardware/: pass --gpu NAME for roofline numbers"
        else:
            message = f"GPU {device} has no device name in the trace: pass --gpu NAME for roofline numbers"
        db.add_diagnostic(con, rank, "analysis", "warning", "gpu_unknown", message)
    busiest = MODULE.query(con, "busiest")
    MODULE.run(con, "publish")
    return next((s for s in specs if busiest and s.id == busiest[0][0]), override)


def _start_devices(con: duckdb.DuckDBPyConnection) -> None:
    """`_devices`: the trace's own device rows with the analysis columns empty, to be filled and published.

    Rows an earlier analysis added (`listed` false) are left out, so analysing again starts from the trace.
    """
    # schema.sql's columns of `devices`: a list of names devices.sql cannot spell; the condition is one of two
    # fixed texts, as `listed` exists only after an analysis
    own_rows_sql = " WHERE listed" if db.has_column(con, "devices", "listed") else ""
    con.execute(f"CREATE OR REPLACE TEMP VIEW _trace_devices AS "
                f"SELECT {db.idents(db.contract_columns('devices'))} FROM devices{own_rows_sql}")
    MODULE.run(con, "start")


def attach_gpu_specs(con: duckdb.DuckDBPyConnection, matches: dict[tuple[int, int], tuple[HardwareSpec, str]],
                     all_specs: list[HardwareSpec]) -> None:
    """Record each device's spec, where it came from, its architecture and tensor cores; write the spec tables."""
    rows = [(rank, device, spec.id, source, spec.architecture, spec.tensor_cores)
            for (rank, device), (spec, source) in matches.items()]
    matched = {"rank": "INTEGER", "device_id": "INTEGER", "spec_id": "VARCHAR", "spec_source": "VARCHAR",
               "architecture": "VARCHAR", "tensor_cores": "BOOLEAN"}
    with db.values_table(con, "_matches", matched, rows):
        MODULE.run(con, "matches")
    peaks = [(s.id, dtype, tflops * 1e12) for s in all_specs for dtype, tflops in s.peak_tflops.items()]
    MODULE.run(con, "gpu_peaks", **_columns("gpu_peaks", peaks))
    spec_rows = [(s.id, s.name, s.vendor, s.architecture, s.hbm_tbps * 1e12, s.memory_bytes, s.sm_count, s.l2_bytes,
                  s.l2_bytes_per_s, s.host_link and s.host_link.label, s.host_link and s.host_link.bytes_per_s,
                  s.gpu_link and s.gpu_link.label, s.gpu_link and s.gpu_link.bytes_per_s, s.gpu_link and s.gpu_link.kind,
                  s.gpu_link and s.gpu_link.links) for s in all_specs]
    MODULE.run(con, "gpu_specs", **_columns("gpu_specs", spec_rows))
    classes = load_architectures()[0]
    covers = [(c.id, s.id) for c in classes for s in all_specs if s.architecture in c.covers]
    MODULE.run(con, "architecture_specs", **_columns("architecture_specs", covers))


# ----------------------------------------------------------------------------- device-id mapping


def _map_unlisted_ids(con: duckdb.DuckDBPyConnection, specs: list[HardwareSpec]) -> None:
    """Give each used device id the device list lacks a row copying the listed device it stands for."""
    mapping = []
    for rank, unlisted, used_listed in MODULE.query(con, "unlisted"):
        listed = MODULE.query(con, "listed", rank=rank)
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
        MODULE.run(con, "map")


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
        inferred = MODULE.query(con, "infer")
    for rank, device, pick in inferred:
        if not MODULE.query(con, "has_row", rank=rank, device_id=device)[0][0]:
            MODULE.run(con, "add_row", rank=rank, device_id=device)
        MODULE.run(con, "inferred", architecture=pick["a"], tensor_cores=pick["t"], rank=rank, device_id=device)
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


STAGE = MODULE.stage(run=lambda con, context: setattr(context, "gpu", match_devices(con, context.options.gpu)))
