"""The recommendation as a type: what study/recommend.py builds once, the study stores as JSON
(`studies.recommendation`, `stored()`) and the API serves (api/schemas.py's BestView), field for
field.

The fields a study always has are required; the ones only some studies have (time_to_train_h,
scaling, input_pipeline) and the end-of-study evidence (importance, cost_model, pruned,
learned_rules, stopped) default to None and stay out of the stored JSON unless set, so a client
sees only the keys the study has. Unknown keys are kept, not refused: rows stored before a field
was renamed, and what a view adds (the CLI's re-judged headroom), must still read back.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from autotuner.search.objective import Objective


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Interleaved(_View):
    """Winner and runner-up re-measured in turn (A B A B) in fresh processes."""

    pairs: int
    winner_ahead: int = Field(description="Pairs in which the winner measured faster")
    ratios: list[float] = Field(description="Winner over runner-up, pair by pair")


class RunnerUp(_View):
    """The second-best config and whether the winner beats it beyond the noise."""

    trial_number: int
    objective_value: float = Field(description="Pooled median over its measurements")
    params: dict[str, Any]
    margin_rel: float = Field(description="Winner over runner-up minus 1")
    noise_rel: float
    tie: bool = Field(description="The margin is within the noise: either config will do")
    measurements: int
    interleaved: Interleaved | None = Field(None, description="Only when both were re-measured")
    text: str = Field(description="The verdict in words")


class ParetoPoint(_View):
    """A config no other beats on both the objective (higher) and peak memory (lower)."""

    trial_number: int
    objective_value: float
    peak_mem_gib: float
    params: dict[str, Any]


class Recommendation(BaseModel):
    """The winner, its margin over the runner-up, and the evidence behind it.

    Finished studies carry the search policy's evidence too (`importance`, `cost_model`,
    `pruned`, `learned_rules`, `stopped`); live views leave those keys out.
    """

    # The policy's evidence is free-form and may grow: keep unknown keys rather than lose them.
    model_config = ConfigDict(extra="allow")

    trial_number: int
    objective: Objective
    objective_value: float = Field(description="Pooled median over the winner's measurements")
    params: dict[str, Any]
    knobs: dict[str, Any] = Field(description="Every knob of the winning config")
    model: dict[str, Any]
    tokens_per_s: float
    tokens_per_s_min: float | None
    tokens_per_s_max: float | None
    tokens_per_s_per_gpu: float | None
    mfu: float | None
    gpu_clock: dict[str, Any] | None = Field(
        None,
        description="The SM clock while the winner was timed (mean_mhz, max_mhz, power_w, "
        "capped_by: NVML's power-cap or thermal throttle reasons, text)",
    )
    peak_mem_gib: float | None
    compile_s: float | None
    compile: dict[str, Any] | None = Field(
        None,
        description="The winner's compile time: cold (what a user's first run pays) and warm "
        "from the study's cache where measured, text; `regions` for a regional compile: what "
        "was compiled on its own, as the trainer must compile it for the speed measured",
    )
    fingerprint: dict[str, Any] | None = Field(description="The hardware it was measured on")
    completed_trials: int
    measurements: int = Field(description="How many times the winner was measured")
    measured_trials: list[int]
    noise_rel: float = Field(description="The study's noise band, relative")
    runner_up: RunnerUp | None
    time_to_train_h: float | None = Field(None, description="Only for objective time_to_train")
    pareto: list[ParetoPoint] = Field(description="Throughput against peak memory")
    scaling: dict[str, Any] | None = Field(
        None,
        description="Multi-GPU studies: the winner's per-GPU rate against the same config on "
        "one GPU (efficiency, the reference trial, a sentence)",
    )
    numerics: dict[str, Any] | None = Field(
        None,
        description="The loss-parity check of a winner whose precision (or 8-bit optimizer "
        "state) changes numerics (checked, passed, precision, name: the numerics in words, "
        "changes_numerics, reference_precision, tolerance_rel, diff_rel, steps, parity_trials, "
        "skipped: faster configs that failed it, preferred_over: a faster config it ties "
        "whose check has not passed, with that check's state: not run, pending or unchecked; "
        "text)",
    )
    fresh_run: dict[str, Any] | None = Field(
        None,
        description="The winner timed again in a fresh process by its headroom check, not "
        "pooled (trial_number, tokens_per_s, diff_rel against the recommended figure, "
        "within_noise, text)",
    )
    input_pipeline: dict[str, Any] | None = Field(
        None,
        description="Studies on loader or file data: whether the winner waits for its batches "
        "(input_wait_share, gpu_idle_share, threshold, bottleneck, loader_settings, fix: the "
        "measured loader settings that waited least, text)",
    )
    headroom: dict[str, Any] | None = Field(
        None,
        description="Peak memory (reserved + CUDA context), the limit and the headroom side by "
        "side (peak_gib, peak_kind, limit_gib, headroom_rel, usable_gib, free_rel, spare_gib, "
        "enforced), the headroom check with an evaluation pass and a checkpoint save (check), "
        "faster configs passed over for memory (passed_over), text",
    )
    vs_expert_default: dict[str, Any] | None = Field(
        None,
        description="The winner against the expert default, the trial whose purpose is "
        "expert-default (trial_number, objective_value, speedup, noise_rel, text)",
    )
    global_batch: dict[str, Any] | None = Field(
        None,
        description="The winner's tokens per optimizer step (tokens), whether every measured "
        "trial ran the same (same_for_all, sizes), else the expert default's (expert_default) "
        "and the best config at it (best_at_expert), text",
    )
    importance: list[dict[str, Any]] | None = Field(
        None,
        description="Per knob: each value's best (levels), the effect (effect_rel), the "
        "importance (its share of the effects beyond noise, log scale) and a verdict, most "
        "important first (finished studies)",
    )
    cost_model: dict[str, Any] | None = Field(None, description="The memory/time model's accuracy")
    throughput_model: dict[str, Any] | None = Field(
        None,
        description="The throughput model's at-launch accuracy (model_rel_sd, errors, trials: "
        "predicted and measured tokens/s of each measured trial)",
    )
    pruned: dict[str, int] | None = Field(None, description="Configs ruled out before launch")
    learned_rules: list[str] | None = None
    stopped: str | None = Field(None, description="Why the search stopped")
    rejudged: dict[str, Any] | None = Field(
        None,
        description="Only in `best --headroom` answers: the recommendation re-judged from the "
        "measured trials at another memory headroom, never stored (headroom, study_headroom, "
        "text)",
    )

    def stored(self) -> dict[str, Any]:
        """The JSON stored with the study and served: the keys that were set, nothing else."""
        return self.model_dump(mode="json", exclude_unset=True)

    def with_entries(self, **entries: Any) -> Recommendation:
        """This recommendation with more entries (the end-of-study evidence), validated."""
        return Recommendation.model_validate({**self.stored(), **entries})

    def as_ended(self) -> Recommendation:
        """As the study ends: a numerics or headroom check still to come never runs, and its
        entry says so."""
        # Imported here: the CLI reads this type, and its import stays light (no SQLAlchemy).
        from autotuner.search import headroom_check, numerics

        ended: dict[str, Any] = {}
        if self.numerics:
            ended["numerics"] = numerics.as_ended(self.numerics)
        if self.headroom:
            ended["headroom"] = headroom_check.as_ended(self.headroom)
        return self.with_entries(**ended) if ended else self
