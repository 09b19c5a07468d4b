"""Engines, not only kernels: what each GPU's copy engines did beside its SMs, against the link they use.

A GPU runs kernels on its SMs and copies on its copy engines (DMA); a run can be bound by either. Per
device this stage measures time in kernels, in copies by direction and in memsets (each the union of its
intervals), the copy time with no kernel running beside it (copy-only: the SMs wait on the copies), the
copies' achieved bytes/s against the peak of the link they cross (hardware/: PCIe or NVLink-C2C to the
host, NVLink/xGMI to a peer, HBM for device-to-device), and whether copies share a stream with kernels
(serialised with compute) or run on a side stream that can overlap them. TV208 reads these tables.

Neither nsys (TARGET_INFO_GPU: busLocation, isDiscrete, asyncEngines; no link width or generation) nor
Kineto (deviceProperties) records the link a GPU negotiated, so the peak comes from the matched
hardware/ file, named in `link_source`; a device without a spec, or a spec without a sourced link, has
NULL peaks and percentages, never a guess.

Copy-only time is the part of the copies' union that no kernel interval covers: each copy island less
K(hi) - K(lo), where K(t) is the device's kernel-busy time before t, read with one ASOF join of every copy's
start and end on the kernel islands' running sum, so no pair of intervals is ever compared. The SQL is
analysis/sql/engines.sql.
"""

from __future__ import annotations

from traceview.analysis import sql_module

STAGE = sql_module.load("engines").stage()
