"""ReplayExecutor: answers trials from a recorded landscape instead of running them.

A landscape is a file of measured configs (JSON list of {"params": {...}, "result": TrialResult},
or {"entries": [...]} with optional metadata; docs/landscape-format.md) recorded on real
hardware (bench/gpu_validation.py writes one). Replaying it through the real coordinator
measures how fast a search strategy finds the best config, in trials and in simulated
GPU-seconds (each result's wall_s), without spending GPU time. It is also the named fake the
coordinator's tests use in place of GPUs.

With `noise_rel` > 0 each answer draws its throughput from the recorded repeat spread (uniform
between tokens_per_s_min and tokens_per_s_max, widened to at least +-noise_rel), so repeated
measurements of one config differ the way fresh processes do.

A trial with an early-stop floor (`measure.abandon_below_tokens_per_s`, search/early_stop.py)
is answered as the worker would: when its first repeat (the recorded one, or the median when
none is recorded or noise is drawn) is below the floor, the answer is that one repeat with
`stopped_early` set, and the skipped repeats' time (from `phases_s`, when recorded) is not
charged.

With a `SimulatedClock` the replay runs on simulated time, so that a study's time budget
(`--minutes`) decides what it measures as it would on the recorded hardware: each answer
advances the clock by the trial's wall (trials answered together ran side by side). `rewall`,
where given, sets each answer's wall first: the replay benchmark charges a re-run of a config
what the study's end-time model expects of it (bench/replay_lib/simtime.py), a policy that
belongs to the layers above this one.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from autotuner.executors.base import Completed, Target
from autotuner.spec import (
    LEGACY_KNOBS,
    FailureClass,
    TrialConfig,
    TrialResult,
    TrialStatus,
    canonical_params,
)


class Landscape:
    """config -> measured result, keyed on the knobs a space searches."""

    def __init__(
        self,
        entries: Iterable[tuple[dict[str, Any], TrialResult]],
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.entries = list(entries)
        self.meta = dict(meta or {})

    @classmethod
    def load(cls, path: str | Path) -> Landscape:
        data = json.loads(Path(path).read_text())
        meta: dict[str, Any] = {}
        if isinstance(data, dict):
            meta = {k: v for k, v in data.items() if k != "entries"}
            data = data.get("entries", [])
        return cls(
            (
                (_knobs_only(e["params"]), TrialResult.model_validate(e["result"]))
                for e in data
                if e["params"].get("data_source", "synthetic") == "synthetic"
            ),
            meta,
        )

    def dump(self, path: str | Path) -> None:
        entries = [{"params": p, "result": r.model_dump(mode="json")} for p, r in self.entries]
        data: Any = {**self.meta, "entries": entries} if self.meta else entries
        Path(path).write_text(json.dumps(data, indent=1))

    def target(self, slots: int = 1) -> Target:
        """The hardware it was recorded on, from the results' fingerprints and memory limits."""
        fp = next((r.fingerprint for _, r in self.entries if r.fingerprint), None)
        limit = next((r.memory_limit_gib for _, r in self.entries if r.memory_limit_gib), None)
        if fp is None:
            return Target("cuda", slots, "replay", (9, 0), limit or 80.0)
        t = Target.from_fingerprint(fp)
        return Target(
            t.device_type, slots, t.device_name, t.compute_capability, limit or t.memory_gib
        )

    def values(self) -> dict[str, list[Any]]:
        """Each knob's recorded values, in first-seen order."""
        out: dict[str, list[Any]] = {}
        for params, _ in self.entries:
            for k, v in params.items():
                if v not in out.setdefault(k, []):
                    out[k].append(v)
        return out

    def index(self, knob_names: Iterable[str]) -> dict[str, TrialResult]:
        names = list(knob_names)
        out: dict[str, TrialResult] = {}
        for params, result in self.entries:
            values = with_later_knobs(params, names)
            if all(n in values for n in names):
                out.setdefault(canonical_params({n: values[n] for n in names}), result)
        return out


# Knobs added after landscapes were first recorded, and the value that names what every trial
# ran before they existed: an entry without the key ran the whole model under one compile, the
# unfused loss and the default CUDA allocator. Other missing knobs stay unknown (an entry may
# carry only the knobs its recording searched, the rest fixed at values it does not say).
LATER_KNOBS: dict[str, Any] = {"allocator": "default", "compile_scope": "model", "kernels": "none"}


