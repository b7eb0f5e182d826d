"""Compatibility rules: combinations that cannot run on the target, removed before launch.

Three layers, checked in this order before any GPU time is spent:

1. Built-in rules (`incompatibility`): what the hardware, the model's shape and the worker
   cannot do (flash/cuDNN need fp16/bf16, fp8 needs compute capability >= 8.9, CUDA-only kernels
   on the CPU, ...), the parallel combinations the worker refuses (workers/distributed.py), and
   knobs that do nothing in this setup (NCCL settings with one GPU, DDP settings under FSDP2),
   whose other values would only measure the same config again.
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
from autotuner.search import liger
from autotuner.spec import (
    Attention,
    CompileMode,
    CompileScope,
    Kernels,
    Knobs,
    ModelFamily,
    ModelSpec,
    Precision,
    clip,
)

_CUDA_GRAPH_MODES = (CompileMode.REDUCE_OVERHEAD, CompileMode.MAX_AUTOTUNE)
_NCCL_KNOBS = ("nccl_algo", "nccl_proto", "nccl_min_channels", "nccl_max_channels", "nccl_buffsize")
_DDP_KNOBS = (
    "ddp_bucket_cap_mb",
    "ddp_grad_as_bucket_view",
    "ddp_static_graph",
    "grad_compression",
)
_FSDP_KNOBS = ("fsdp_reduce_dtype",)
_MULTI_GPU_KNOBS = ("parallel", *_NCCL_KNOBS, *_DDP_KNOBS, *_FSDP_KNOBS)
_DEFAULTS = Knobs()


def incompatibility(
    knobs: Knobs,
    target: Target,
    model: ModelSpec | None = None,
    num_gpus: int | None = None,
) -> str | None:
    """Why these knobs cannot run on the target (or would repeat another config), else None."""
    for check in (_device_rules, _capability_rules, _shape_rules, _kernel_rules):
        reason = check(knobs, target, model)
        if reason:
            return reason
    if num_gpus is not None and num_gpus <= 1:
        for name in _MULTI_GPU_KNOBS:
            if _changed(knobs, name):
                return (
                    f"{name}={_show(knobs, name)} does nothing with one GPU per trial (no "
                    f"collectives run); it would re-measure the default config: search it only "
                    f"with --gpus 2 or more"
                )
    if num_gpus is not None and num_gpus > 1:
        return _parallel_rules(knobs, target)
    return None


def _changed(knobs: Knobs, name: str) -> bool:
    return bool(getattr(knobs, name) != getattr(_DEFAULTS, name))


def _show(knobs: Knobs, name: str) -> str:
    value = getattr(knobs, name)
    return str(getattr(value, "value", value))


def _parallel_rules(knobs: Knobs, target: Target) -> str | None:
    """What the multi-GPU worker refuses (workers/distributed.py says why), and settings that
    do nothing under the chosen parallelism."""
    fsdp = knobs.parallel in ("fsdp2", "fsdp2-no-reshard")
    if knobs.parallel == "hsdp":
        return (
            "parallel=hsdp replicates across nodes and shards within one: it needs several "
            "nodes' worth of ranks; use fsdp2 (or fsdp2-no-reshard) on one node"
        )
    if knobs.compile_mode in _CUDA_GRAPH_MODES:
        return (
            f"compile mode {knobs.compile_mode.value!r} captures CUDA graphs, which DDP's and "
            "FSDP2's collectives break; with several GPUs use 'default' or "
            "'max-autotune-no-cudagraphs'"
        )
    if fsdp and knobs.grad_compression != "none":
        return (
            f"grad_compression={knobs.grad_compression} is a DDP communication hook; FSDP2 has "
            "none: use fsdp_reduce_dtype=bf16 for bf16 gradient reduction, or parallel=ddp"
        )
    if fsdp and knobs.precision == Precision.FP16:
        return (
            "fp16 loss scaling under FSDP2 sees one rank's gradient shard, so ranks would "
            "disagree on skipping a step: use bf16 with fsdp2, or parallel=ddp"
        )
    if target.device_type == "cpu":
        if knobs.grad_compression == "bf16":
            return "bf16 gradient compression needs NCCL; on the CPU (gloo) use fp16 or none"
        for name in _NCCL_KNOBS:
            if _changed(knobs, name):
                return f"{name} is an NCCL setting; CPU trials use gloo, where it does nothing"
    for name in _DDP_KNOBS if fsdp else _FSDP_KNOBS:
        if _changed(knobs, name):
            return (
                f"{name}={_show(knobs, name)} does nothing under parallel={knobs.parallel}; "
                "it would re-measure the same config"
            )
    return None


def _device_rules(knobs: Knobs, target: Target, model: ModelSpec | None) -> str | None:
    if target.device_type != "cpu":
        if knobs.attention in (Attention.FLASH, Attention.CUDNN) and not knobs.precision.is_half:
            return (
                f"{knobs.attention.value} attention needs fp16 or bf16, not "
                f"{knobs.precision.value}; remove {knobs.attention.value!r} or drop "
                f"{knobs.precision.value} from the space"
            )
        return None
    # The CPU (the worker's support checks say the same; here nothing is launched at all).
    if knobs.attention in (Attention.EFFICIENT, Attention.CUDNN):
        return (
            f"the {knobs.attention.value!r} SDPA backend exists only on CUDA; on the CPU use "
            "'math' or 'flash'"
        )
    if knobs.attention == Attention.FLEX:
        return "FlexAttention has no CPU backward; on the CPU use 'math' or 'flash'"
    if knobs.precision.is_fp8:
        return "fp8 training needs a CUDA GPU with compute capability >= 8.9; on the CPU use bf16"
    if knobs.precision == Precision.FP16:
        return "fp16 with loss scaling is a GPU mode; use fp32 or bf16 on the CPU"
    if knobs.precision == Precision.TF32:
        return "tf32 is a CUDA tensor-core mode; on the CPU it is fp32, use fp32"
    if knobs.compile_mode in _CUDA_GRAPH_MODES:
        return (
            f"compile mode {knobs.compile_mode.value!r} captures CUDA graphs, which need a CUDA "
            "GPU; on the CPU use 'default' or 'max-autotune-no-cudagraphs'"
        )
    if _changed(knobs, "allocator"):
        return (
            f"allocator={knobs.allocator} configures the CUDA caching allocator; the CPU does "
            "not use it, so it would re-measure the default config: leave it out on the CPU"
        )
    return None


def _capability_rules(knobs: Knobs, target: Target, model: ModelSpec | None) -> str | None:
    cc = target.compute_capability
    if target.device_type == "cpu" or cc is None:
        return None
    name = f"{cc[0]}.{cc[1]}"
    if knobs.precision.is_fp8 and cc < (8, 9):
        return f"fp8 training needs compute capability >= 8.9 (Ada/Hopper); this GPU is {name}"
    if knobs.precision == Precision.BF16 and cc < (8, 0):
        return f"bf16 needs compute capability >= 8.0 (Ampere); this GPU is {name}: use fp16"
    if knobs.attention in (Attention.FLASH, Attention.CUDNN) and cc < (8, 0):
        return (
            f"{knobs.attention.value} attention needs compute capability >= 8.0 (Ampere); this "
            f"GPU is {name}: use 'efficient'"
        )
    if knobs.precision == Precision.TF32 and cc < (8, 0):
        return f"tf32 needs compute capability >= 8.0 (Ampere); this GPU is {name}: use fp32"
    return None


def _shape_rules(knobs: Knobs, target: Target, model: ModelSpec | None) -> str | None:
    if model is None:
        return None
    hd = model.head_dim
    if knobs.attention == Attention.FLASH and target.device_type != "cpu" and (hd > 256 or hd % 8):
        return (
            f"flash attention needs head_dim <= 256 and a multiple of 8; this model's is "
            f"{hd}: use 'efficient' or 'math'"
        )
    if knobs.precision.is_fp8 and (model.d_model % 16 or model.ffn_dim % 16):
        return (
            f"fp8 matmuls need dims that are multiples of 16 (d_model={model.d_model}, "
            f"ffn={model.ffn_dim}), so no layer would convert: use bf16"
        )
    return None


def _kernel_rules(knobs: Knobs, target: Target, model: ModelSpec | None) -> str | None:
    """compile_scope and kernels: settings that do nothing, and Liger's coverage."""
    if knobs.compile_scope == CompileScope.BLOCK and knobs.compile_mode == CompileMode.NONE:
        return (
            "compile_scope=block does nothing with compile_mode=none (nothing is compiled); it "
            "would re-measure the same config: search compile_scope with a compile mode"
        )
    if knobs.kernels == Kernels.NONE:
        return None
    if target.device_type == "cpu":
        return (
            f"kernels={knobs.kernels} runs Liger-Kernel's Triton kernels, which need a CUDA GPU; "
            "on the CPU leave kernels out of the space (or set it to none)"
        )
    if model is None:
        return None
    if model.family == ModelFamily.FACTORY:
        # The factory's model returns logits (docs/models.md): the fused loss needs the hidden
        # states and the output layer, which only the model's own code can hand over.
        return (
            f"kernels={knobs.kernels} needs the model's output layer and hidden states, and a "
            "factory model returns logits: leave kernels out of the space for a factory model"
        )
    if knobs.kernels == Kernels.LIGER and not liger.patches(model):
        return (
            f"kernels=liger has no kernels for Hugging Face model_type "
            f"{liger.hf_model_type(model)!r}: Liger {liger.LIGER_VERSION} patches "
            f"{liger.covered_types()}; use kernels=fused-ce (the fused loss needs no patch)"
        )
    return None


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
        return all(_as_str(flat.get(k)) == v for k, v in self.match)

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
