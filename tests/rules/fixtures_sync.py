"""Generated traces for the host-sync, memcpy, step-jitter and hotspot rules (TV204-TV207, TV305).

Each function returns a TraceSpec whose timings are set by hand, so the case files can assert exact
numbers; the comments give the arithmetic. Steps are vLLM-style `execute_context_..._generation_...`
annotations (the analysis takes their windows and phases from the names). All times are ns.
"""

from __future__ import annotations

from traceview.testing import H100_SXM, ApiCall, Kernel, Memop, Range, TraceSpec

PID = 4242
US = 1_000
MS = 1_000_000
START = 2 * MS  # first step start
GAP = 200 * US  # host time between steps

GEMM = "nvjet_tst_128x64_64x8_1x1_v_bz_coopB_TNN"
SILU = ("void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>("
        "c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)")
RMS = ("void vllm::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, "
       "float, int, int)")
STEP_NAMES = {
    "decode": "execute_context_0(0)_generation_8(8)",
    "mixed": "execute_context_1(512)_generation_7(7)",
    "prefill": "execute_context_2(1024)_generation_0(0)",
}


def _kernel(name: str, start: int, dur: int, launch_at: int) -> Kernel:
    return Kernel(name, start, dur, pid=PID, tid=PID, launch_start_ns=launch_at, launch_dur_ns=4 * US)


def _spec(kernels=(), memops=(), api_calls=(), ranges=()) -> TraceSpec:
    return TraceSpec(gpus=(H100_SXM,), kernels=tuple(kernels), memops=tuple(memops), api_calls=tuple(api_calls),
                     ranges=tuple(ranges), process_names={PID: "python"}, thread_names={(PID, PID): "python"})


