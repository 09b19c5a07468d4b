"""How traceview's cost grows with trace size and with rank count (a script, not a test).

Part 1, size: `traceview report --format html,json` (and `traceview audit`) on the same trace at
several sizes, each in a fresh process: wall time, peak RSS, seconds per 100 MB and per million
events, and a least-squares fit of fixed + marginal cost.
  * Kineto: the real vLLM H100 trace replicated 1x, 2x, 5x, 10x in time (bench/compare.py's inputs,
    built by bench/ingest.py's build_kineto; cached in --workdir as kineto_vllm_x{N}.pt.trace.json.gz).
  * nsys: generated exports with 0.2 M, 0.5 M, 1 M, 2 M kernels (bench/ingest.py's builder with a
    kernel count; bench/nsys_compare.py's build_nsys caches them).

Part 2, ranks: one synthetic 64-rank data-parallel training job (BF16 transformer on H100s, DDP
bucketed all-reduce on a separate NCCL stream, one straggler rank), one Kineto file per rank with its
own `distributedInfo.rank`, written by traceview.testing.generator.write_kineto and cached in
--workdir/ranks-64/. The first 8, 16, 32, 64 ranks are measured as
  * one job: a directory of rank_NN files (traceview ingests it as one database) with
    `traceview audit DIR --jobs J` and `traceview report DIR --format html,json`;
  * separate traces: a directory of the same files under names without a rank, so
    `traceview audit DIR --jobs J` audits each file on its own, J at a time.

    .venv/bin/python bench/scaling.py --output /tmp/traceview-bench/scaling.md
    .venv/bin/python bench/scaling.py --quick            # small sizes: check the harness end to end
    .venv/bin/python bench/scaling.py --only ranks --ranks 8,64

Peak RSS is `ru_maxrss` from os.wait4 on the traceview process; on Linux that also covers its reaped
children (the --jobs worker processes) as a max, not a sum. Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import compare
import ingest
import nsys_compare

REPO = BENCH.parent
TRACEVIEW = Path(sys.executable).parent / "traceview"

RANKS_VERSION = 1  # bump when the generated rank files change shape

# --------------------------------------------------------------------------------------------
# The multi-rank job
# --------------------------------------------------------------------------------------------

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
GEMM_NT = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
FLASH_FWD = ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
             "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, true, false, false, "
             "false, true, true, false, false>(pytorch_flash::Flash_fwd_params)")
FLASH_BWD = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, "
             "2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, "
             "true, false, false, false, false, true, false, false>(pytorch_flash::Flash_bwd_params)")
LAYER_NORM = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
              "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)")
LAYER_NORM_BWD = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::BFloat16, float>("
                  "c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, "
                  "c10::BFloat16*, int)")
GELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)")
GELU_BWD = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, "
            "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
            "{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul> >(int, at::native::GeluBackwardCUDAKernelImpl("
            "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() "
            "const::{lambda(c10::BFloat16, c10::BFloat16)#1}, std::array<char*, 3ul>)")
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
       "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
        "(at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, bool, float*, float*>("
        "at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
        "FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, "
        "double, bool, float*, float*)")

# (cpu op, kernel, base duration ns, grid, block): one decoder layer, forward then backward
FORWARD = [
    ("aten::native_layer_norm", LAYER_NORM, 24_000, (8192, 1, 1), (256, 1, 1)),
    ("aten::mm", GEMM, 180_000, (132, 1, 1), (384, 1, 1)),
    ("aten::_flash_attention_forward", FLASH_FWD, 230_000, (32, 32, 8), (128, 1, 1)),
    ("aten::mm", GEMM, 62_000, (132, 1, 1), (384, 1, 1)),
    ("aten::add", ADD, 21_000, (4096, 1, 1), (128, 1, 1)),
    ("aten::native_layer_norm", LAYER_NORM, 24_000, (8192, 1, 1), (256, 1, 1)),
    ("aten::mm", GEMM, 240_000, (132, 1, 1), (384, 1, 1)),
    ("aten::gelu", GELU, 52_000, (16384, 1, 1), (128, 1, 1)),
    ("aten::mm", GEMM, 240_000, (132, 1, 1), (384, 1, 1)),
    ("aten::add", ADD, 21_000, (4096, 1, 1), (128, 1, 1)),
]
BACKWARD = [
    ("aten::mm", GEMM_NT, 240_000, (132, 1, 1), (256, 1, 1)),
    ("aten::mm", GEMM, 240_000, (132, 1, 1), (384, 1, 1)),
    ("aten::gelu_backward", GELU_BWD, 78_000, (16384, 1, 1), (128, 1, 1)),
    ("aten::mm", GEMM_NT, 240_000, (132, 1, 1), (256, 1, 1)),
    ("aten::mm", GEMM, 240_000, (132, 1, 1), (384, 1, 1)),
    ("aten::native_layer_norm_backward", LAYER_NORM_BWD, 41_000, (8192, 1, 1), (256, 1, 1)),
    ("aten::add", ADD, 21_000, (4096, 1, 1), (128, 1, 1)),
    ("aten::mm", GEMM_NT, 62_000, (132, 1, 1), (256, 1, 1)),
    ("aten::mm", GEMM, 62_000, (132, 1, 1), (384, 1, 1)),
    ("aten::_flash_attention_backward", FLASH_BWD, 560_000, (32, 32, 8), (256, 1, 1)),
    ("aten::mm", GEMM_NT, 180_000, (132, 1, 1), (256, 1, 1)),
    ("aten::mm", GEMM, 180_000, (132, 1, 1), (384, 1, 1)),
    ("aten::native_layer_norm_backward", LAYER_NORM_BWD, 41_000, (8192, 1, 1), (256, 1, 1)),
    ("aten::add", ADD, 21_000, (4096, 1, 1), (128, 1, 1)),
]
LAYERS = 24
LAYERS_PER_BUCKET = 3  # DDP gradient bucket = 3 layers' grads: 8 all-reduces per step
ALLREDUCE_NS = 1_150_000  # ring all-reduce of one bucket once every rank is ready
ADAM_KERNELS = 8
ADAM_NS = 95_000
GAP_NS = 2_000  # GPU gap between back-to-back kernels
HOST_PER_OP_NS = 11_000  # host time per op (dispatch + launch)
STEP_GAP_NS = 600_000  # dataloader + loss.item() between steps
STRAGGLER_SLOWDOWN = 0.12
STRAGGLER_RANK = 5


def rank_speed(rank: int, step: int, world: int) -> float:
    """Compute-time factor of `rank` in `step`: +-2 % jitter, and rank 5 (in every subset measured) 12 % slower."""
    jitter = random.Random(f"speed-{rank}-{step}-{world}").uniform(-0.02, 0.02)
    return 1.0 + jitter + (STRAGGLER_SLOWDOWN if rank == STRAGGLER_RANK else 0.0)


def job_spec(rank: int, world: int, steps: int):
    """One rank of a synchronous data-parallel job: each bucket's all-reduce ends at the same time on
    every rank (when the slowest rank got there, plus the transfer), so fast ranks wait in NCCL."""
    from dataclasses import replace

    from traceview.testing import H100_SXM, ApiCall, Kernel, Memop, Range, TraceSpec

    pid = 31_000 + rank
    tid, bwd_tid = pid, pid + 7  # main thread; autograd engine thread
    device = rank % 8
    compute, comm = 7, 20
    kernels, memops, ranges, calls = [], [], [], []
    gpu_start = 5_000_000
    order = [("forward", layer, op) for layer in range(LAYERS) for op in FORWARD]
    order += [("backward", layer, op) for layer in reversed(range(LAYERS)) for op in BACKWARD]
    # GPU offsets (at speed 1.0) of each compute kernel, and of the end of each bucket's backward
    offsets, t = [], 40_000  # the input copy comes first
    bucket_ready: list[int] = []
    for i, (phase, layer, op) in enumerate(order):
        offsets.append(t)
        t += op[2] + GAP_NS
        last_of_layer = phase == "backward" and (i + 1 == len(order) or order[i + 1][1] != layer)
        if last_of_layer and layer % LAYERS_PER_BUCKET == 0:
            bucket_ready.append(t)
    compute_total = t
    for step in range(steps):
        speeds = [rank_speed(r, step, world) for r in range(world)]
        f, fmax = speeds[rank], max(speeds)
        host = gpu_start - 1_500_000
        step_start_host = host
        ranges.append(Range(f"ProfilerStep#{step}", step_start_host, 0, pid=pid, tid=tid, kind="user_annotation"))
        step_index = len(ranges) - 1
        # input batch copy
        memops.append(Memop("memcpy", gpu_start, 38_000, 16 << 20, "HtoD", "Pinned", "Device", pid=pid, tid=tid,
                            device_id=device, stream_id=compute, launch_start_ns=host + 4_000, launch_dur_ns=9_000))
        ranges.append(Range("aten::copy_", host, host + 16_000, pid=pid, tid=tid, kind="cpu_op"))
        host += 20_000
        fwd_start = host
        bucket = 0
        comm_end = 0
        bwd_host_start = None
        for i, (phase, layer, (cpu_name, kname, base, grid, block)) in enumerate(order):
            if phase == "backward" and bwd_host_start is None:
                ranges.append(Range("## forward ##", fwd_start, host, pid=pid, tid=tid, kind="user_annotation"))
                bwd_host_start = host
            thread = tid if phase == "forward" else bwd_tid
            start = gpu_start + round(offsets[i] * f)
            dur = round(base * f)
            kernels.append(Kernel(kname, start, dur, pid=pid, tid=thread, device_id=device, stream_id=compute,
                                  grid=grid, block=block, registers_per_thread=128 if "gemm" in kname else 40,
                                  launch_start_ns=host + 3_000, launch_dur_ns=5_000))
            ranges.append(Range(cpu_name, host, host + 9_000, pid=pid, tid=thread, kind="cpu_op"))
            host += HOST_PER_OP_NS
            if phase == "backward" and bucket < len(bucket_ready) and offsets[i] + base + GAP_NS == bucket_ready[bucket]:
                ready_here = gpu_start + round(bucket_ready[bucket] * f)
                ready_all = gpu_start + round(bucket_ready[bucket] * fmax)
                end = max(ready_all, comm_end) + ALLREDUCE_NS
                begin = max(ready_here, comm_end)
                kernels.append(Kernel(ALLREDUCE, begin, end - begin, pid=pid, tid=bwd_tid, device_id=device,
                                      stream_id=comm, grid=(24, 1, 1), block=(640, 1, 1), registers_per_thread=96,
                                      shared_memory_bytes=41_760, launch_start_ns=host + 5_000, launch_dur_ns=7_000))
                ranges.append(Range("c10d::allreduce_", host, host + 16_000, pid=pid, tid=bwd_tid, kind="cpu_op"))
                ranges.append(Range("nccl:all_reduce", host + 1_000, host + 15_000, pid=pid, tid=bwd_tid,
                                    kind="user_annotation"))
                host += 18_000
                comm_end = end
                bucket += 1
        ranges.append(Range("## backward ##", bwd_host_start, host, pid=pid, tid=bwd_tid, kind="user_annotation"))
        # optimizer: waits for the last all-reduce (stream wait event), then fused Adam
        calls.append(ApiCall("cudaStreamWaitEvent", host, 3_000, pid=pid, tid=tid))
        host += 5_000
        opt_host = host
        t = max(comm_end, gpu_start + round(compute_total * f)) + GAP_NS
        for _ in range(ADAM_KERNELS):
            dur = round(ADAM_NS * f)
            kernels.append(Kernel(ADAM, t, dur, pid=pid, tid=tid, device_id=device, stream_id=compute,
                                  grid=(320, 1, 1), block=(512, 1, 1), registers_per_thread=64,
                                  launch_start_ns=host + 3_000, launch_dur_ns=5_000))
            ranges.append(Range("aten::_fused_adam_", host, host + 9_000, pid=pid, tid=tid, kind="cpu_op"))
            host += HOST_PER_OP_NS
            t += dur + GAP_NS
        ranges.append(Range("Optimizer.step#AdamW.step", opt_host, host, pid=pid, tid=tid, kind="user_annotation"))
        # loss.item(): the host waits for the GPU
        opt_end_all = max(comm_end, gpu_start + round(compute_total * fmax)) + GAP_NS + ADAM_KERNELS * round(
            ADAM_NS * fmax + GAP_NS)
        sync_end = max(t, host + 5_000) + 20_000
        calls.append(ApiCall("cudaStreamSynchronize", host, sync_end - host, pid=pid, tid=tid))
        host = sync_end
        r = ranges[step_index]
        ranges[step_index] = replace(r, end_ns=host + 10_000)
        gpu_start = max(opt_end_all, host) + 100_000 + STEP_GAP_NS + 1_500_000  # same on every rank
    gpu = replace(H100_SXM, device_id=device)
    return TraceSpec(gpus=(gpu,), kernels=tuple(kernels), memops=tuple(memops), api_calls=tuple(calls),
                     ranges=tuple(ranges), rank=rank, world_size=world,
                     process_names={pid: "python3"}, thread_names={(pid, tid): "python3", (pid, bwd_tid): "pt_autograd_0"},
                     hostname=f"h100-node-{rank // 8:02d}")


RANKS_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import scaling
print(json.dumps(scaling.build_rank_files(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))))
"""


