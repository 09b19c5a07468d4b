"""What every report format shows the phases in: their order and colours. A module of its own, so the HTML
renderer's process loads it without the report data's database code."""

PHASE_ORDER = ("prefill", "decode", "mixed", "train", "unknown", "empty", "other")
# one colour per phase for the charts and the HTML tables ('none': work with no phase)
PHASE_COLORS = {"prefill": "#4c78a8", "decode": "#f58518", "mixed": "#54a24b", "train": "#e45756", "unknown": "#9d9d9d",
                "empty": "#d4d4d4", "other": "#b279a2", "none": "#79706e"}