def with_later_knobs(params: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """`params` with LATER_KNOBS' values for those of `names` it was recorded without."""
    missing = {n: LATER_KNOBS[n] for n in names if n not in params and n in LATER_KNOBS}
    return {**params, **missing} if missing else params


def _knobs_only(params: dict[str, Any]) -> dict[str, Any]:
    # Landscapes recorded before data_source became a measurement setting list it among the
    # knobs; its entries on loader data (another measurement) are dropped, the key removed.
    return {k: v for k, v in params.items() if k not in LEGACY_KNOBS}


def stop_early(result: TrialResult, floor: float, repeats: int, *, drawn: bool) -> TrialResult:
    """`result` as a worker stopping after a first repeat below `floor` would report it."""
    recorded = result.repeat_tokens_per_s
    first = recorded[0] if recorded and not drawn else result.tokens_per_s or 0.0
    if first >= floor or repeats <= 1:
        return result
    wall_s = result.wall_s
    measure_s = (result.phases_s or {}).get("measure")
    if wall_s is not None and measure_s:
        wall_s = max(0.0, wall_s - measure_s * (repeats - 1) / repeats)
    return result.model_copy(
        update={
            "tokens_per_s": first,
            "tokens_per_s_min": first,
            "tokens_per_s_max": first,
            "tokens_per_s_per_gpu": first
            * (result.tokens_per_s_per_gpu or 0.0)
            / (result.tokens_per_s or 1.0)
            or None,
            "repeat_tokens_per_s": [first],
            "stopped_early": True,
            "wall_s": wall_s,
            "notes": [*result.notes, f"stopped early (replayed): {first:,.0f} < {floor:,.0f}"],
        }
    )


# (config, its canonical knobs, the recorded answer, whether the landscape holds it) -> the
# answer with the wall this trial takes now.
Rewall = Callable[[TrialConfig, str, TrialResult, bool], TrialResult]


class SimulatedClock:
    """A study's "now" on simulated time (study/budget.py `Budget.clock`): the real time of its
    first reading, then moved only by `advance`. Anchored at the first reading, which comes
    after the study stored its start, so that a budget is spent when the simulated seconds
    reach it, not a few real milliseconds before."""

    def __init__(self) -> None:
        self.origin: dt.datetime | None = None
        self.elapsed_s = 0.0

    def __call__(self) -> dt.datetime:
        if self.origin is None:
            self.origin = dt.datetime.now(dt.UTC)
        return self.origin + dt.timedelta(seconds=self.elapsed_s)

    def advance(self, seconds: float) -> None:
        self.elapsed_s += max(0.0, seconds)


class ReplayExecutor:
    """An executor whose trials finish instantly with their recorded results."""

    def __init__(
        self,
        landscape: Landscape,
        knob_names: Iterable[str],
        *,
        slots: int = 1,
        target: Target | None = None,
        noise_rel: float = 0.0,
        seed: int = 0,
        clock: SimulatedClock | None = None,
        rewall: Rewall | None = None,
    ) -> None:
        self.knob_names = list(knob_names)
        self.table = landscape.index(self.knob_names)
        self.slots = slots
        self._target = target or Target("cuda", slots, "replay", (9, 0), 80.0)
        self.noise_rel = noise_rel
        self._rng = random.Random(seed)
        self._pending: dict[str, TrialConfig] = {}
        self._counter = 0
        self.gpu_seconds = 0.0  # simulated device time of every trial answered so far
        self.submitted: list[TrialConfig] = []
        self.clock = clock
        self.rewall = rewall

    def target(self) -> Target:
        return self._target

    def close(self) -> None:
        pass  # nothing was started: answers come from a table

    def health(self) -> str | None:
        return None  # a table is always there

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
        if self.clock is not None and done:
            # The trials answered together ran side by side (one slot each).
            self.clock.advance(max(c.result.wall_s or 0.0 for c in done))
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
        if self.noise_rel > 0 and result.status == TrialStatus.OK:
            result = self._noisy(result)
        floor = config.measure.abandon_below_tokens_per_s
        if floor is not None and result.status == TrialStatus.OK:
            result = stop_early(result, floor, config.measure.repeats, drawn=self.noise_rel > 0)
        if self.rewall is not None:
            result = self.rewall(config, key, result, key in self.table)
        self.gpu_seconds += result.wall_s or 0.0
        return result

    def _noisy(self, result: TrialResult) -> TrialResult:
        tps = result.tokens_per_s or 0.0
        low = min(result.tokens_per_s_min or tps, tps * (1 - self.noise_rel))
        high = max(result.tokens_per_s_max or tps, tps * (1 + self.noise_rel))
        drawn = self._rng.uniform(low, high)
        scale = drawn / tps
        return result.model_copy(
            update={
                "tokens_per_s": drawn,
                "tokens_per_s_min": (result.tokens_per_s_min or tps) * scale,
                "tokens_per_s_max": (result.tokens_per_s_max or tps) * scale,
                "tokens_per_s_per_gpu": (result.tokens_per_s_per_gpu or tps) * scale,
            }
        )