def build_rank_files(directory: Path, world: int, steps: int, count: int) -> dict:
    """Write rank_00..rank_{count-1} of the `world`-rank job (cached: only missing files are written)."""
    import gzip as _gzip
    import time

    from traceview.testing import write_kineto

    manifest = directory / "manifest.json"
    info = json.loads(manifest.read_text()) if manifest.exists() else {}
    if info.get("version") != RANKS_VERSION or info.get("world") != world or info.get("steps") != steps:
        shutil.rmtree(directory, ignore_errors=True)
        info = {"version": RANKS_VERSION, "world": world, "steps": steps, "files": {}}
    directory.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for rank in range(count):
        name = f"rank_{rank:02d}.pt.trace.json.gz"
        if name in info["files"] and (directory / name).exists():
            continue
        spec = job_spec(rank, world, steps)
        tmp = directory / (name + ".tmp.gz")
        write_kineto(spec, tmp)
        with _gzip.open(tmp, "rb") as f:
            raw = f.read()
        tmp.replace(directory / name)
        info["files"][name] = {"rank": rank, "kernels": len(spec.kernels), "bytes": (directory / name).stat().st_size,
                               "json_bytes": len(raw), "events": raw.count(b'"ph": ')}
        manifest.write_text(json.dumps(info, indent=1))
    info["build_seconds"] = round(time.perf_counter() - started, 1)
    return info


