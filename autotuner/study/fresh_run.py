"""The winner timed again in a fresh process by its headroom check, beside the figure recommended.

The headroom check (search/headroom_check.py) runs the winner's config once more in a process of
its own and times the same repeats on the same synthetic tokens before its evaluation pass and
checkpoint save, which are not timed. Its tokens/s is not pooled with the winner's measurements
(an end check never ranks: a pick could otherwise move to a config no check has seen), but it is
a second fresh-process measurement of the winner, and often the only one when the study's time
left no room to re-measure. The noise band comes from the spread between repeats and between
re-measured configs; a fresh process can differ by more (on an H100, Qwen2.5-1.5B's winner
measured 49,519 tok/s and 50,059 in its check: +1.1% against a ±0.5% band), which the user
should know before reading a margin of a percent or two.
"""

from __future__ import annotations

from typing import Any, Protocol

from autotuner.search.headroom_check import Check


class _Measured(Protocol):  # measurements.ConfigMeasurements
    @property
    def key(self) -> str: ...

    @property
    def median(self) -> float: ...


def fresh_run_entry(
    best: _Measured, checks: dict[str, Check], noise_rel: float
) -> dict[str, Any] | None:
    """{trial_number, tokens_per_s, diff_rel, within_noise, text}, where the winner's headroom
    check completed with a timed measurement; None otherwise."""
    check = checks.get(best.key)
    if check is None or check.result is None or check.trial is None:
        return None
    if check.state not in ("passed", "reported") or check.result.stopped_early:
        return None
    tps = check.result.tokens_per_s
    if not tps or best.median <= 0:
        return None
    diff = tps / best.median - 1.0
    within = abs(diff) <= noise_rel
    text = (
        f"{tps:,.0f} tokens/s in its headroom check (trial #{check.trial}, a fresh process): "
        f"{diff:+.1%} from the {best.median:,.0f} recommended, "
    )
    if within:
        text += f"inside the noise band (±{noise_rel:.1%})"
    else:
        text += (
            f"beyond the noise band (±{noise_rel:.1%}): runs of this config differ by about "
            "this much, so read smaller margins as ties"
        )
    return {
        "trial_number": check.trial,
        "tokens_per_s": tps,
        "diff_rel": round(diff, 4),
        "within_noise": within,
        "text": text,
    }
