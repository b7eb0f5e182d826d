"""`autotuner serve` whose Ray executor runs the fake trial body (tests/fakes.py
`fake_ray_executor`): the service process, its coordinator and its Ray driver are the real
ones, only each trial's body is a fake measurement. For tests that fault the cluster under a
service of its own process, as `serve` runs in production:

    python -m tests.faults.fake_serve serve --executor fake-ray --ray-address HOST:PORT ...
"""

from __future__ import annotations

from autotuner.executors import base, factory

_build_executor = factory.build_executor


def build_executor(spec: str, *, ray_address: str | None = None) -> base.Executor:
    """`fake-ray`: the real RayExecutor at `ray_address` with fake trial bodies; else as serve."""
    if spec == "fake-ray":
        from tests.fakes import fake_ray_executor

        executor: base.Executor = fake_ray_executor(ray_address or "auto")
        return executor
    return _build_executor(spec, ray_address=ray_address)


factory.build_executor = build_executor

if __name__ == "__main__":
    from autotuner.cli import main

    main()
