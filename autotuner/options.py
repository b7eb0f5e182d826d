"""A study's options: one typed model at the API edge, in the database and inside the search.

The request validates it (`StudyRequest.options`), the `studies.options` column stores and loads
it (`storage.tables.OptionsJson`), and the objective, the policy and the seeder read its fields.
Every default lives here, once (those read without the model: in option_defaults.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from autotuner.option_defaults import DEFAULT_HEADROOM

# 24, not 12: on the H200 replay stress test (best config removed) patience 12 stopped 30% of
# runs before they reached the best; 24 stopped none and cost no extra trials to get there.
DEFAULT_PATIENCE = 24


class StudyOptions(BaseModel):
    """Per-study options beside the search itself (all optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # What a result is worth: price and run length (objectives), a memory ceiling (constraint).
    usd_per_gpu_hour: float | None = Field(
        default=None, gt=0, le=10_000, description="Price of one GPU hour, for cost objectives."
    )
    planned_tokens: float | None = Field(
        default=None, gt=0, le=1e16, description="Length of the real run, for time_to_train."
    )
    planned_hours: float | None = Field(
        default=None, gt=0, le=1e5, description="Or the run's length in hours, for time_to_train."
    )
    max_mem_gib: float | None = Field(
        default=None, gt=0, le=1e5, description="Memory ceiling: configs above it are infeasible."
    )
    headroom: float = Field(
        default=DEFAULT_HEADROOM,
        ge=0,
        le=0.9,
        description="Share of GPU memory the recommendation keeps free (0.1: 10%) for what a "
        "short trial does not do: evaluation, checkpoints, fragmentation. 0: none, no check.",
    )
    # How the search spends its budget.
    early_stop_patience: int = Field(
        default=DEFAULT_PATIENCE,
        ge=0,
        le=10_000,
        description="Stop after this many trials without improvement beyond noise (0: never).",
    )
    remeasure_top: int = Field(
        default=2, ge=0, le=10, description="Top candidates re-measured before recommending."
    )
    remeasure_rounds: int = Field(
        default=2, ge=0, le=10, description="Interleaved re-measurement rounds (A B A B)."
    )
    history_seeds: int = Field(
        default=3, ge=0, le=50, description="Earlier winners (same GPU and family) tried first."
    )
    memory_history: int = Field(
        default=200,
        ge=0,
        le=2_000,
        description="Measured peaks and out-of-memory trials of earlier studies of the same "
        "model on the same GPU that calibrate the memory model before the first trial, newest "
        "first (0: none; the study learns from its own trials alone).",
    )
    neighbour_seeds: bool = Field(
        default=True, description="Also seed the expert default's nearest alternatives."
    )
    seeds_yield: bool = Field(
        default=True,
        description="Run the expert default's fastest alternative and its other precisions "
        "first; its other alternatives wait until the throughput model has no proposal worth "
        "a trial (off: every seed first).",
    )
    proxy_layers: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Run a new kind of config (precision, compile mode, attention, "
        "checkpointing) first on a model of this many layers (same width) to teach the "
        "throughput model, before a full-depth trial; None: every trial at full depth.",
    )
    # Ablation switches: each guard can be turned off to measure what it is worth (the replay
    # benchmark's baselines). A user has no reason to turn them off.
    rules: bool = Field(default=True, description="Prune combinations that cannot run.")
    cost_model: bool = Field(default=True, description="Prune predicted out-of-memory configs.")
    expert_seed: bool = Field(
        default=True,
        description="Run the expert default among the first seeds: the winner's yardstick.",
    )
    guided: bool = Field(
        default=True,
        description="Propose by the throughput model's expected improvement per GPU-second.",
    )
    stop_slow_trials: bool = Field(
        default=True,
        description="Stop a search trial after its first repeat when it runs far below the "
        "best so far (search/early_stop.py; off: every trial measured in full, as a recorded "
        "landscape needs).",
    )
    headroom_check: bool = Field(
        default=True,
        description="Re-run the winner with an evaluation pass and a checkpoint save before "
        "recommending it, where a headroom is kept (off: recording a landscape, where the "
        "headroom only screens out configs sure to break it).",
    )
    numerics_check: bool = Field(
        default=True,
        description="Check a numerics-changing winner's loss against the reference precision "
        "(off: recording a landscape, where no recommendation is used).",
    )

    def stored(self) -> dict[str, Any]:
        """The JSON kept in the database: only what differs from the defaults, so a default
        changed later applies to old studies as it does to new ones."""
        return self.model_dump(mode="json", exclude_defaults=True)


# Every guard off: the sampler alone (the replay benchmark's baselines).
PLAIN_SAMPLER = StudyOptions(
    rules=False,
    cost_model=False,
    expert_seed=False,
    guided=False,
    history_seeds=0,
    memory_history=0,
    remeasure_top=0,
    early_stop_patience=0,
)
