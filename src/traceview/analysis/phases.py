"""Steps (engine iterations, forward passes, training iterations) and their phase: train, prefill,
decode, mixed, empty, unknown.

A step is a host-side window: an engine's step annotation, an `execute_model` Python frame, a
ProfilerStep, a range matching the user's regex, or, with none of these, a burst of GPU work between
idle gaps where such bursts repeat a kernel pattern (else the rank's GPU work is one window). The GPU work of a step is what its launches caused (joined on correlation id), not
whatever happens to run on the GPU during the window. An engine's step annotation (confidence 1.0, or with token
counts) decides the phase first; then the workload kind: a step that launches backward work or work inside a strong
optimizer range is `train` (multi-tensor and fused optimizer ops count only beside those); only inference steps get
prefill/decode/mixed. Each step's phase comes from the strongest evidence available, recorded in `phase_source` with
a confidence. With no step marker, a training loop's NVTX/user ranges (forward .. optimizer) make the steps.

The SQL is analysis/sql/step_work.sql (the windows and the work each one launched), analysis/sql/step_roles.sql
(the steps' kernels with their GEMM tile, and the training role of their work) and analysis/sql/steps.sql (the
steps and their phase); this module loads steps.toml (the engines' step grammars, training patterns, GEMM
tiles) and runs their sections with those values bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import duckdb

from traceview.analysis import sql_module
from traceview.compat import tomllib
from traceview.model import db

COUNT_GROUPS = ("prefill_requests", "prefill_tokens", "prefill_context_tokens", "decode_requests", "decode_tokens",
                "decode_context_tokens", "requests", "tokens")
KNOWN_GROUPS = frozenset(COUNT_GROUPS) | {"mode"}
DEFAULT_GAP_NS = 1_000_000
# kernels at the head of a GPU burst that make its pattern (gap-based steps split only where patterns repeat)
PATTERN_KERNELS = 8
ANNOTATION_KINDS = ("user_annotation", "nvtx")

STEP_WORK = sql_module.load("step_work")
STEP_ROLES = sql_module.load("step_roles")
STEPS = sql_module.load("steps")


@dataclass(frozen=True)
class StepGrammar:
    """One engine's step annotation: a regex and what its capture groups count."""

    name: str
    engine: str
    pattern: str
    groups: tuple[str, ...]
    confidence: float
    source: str
    modes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainingPatterns:
    """Range-name patterns (RE2) of backward and optimizer work (strong and weak), the training loop's phase words,
    and how GEMM names state their tile."""

    backward: str
    optimizer: str
    optimizer_weak: str
    loop_forward: str
    loop_loss: str
    loop_backward: str  # backward words or a gradient all-reduce
    loop_optimizer: str
    tile_patterns: tuple[str, ...]
    skinny: str
    small_max: int
    skinny_max: int
    large_min: int


@lru_cache(maxsize=1)
def _steps_config() -> dict:
    return tomllib.loads(resources.files("traceview.analysis").joinpath("steps.toml").read_text())


def _any_of(patterns: list[str]) -> str:
    return "|".join(f"(?:{p})" for p in patterns)


def load_training_patterns() -> TrainingPatterns:
    config = _steps_config()
    training, loop, tiles = config["training"], config["training_loop"], config["gemm_tiles"]
    for where, table, keys in (("training", training, ("backward", "optimizer", "optimizer_weak")),
                               ("training_loop", loop, ("forward", "loss", "backward", "grad_sync", "optimizer")),
                               ("gemm_tiles", tiles, ("patterns", "skinny", "small_max", "skinny_max", "large_min"))):
        missing = [key for key in keys if key not in table]
        if missing:
            raise ValueError(f"steps.toml: [{where}] missing {', '.join(missing)}")
    return TrainingPatterns(
        _any_of(training["backward"]), _any_of(training["optimizer"]), _any_of(training["optimizer_weak"]),
        loop["forward"], loop["loss"], _any_of([loop["backward"], *loop["grad_sync"]]), loop["optimizer"],
        tuple(tiles["patterns"]), tiles["skinny"], int(tiles["small_max"]), int(tiles["skinny_max"]),
        int(tiles["large_min"]))


def load_grammars() -> list[StepGrammar]:
    grammars = []
    for index, entry in enumerate(_steps_config()["grammar"]):
        where = f"steps.toml: grammar[{index}]"
        missing = [key for key in ("name", "engine", "pattern", "groups", "confidence", "source") if key not in entry]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        unknown = set(entry["groups"]) - KNOWN_GROUPS
        if unknown:
            raise ValueError(f"{where}.groups: unknown group names {sorted(unknown)}")
        grammars.append(StepGrammar(
            entry["name"], entry["engine"], entry["pattern"], tuple(entry["groups"]),
            float(entry["confidence"]), entry["source"], dict(entry.get("modes", {})),
        ))
    return grammars


