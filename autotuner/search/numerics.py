"""The numerics check of the recommendation (docs/measurement.md, "fp8 and other numerics changes").

A winner whose precision changes the numerics (fp16, tf32, fp8-tensorwise, fp8-rowwise), whose
optimizer keeps 8-bit moments (adamw-8bit), or whose loss runs in fused kernels (kernels
fused-ce or liger: Liger's cross-entropy over chunks of rows, its gradient accumulated in the
weight's dtype chunk by chunk; liger's norms and SwiGLU too; cce: cut-cross-entropy's, which
skips the gradient blocks below bf16's resolution) is only recommended once a short loss-parity
check agrees with the reference: bf16 where the hardware runs it, else fp32, with fp32 AdamW
moments and the unfused loss (kernels none). The check is two parity runs
(`MeasureSettings.parity_steps`): the reference first (purpose `parity-ref`: the same knobs at the
reference precision), then the candidate itself: inside its headroom check (a `headroom` row whose
config has parity_steps: the steps before its warm-up, one process and one compile for both checks;
`headroom_plan`), or, with no headroom check, a trial of its own (purpose `parity`). Both train
PARITY_STEPS steps of one micro-batch from the same seed on the same learnable token stream, so
their loss curves compare step by step.

The measure: the mean absolute difference of the two curves over their last TAIL_SHARE of
steps, relative to the reference's mean loss there. The tolerance is TOLERANCE_REL (2%):
recipes that train correctly differ by rounding noise only (bf16 against fp32 on the CPU worker:
0.004%; on a GPU a few tenths of a percent), while a broken recipe learns visibly slower (the
test fault `numerics_drift`, gradients underflowing as in fp16 without loss scaling: 10%). The
early steps are left out: every recipe starts from the same loss, log(vocab), and the difference
that matters is where training is heading.

A candidate that fails is marked `numerics` (its parity trial is stored infeasible with the
measured difference) and the next candidate is recommended; if that one changes numerics too it
is checked in turn, at most MAX_CHECKED candidates per study. The parity trials come out of the
end-of-study reserve (search/remeasure.py) and, like the multi-GPU `reference` trial, are never
told to the sampler and never candidates themselves (END_CHECKS).

A parity trial's row carries the params of the candidate it checks (the `parity-ref` row too,
as the multi-GPU `reference` row does); its config holds what really ran (the reference
precision, `measure.parity_steps`). The trial rows are the state: the coordinator asks
`next_parity` what to run next and the recommendation asks `choose` which candidate wins, both
from the same rows, so a restarted coordinator carries on where the last one stopped (a parity
trial lost or failed for infra reasons runs once more, as a new row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from autotuner.executors.base import Target
from autotuner.purpose import Purpose
from autotuner.search.ended_checks import CHANGING_VALUES as CHANGING_VALUES
from autotuner.search.ended_checks import numerics_as_ended as as_ended  # noqa: F401  (its callers' name)
from autotuner.search.rules import incompatibility
from autotuner.search.space import SearchSpace
from autotuner.spec import (
    Attention,
    Checkpointing,
    CompileMode,
    CompileScope,
    FailureClass,
    Kernels,
    Knobs,
    ModelFamily,
    ModelSpec,
    Optimizer,
    Precision,
    TrialResult,
    canonical_params,
)
from autotuner.storage.models import Trial, TrialState

PARITY_STEPS = 50  # long enough to leave the log(vocab) start; a few seconds on a GPU
TAIL_SHARE = 0.2  # the last 20% of the steps are compared
TOLERANCE_REL = 0.02  # mean |candidate - reference| over the tail / reference loss there
MAX_CHECKED = 2  # candidates checked per study: the winner, then the runner-up
PARITY_RESERVE = 2  # trials the end-of-study reserve keeps for one check
# Precisions whose numerics differ from the reference (bf16, else fp32): ended_checks.py's.
CHANGES_NUMERICS = frozenset(Precision(value) for value in CHANGING_VALUES)

State = Literal["pending", "passed", "failed", "unchecked"]


def numerics_name(knobs: Knobs) -> str:
    """The numerics a config trains with, in words: its precision, its optimizer's moments
    where they are 8-bit, and the fused kernels where it runs them."""
    parts = [knobs.precision.value]
    if knobs.optimizer == Optimizer.ADAMW_8BIT:
        parts.append("8-bit AdamW moments")
    if knobs.kernels == Kernels.CCE:
        parts.append("cut-cross-entropy's fused loss")
    elif knobs.kernels != Kernels.NONE:
        parts.append(f"Liger's {knobs.kernels.value} kernels")
    return " with ".join(parts[:2]) + (f" and {parts[2]}" if len(parts) > 2 else "")


def changes_numerics(knobs: Knobs) -> bool:
    """A precision of CHANGES_NUMERICS, 8-bit optimizer moments (quantised every step), or
    fused kernels (Liger's loss and its gradient computed chunk by chunk, cut-cross-entropy's
    with its gradient filter)."""
    return (
        knobs.precision in CHANGES_NUMERICS
        or knobs.optimizer == Optimizer.ADAMW_8BIT
        or knobs.kernels != Kernels.NONE
    )


def space_changes_numerics(space: SearchSpace, target: Target) -> bool:
    """Whether the space holds a numerics-changing precision the target can run (then the
    end-of-study reserve keeps PARITY_RESERVE trials for the check)."""
    optimizers = space.knobs.get("optimizer")
    if isinstance(optimizers, list) and Optimizer.ADAMW_8BIT.value in optimizers:
        return True
    kernels = space.knobs.get("kernels")
    values = kernels if isinstance(kernels, list) else [space.fixed.get("kernels", "none")]
    for value in values:
        fused = Knobs(kernels=Kernels(value), precision=Precision.BF16, attention=Attention.MATH)
        if fused.kernels != Kernels.NONE and incompatibility(fused, target) is None:
            return True
    domain = space.knobs.get("precision")
    values = domain if isinstance(domain, list) else [space.fixed.get("precision", "bf16")]
    for value in values:
        knobs = Knobs(precision=Precision(value), attention=Attention.MATH)
        if knobs.precision in CHANGES_NUMERICS and incompatibility(knobs, target) is None:
            return True
    return False


def parity_reference_knobs(knobs: Knobs, target: Target, model: ModelSpec | None) -> Knobs | None:
    """The candidate's knobs at the reference precision: bf16 where the target runs it, else
    fp32 (with the attention backend a full-precision run has, if the candidate's needs half
    precision). None when neither runs here."""
    options: list[dict[str, Any]] = [
        {"precision": Precision.BF16},
        {"precision": Precision.FP32},
        {
            "precision": Precision.FP32,
            "attention": Attention.MATH if target.device_type == "cpu" else Attention.EFFICIENT,
        },
    ]
    base: dict[str, Any] = {}
    if knobs.optimizer == Optimizer.ADAMW_8BIT:
        # fp32 moments. The model's graph is the candidate's (the optimizer is not compiled
        # with it), so the reference's compile is warm; where the 6 B/param the 8-bit moments
        # freed were spent on activations the reference may not fit: the caller who knows the
        # memory turns on full checkpointing then (`needs_recompute`).
        base = {"optimizer": Optimizer.ADAMW_FUSED}
    if knobs.kernels != Kernels.NONE:
        # The unfused loss (and norms, SwiGLU, RoPE): the model's own arithmetic. It keeps the
        # logits the fused loss never materialised; the caller who knows the memory turns on
        # full checkpointing where they would not fit (`with_recompute`).
        base["kernels"] = Kernels.NONE
    for update in options:
        ref = knobs.model_copy(update={**base, **update})
        if incompatibility(ref, target, model) is None:
            return ref
    return None


# Knobs that change how the same arithmetic is scheduled, not what is computed: an exact
# attention kernel for another (flash, cuDNN, memory-efficient, flex: the same softmax, rounded
# differently), or a compile mode for another (kernel fusion, CUDA graphs). The reference may
# take them from a config the study already compiled: its compile is then warm (the study's
# compile cache), where the candidate's own knobs at bf16 are a graph nobody built (a cold
# bf16 compile: 94 s of a 10-minute Llama 3B study on the H200, bench/results/
# h200_session_20261204g). Their rounding differences are far inside TOLERANCE_REL (bf16
# against fp32: 0.004% on the CPU). Checkpointing and vocab padding are not among them: the
# first sets what fits (an 8-bit candidate's reference recomputes every block to fit), the
# second the logits the loss is taken over.
NEUTRAL_ATTENTION = frozenset(
    {Attention.FLASH, Attention.CUDNN, Attention.EFFICIENT, Attention.FLEX}
)


def with_recompute(reference: Knobs) -> Knobs:
    """An 8-bit candidate's reference that would not fit at the candidate's checkpointing
    (Llama 8B on one H200: fp32 moments take 45 GiB more): every block recomputed, which
    repeats the same forward, so the loss curve is the one the candidate's checkpointing gives."""
    return reference.model_copy(update={"checkpointing": Checkpointing.FULL})


