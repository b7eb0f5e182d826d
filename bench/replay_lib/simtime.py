"""What a replayed trial costs on simulated time (`ReplayExecutor(rewall=RerunWalls())`).

A config's first trial costs its recorded wall, cold compile included. A re-run of a config the
study already measured (a re-measurement, the winner's headroom check, a parity trial) costs
what the study's own end-time model expects of it (autotuner/search/end_time.py `TrialWalls`:
the compile warm, the headroom check's evaluation pass, the parity steps), and its answer says
so (wall_s, compile_s), as the real re-run's does: the study learns a re-run's warm compile
from it. A config nobody recorded (the numerics check's reference at bf16, where no compiled
config lends it its kernel: search/numerics.py warm_reference) ran once on the hardware, as
long as the study expects an unmeasured config to take; the replay answers it with a failure,
and that failure's retry is free (an artefact of the replay).

On the H200's 10-minute Llama 3B study of 2026-12-04 the end-time estimates summed to 4.5 min
against the 4.8 min its end checks took (bench/results/h200_session_20261204g)."""

from __future__ import annotations

import json

from autotuner.purpose import Purpose
from autotuner.search.end_time import FLOOR_S, HEADROOM_AND_PARITY, TrialWalls
from autotuner.spec import Checkpointing, TrialConfig, TrialResult, canonical_params


class RerunWalls:
    """The `rewall` of a replay on simulated time."""

    def __init__(self) -> None:
        # A checkpointed config's re-run compiles cold (end_time.RECOMPUTE_WARM_SHARE).
        self._recomputes: dict[str, bool] = {}
        self._walls = TrialWalls(
            recomputes=lambda p: self._recomputes.get(canonical_params(p), False)
        )
        self._unrecorded: set[str] = set()  # configs not in the landscape, charged once

    def __call__(
        self, config: TrialConfig, key: str, result: TrialResult, recorded: bool
    ) -> TrialResult:
        params = json.loads(key)
        self._recomputes[canonical_params(params)] = (
            config.knobs.checkpointing != Checkpointing.NONE
        )
        if not recorded:
            charged = key in self._unrecorded
            self._unrecorded.add(key)
            return result.model_copy(
                update={"wall_s": 0.0 if charged else self._walls.search_trial_s()}
            )
        if not self._walls.known(params):
            self._walls.observe(params, result, "search", config.knobs.grad_accum)
            return result
        m = config.measure
        if m.headroom_check:
            purpose = HEADROOM_AND_PARITY if m.parity_steps else Purpose.HEADROOM
        elif m.parity_steps:
            purpose = Purpose.PARITY
        else:
            purpose = "remeasure"
        wall_s = max(FLOOR_S, self._walls.expected_s(purpose, params))
        share = self._walls.warm_share(params)
        compile_s = None if result.compile_s is None else result.compile_s * share
        return result.model_copy(update={"wall_s": wall_s, "compile_s": compile_s})