def rank_dirs(workdir: Path, world: int, steps: int, counts: list[int]) -> tuple[dict, dict[int, tuple[Path, Path]]]:
    """Build (in a child) the rank files, then per count a job dir (rank_NN links) and a separate-traces
    dir (trace-NN links: no rank in the name, so audit treats each as its own trace)."""
    source = workdir / (f"ranks-{world}" if steps == 5 else f"ranks-{world}-s{steps}")
    out = subprocess.run([sys.executable, "-c", RANKS_CHILD, str(BENCH), str(source), str(world), str(steps),
                          str(max(counts))], stdout=subprocess.PIPE, check=True, text=True).stdout
    info = json.loads(out.strip().splitlines()[-1])
    dirs = {}
    for n in counts:
        job, sep = source.parent / f"{source.name}-job-{n}", source.parent / f"{source.name}-sep-{n}"
        for d, fmt in ((job, "rank_{:02d}.pt.trace.json.gz"), (sep, "trace-{:02d}.pt.trace.json.gz")):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)
            for r in range(n):
                (d / fmt.format(r)).symlink_to(source / f"rank_{r:02d}.pt.trace.json.gz")
        dirs[n] = (job, sep)
    return info, dirs


# --------------------------------------------------------------------------------------------
# Measurement and fits
# --------------------------------------------------------------------------------------------