def gemm_tile_parameters(patterns: TrainingPatterns) -> dict:
    """The parameters of step_roles.sql's gemm_tiles query, (name, tile) over the distinct GEMM kernel names: 'small',
    'large' or NULL, the token-side tile the name states."""
    return {"tile_patterns": list(patterns.tile_patterns), "skinny": patterns.skinny,
            "small_max": patterns.small_max, "skinny_max": patterns.skinny_max, "large_min": patterns.large_min}


def range_role_parameters(patterns: TrainingPatterns) -> dict:
    """The parameters of step_work.sql's range_roles section, which gives each distinct host range name its training
    role (tests run it alone)."""
    return {"backward": patterns.backward, "optimizer": patterns.optimizer, "optimizer_weak": patterns.optimizer_weak,
            "loop_forward": patterns.loop_forward, "loop_loss": patterns.loop_loss,
            "loop_backward": patterns.loop_backward, "loop_optimizer": patterns.loop_optimizer,
            "annotation_kinds": list(ANNOTATION_KINDS)}


def find_step_work(con: duckdb.DuckDBPyConnection, *, step_regex: str | None = None,
                   gap_ns: int = DEFAULT_GAP_NS) -> None:
    """Build the step windows and the work each one launched (`kernel_steps`, `memop_steps`, `step_work_windows`,
    `step_work_memops`) and each host range name's training role (`range_roles`)."""
    STEP_WORK.run(con, "windows", annotation_kinds=list(ANNOTATION_KINDS))
    if step_regex:
        STEP_WORK.run(con, "user_regex", regex=step_regex)
    annotated = {rank for (rank,) in STEP_WORK.query(con, "annotated_ranks")}
    for grammar in load_grammars():
        # a grammar gives windows only to annotated ranks that have none yet: once every one has some (the
        # engine's grammar matched), the later grammars are not run (the sample's stage 65 -> 55 ms)
        unwindowed = annotated - {rank for (rank,) in STEP_WORK.query(con, "windowed_ranks")}
        if not unwindowed and not step_regex:
            break
        # one statement per grammar, so that its pattern is a bound constant: DuckDB compiles a pattern read
        # from a column once per row
        parameters = {"pattern": grammar.pattern, "groups": list(grammar.groups), "grammar": grammar.name,
                      "confidence": grammar.confidence}
        with db.values_table(con, "_modes", {"mode": "VARCHAR", "phase": "VARCHAR"}, list(grammar.modes.items())):
            if unwindowed:
                STEP_WORK.run(con, "grammar", **parameters)
            if step_regex:
                STEP_WORK.run(con, "user_regex_phases", **parameters)
    STEP_WORK.run(con, "range_roles", **range_role_parameters(load_training_patterns()))
    STEP_WORK.run(con, "work", gap=gap_ns, head=PATTERN_KERNELS, memop_columns=list(db.contract_columns("memops")))
    STEP_WORK.run(con, "cleanup")


def find_step_roles(con: duckdb.DuckDBPyConnection) -> None:
    """The steps' kernels with their GEMM tile and the training role of the steps' work (`step_work_kernels`,
    `step_work_roles`), once the kernels have their categories."""
    # the tile each distinct GEMM name states, as a SELECT of its own (tests run it alone), kept in `_gemm_tiles`
    tiles = STEP_ROLES.query(con, "gemm_tiles", **gemm_tile_parameters(load_training_patterns()))
    with db.values_table(con, "_gemm_tiles", {"name": "VARCHAR", "tile": "VARCHAR"}, tiles):
        STEP_ROLES.run(con, "kernels")


def segment_steps(con: duckdb.DuckDBPyConnection, *, phase_kernels: tuple[tuple[str, str], ...] = ()) -> None:
    """Build `steps` from the step windows and their work (`find_step_work`, `find_step_roles`).

    `phase_kernels` maps phases to kernel-name regexes the user knows belong to them.
    """
    user_patterns = list(phase_kernels)  # (phase, kernel-name regex) from --phase-kernel
    with db.values_table(con, "_phase_kernel_patterns", {"phase": "VARCHAR", "pattern": "VARCHAR"}, user_patterns):
        STEPS.run(con, "steps")


WORK_STAGE = STEP_WORK.stage(run=lambda con, context: find_step_work(con, step_regex=context.options.step_regex,
                                                                     gap_ns=context.options.step_gap_ns))
ROLES_STAGE = STEP_ROLES.stage(run=lambda con, context: find_step_roles(con))
STAGE = STEPS.stage(run=lambda con, context: segment_steps(con, phase_kernels=context.options.phase_kernels))
