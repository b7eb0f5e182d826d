"""Telling the cluster's failures from the trial's, by the error Ray raised for a task.

A trial's Ray task either returns the trial's result (whatever the trial did: a crash of its
process is a result, `crash`) or raises. What it raises says whose failure it was:

- a Ray system error (`ray.exceptions.RayError`: `WorkerCrashedError`, `NodeDiedError`,
  `LocalRayletDiedError`, `RaySystemError`, `RpcError`, `ObjectLostError`, `GetTimeoutError`,
  `TaskUnschedulableError`, ...): the cluster failed under the trial (its worker, node, raylet
  or the GCS went away). The trial is *lost*: nothing is learned about its config, and it runs
  again without spending the config's retry (study/lost.py);
- the task's own exception (`RayTaskError`: our supervisor code raised), Ray's memory monitor
  killing the task (`OutOfMemoryError`: the trial's own host memory, very likely), a runtime
  environment that cannot be set up, or a cancel we asked for: as before, an `infra` failure
  that spends the retry.
"""

from __future__ import annotations


def lost_to_cluster(exc: BaseException) -> bool:
    """Whether `exc`, raised by `ray.get` on a trial's task, is the cluster's failure."""
    from ray import exceptions as rx

    ours = (rx.RayTaskError, rx.OutOfMemoryError, rx.RuntimeEnvSetupError, rx.TaskCancelledError)
    return isinstance(exc, rx.RayError) and not isinstance(exc, ours)