def measure(case: str, argv: list[str], timeout: float, ok: tuple[int, ...] = (0,)) -> dict:
    nsys_compare.log(f"{case} ...")
    r = nsys_compare.run(argv, timeout, ok=ok)
    status = "ok" if r["ok"] else f"FAILED rc={r['rc']}: {(r.get('error') or '')[-1500:]}"
    print(f"[scaling] {case}: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU, {r['rss_mb']:,.0f} MB peak RSS, {status}",
          file=sys.stderr, flush=True)
    return {"case": case, "argv": argv, **r}


def fit(xs: list[float], ys: list[float]) -> dict | None:
    """Least squares y = a + b x; R^2 and the largest residual relative to y."""
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    residuals = [y - (a + b * x) for x, y in zip(xs, ys)]
    r2 = 1 - sum(e * e for e in residuals) / ss_tot if ss_tot else 1.0
    worst = max(abs(e) / y for e, y in zip(residuals, ys)) if all(ys) else None
    return {"fixed": a, "marginal": b, "r2": r2, "max_residual": worst}


def audit_status(path: Path) -> str:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        return f"no audit JSON ({type(exc).__name__})"
    bad = [r for r in doc["rows"] if r.get("status") != "ok"]
    if bad:
        return f"{len(bad)}/{len(doc['rows'])} rows failed: {bad[0].get('error', '')[:200]}"
    return f"{len(doc['rows'])} row(s) ok"


