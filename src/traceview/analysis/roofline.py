"""Roofline: how close each kernel, category, phase and step runs to the matched GPU's roof.

The SQL is in analysis/sql/: `kernel_costs.sql` gives each kernel its launching op's cost, shared by
time, if the hardware could have run it (a cost the GPU could not produce is rejected, never clamped);
`roofline.sql` sums accepted costs per kernel, category, phase and step (ΣFLOPs/Σtime, never a mean of
percentages, MATH.md §1) and holds the one rule for which wall a set of kernels hits; `phase_summary.sql`
decides each phase's wall from the strongest evidence there is.
"""

from __future__ import annotations

from traceview.analysis import sql_module

COSTS = sql_module.load("kernel_costs")
# the per-kernel facts analysis/assemble.py joins onto `kernels`
COST_COLUMNS = {name: meaning for name, meaning in COSTS.creates[0].columns.items() if name not in ("rank", "kernel_id")}

COSTS_STAGE = COSTS.stage()
VIEWS_STAGE = sql_module.load("roofline").stage()
SUMMARY_STAGE = sql_module.load("phase_summary").stage()