def cold_reference(reference: Knobs, model: ModelSpec | None) -> Knobs:
    """A reference that no compiled graph serves compiles cold: per block (compile_scope
    block), which traces one block whatever the depth and compiles the output layer with the
    loss as a region of its own, the same arithmetic as the whole-model graph (7-9 s against
    29-54 s for 1-3B Hugging Face models on the H200, bench/results/hf_knobs_h200). Not for a
    factory model, whose blocks may not be a list of like modules (workers/compiling.py)."""
    whole = reference.compile_mode != CompileMode.NONE and reference.compile_scope == (
        CompileScope.MODEL
    )
    if not whole or model is None or model.family == ModelFamily.FACTORY:
        return reference
    return reference.model_copy(update={"compile_scope": CompileScope.BLOCK})


def warm_reference(
    reference: Knobs, compiled: Sequence[Knobs], cold: Callable[[Knobs], Knobs] = lambda k: k
) -> Knobs:
    """`reference` with the attention kernel and compile mode of a config the study already
    ran (`compiled`, earliest first) that differs from it in nothing else but its optimizer
    (not compiled with the model); `reference` itself where its own graph was compiled, and
    `cold(reference)` where nothing alike was."""
    if reference.attention not in NEUTRAL_ATTENTION:
        return cold(reference)
    neutral = {"attention", "compile_mode", "compile_scope", "grad_accum", "optimizer"}
    fields = set(Knobs.model_fields) - neutral
    want = reference.model_dump(include=fields)
    matches = [
        k
        for k in compiled
        if k.attention in NEUTRAL_ATTENTION and k.model_dump(include=fields) == want
    ]
    if not matches:
        return cold(reference)
    same = (reference.attention, reference.compile_mode, reference.compile_scope)
    if any((k.attention, k.compile_mode, k.compile_scope) == same for k in matches):
        return reference
    first = matches[0]
    return reference.model_copy(
        update={
            "attention": first.attention,
            "compile_mode": first.compile_mode,
            "compile_scope": first.compile_scope,
        }
    )