def size_part(args, out: Path) -> list[dict]:
    rows = []
    commands = args.commands
    inputs = []
    if "kineto" in args.formats:
        for n, (path, info) in compare.build_inputs(args.workdir, args.copies).items():
            inputs.append({"format": "kineto", "label": f"vLLM x{n}", "path": path, "events": info["events"],
                           "mb": info["uncompressed_bytes"] / 1e6, "mb_label": "JSON",
                           "file_mb": info["bytes"] / 1e6})
    if "nsys" in args.formats:
        for k in args.nsys_kernels:
            path, info = nsys_compare.build_nsys(args.workdir, k)
            inputs.append({"format": "nsys", "label": f"{k / 1e6:g} M kernels", "path": path, "events": info["rows"],
                           "mb": info["bytes"] / 1e6, "mb_label": "SQLite", "file_mb": info["bytes"] / 1e6})
    for inp in inputs:
        tag = f"{inp['format']}-{inp['events']}"
        for command in commands:
            if command == "report":
                argv = [str(TRACEVIEW), "report", str(inp["path"]), "--format", "html,json", "-o",
                        str(out / f"report-{tag}.html")]
                ok: tuple[int, ...] = (0,)
            else:
                argv = [str(TRACEVIEW), "audit", str(inp["path"]), "--json", str(out / f"audit-{tag}.json")]
                ok = (0, 1)
            r = measure(f"{command} {inp['format']} {inp['label']}", argv, args.timeout, ok)
            if command == "audit" and r["ok"]:
                r["note"] = audit_status(out / f"audit-{tag}.json")
            rows.append({**{k: v for k, v in inp.items() if k != "path"}, "path": str(inp["path"]),
                         "command": command, **r})
    return rows


