"""A GPU node that joins the Ray cluster after the coordinator started is used (Ray's own test
cluster utilities: a head with no GPU, then a node that declares one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.service.conftest import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture
def cluster() -> Iterator[object]:
    import ray
    from ray.cluster_utils import Cluster

    ray.shutdown()  # a Ray left connected by an earlier test would be used instead
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def test_the_target_follows_gpus_that_join_later(cluster: object) -> None:
    from autotuner.executors.ray_executor import RayExecutor

    executor = RayExecutor(cluster.address)  # type: ignore[attr-defined]
    assert executor.target().device_type == "cpu"
    assert executor.free_slots(1) == 1  # CPU trials, one at a time
    cluster.add_node(num_cpus=1, num_gpus=2)  # type: ignore[attr-defined]
    # Within a refresh (5 s) and the probe of the new node, without a restart.
    wait_for(lambda: executor.target().device_type == "cuda", 90, "the GPU node to be used")
    target = executor.target()
    assert target.gpus_total == 2
    # The probe held one of them (num_gpus=1); Ray frees it when the probe's worker exits,
    # and its available resources show it a moment later (seconds on a loaded machine).
    wait_for(lambda: executor.free_slots(1) == 2, 30, "the probe's GPU to be free again")
    assert executor.free_slots(2) == 1
