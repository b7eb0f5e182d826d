"""ReplayExecutor: answers trials from a recorded landscape instead of running them.

A landscape is a file of measured configs (JSON list of {"params": {...}, "result": TrialResult})
recorded on real hardware (bench/gpu_validation.py writes one). Replaying it through the real
coordinator measures how fast a search strategy finds the best config, in trials and in
simulated GPU-seconds, without spending GPU time. It is also the named fake the coordinator's
tests use in place of GPUs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from autotuner.executors.base import Completed, Target
from autotuner.spec import FailureClass, TrialConfig, TrialResult, canonical_params


class Landscape:
    """config -> measured result, keyed on the knobs a space searches."""

    def __init__(self, entries: Iterable[tuple[dict[str, Any], TrialResult]]) -> None:
        self.entries = list(entries)

    @classmethod
    def load(cls, path: str | Path) -> Landscape:
        data = json.loads(Path(path).read_text())
        if isinstance(data, dict):
            data = data.get("entries", [])
        return cls((e["params"], TrialResult.model_validate(e["result"])) for e in data)

    def index(self, knob_names: Iterable[str]) -> dict[str, TrialResult]:
        names = list(knob_names)
        out: dict[str, TrialResult] = {}
        for params, result in self.entries:
            if all(n in params for n in names):
                out.setdefault(canonical_params({n: params[n] for n in names}), result)
        return out


class ReplayExecutor:
    """An executor whose trials finish instantly with their recorded results."""

    def __init__(
        self,
        landscape: Landscape,
        knob_names: Iterable[str],
        *,
        slots: int = 1,
        target: Target | None = None,
    ) -> None:
        self.knob_names = list(knob_names)
        self.table = landscape.index(self.knob_names)
        self.slots = slots
        self._target = target or Target("cuda", slots, "replay", (9, 0), 80.0)
        self._pending: dict[str, TrialConfig] = {}
        self._counter = 0
        self.gpu_seconds = 0.0  # simulated device time of every trial answered so far
        self.submitted: list[TrialConfig] = []

    def target(self) -> Target:
        return self._target

    def free_slots(self, gpus_per_trial: int) -> int:
        return max(0, self.slots - len(self._pending))

    def submit(self, config: TrialConfig) -> str:
        self._counter += 1
        handle = f"r{self._counter}"
        self._pending[handle] = config
        self.submitted.append(config)
        return handle

    def collect(self, timeout_s: float) -> list[Completed]:
        done = [Completed(h, self._answer(c), "replay") for h, c in self._pending.items()]
        self._pending.clear()
        return done

    def cancel(self, handle: str) -> None:
        self._pending.pop(handle, None)

    def running(self) -> list[str]:
        return list(self._pending)

    def _answer(self, config: TrialConfig) -> TrialResult:
        knobs = config.knobs.model_dump(mode="json")
        key = canonical_params({n: knobs[n] for n in self.knob_names})
        result = self.table.get(key)
        if result is None:
            result = TrialResult.failure(
                FailureClass.INFRA, f"config not in the recorded landscape: {key}"
            )
        self.gpu_seconds += result.wall_s or 0.0
        return result