def rank_part(args, out: Path) -> tuple[dict, list[dict]]:
    info, dirs = rank_dirs(args.workdir, args.world, args.rank_steps, args.ranks)
    files = info["files"]
    rows = []
    for n in args.ranks:
        job, sep = dirs[n]
        names = [f"rank_{r:02d}.pt.trace.json.gz" for r in range(n)]
        meta = {"ranks": n, "kernels": sum(files[x]["kernels"] for x in names),
                "events": sum(files[x]["events"] for x in names),
                "mb": sum(files[x]["json_bytes"] for x in names) / 1e6,
                "file_mb": sum(files[x]["bytes"] for x in names) / 1e6}
        cases = [
            ("audit, one job", [str(TRACEVIEW), "audit", str(job), "--jobs", str(args.jobs), "--json",
                                str(out / f"audit-job-{n}.json")], (0, 1), out / f"audit-job-{n}.json"),
            (f"audit, {n} separate traces", [str(TRACEVIEW), "audit", str(sep), "--jobs", str(args.jobs), "--json",
                                             str(out / f"audit-sep-{n}.json")], (0, 1), out / f"audit-sep-{n}.json"),
            ("report, one job", [str(TRACEVIEW), "report", str(job), "--format", "html,json", "-o",
                                 str(out / f"report-job-{n}.html")], (0,), None),
        ]
        for name, argv, ok, audit_json in cases:
            if args.rank_cases and not any(name.startswith(c) for c in args.rank_cases):
                continue
            r = measure(f"{name} ({n} ranks)", argv, args.timeout, ok)
            if audit_json is not None and r["ok"]:
                r["note"] = audit_status(audit_json)
            rows.append({**meta, "kind": name.replace(f"{n} ", ""), **r})
    return info, rows


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def fmt_fit(f: dict | None, unit: str, scale: float = 1.0) -> str:
    if not f:
        return "n/a"
    worst = f" (max residual {f['max_residual']:.0%})" if f.get("max_residual") is not None else ""
    return f"{f['fixed']:.2f} + {f['marginal'] * scale:.3g} {unit}; R² {f['r2']:.3f}{worst}"