def _steps(walls: list[int], phases: list[str] | None = None, sync=None, second_kernel=None) -> TraceSpec:
    """One annotated step per wall time (host window = step), each running a GEMM from +20 us to +60 % of
    the wall; `sync(i)` gives an optional (offset, dur) cudaStreamSynchronize, `second_kernel(i)` an
    optional (offset, dur) SiLU kernel launched 10 us before it starts."""
    phases = phases or ["decode"] * len(walls)
    kernels, calls, ranges = [], [], []
    t = START
    for i, (wall, phase) in enumerate(zip(walls, phases)):
        ranges.append(Range(STEP_NAMES[phase], t, t + wall, pid=PID, tid=PID, kind="user_annotation"))
        kernels.append(_kernel(GEMM, t + 20 * US, wall * 6 // 10 - 20 * US, t + 10 * US))
        if sync and (s := sync(i)):
            calls.append(ApiCall("cudaStreamSynchronize", t + s[0], s[1], pid=PID, tid=PID))
        if second_kernel and (k := second_kernel(i)):
            kernels.append(_kernel(SILU, t + k[0], k[1], t + k[0] - 10 * US))
        t += wall + GAP
    return _spec(kernels=kernels, api_calls=calls, ranges=ranges)


# ---- TV204: host synchronisation inside steps -----------------------------------------------------


def sync_in_steps() -> TraceSpec:
    """Six 1 ms decode steps. GEMM at +20..+600 us; cudaStreamSynchronize at +100 us for 520 us (returns at
    +620 us, 20 us after the GPU drained); SiLU launched at +700 us, runs +710..+950 us.

    Per step: blocked 520 us; exposed GPU idle = window [+100, +710] (610 us) - busy [+100, +600] (500 us)
    = 110 us; saving min(520, 110) = 110 us. Step 3 waits 560 us and launches nothing after, so its window
    runs to the step end: [+100, +1000] (900 us) - 500 us busy = 400 us idle, saving min(560, 400) = 400 us.
    A cudaDeviceSynchronize between steps 5 and 6 lies outside every step and does not count.
    Totals: 6 calls, blocked 5*520 + 560 = 3160 us, saving 5*110 + 400 = 950 us."""
    spec = _steps(
        [1 * MS] * 6,
        sync=lambda i: (100 * US, 560 * US if i == 3 else 520 * US),
        second_kernel=lambda i: None if i == 3 else (710 * US, 240 * US),
    )
    after = START + 6 * (MS + GAP) - GAP + 50 * US
    outside = ApiCall("cudaDeviceSynchronize", after, 150 * US, pid=PID, tid=PID)
    return _spec(spec.kernels, api_calls=(*spec.api_calls, outside), ranges=spec.ranges)


def sync_free_steps() -> TraceSpec:
    """The same six steps with no synchronisation: the SiLU kernel follows the GEMM directly."""
    return _steps([1 * MS] * 6, second_kernel=lambda i: (600 * US, 240 * US))


# ---- TV205: async memcpy with pageable host memory ------------------------------------------------


def pageable_async_copies() -> TraceSpec:
    """cudaMemcpyAsync from pageable memory: 4 HtoD copies of 8 MiB taking 1 ms each on the GPU (the host
    call blocks 1.02 ms while the driver stages the buffer) and 2 DtoH copies of 4 KiB into pageable memory
    taking 3 us each (the call waits 500 us for the GPU). Pinned copies and a memset do not count.

    Saving at the default 2x pinned speed-up: (4 * 1 ms + 2 * 3 us) / 2 = 2.003 ms.
    Host blocked: 4 * 1.02 ms + 2 * 500 us = 5.08 ms. Bytes 4 * 8 MiB + 2 * 4 KiB = 33_562_624."""
    memops, kernels = [], []
    t = START
    for _ in range(4):
        memops.append(Memop("memcpy", t + 10 * US, 1 * MS, 8 << 20, "HtoD", "Pageable", "Device", pid=PID, tid=PID,
                            launch_start_ns=t, launch_dur_ns=1 * MS + 20 * US))
        t += 1_200 * US
        kernels.append(_kernel(GEMM, t, 300 * US, t - 30 * US))
        t += 400 * US
    for _ in range(2):
        kernels.append(_kernel(GEMM, t + 20 * US, 480 * US, t + 10 * US))
        memops.append(Memop("memcpy", t + 500 * US, 3 * US, 4096, "DtoH", "Device", "Pageable", pid=PID, tid=PID,
                            launch_start_ns=t + 15 * US, launch_dur_ns=500 * US))
        t += 800 * US
    for _ in range(3):
        memops.append(Memop("memcpy", t + 10 * US, 400 * US, 8 << 20, "HtoD", "Pinned", "Device", pid=PID, tid=PID,
                            launch_start_ns=t, launch_dur_ns=6 * US))
        t += 600 * US
    memops.append(Memop("memset", t + 10 * US, 5 * US, 1 << 20, "", "", "Device", pid=PID, tid=PID,
                        launch_start_ns=t, launch_dur_ns=4 * US))
    return _spec(kernels=kernels, memops=memops)


def pinned_copies_only() -> TraceSpec:
    """The same traffic with every host buffer pinned."""
    spec = pageable_async_copies()
    memops = [Memop(m.kind, m.start_ns, m.dur_ns, m.bytes, m.copy_kind,
                    "Pinned" if m.src_kind == "Pageable" else m.src_kind,
                    "Pinned" if m.dst_kind == "Pageable" else m.dst_kind, pid=PID, tid=PID,
                    launch_start_ns=m.launch_start_ns, launch_dur_ns=m.launch_dur_ns) for m in spec.memops]
    return _spec(kernels=spec.kernels, memops=memops)


# ---- TV207: step-time jitter ----------------------------------------------------------------------

JITTER_DECODE_WALLS = [1000, 1010, 990, 1000, 1020, 980, 1000, 1000, 3000, 1005]  # us


def decode_jitter() -> TraceSpec:
    """Ten decode steps of about 1 ms, one (step 8) of 3 ms, then two mixed steps of 1.4 ms and 2 ms.

    Decode walls (us) 1000 1010 990 1000 1020 980 1000 1000 3000 1005: sorted 980 990 1000 1000 1000 1000
    1005 1010 1020 3000. p50 (interpolated) = 1000, p90 = 1020 + 0.1 * (3000 - 1020) = 1218, p99 = 1020 +
    0.91 * 1980 = 2821.8; p99/p50 = 2.8218. Tail saving: only 3000 us is above p90: 3000 - 1000 = 2000 us.
    Mixed steps: 1400 us is 40 % over the decode median (within the 50 % budget); 2000 us is 100 % over:
    2000 - 1000 * 1.5 = 500 us above the budget. Saving 2000 + 500 = 2500 us."""
    walls = [w * US for w in JITTER_DECODE_WALLS] + [1400 * US, 2000 * US]
    return _steps(walls, ["decode"] * 10 + ["mixed"] * 2)


def steady_decode() -> TraceSpec:
    """Ten decode steps within 2 % of each other and a mixed step 20 % over the decode median."""
    walls = [w * US for w in (1000, 1010, 990, 1000, 1020, 980, 1000, 1000, 1015, 1005)] + [1200 * US]
    return _steps(walls, ["decode"] * 10 + ["mixed"])


# ---- TV305: one kernel family dominating GPU time -------------------------------------------------


def gemm_hotspot() -> TraceSpec:
    """Ten bf16 GEMMs of 4096^3 (aten::mm with shapes, so the roofline costs them) at 278 us each, twenty
    SiLU kernels of 20 us and ten RMSNorm kernels of 15 us.

    Kernel time 2780 + 400 + 150 = 3330 us; GEMM share 2780 / 3330 = 83.48 %. Each GEMM does
    2 * 4096^3 = 137_438_953_472 FLOP, 138.91 us at the H100's 989.4 TFLOP/s bf16 peak (its 100 MiB of
    operands take 31.3 us at 3.35 TB/s, so compute bounds it): 49.97 % of roof, saving 278 - 138.91 =
    139.09 us per GEMM, 1390.9 us in all."""
    kernels, ranges = [], []
    t = START
    n = 4096
    for _ in range(10):
        ranges.append(Range("aten::mm", t, t + 30 * US, pid=PID, tid=PID, kind="cpu_op",
                            input_dims=[[n, n], [n, n]], input_types=["c10::BFloat16", "c10::BFloat16"]))
        kernels.append(_kernel(GEMM, t + 40 * US, 278 * US, t + 10 * US))
        t += 330 * US
        for _ in range(2):
            kernels.append(_kernel(SILU, t, 20 * US, t - 15 * US))
            t += 30 * US
        kernels.append(_kernel(RMS, t, 15 * US, t - 15 * US))
        t += 40 * US
    return _spec(kernels=kernels, ranges=ranges)


# ---- TV204 and the host context: a sync issued by aten::item ---------------------------------------

ITEM_SILU = "triton_poi_fused_silu_0"
ITEM_STEP_US = 1_500  # each step ends as its last kernel does: the sync is the main loss


def _item_kernel(name: str, start_us: int, dur_us: int, launch_us: int) -> Kernel:
    """A kernel at µs offsets whose launch call takes 5 us."""
    return Kernel(name, start_us * US, dur_us * US, pid=PID, tid=PID, launch_start_ns=launch_us * US,
                  launch_dur_ns=5 * US)


def item_sync() -> TraceSpec:
    """Four 1.5 ms steps (ProfilerStep#N), each reading a scalar with `loss.item()` (the sync's origin, for
    TV204 and the host context under gaps); T = 1000 + 1500 * i us:

      GEMM           launched T+10, runs [T+20, T+820]
      aten::item [T+100, T+1000] > aten::_local_scalar_dense [T+105, T+995] > aten::copy_ [T+110, T+990]
        cudaMemcpyAsync DtoH into pageable memory, call [T+120, T+840]; the 4-byte copy runs [T+830, T+832]
        cudaStreamSynchronize [T+845, T+860]
      aten::mm [T+1090, T+1110] launches the next kernel at T+1100; it runs [T+1110, T+1500]

    Gap [T+832, T+1110] (278 us): the launching thread sat in the copy until T+840 -> sync_drain. Calls in it:
    the copy 8 us, the sync 15 us, the launch 5 us -> host call cudaStreamSynchronize; CPU ops in it: aten::item
    168 us, its children less, aten::mm 20 us -> aten::item. Gap [T+820, T+830] (10 us): the copy was queued at
    T+120 -> bubble, under aten::copy_ (innermost of three equal 10 us overlaps), issued by aten::item.
    The copy exposes the GPU from its drain at T+832 to the next kernel at T+1110: 278 us, saving min(278, 720);
    the sync exposes the same window, already counted: 0. Per step 278 us, 1112 us in all."""
    kernels, memops, calls, ranges = [], [], [], []
    for i in range(4):
        t = 1_000 + ITEM_STEP_US * i
        ranges.append(Range(f"ProfilerStep#{i}", t * US, (t + ITEM_STEP_US) * US, pid=PID, tid=PID,
                            kind="user_annotation"))
        kernels.append(_item_kernel(GEMM, t + 20, 800, t + 10))
        for name, lo, hi in (("aten::item", 100, 1000), ("aten::_local_scalar_dense", 105, 995),
                             ("aten::copy_", 110, 990), ("aten::mm", 1090, 1110)):
            ranges.append(Range(name, (t + lo) * US, (t + hi) * US, pid=PID, tid=PID, kind="cpu_op"))
        memops.append(Memop("memcpy", (t + 830) * US, 2 * US, 4, "DtoH", "Device", "Pageable", pid=PID, tid=PID,
                            launch_start_ns=(t + 120) * US, launch_dur_ns=720 * US))
        calls.append(ApiCall("cudaStreamSynchronize", (t + 845) * US, 15 * US, pid=PID, tid=PID))
        kernels.append(_item_kernel(ITEM_SILU, t + 1110, 390, t + 1100))
    return _spec(kernels=kernels, memops=memops, api_calls=calls, ranges=ranges)