def compare_curves(candidate: Sequence[float], reference: Sequence[float]) -> tuple[float, int]:
    """(difference, steps compared): mean |candidate - reference| over the last TAIL_SHARE of
    the steps, relative to the reference's mean loss over them."""
    n = min(len(candidate), len(reference))
    if n == 0:
        raise ValueError("a parity check needs two non-empty loss curves")
    tail = max(1, round(n * TAIL_SHARE))
    c, r = candidate[n - tail : n], reference[n - tail : n]
    diff = sum(abs(a - b) for a, b in zip(c, r, strict=True)) / tail
    return diff / max(abs(sum(r) / tail), 1e-12), tail


# --------------------------------------------------------------------------- from trial rows


class Candidate(Protocol):
    """What the checks need of a ranked config (study/measurements.py ConfigMeasurements)."""

    @property
    def key(self) -> str: ...

    @property
    def first(self) -> Trial: ...


def candidate_knobs(group: Candidate) -> Knobs:
    return Knobs.model_validate(group.first.config.get("knobs", {}))


@dataclass
class Check:
    """One candidate's parity check, as its trial rows tell it."""

    state: State
    text: str
    reference_precision: str | None = None
    diff_rel: float | None = None
    steps: int | None = None
    trials: list[int] = field(default_factory=list)
    next: str | None = None  # the purpose to dispatch next (pending checks)

    def entry(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reference_precision": self.reference_precision,
            "diff_rel": self.diff_rel,
            "steps": self.steps,
            "parity_trials": self.trials,
        }


PARITY_ATTEMPTS = 2  # a parity trial lost or failed for infra reasons runs once more


def runs_parity_steps(t: Trial) -> bool:
    """A headroom check that is also the candidate's parity run (its measure.parity_steps)."""
    return t.purpose == Purpose.HEADROOM and bool(
        (t.config.get("measure") or {}).get("parity_steps")
    )


def _is_candidate_run(t: Trial) -> bool:
    return t.purpose == Purpose.PARITY or runs_parity_steps(t)