def markdown(size_rows: list[dict], rank_info: dict | None, rank_rows: list[dict], env: dict, args) -> str:
    lines = [
        (f"Machine: {env['cores']} cores ({env['cpu']}), {env['mem_gib']:.1f} GiB RAM, {env['os']}; "
        f"traceview {env['traceview']} ({env['git']}), Python {env['python']}, duckdb {env['duckdb']}, "
        f"polars {env['polars']}, "
        f"pyarrow {env['pyarrow']}."),
        "",
        (f"Load average (1 min) when the run started: {env.get('load_start', float('nan')):.2f}, when it ended: "
        f"{env.get('load_end', float('nan')):.2f} (other work shares this machine)."),
        "",
        ("Each row is one fresh `traceview` process, run once. Wall = the whole process; peak RSS = `ru_maxrss` "
        "from `os.wait4` (with worker processes: the largest single process, not a sum); CPU = user + system "
        "seconds of the process and its reaped children (less sensitive than wall to other work on the machine)."),
    ]
    if size_rows:
        lines += ["", "### Size: fixed + marginal cost", "",
                  ("Events = Kineto `traceEvents` entries; for nsys, kernel + runtime + NVTX rows. MB = uncompressed "
                  "JSON (Kineto; the `.json.gz` file itself is much smaller) or the SQLite file (nsys). \"Step slope\" = "
                  "extra seconds per million extra events from the previous size (constant when growth is linear)."),
                  "",
                  ("| command | format | input | events | MB | wall s | CPU s | peak RSS MB | s / 100 MB | s / M events | "
                  "step slope s / M | CPU s / M events | RSS MB / M events |"),
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for command in args.commands:
            for fmt in ("kineto", "nsys"):
                group = [r for r in size_rows if r["command"] == command and r["format"] == fmt]
                prev = None
                for r in group:
                    if not r["ok"]:
                        lines.append(f"| {command} | {fmt} | {r['label']} | {r['events']:,} | {r['mb']:,.0f} | failed "
                                     f"({r['wall_s']:.1f} s) | {r['cpu_s']:.1f} | {r['rss_mb']:,.0f} | | | | | `{nsys_compare.short(r.get('error', ''), 150)}` |")
                        continue
                    m = r["events"] / 1e6
                    slope = (f"{(r['wall_s'] - prev['wall_s']) / ((r['events'] - prev['events']) / 1e6):.2f}"
                             if prev else "")
                    lines.append(f"| {command} | {fmt} | {r['label']} | {r['events']:,} | {r['mb']:,.0f} | "
                                 f"{r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['rss_mb']:,.0f} | {100 * r['wall_s'] / r['mb']:.2f} | "
                                 f"{r['wall_s'] / m:.2f} | {slope} | {r['cpu_s'] / m:.2f} | {r['rss_mb'] / m:,.0f} |")
                    prev = r
        lines += ["", ("Least-squares fits over the sizes above (seconds = fixed + marginal × million events, for "
                  "wall and for CPU; peak RSS MB = fixed + marginal × million events):"), "",
                  ("| command | format | sizes | wall: fixed s + marginal | CPU: fixed s + marginal | "
                   "CPU marginal per 100 MB | peak RSS: fixed MB + marginal |"),
                  "|---|---|---:|---|---|---:|---|"]
        for command in args.commands:
            for fmt in ("kineto", "nsys"):
                group = [r for r in size_rows if r["command"] == command and r["format"] == fmt and r["ok"]]
                if len(group) < 2:
                    continue
                events = [r["events"] / 1e6 for r in group]
                wall = fit(events, [r["wall_s"] for r in group])
                cpu = fit(events, [r["cpu_s"] for r in group])
                rss = fit(events, [r["rss_mb"] for r in group])
                per_mb = fit([r["mb"] / 100 for r in group], [r["cpu_s"] for r in group])
                lines.append(f"| {command} | {fmt} | {len(group)} | {fmt_fit(wall, 's / M events')} | "
                             f"{fmt_fit(cpu, 's / M events')} | {per_mb['marginal']:.2f} s | "
                             f"{fmt_fit(rss, 'MB / M events')} |")
    if rank_rows:
        sample = next(iter(rank_info["files"].values()))
        lines += ["", "### Ranks", "",
                  (f"Synthetic {rank_info['world']}-rank data-parallel training job (bench/scaling.py `job_spec`): "
                  f"per rank {rank_info['steps']} steps, about {sample['kernels']:,} kernels "
                  f"({LAYERS} layers fwd+bwd, {LAYERS // LAYERS_PER_BUCKET} NCCL all-reduces per step on their own "
                  f"stream, fused Adam), {sample['events']:,} events, {sample['json_bytes'] / 1e6:.1f} MB JSON / "
                  f"{sample['bytes'] / 1e6:.2f} MB gzip; each file carries its own `distributedInfo.rank`. "
                  f"`--jobs {args.jobs}` for audit. One job = a directory of `rank_NN` files (one database); "
                  f"separate traces = the same files under names without a rank."),
                  "",
                  ("| case | ranks | kernels | events | MB (JSON) | wall s | CPU s | peak RSS MB | wall s / rank | "
                   "CPU s / rank | result |"),
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        kinds = []
        for r in rank_rows:
            if r["kind"] not in kinds:
                kinds.append(r["kind"])
        for kind in kinds:
            for r in (x for x in rank_rows if x["kind"] == kind):
                if not r["ok"]:
                    lines.append(f"| {kind} | {r['ranks']} | {r['kernels']:,} | {r['events']:,} | {r['mb']:,.0f} | failed "
                                 f"({r['wall_s']:.1f} s) | {r['cpu_s']:.1f} | {r['rss_mb']:,.0f} | | | `{nsys_compare.short(r.get('error', ''), 200)}` |")
                    continue
                lines.append(f"| {kind} | {r['ranks']} | {r['kernels']:,} | {r['events']:,} | {r['mb']:,.0f} | "
                             f"{r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['rss_mb']:,.0f} | {r['wall_s'] / r['ranks']:.3f} | "
                             f"{r['cpu_s'] / r['ranks']:.3f} | {r.get('note', '')} |")
        lines += ["", "Least-squares fits over rank counts (seconds or MB = fixed + marginal × ranks):", "",
                  "| case | points | wall: fixed s + marginal | CPU: fixed s + marginal | peak RSS: fixed MB + marginal |",
                  "|---|---:|---|---|---|"]
        for kind in kinds:
            group = [r for r in rank_rows if r["kind"] == kind and r["ok"]]
            if len(group) >= 2:
                ranks = [r["ranks"] for r in group]
                lines.append(f"| {kind} | {len(group)} | {fmt_fit(fit(ranks, [r['wall_s'] for r in group]), 's / rank')} | "
                             f"{fmt_fit(fit(ranks, [r['cpu_s'] for r in group]), 's / rank')} | "
                             f"{fmt_fit(fit(ranks, [r['rss_mb'] for r in group]), 'MB / rank')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/traceview-bench"))
    p.add_argument("--only", choices=["size", "ranks"], help="run one part only")
    p.add_argument("--quick", action="store_true",
                   help="small sizes (Kineto x1,x2; nsys 20k, 50k kernels; ranks 2,4 of 1-step files)")
    p.add_argument("--copies", default="1,2,5,10", help="Kineto replication factors")
    p.add_argument("--nsys-kernels", default="200000,500000,1000000,2000000", help="nsys export sizes (kernels)")
    p.add_argument("--formats", default="kineto,nsys", help="size part: kineto, nsys or both")
    p.add_argument("--commands", default="report,audit", help="size part: report, audit or both")
    p.add_argument("--ranks", default="8,16,32,64", help="rank counts (first N ranks of the job)")
    p.add_argument("--world", type=int, default=64, help="ranks in the generated job")
    p.add_argument("--rank-steps", type=int, default=5, help="training steps per rank file")
    p.add_argument("--rank-cases", action="append", help="only rank cases starting with this (repeatable): "
                   "'audit, one job', 'audit, ', 'report'")
    p.add_argument("--jobs", type=int, default=2, help="audit --jobs")
    p.add_argument("--timeout", type=float, default=1800, help="per child, seconds")
    p.add_argument("--output", type=Path, help="also write the Markdown and raw JSON (FILE with .json suffix)")
    p.add_argument("--from-json", type=Path, help="measure nothing: print the Markdown of an earlier run's raw JSON")
    args = p.parse_args(argv)
    if args.from_json:
        raw = json.loads(args.from_json.read_text())
        for key, value in raw.get("args", {}).items():
            setattr(args, key, value)
        if isinstance(args.commands, str):
            args.commands = args.commands.split(",")
        print(markdown(raw["size"], raw["ranks"]["info"], raw["ranks"]["rows"], raw["env"], args))
        return 0
    if args.quick:
        args.copies, args.nsys_kernels, args.ranks, args.rank_steps = "1,2", "20000,50000", "2,4", 1
    args.copies = [int(x) for x in args.copies.split(",")]
    args.nsys_kernels = [int(x) for x in args.nsys_kernels.split(",")]
    args.ranks = [int(x) for x in args.ranks.split(",")]
    args.formats = args.formats.split(",")
    args.commands = args.commands.split(",")
    if max(args.ranks) > args.world:
        p.error("--ranks must not exceed --world")
    load_start, git_start = os.getloadavg()[0], nsys_compare.git_state()
    out = args.workdir / "scaling-out"
    out.mkdir(parents=True, exist_ok=True)

    size_rows = size_part(args, out) if args.only in (None, "size") else []
    rank_info, rank_rows = rank_part(args, out) if args.only in (None, "ranks") else (None, [])
    env = ingest.environment()
    git_end = nsys_compare.git_state()
    env["git"] = git_start if git_start == git_end else f"{git_start} at the start; {git_end} at the end"
    env["load_start"], env["load_end"] = load_start, os.getloadavg()[0]
    env["traceview"] = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('traceview'))"],
        check=False, capture_output=True, text=True).stdout.strip()
    text = markdown(size_rows, rank_info, rank_rows, env, args)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        args.output.with_suffix(".json").write_text(json.dumps(
            {"env": env, "args": {"commands": args.commands, "jobs": args.jobs},
             "size": size_rows, "ranks": {"info": rank_info, "rows": rank_rows}}, indent=1, default=str))
        print(f"[scaling] wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
