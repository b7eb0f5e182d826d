"""What a trial will take before it runs: its expected wall, compile included.

From the walls the study measured, by compile mode and whether it is fp8 (whose compiles take
longer). A kind of trial the study has not run yet is estimated from the others: the median of
their non-compile time, plus a compile scaled from the compiles it measured by each compile
mode's and fp8's factor (COMPILE_FACTOR, FP8_COMPILE_FACTOR), measured on the H200:
- `max-autotune-no-cudagraphs` on GPT-2 124M was still autotuning its matmuls after 240 s,
  against 25 s for the default mode (bench/results/gpu_validation_h200.md): at least 10x;
- `reduce-overhead` compiled in 20 s where the default took 25 s (the same run): 1x;
- an fp8 compile of Llama 3B took 157 s where bf16's took 64-70 s: 2.4x
  (bench/results/h200_session_20261201).
With nothing compiled yet, a compile is taken as twice the measured non-compile time.

The proposer divides expected improvement by it (GPU-seconds per proposal); the policy refuses
to launch a trial that, with the end checks due, would not finish inside a time budget (a
max-autotune trial launched near the end of `--minutes` compiled for minutes past it).
"""

from __future__ import annotations

from statistics import median

from autotuner.spec import CompileMode, Knobs, TrialResult

COMPILE_FACTOR = {
    CompileMode.NONE: 0.0,
    CompileMode.DEFAULT: 1.0,
    CompileMode.REDUCE_OVERHEAD: 1.0,
    CompileMode.MAX_AUTOTUNE_NO_CUDAGRAPHS: 10.0,
    CompileMode.MAX_AUTOTUNE: 10.0,
}
FP8_COMPILE_FACTOR = 2.4
EAGER_TO_COMPILE = 2.0  # a first compile / the non-compile time, before any was measured

Group = tuple[CompileMode, bool]


class TrialCosts:
    """Expected seconds of a trial, from the study's measured walls (compile included)."""

    def __init__(self) -> None:
        self._walls: dict[Group, list[float]] = {}
        self._rest: list[float] = []  # wall less compile, every measured trial
        self._compiles: list[float] = []  # each compile over its kind's factor: a default one

    @staticmethod
    def group(knobs: Knobs) -> Group:
        return (knobs.compile_mode, knobs.precision.is_fp8)

    @staticmethod
    def _factor(group: Group) -> float:
        mode, fp8 = group
        return COMPILE_FACTOR[mode] * (FP8_COMPILE_FACTOR if fp8 else 1.0)

    def observe(self, knobs: Knobs, result: TrialResult) -> None:
        if not result.wall_s:
            return
        group = self.group(knobs)
        self._walls.setdefault(group, []).append(result.wall_s)
        compile_s = result.compile_s or 0.0
        self._rest.append(max(0.0, result.wall_s - compile_s))
        if compile_s and self._factor(group):
            self._compiles.append(compile_s / self._factor(group))

    def expected_s(self, knobs: Knobs) -> float:
        group = self.group(knobs)
        if group in self._walls:
            return median(self._walls[group])
        if not self._rest:
            return 1.0
        rest = median(self._rest)
        default_compile = median(self._compiles) if self._compiles else EAGER_TO_COMPILE * rest
        return rest + default_compile * self._factor(group)
