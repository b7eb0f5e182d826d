"""Executors run trials and hand back results: Ray in production, replay in benchmarks."""

from autotuner.executors.base import Completed, Executor, ExecutorUnavailable

__all__ = ["Completed", "Executor", "ExecutorUnavailable"]