def last_row(trials: Sequence[Trial], key: str, purpose: str) -> Trial | None:
    """The parity row of this purpose for `key` that counts; None when it is (again) to run:
    never run, or failed for infra reasons (lost, crash, timeout) with an attempt left.
    Purpose.PARITY also finds a headroom check that ran the candidate's parity steps."""
    match = _is_candidate_run if purpose == Purpose.PARITY else (lambda t: t.purpose == purpose)
    rows = [t for t in trials if match(t) and canonical_params(t.params) == key]
    if not rows:
        return None
    infra = TrialState(rows[-1].state) in (TrialState.FAILED, TrialState.LOST)
    return None if infra and len(rows) < PARITY_ATTEMPTS else rows[-1]


def loss_curve(t: Trial) -> list[float] | None:
    if not t.result:
        return None
    return TrialResult.model_validate(t.result).loss_curve


def reference_label(ref: Trial) -> str:
    """The reference in words: its precision, and its moments where the candidate's 8-bit
    ones are checked (a `parity-ref` row holds the params of the candidate it checks)."""
    precision = Knobs.model_validate(ref.config.get("knobs", {})).precision.value
    params = ref.params or {}
    parts = [precision]
    if params.get("optimizer") == Optimizer.ADAMW_8BIT.value:
        parts.append("fp32 AdamW moments")
    if params.get("kernels", Kernels.NONE.value) != Kernels.NONE.value:
        parts.append("the unfused loss")
    return " with ".join(parts[:2]) + (f" and {parts[2]}" if len(parts) > 2 else "")


def _borrowed(reference: Trial) -> str:
    """What the reference took from a graph the study had compiled (warm_reference), or that
    it compiled per block (cold_reference), said."""
    ran = Knobs.model_validate(reference.config.get("knobs", {}))
    params = reference.params or {}
    parts = []
    if "attention" in params and params["attention"] != ran.attention.value:
        parts.append(f"{ran.attention.value} attention")
    if "compile_mode" in params and params["compile_mode"] != ran.compile_mode.value:
        parts.append(f"compile mode {ran.compile_mode.value}")
    scope = params.get("compile_scope", "model") != ran.compile_scope.value
    if not parts and scope:
        return "; the reference compiled per block (the same arithmetic, a cheaper compile)"
    if scope:
        parts.append(f"compile scope {ran.compile_scope.value}")
    if not parts:
        return ""
    return f"; the reference ran {' and '.join(parts)}, a graph the study had compiled"


def verdict(candidate: TrialResult, reference: Trial) -> Check:
    """Compare a finished candidate parity result with its reference's row."""
    ref_knobs = Knobs.model_validate(reference.config.get("knobs", {}))
    ref_prec, label = ref_knobs.precision.value, reference_label(reference)
    ref_curve = loss_curve(reference)
    curve = candidate.loss_curve
    if ref_curve is None or not curve:
        return Check("unchecked", "not checked: a parity trial returned no loss curve", ref_prec)
    diff, tail = compare_curves(curve, ref_curve)
    passed = diff <= TOLERANCE_REL
    n = min(len(curve), len(ref_curve))
    text = (
        f"loss within {diff:.2%} of {label} over the last {tail} of {n} parity steps "
        f"(tolerance {TOLERANCE_REL:.0%})"
        if passed
        else f"loss {diff:.2%} away from {label} over the last {tail} of {n} parity steps, "
        f"beyond the tolerance of {TOLERANCE_REL:.0%}: its numerics do not match the reference"
    ) + _borrowed(reference)
    return Check("passed" if passed else "failed", text, ref_prec, diff, n)


def check_of(key: str, trials: Sequence[Trial]) -> Check | None:
    """The parity check of the config `key`; None when it never started."""
    ref = last_row(trials, key, Purpose.PARITY_REFERENCE)
    if ref is None:
        return None
    ref_knobs = Knobs.model_validate(ref.config.get("knobs", {}))
    ref_prec, label = ref_knobs.precision.value, reference_label(ref)
    state = TrialState(ref.state)
    if state == TrialState.RUNNING:
        return Check("pending", "the parity check is running", ref_prec, trials=[ref.number])
    if state != TrialState.COMPLETE:
        why = f"{ref.error_class}: {ref.error_message or ''}".strip(": ")
        return Check(
            "unchecked",
            f"not checked: the {label} reference parity trial #{ref.number} failed ({why})",
            ref_prec,
            trials=[ref.number],
        )
    cand = last_row(trials, key, Purpose.PARITY)
    if cand is None:
        return Check(
            "pending",
            "the parity check is half done",
            ref_prec,
            trials=[ref.number],
            next=Purpose.PARITY,
        )
    numbers = [ref.number, cand.number]
    cstate = TrialState(cand.state)
    if cstate == TrialState.RUNNING:
        return Check("pending", "the parity check is running", ref_prec, trials=numbers)
    result = TrialResult.model_validate(cand.result) if cand.result else None
    if result is not None and result.loss_curve:
        out = verdict(result, ref)
        out.trials = numbers
        return out
    if cand.error_class == FailureClass.NUMERICS.value:
        return Check(
            "failed",
            f"its parity trial #{cand.number} did not train: {cand.error_message or 'numerics'}",
            ref_prec,
            trials=numbers,
        )
    why = f"{cand.error_class}: {cand.error_message or ''}".strip(": ")
    return Check(
        "unchecked",
        f"not checked: its parity trial #{cand.number} failed ({why})",
        ref_prec,
        trials=numbers,
    )


