"""Compatibility rules: combinations that cannot run on the target, removed before launch.

Three layers, checked in this order before any GPU time is spent:

1. Built-in rules (`incompatibility`): what the hardware, the model's shape and the worker
   cannot do (flash/cuDNN need fp16/bf16, fp8 needs compute capability >= 8.9, CUDA-only kernels
   on the CPU, ...), the parallel combinations the worker refuses, and knobs that do nothing in
   this setup (NCCL settings with one GPU, DDP settings under FSDP2), whose other values would
   only measure the same config again. The table is autotuner/spec/support_rules.py, which the
   worker's support check (workers/support.py) reads too: the two cannot disagree.
2. The space's own rules (`rules:` in a space file), see autotuner/space.py.
3. Learned rules (`LearnedRules`): what a worker reported as `unsupported` in this study. The
   rule covers exactly the knob values the worker names as the cause
   (`TrialResult.unsupported_knobs`); when it names none, the (attention, precision,
   compile_mode) of the failing trial, the narrowest projection that still covers every
   kernel-availability failure we know of.

Each rule returns a remedy-style reason, so a pruned trial says what to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotuner.executors.base import Target
from autotuner.spec import (
    Hardware,
    Knobs,
    ModelSpec,
    Verdict,
    clip,
    support_verdicts,
)


def incompatibility(
    knobs: Knobs,
    target: Target,
    model: ModelSpec | None = None,
    num_gpus: int | None = None,
) -> str | None:
    """Why these knobs cannot run on the target (or would repeat another config), else None."""
    verdict = builtin_verdict(knobs, target, model, num_gpus)
    return verdict.message if verdict is not None else None


def builtin_verdict(
    knobs: Knobs,
    target: Target,
    model: ModelSpec | None = None,
    num_gpus: int | None = None,
) -> Verdict | None:
    """The first built-in verdict on these knobs (autotuner/spec/support_rules.py, the table the
    worker reads too): what cannot run here before what is not worth a trial. The workers'
    packages are unknown here, so none is judged."""
    hardware = Hardware(target.device_type, target.compute_capability, target.device_name)
    return next(support_verdicts(knobs, hardware, model=model, num_gpus=num_gpus), None)


def decided_verdict(
    knobs: Knobs,
    target: Target,
    model: ModelSpec | None,
    num_gpus: int | None,
    decided: set[str],
) -> Verdict | None:
    """The first built-in verdict on these knobs that the `decided` knobs bring about alone:
    every knob it blames is decided (or it blames none). One that blames a knob still to be
    chosen says nothing about the choices so far (the expert default's, made one knob at a
    time with the others at a placeholder: search/seeding.py)."""
    hardware = Hardware(target.device_type, target.compute_capability, target.device_name)
    verdicts = support_verdicts(knobs, hardware, model=model, num_gpus=num_gpus)
    return next((v for v in verdicts if set(v.knobs) <= decided), None)


# --------------------------------------------------------------------------- learned rules

# The fallback granularity when a worker does not name the cause: kernel availability depends
# on these three (and the hardware, which is fixed within a study).
FALLBACK_PROJECTION = ("attention", "precision", "compile_mode")


@dataclass(frozen=True)
class LearnedRule:
    """Knob values that a worker could not run; any config matching all of them is pruned."""

    match: tuple[tuple[str, str], ...]
    trial_number: int | None
    message: str

    def matches(self, flat: dict[str, Any]) -> bool:
        return all(_as_str(flat.get(k)) == v and not _inert(k, flat) for k, v in self.match)

    def describe(self) -> str:
        values = ", ".join(f"{k}={v}" for k, v in self.match)
        src = f"trial {self.trial_number}" if self.trial_number is not None else "a worker"
        return f"learned from {src}: {values} is unsupported here ({clip(self.message, 200)})"


# A failure that names no knob but repeats (compile errors): once this many trials failed with
# one value of a kernel-selecting knob that no trial ever ran with, that value is learned as
# unsupported. Seen on the H200: GPT-2 with reduce-overhead failed the same way under four
# attention kernels, two precisions and three micro-batches: 11 of a study's 20 trials.
REPEATED_FAILURES = 2
REPEATED_PROJECTION = ("compile_mode", "attention", "precision")  # the likelier cause first


# Knobs that do nothing where another knob has a value: a failure blamed on such a knob says
# nothing about configs where it is inert. A whole-model compile that could not trace Liger's
# kernels ({kernels, compile_scope: model}) must not prune the same kernels run eagerly, which
# also carry compile_scope model and are the kernels' fastest uncompiled configs.
INERT_WHERE = {"compile_scope": ("compile_mode", "none")}


def _inert(knob: str, flat: dict[str, Any]) -> bool:
    other = INERT_WHERE.get(knob)
    return other is not None and _as_str(flat.get(other[0])) == other[1]


class LearnedRules:
    """Unsupported combinations learned from this study's trials (never proposed again)."""

    def __init__(self) -> None:
        self.rules: list[LearnedRule] = []
        self._ran: set[tuple[str, str]] = set()  # knob values of configs that ran
        self._failed: dict[tuple[str, str], list[int | None]] = {}  # value -> failed trials

    def observe(self, knobs: Knobs, ran: bool) -> None:
        """A finished trial; one that ran (measured) shows its knob values can run, so no
        repeated-failure rule will name them."""
        if ran:
            flat = knobs.model_dump(mode="json")
            self._ran.update((k, _as_str(flat[k])) for k in REPEATED_PROJECTION if k in flat)

    def learn_repeated(
        self, knobs: Knobs, trial_number: int | None, message: str | None
    ) -> LearnedRule | None:
        """A failure that names no knob: the rule, once a kernel-selecting knob value failed
        REPEATED_FAILURES times and never ran."""
        flat = knobs.model_dump(mode="json")
        for key in ((k, _as_str(flat[k])) for k in REPEATED_PROJECTION if k in flat):
            self._failed.setdefault(key, []).append(trial_number)
        for key in ((k, _as_str(flat[k])) for k in REPEATED_PROJECTION if k in flat):
            failed = self._failed[key]
            if key in self._ran or len(failed) < REPEATED_FAILURES:
                continue
            for rule in self.rules:
                if rule.match == (key,):
                    return rule
            trials = ", ".join(f"#{n}" for n in failed if n is not None)
            text = f"failed the same way in {len(failed)} trials ({trials}) and never ran"
            rule = LearnedRule((key,), trial_number, f"{text}: {message or 'compile error'}")
            self.rules.append(rule)
            return rule
        return None

    def learn(
        self,
        knobs: Knobs,
        unsupported_knobs: dict[str, Any] | None,
        trial_number: int | None,
        message: str | None,
    ) -> LearnedRule:
        flat = knobs.model_dump(mode="json")
        named = {k: v for k, v in (unsupported_knobs or {}).items() if k in flat}
        if not named:
            named = {k: flat[k] for k in FALLBACK_PROJECTION}
        match = tuple(sorted((k, _as_str(v)) for k, v in named.items()))
        for rule in self.rules:
            if rule.match == match:
                return rule
        rule = LearnedRule(match, trial_number, message or "unsupported")
        self.rules.append(rule)
        return rule

    def violated_by(self, knobs: Knobs) -> LearnedRule | None:
        flat = knobs.model_dump(mode="json")
        return next((r for r in self.rules if r.matches(flat)), None)


def _as_str(value: Any) -> str:
    return str(getattr(value, "value", value))
