"""The executor the service's coordinator shares among its studies, chosen by `--executor`.

    ray                           trials as Ray tasks (the default; --ray-address or RAY_ADDRESS)
    replay:FILE[?slots=N&delay_s=S]
                                  answers from a recorded landscape (tests, demos, benchmarks);
                                  delay_s holds each answer back, as if the trial took that long

Test-only fault injection: with $AUTOTUNER_TEST_FAULTS set on the service (a JSON mapping of
trial number to fault, e.g. '{"0": "hang"}'), those trials of every study run with
`TrialConfig.fault` set (see workers/faults.py). It is an environment variable of the service
process, never a field of the API, so no client can inject a fault.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, get_args
from urllib.parse import parse_qs, urlsplit

from autotuner.executors.base import Completed, Executor, Target
from autotuner.inputs import UserError
from autotuner.spec import TrialConfig

log = logging.getLogger(__name__)

FAULTS_ENV = "AUTOTUNER_TEST_FAULTS"


def build_executor(spec: str, *, ray_address: str | None = None) -> Executor:
    """An executor from its `--executor` spec (see the module docstring)."""
    executor: Executor
    if spec == "ray":
        from autotuner.executors.ray_executor import RayExecutor

        executor = RayExecutor(ray_address)
    elif spec.startswith("replay:"):
        executor = _replay(spec.removeprefix("replay:"))
    else:
        raise UserError(f"--executor {spec!r}: use 'ray' or 'replay:FILE[?slots=N&delay_s=S]'")
    plan = fault_plan_from_env()
    if plan:
        log.warning("%s is set: injecting faults %s (tests only)", FAULTS_ENV, plan)
        executor = FaultPlanExecutor(executor, plan)
    return executor


def _replay(value: str) -> Executor:
    from autotuner.executors.replay import Landscape, ReplayExecutor

    parts = urlsplit(value)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    path = parts.path
    try:
        landscape = Landscape.load(path)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"--executor replay:{path}: cannot read the landscape: {exc}") from None
    if not landscape.entries:
        raise UserError(f"--executor replay:{path}: the landscape has no entries")
    slots = int(query.get("slots", 1))
    knob_names = list(landscape.entries[0][0])
    executor: Executor = ReplayExecutor(landscape, knob_names, slots=slots)
    delay_s = float(query.get("delay_s", 0))
    if delay_s > 0:
        executor = DelayedExecutor(executor, delay_s)
    return executor


def fault_plan_from_env() -> dict[int, str]:
    raw = os.environ.get(FAULTS_ENV, "").strip()
    if not raw:
        return {}
    allowed = get_args(TrialConfig.model_fields["fault"].annotation)
    try:
        data = json.loads(raw)
        plan = {int(k): str(v) for k, v in data.items()}
    except (ValueError, AttributeError) as exc:
        raise UserError(
            f'{FAULTS_ENV}: give a JSON mapping like \'{{"0": "hang"}}\' ({exc})'
        ) from None
    for number, fault in plan.items():
        if fault not in allowed:
            raise UserError(f"{FAULTS_ENV}: trial {number}: fault {fault!r} not in {allowed}")
    return plan


class _Wrapper:
    def __init__(self, inner: Executor) -> None:
        self.inner = inner

    def target(self) -> Target:
        return self.inner.target()

    def free_slots(self, gpus_per_trial: int) -> int:
        return self.inner.free_slots(gpus_per_trial)

    def submit(self, config: TrialConfig) -> str:
        return self.inner.submit(config)

    def collect(self, timeout_s: float) -> list[Completed]:
        return self.inner.collect(timeout_s)

    def cancel(self, handle: str) -> None:
        self.inner.cancel(handle)

    def running(self) -> list[str]:
        return self.inner.running()

    def health(self) -> str | None:
        return self.inner.health()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class FaultPlanExecutor(_Wrapper):
    """Sets `fault` on the first attempt of the planned trial numbers (tests only)."""

    def __init__(self, inner: Executor, plan: dict[int, str]) -> None:
        super().__init__(inner)
        self.plan = plan

    def submit(self, config: TrialConfig) -> str:
        fault = self.plan.get(config.trial_number if config.trial_number is not None else -1)
        if fault and config.fault == "none":
            config = config.model_copy(update={"fault": fault})
        return self.inner.submit(config)


class DelayedExecutor(_Wrapper):
    """Holds each finished trial back until `delay_s` after its submit (replay with a pace)."""

    def __init__(self, inner: Executor, delay_s: float) -> None:
        super().__init__(inner)
        self.delay_s = delay_s
        self._submitted: dict[str, float] = {}
        self._held: list[Completed] = []

    def free_slots(self, gpus_per_trial: int) -> int:
        return max(0, self.inner.free_slots(gpus_per_trial) - len(self._held))

    def submit(self, config: TrialConfig) -> str:
        handle = self.inner.submit(config)
        self._submitted[handle] = time.monotonic()
        return handle

    def collect(self, timeout_s: float) -> list[Completed]:
        self._held += self.inner.collect(0.0)
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            due = [c for c in self._held if now - self._submitted[c.handle] >= self._delay_s(c)]
            if due or now >= deadline:
                break
            time.sleep(min(0.02, max(deadline - now, 0)))
        self._held = [c for c in self._held if c not in due]
        for c in due:
            self._submitted.pop(c.handle, None)
        return due

    def _delay_s(self, completed: Completed) -> float:
        """How long this trial takes (the same for every trial here; tests/fakes.py paces
        each by its own recorded wall)."""
        return self.delay_s

    def cancel(self, handle: str) -> None:
        self._held = [c for c in self._held if c.handle != handle]
        self._submitted.pop(handle, None)
        self.inner.cancel(handle)

    def running(self) -> list[str]:
        return [*self.inner.running(), *(c.handle for c in self._held)]