def checks_of(ranked: Sequence[Candidate], trials: Sequence[Trial]) -> dict[str, Check]:
    # Only parity rows make a check: filter once, not once per candidate (8,000 candidates in
    # a 10,000-trial study scanned every trial each, 60 s, before this).
    trials = [t for t in trials if t.purpose == Purpose.PARITY_REFERENCE or _is_candidate_run(t)]
    out = {}
    for g in ranked:
        check = check_of(g.key, trials)
        if check is not None:
            out[g.key] = check
    return out


def choose(ranked: Sequence[Candidate], checks: dict[str, Check]) -> int | None:
    """Index of the config to recommend: the best-ranked one not failed. Once MAX_CHECKED
    candidates failed, an unchecked numerics-changing one is passed over too, for a config with
    the reference's numerics if there is one. None when every config failed."""
    failed = sum(1 for c in checks.values() if c.state == "failed")
    # Read every candidate's knobs only when the bound is reached (each is a config to load).
    plain = failed >= MAX_CHECKED and any(not changes_numerics(candidate_knobs(g)) for g in ranked)
    for i, g in enumerate(ranked):
        check = checks.get(g.key)
        if check is not None and check.state == "failed":
            continue
        unchecked = plain and check is None and changes_numerics(candidate_knobs(g))
        if unchecked:
            continue
        return i
    return None


def prefer_reference_numerics(
    ranked: Sequence[Candidate], chosen: int, checks: dict[str, Check], tied: Sequence[int]
) -> int:
    """Index of the config to recommend once ties are weighed: ranked[chosen], unless it
    changes numerics without a passed check and one of `tied` (indices of configs within the
    noise of it, fastest first) keeps the reference's numerics; then that one. A tie means
    either config will do, and only one of them carries a risk nobody measured (a Llama 8B
    study on the H200 ended with unchecked 8-bit AdamW moments 1.6% ahead of fused AdamW,
    inside a 2.4% noise)."""
    g = ranked[chosen]
    check = checks.get(g.key)
    if (check is not None and check.state == "passed") or not changes_numerics(candidate_knobs(g)):
        return chosen
    for i in tied:
        if not changes_numerics(candidate_knobs(ranked[i])):
            return i
    return chosen


def next_parity(
    ranked: Sequence[Candidate], trials: Sequence[Trial]
) -> tuple[Candidate, str] | None:
    """The next parity trial to run, as (candidate, purpose), or None when no check is due:
    the config to recommend has the reference's numerics, is checked, or is past the bound."""
    checks = checks_of(ranked, trials)
    i = choose(ranked, checks)
    if i is None:
        return None
    g = ranked[i]
    if not changes_numerics(candidate_knobs(g)):
        return None
    check = checks.get(g.key)
    if check is None:
        started = sum(1 for c in checks.values() if c.trials)
        return (g, Purpose.PARITY_REFERENCE) if started < MAX_CHECKED else None
    return (g, check.next) if check.next else None


Plan = Literal["alone", "reference first", "with parity"]


def headroom_plan(
    group: Candidate, ranked: Sequence[Candidate], trials: Sequence[Trial], *, room: int | None
) -> Plan:
    """How the headroom check of `group` runs, by the numerics check that config is due:
    `with parity` (the reference is done: the check runs the candidate's parity steps first,
    one process and one compile for both checks), `reference first` (the reference is not run
    yet: it goes first), or `alone` (no numerics check is due for it, or only one trial is
    left in the budget, `room`: the headroom check takes it alone)."""
    planned = next_parity(ranked, trials)
    if planned is None or planned[0].key != group.key:
        return "alone"
    if planned[1] == Purpose.PARITY:
        return "with parity"
    return "reference first" if room is None or room >= 2 else "alone"
