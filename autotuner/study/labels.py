"""How a trial or a study's best reads to a person, from the view shapes alone (no database
imports: the CLI renders these for the service's answers too)."""

from __future__ import annotations

from typing import Any

from autotuner.purpose import Purpose

# How a trial stopped by its study's cancel is stored (study/trials.py, storage/trial_repo.py):
# failed, infra, with this message. Views show it as `cancelled`, not as a failure.
CANCELLED_MESSAGE = "cancelled with the study"


def trial_label(view: dict[str, Any]) -> str:
    """The state to show a person: `cancelled` for a trial its study's cancel stopped, `proxy`
    for one measured on the shallower proxy model, `tight` for a complete one that leaves less
    than the memory headroom free."""
    message = view.get("error_message") or ""
    if view.get("state") == "failed" and message.startswith(CANCELLED_MESSAGE):
        return "cancelled"
    if view.get("purpose") == Purpose.PROXY and view.get("state") == "complete":
        return "proxy"  # measured on the shallower proxy model: no candidate (--proxy-layers)
    if view.get("tight"):
        return "tight"  # complete, but less than the memory headroom free: not recommended
    return str(view.get("state"))


def unfinished_note(best: dict[str, Any]) -> str | None:
    """For the best view of a study that was cancelled, failed or interrupted: how far it got,
    so its best is not read as a finished search's recommendation. None for any other study."""
    if best["status"] not in ("cancelled", "failed", "interrupted"):
        return None
    done = best["completed_trials"]
    budget = f" of {best['max_trials']}" if best.get("max_trials") else ""
    why = f" ({best['error_message']})" if best.get("error_message") else ""
    ended = "failed" if best["status"] == "failed" else f"was {best['status']}"
    more = (
        f"; continue it with: autotuner resume {best['study']}"
        if best["status"] == "interrupted"
        else ""
    )
    return (
        f"study {best['study']} {ended} after {done}{budget} trials{why}: this is the best so "
        f"far, not a finished search's recommendation{more}"
    )


def no_recommendation_note(best: dict[str, Any]) -> str:
    """Why a study (its best view) recommends nothing. While it runs: no trial completed yet, or
    each one measured so far is tight. Once it has ended: no trial measured (Llama 8B on
    one H200 before its seeder fell back to checkpointing: every trial out of memory), or every
    measured one left less memory free than the headroom; then its fastest, and the
    --headroom that would accept it (`tight_fastest`). The CLI's `best` and the dashboard's
    study page say the same."""
    study = best["study"]
    measured = best.get("completed_trials") or 0
    if best["status"] in ("queued", "running"):
        if not measured:
            return f"no completed trial yet ({best['total_trials']} trial(s) so far)"
        return (
            f"no recommendable trial yet: each of the {measured} measured so far left less "
            "memory free than the headroom (or went over --max-mem); their free memory: "
            f"autotuner trials {study}"
        )
    if best["status"] == "failed" and best.get("error_message"):
        # The study's own reason (study/ending.py), once, rather than a count of its trials.
        return f"the study failed: {best['error_message']}. Each trial: autotuner trials {study}"
    if not measured:
        return (
            f"no trial measured a throughput; all {best['total_trials']} failed or were not "
            f"run. Why each: autotuner trials {study}"
        )
    why = (
        f"nothing to recommend: each of the {measured} measured trial(s) left less memory free "
        "than the headroom (or went over --max-mem)."
    )
    tight = best.get("tight_fastest")
    if not tight:
        return (
            f"{why} Their free memory: autotuner trials {study}; to accept a tight config, run "
            "again with a lower --headroom"
        )
    return (
        f"{why} The fastest, #{tight['trial_number']} at {tight['tokens_per_s'] or 0:,.0f} "
        f"tokens/s, left {tight['memory_free_rel']:.1%} free of the {tight['headroom']:.0%} "
        f"kept: to accept it, autotuner best {study} --headroom {tight['headroom_accepting']:g} "
        "re-judges the measured trials (or run the study again with that --headroom). Each "
        f"trial's: autotuner trials {study}"
    )


def model_label(spec: dict[str, Any]) -> str:
    """A study's model in a few words (its model spec as stored): the preset's name, else the
    factory or the family with its depth and width ("llama, 8 × 1024")."""
    name = spec.get("preset") or spec.get("factory")
    if name:
        return str(name)
    sizes = f"{spec.get('n_layer', '?')} × {spec.get('d_model', '?')}"
    return f"{spec.get('family', 'model')}, {sizes}"


def runs_on(study: dict[str, Any]) -> str:
    """What a study's trials run on, as the lists say it: `CPU`, `2 GPUs`, or `1 GPU` while
    the study's device kind is not known yet (submitted to a database no cluster has seen)."""
    if study.get("device_type") == "cpu":
        return "CPU"
    gpus = int(study.get("gpus_per_trial") or 1)
    return f"{gpus} GPU{'s' if gpus != 1 else ''}"


def budget_used(study: dict[str, Any]) -> str:
    """How much of its budget a study (its view) has spent, as the lists say it: `33/80`
    trials launched, with `4.3/6 min` beside when it has a time budget too (`6 launched ·
    11.9/10 min` with that alone)."""
    launched, max_trials = study.get("trials_launched") or 0, study.get("max_trials")
    parts = [f"{launched}/{max_trials}" if max_trials else f"{launched} launched"]
    used, max_minutes = study.get("minutes_used"), study.get("max_minutes")
    if max_minutes and used is not None:
        parts.append(f"{used:.1f}/{max_minutes:g} min")
    return " · ".join(parts)


# What a trial was run for, where it is not the search's own proposal (search/progress.py's
# purposes): the tables show it beside the state, since a re-measurement or an end check
# re-runs a config an earlier row already shows and would otherwise read as a duplicate.
PURPOSE_TAGS: dict[str, str] = {
    Purpose.EXPERT_DEFAULT: "expert default",
    Purpose.REMEASURE: "re-measurement",
    Purpose.HEADROOM: "headroom check",
    Purpose.PARITY: "numerics check",
    Purpose.PARITY_REFERENCE: "numerics reference",
    Purpose.REFERENCE: "1-GPU reference",
    Purpose.PROXY: "proxy",
}


def purpose_tag(view: dict[str, Any]) -> str:
    """The trial's purpose as the tables tag it (`re-measurement`), or "" for a search or seed
    trial; nothing for a measured proxy, whose state label already says `proxy`."""
    if trial_label(view) == "proxy":
        return ""
    return PURPOSE_TAGS.get(str(view.get("purpose")), "")


SINGLE_REPEAT = "1 repeat"


def spread_text(view: dict[str, Any]) -> str:
    """A measured trial's repeat spread as the tables show it: `±1.2%` (half the min-max range
    of its timed repeats, relative to the median), `1 repeat` where it ran a single one (its
    min and max are that repeat: a spread of 0.0% would claim a precision nobody measured;
    a trial stopped early reports its one repeat), "" where nothing was measured."""
    tps, low, high = (view.get(k) for k in ("tokens_per_s", "tokens_per_s_min", "tokens_per_s_max"))
    if not tps or low is None or high is None:
        return ""
    if low == high:
        return SINGLE_REPEAT
    return f"±{(high - low) / 2 / tps:.1%}"
