"""What a trial will take before it runs: its expected wall, compile included.

From the walls the study measured, by compile mode and whether it is fp8 (whose compiles take
longer). A kind of trial the study has not run yet is estimated from the others: the median of
their non-compile time, plus a compile scaled from the compiles it measured by each compile
mode's and fp8's factor (COMPILE_FACTOR, FP8_COMPILE_FACTOR), measured on the H200:
- `max-autotune-no-cudagraphs` on GPT-2 124M was still autotuning its matmuls after 240 s,
  against 25 s for the default mode (bench/results/gpu_validation_h200.md): at least 10x;
- `reduce-overhead` compiled in 20 s where the default took 25 s (the same run): 1x;
- an fp8 compile of Llama 3B took 157 s where bf16's took 64-70 s: 2.4x
  (bench/results/h200_session_20261201); per block much less (FP8_COMPILE_FACTOR, by scope).
With nothing compiled yet, a compile is taken as twice the measured non-compile time.

What is compiled scales it too (`compile_scope`): the whole model is one unrolled graph of
every block, where block scope traces one block and reuses its graph for every layer (the rest
runs eagerly), so its compile is a share of the whole model's: BLOCK_COMPILE_BLOCKS blocks'
worth of the model's n_layer until the study has measured both scopes, then the ratio of their
measured compiles (each over its mode's and fp8's factor), as the end-time model learns its
warm share from re-runs. Whole-model compiles took 70-150 s per trial at 1-3B on an H100.

The proposer divides expected improvement by it (GPU-seconds per proposal); the policy refuses
to launch a trial that, with the end checks due, would not finish inside a time budget (a
max-autotune trial launched near the end of `--minutes` compiled for minutes past it).
"""

from __future__ import annotations

from statistics import median

from autotuner.spec import CompileMode, CompileScope, Knobs, TrialResult

COMPILE_FACTOR = {
    CompileMode.NONE: 0.0,
    CompileMode.DEFAULT: 1.0,
    CompileMode.REDUCE_OVERHEAD: 1.0,
    CompileMode.MAX_AUTOTUNE_NO_CUDAGRAPHS: 10.0,
    CompileMode.MAX_AUTOTUNE: 10.0,
}
# fp8's Float8Linear graphs over bf16's, by what is compiled. The whole model: Llama 3B on the
# H200 2.4x (157 s against 64-70), on the H100 Llama-3.2-1B 2.4x (81 s against 34) and
# Qwen2.5-1.5B 2.3x (131.5 against 57.5). A block: 1.2-2.0x (Qwen2.5-1.5B 17 s against 14,
# Llama-3.2-1B 21 against 11, under reduce-overhead 20 against 16), as a block compile is
# largely what any compile costs whatever its graph. Cold compiles only, H100, from the
# committed Hugging Face tunes and landscape recordings. One factor for both scopes misjudges
# a whole model's fp8 compile scaled from block compiles by a fifth or more
# (bench/results/trial_cost_fp8_scope_cpu/).
FP8_COMPILE_FACTOR = {CompileScope.MODEL: 2.4, CompileScope.BLOCK: 1.5}
EAGER_TO_COMPILE = 2.0  # a first compile / the non-compile time, before any was measured
# A block-scope compile in blocks' worth of the whole model's: the one block's forward and
# backward graphs, what a compile costs whatever its size (dynamo and inductor's start, the
# eager rest's first run) and the output region's graphs. Measured on the H100 with the output
# region compiled: 4.9-7.2 blocks' worth, median 5.6 (Llama-3.2-1B 11.5 s of 32.7, Qwen2.5-1.5B
# 10.1 of 57.5, Gemma-2-2B 15.5 of 56.2: bench/results/hf_knobs_h100).
BLOCK_COMPILE_BLOCKS = 5.6

Group = tuple[CompileMode, bool, CompileScope]


class TrialCosts:
    """Expected seconds of a trial, from the study's measured walls (compile included)."""

    def __init__(self, n_layer: int = 1) -> None:
        """`n_layer`: the model's blocks (block scope's prior share of a whole-model compile)."""
        self.n_layer = max(1, n_layer)
        self._walls: dict[Group, list[float]] = {}
        self._rest: list[float] = []  # wall less compile, every measured trial
        # Each compile over its kind's factor (a default-mode, non-fp8 one), by scope.
        self._compiles: dict[CompileScope, list[float]] = {s: [] for s in CompileScope}

    @staticmethod
    def group(knobs: Knobs) -> Group:
        scope = knobs.compile_scope
        if knobs.compile_mode == CompileMode.NONE:
            scope = CompileScope.MODEL  # nothing compiled: the scope changes nothing
        return (knobs.compile_mode, knobs.precision.is_fp8, scope)

    @staticmethod
    def _factor(group: Group) -> float:
        mode, fp8, scope = group
        return COMPILE_FACTOR[mode] * (FP8_COMPILE_FACTOR[scope] if fp8 else 1.0)

    def observe(self, knobs: Knobs, result: TrialResult) -> None:
        if not result.wall_s:
            return
        group = self.group(knobs)
        self._walls.setdefault(group, []).append(result.wall_s)
        compile_s = result.compile_s or 0.0
        self._rest.append(max(0.0, result.wall_s - compile_s))
        if compile_s and self._factor(group):
            self._compiles[group[2]].append(compile_s / self._factor(group))

    def block_share(self) -> float:
        """A block-scope compile over a whole-model one: the study's measured ratio once it
        compiled both, else BLOCK_COMPILE_BLOCKS of n_layer blocks."""
        block, model = self._compiles[CompileScope.BLOCK], self._compiles[CompileScope.MODEL]
        if block and model:
            return median(block) / median(model)
        return min(1.0, BLOCK_COMPILE_BLOCKS / self.n_layer)

    def _scope_share(self, scope: CompileScope) -> float:
        return self.block_share() if scope == CompileScope.BLOCK else 1.0

    def expected_s(self, knobs: Knobs) -> float:
        group = self.group(knobs)
        if group in self._walls:
            return median(self._walls[group])
        if not self._rest:
            return 1.0
        rest = median(self._rest)
        scope = group[2]
        if self._compiles[scope]:
            compile_s = median(self._compiles[scope])
        else:
            # From the other scope's compiles, or from the non-compile time, scaled to this one.
            other = next((s for s in CompileScope if s != scope and self._compiles[s]), None)
            whole = (
                median(self._compiles[other]) / self._scope_share(other)
                if other is not None
                else EAGER_TO_COMPILE * rest
            )
            compile_s = whole * self._scope_share(scope)
        return rest + compile_s * self._factor(group)
