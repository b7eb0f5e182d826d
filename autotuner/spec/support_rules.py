"""Which knob combinations cannot run where: the one table that both the search's screen
(autotuner/search/rules.py, before anything is launched) and the worker's support check
(workers/support.py, before anything is built) read, so the two cannot disagree.

It lives in the contract package because both planes read it, and it is plain Python: it takes
plain values (the knobs, the hardware as either side sees it, the model, the GPUs per trial,
the packages the worker can import) and returns verdicts: the reason with its remedy, and the
knob values to blame (TrialResult.unsupported_knobs). Three kinds:

- CANNOT_RUN: no kernel or feature for it on this hardware or model. The worker refuses it as
  `unsupported`; the search never proposes it.
- NEEDS_PACKAGE: the knob value needs a package the worker cannot import (the worker's
  EnvironmentProblem: the study stops with the install line). The control plane does not know
  the workers' packages and passes none, which skips these.
- NOT_WORTH_A_TRIAL: it runs, but the search has no reason to spend a trial on it: a knob that
  does nothing here would re-measure another config, and fp16 on the CPU is a GPU mode. The
  worker runs such a config when asked (its tests do, and the result's notes name the knobs
  that did nothing: workers/device.py).

Every CANNOT_RUN rule comes before any other verdict, so where the worker refuses a config the
search's reason for it is the worker's, word for word (tests/workers/test_support_agreement.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from autotuner.spec import liger
from autotuner.spec.knobs import (
    Attention,
    CompileMode,
    CompileScope,
    Kernels,
    Knobs,
    Optimizer,
    Precision,
)
from autotuner.spec.model import ModelFamily, ModelSpec

_CUDA_ONLY_SDPA = (Attention.EFFICIENT, Attention.CUDNN)
_HALF_ONLY_SDPA = (Attention.FLASH, Attention.CUDNN)
_CUDA_GRAPH_MODES = (CompileMode.REDUCE_OVERHEAD, CompileMode.MAX_AUTOTUNE)
_FSDP = ("fsdp2", "fsdp2-no-reshard")
NCCL_KNOBS = ("nccl_algo", "nccl_proto", "nccl_min_channels", "nccl_max_channels", "nccl_buffsize")
DDP_KNOBS = ("ddp_bucket_cap_mb", "ddp_grad_as_bucket_view", "ddp_static_graph", "grad_compression")
FSDP_KNOBS = ("fsdp_reduce_dtype",)
MULTI_GPU_KNOBS = ("parallel", *NCCL_KNOBS, *DDP_KNOBS, *FSDP_KNOBS)
_DEFAULTS = Knobs()


class RuleKind(StrEnum):
    CANNOT_RUN = "cannot-run"
    NEEDS_PACKAGE = "needs-package"
    NOT_WORTH_A_TRIAL = "not-worth-a-trial"


@dataclass(frozen=True)
class Hardware:
    """What a trial runs on, as plain values: the control plane's Target and the worker's
    torch device both describe themselves this way."""

    device_type: str  # "cuda" or "cpu"
    compute_capability: tuple[int, int] | None = None  # unknown to the control plane at times
    name: str | None = None

    @property
    def on_cuda(self) -> bool:
        return self.device_type == "cuda"


@dataclass(frozen=True)
class Verdict:
    """Why a config is not run: the reason with its remedy, and the knob values to blame."""

    kind: RuleKind
    message: str
    knobs: dict[str, Any]


def support_verdicts(
    knobs: Knobs,
    hardware: Hardware,
    *,
    model: ModelSpec | None = None,
    num_gpus: int | None = None,
    packages: frozenset[str] | None = None,
) -> Iterator[Verdict]:
    """Every verdict on this config, CANNOT_RUN first. `num_gpus` None leaves out the rules
    of the GPUs per trial (callers that judge one device's kernels); `packages` None leaves out
    the packages (the control plane does not know the workers')."""
    yield from _device(knobs, hardware)
    yield from _capability(knobs, hardware)
    yield from _kernels(knobs)
    yield from _shape(knobs, hardware, model)
    yield from _model(knobs, model)
    multi = num_gpus is not None and num_gpus > 1
    parallel = list(parallel_verdicts(knobs, hardware.device_type)) if multi else []
    yield from (v for v in parallel if v.kind == RuleKind.CANNOT_RUN)
    if packages is not None:
        for package, message, blamed in _package_needs(knobs):
            if package not in packages:
                yield Verdict(RuleKind.NEEDS_PACKAGE, message, blamed)
    yield from _not_worth(knobs, hardware, model)
    if num_gpus is not None and num_gpus <= 1:
        for name in MULTI_GPU_KNOBS:
            if _changed(knobs, name):
                yield _pointless(
                    f"{name}={_show(knobs, name)} does nothing with one GPU per trial (no "
                    f"collectives run); it would re-measure the default config: search it only "
                    f"with --gpus 2 or more",
                    knobs,
                    name,
                )
    yield from (v for v in parallel if v.kind != RuleKind.CANNOT_RUN)


def packages_needed(knobs: Knobs) -> set[str]:
    """The packages these knob values need on the worker (the ones it checks it can import)."""
    return {package for package, _, _ in _package_needs(knobs)}


def parallel_verdicts(knobs: Knobs, device_type: str) -> Iterator[Verdict]:
    """A multi-GPU trial's parallel knobs: what the multi-GPU worker refuses
    (workers/distributed.py says how it runs the rest), and settings that do nothing under the
    chosen parallelism."""
    parallel = {"parallel": knobs.parallel}
    fsdp = knobs.parallel in _FSDP
    if knobs.parallel == "hsdp":
        # HSDP replicates across nodes and shards within one; with the ranks of one node it is
        # fsdp2 under another name, and multi-node trials are not launched.
        yield _cannot(
            "parallel=hsdp replicates across nodes and shards within one: it needs several "
            "nodes' worth of ranks; use fsdp2 (or fsdp2-no-reshard) on one node",
            parallel,
        )
    if knobs.compile_mode in _CUDA_GRAPH_MODES:
        # CUDA graphs capture fixed addresses and a fixed launch sequence: DDP's reducer
        # launches its all-reduces from autograd hooks outside the graph, and FSDP2 allocates
        # its all-gather buffers per step. Neither composes with graph capture here.
        yield _cannot(
            f"compile mode {knobs.compile_mode.value!r} captures CUDA graphs, which "
            f"{knobs.parallel}'s collectives break; with several GPUs use 'default' or "
            "'max-autotune-no-cudagraphs'",
            {**parallel, "compile_mode": knobs.compile_mode.value},
        )
    if fsdp and knobs.grad_compression != "none":
        # FSDP2 has no communication hooks; its reduce dtype is the compression it offers.
        remedy = {
            "bf16": "use fsdp_reduce_dtype=bf16, which reduce-scatters in bf16",
            "fp16": "use fsdp_reduce_dtype=bf16 (FSDP2 here reduces in fp32 or bf16)",
            "powersgd": "PowerSGD is a DDP communication hook: use parallel=ddp",
        }[knobs.grad_compression]
        yield _cannot(
            f"grad_compression={knobs.grad_compression} is a DDP communication hook and "
            f"{knobs.parallel} has none: {remedy}, and set grad_compression=none",
            {**parallel, "grad_compression": knobs.grad_compression},
        )
    if fsdp and knobs.precision == Precision.FP16:
        # GradScaler's inf check sees only this rank's gradient shard: ranks would disagree on
        # skipping a step. FSDP2 has no sharded scaler in this worker.
        yield _cannot(
            f"fp16 loss scaling under {knobs.parallel} sees one rank's gradient shard, so ranks "
            f"would disagree on skipping a step: use bf16 with {knobs.parallel}, or parallel=ddp",
            {**parallel, "precision": knobs.precision.value},
        )
    if not fsdp and knobs.grad_compression == "bf16" and device_type != "cuda":
        yield _cannot(
            "bf16 gradient compression needs NCCL >= 2.10 on CUDA (torch refuses the hook on "
            "gloo); on the CPU use grad_compression=fp16 or none",
            {"grad_compression": knobs.grad_compression},
        )
    if device_type != "cuda":
        for name in NCCL_KNOBS:
            if _changed(knobs, name):
                yield _pointless(
                    f"{name} is an NCCL setting; CPU trials use gloo, where it does nothing",
                    knobs,
                    name,
                )
    for name in DDP_KNOBS if fsdp else FSDP_KNOBS:
        if _changed(knobs, name):
            yield _pointless(
                f"{name}={_show(knobs, name)} does nothing under parallel={knobs.parallel}; "
                "it would re-measure the same config",
                knobs,
                name,
            )


def _device(knobs: Knobs, hardware: Hardware) -> Iterator[Verdict]:
    attention = {"attention": knobs.attention.value}
    precision = {"precision": knobs.precision.value}
    if hardware.on_cuda:
        if knobs.attention in _HALF_ONLY_SDPA and not knobs.precision.is_half:
            yield _cannot(
                f"{knobs.attention.value} attention needs fp16 or bf16, not "
                f"{knobs.precision.value}; remove {knobs.attention.value!r} or drop "
                f"{knobs.precision.value} from the space",
                {**attention, **precision},
            )
        return
    if knobs.attention in _CUDA_ONLY_SDPA:
        yield _cannot(
            f"the {knobs.attention.value!r} SDPA backend exists only on CUDA; on the CPU use "
            "'math' or 'flash' (PyTorch's CPU flash kernel)",
            attention,
        )
    if knobs.attention == Attention.FLEX:
        yield _cannot(
            "FlexAttention has no CPU backward; on the CPU use 'math' or 'flash'", attention
        )
    if knobs.precision.is_fp8:
        yield _cannot(
            f"{knobs.precision.value} training needs a CUDA GPU with compute capability >= 8.9 "
            "(Ada/Hopper); on the CPU use bf16",
            precision,
        )
    if knobs.precision == Precision.TF32:
        yield _cannot(
            "tf32 is a CUDA tensor-core mode; on the CPU it is fp32: use fp32 or bf16", precision
        )
    if knobs.compile_mode in _CUDA_GRAPH_MODES:
        yield _cannot(
            f"compile mode {knobs.compile_mode.value!r} captures CUDA graphs, which need a CUDA "
            "GPU; on the CPU use 'default' or 'max-autotune-no-cudagraphs'",
            {"compile_mode": knobs.compile_mode.value},
        )
    if knobs.kernels != Kernels.NONE:
        yield _cannot(
            f"kernels={knobs.kernels.value} runs {_kernels_owner(knobs.kernels)} Triton kernels, "
            "which need a CUDA GPU: on the CPU use kernels=none (or leave kernels out of the "
            "space)",
            {"kernels": knobs.kernels.value},
        )


def _kernels_owner(kernels: Kernels) -> str:
    return "cut-cross-entropy's" if kernels == Kernels.CCE else "Liger-Kernel's"


def _capability(knobs: Knobs, hardware: Hardware) -> Iterator[Verdict]:
    cc = hardware.compute_capability
    if not hardware.on_cuda or cc is None:
        return
    name = f"{cc[0]}.{cc[1]}"
    precision = {"precision": knobs.precision.value}
    if knobs.precision.is_fp8 and cc < (8, 9):
        yield _cannot(
            f"{knobs.precision.value} training needs compute capability >= 8.9 (Ada/Hopper); "
            f"this GPU is {name}: use bf16",
            precision,
        )
    if knobs.precision == Precision.BF16 and cc < (8, 0):
        yield _cannot(
            f"bf16 needs compute capability >= 8.0 (Ampere); this GPU is {name}: use fp16",
            precision,
        )
    if knobs.attention in _HALF_ONLY_SDPA and cc < (8, 0):
        yield _cannot(
            f"{knobs.attention.value} attention needs compute capability >= 8.0 (Ampere); this "
            f"GPU is {name}: use 'efficient'",
            {"attention": knobs.attention.value},
        )
    if knobs.precision == Precision.TF32 and cc < (8, 0):
        yield _cannot(
            f"tf32 needs compute capability >= 8.0 (Ampere); this GPU is {name}: use fp32",
            precision,
        )


def _shape(knobs: Knobs, hardware: Hardware, model: ModelSpec | None) -> Iterator[Verdict]:
    if model is None:
        return
    hd = model.head_dim
    if knobs.attention == Attention.FLASH and hardware.on_cuda and (hd > 256 or hd % 8):
        yield _cannot(
            f"flash attention needs head_dim <= 256 and a multiple of 8; this model's is "
            f"{hd}: use 'efficient' or 'math'",
            {"attention": knobs.attention.value},
        )
    if knobs.precision.is_fp8 and model.d_model % 16:
        # Every Linear the worker converts reads or writes d_model (workers/precision.py skips
        # the output layer), so none would convert: the worker refuses it after the build.
        yield _cannot(
            f"fp8 matmuls need dims that are multiples of 16 (d_model={model.d_model}, "
            f"ffn={model.ffn_dim}), so no layer would convert: use bf16",
            {"precision": knobs.precision.value},
        )


def _kernels(knobs: Knobs) -> Iterator[Verdict]:
    if knobs.kernels == Kernels.CCE and not knobs.precision.is_half:
        # cut_cross_entropy/cce_backward.py (25.1.1) asserts bf16 or fp16 embeddings: its
        # backward kernel has no fp32 path, so the trial would fail at its first backward.
        yield _cannot(
            f"kernels=cce needs half-precision inputs (its backward kernel takes bf16 or fp16 "
            f"only), and {knobs.precision.value} keeps the output layer's input in fp32: use "
            "bf16 (or fp16, fp8), or kernels=fused-ce",
            {"kernels": knobs.kernels.value, "precision": knobs.precision.value},
        )


# The attention backends that can cap the logits or keep a sliding window: a score function and
# a block mask (flex) or explicit matmuls (math); SDPA's fused kernels take neither
# (workers/models/attention.py).
SCORE_MOD_ATTENTION = (Attention.FLEX, Attention.MATH)


def attention_verdict(
    attention: Attention,
    *,
    cap: float | None,
    window: int | None,
    dropout: float,
    seq_len: int,
) -> Verdict | None:
    """Why this attention cannot run a model's attention as transformers does, or None: the
    model caps its logits (`cap`), attends `window` tokens back where that is fewer than
    `seq_len`, or drops attention weights out (`dropout`). The search judges what the model's
    config says (`_model`); the worker what its attention calls ask for when the model is built
    (workers/models/hf.py), in the same words."""
    if window is not None and attention not in SCORE_MOD_ATTENTION:
        return _cannot(
            f"attention={attention.value} cannot keep a sliding window, and this model's "
            f"local layers attend {window} tokens back, fewer than seq_len {seq_len} "
            "(SDPA's fused kernels would attend further, another model); use attention=flex "
            f"(a block mask, as transformers' flex_attention) or math, or seq_len <= {window}",
            {"attention": attention.value},
        )
    if dropout and attention == Attention.FLEX:
        return _cannot(
            f"attention=flex drops nothing out, and this model's attention dropout is "
            f"{dropout:g} (GPT-2's attn_pdrop is 0.1 unless set): use an SDPA "
            "attention or math, or set it to 0 in hf_config",
            {"attention": attention.value},
        )
    if cap is not None and attention not in SCORE_MOD_ATTENTION:
        return _cannot(
            f"attention={attention.value} cannot cap attention logits, and this model caps "
            f"them (attn_logit_softcapping {cap:g}: SDPA's fused kernels take no score "
            "function, so they would train another model); use attention=flex (transformers' "
            "flex_attention does the same) or math",
            {"attention": attention.value},
        )
    return None


def _model(knobs: Knobs, model: ModelSpec | None) -> Iterator[Verdict]:
    if model is None:
        return
    verdict = attention_verdict(
        knobs.attention,
        cap=model.attention_softcap,
        window=model.attention_window,
        dropout=model.attention_dropout,
        seq_len=model.seq_len,
    )
    if verdict is not None:
        yield verdict
    if knobs.kernels == Kernels.NONE:
        return
    kernels = {"kernels": knobs.kernels.value}
    if model.family == ModelFamily.FACTORY:
        # The factory's model returns logits (docs/models.md): the fused loss needs the hidden
        # states and the output layer, which only the model's own code can hand over.
        yield _cannot(
            f"kernels={knobs.kernels.value} needs the model's output layer and hidden states, "
            "and a factory model returns logits: use kernels=none (leave kernels out of the "
            "space) for a factory model",
            kernels,
        )
    elif knobs.kernels == Kernels.LIGER and not liger.patches(model):
        yield _cannot(
            f"kernels=liger has no kernels for Hugging Face model_type "
            f"{liger.hf_model_type(model)!r}: Liger {liger.LIGER_VERSION} patches "
            f"{liger.covered_types()}; use kernels=fused-ce (the fused loss needs no patch)",
            kernels,
        )


def _package_needs(knobs: Knobs) -> list[tuple[str, str, dict[str, Any]]]:
    """(package, the message if the worker cannot import it, the knob values that need it)."""
    needs = []
    if knobs.optimizer == Optimizer.ADAMW_8BIT:
        needs.append(
            (
                "torchao",
                "the worker cannot import torchao, which optimizer adamw-8bit (torchao's "
                "AdamW8bit) needs: pip install torchao in the workers' Python environment, or "
                "drop adamw-8bit from the space's optimizer values",
                {"optimizer": knobs.optimizer.value},
            )
        )
    if knobs.kernels == Kernels.CCE:
        needs.append(
            (
                "cut_cross_entropy",
                "the worker cannot import cut_cross_entropy, which kernels 'cce' need: pip "
                "install cut-cross-entropy in the workers' Python environment (the `kernels` "
                "extra), or drop cce from the space's kernels values",
                {"kernels": knobs.kernels.value},
            )
        )
    elif knobs.kernels != Kernels.NONE:
        needs.append(
            (
                "liger_kernel",
                f"the worker cannot import liger_kernel, which kernels {knobs.kernels.value!r} "
                "need: pip install liger-kernel in the workers' Python environment (the "
                "`kernels` extra), or drop fused-ce and liger from the space's kernels values",
                {"kernels": knobs.kernels.value},
            )
        )
    if knobs.precision.is_fp8:
        needs.append(
            (
                "torchao",
                f"the worker cannot import torchao, which {knobs.precision.value} training "
                "needs: pip install torchao in the workers' Python environment, or drop "
                f"{knobs.precision.value} from the space's precision values",
                {"precision": knobs.precision.value},
            )
        )
    return needs


def _not_worth(knobs: Knobs, hardware: Hardware, model: ModelSpec | None) -> Iterator[Verdict]:
    if not hardware.on_cuda:
        if knobs.precision == Precision.FP16:
            yield _pointless(
                "fp16 with loss scaling is a GPU mode; use fp32 or bf16 on the CPU",
                knobs,
                "precision",
            )
        if _changed(knobs, "allocator"):
            yield _pointless(
                f"allocator={knobs.allocator} configures the CUDA caching allocator; the CPU "
                "does not use it, so it would re-measure the default config: leave it out on "
                "the CPU",
                knobs,
                "allocator",
            )
    if model is not None and knobs.precision.is_fp8 and model.ffn_dim % 16:
        # d_model is a multiple of 16 here (else it cannot run at all): only the attention
        # projections would convert, the MLP's larger matmuls stay in bf16.
        yield _pointless(
            f"fp8 matmuls need dims that are multiples of 16 (d_model={model.d_model}, "
            f"ffn={model.ffn_dim}), so the MLP's layers would not convert: use bf16",
            knobs,
            "precision",
        )
    if knobs.compile_scope == CompileScope.BLOCK and knobs.compile_mode == CompileMode.NONE:
        yield _pointless(
            "compile_scope=block does nothing with compile_mode=none (nothing is compiled); it "
            "would re-measure the same config: search compile_scope with a compile mode",
            knobs,
            "compile_scope",
        )


def _cannot(message: str, blamed: dict[str, Any]) -> Verdict:
    return Verdict(RuleKind.CANNOT_RUN, message, blamed)


def _pointless(message: str, knobs: Knobs, name: str) -> Verdict:
    return Verdict(RuleKind.NOT_WORTH_A_TRIAL, message, {name: _show_value(knobs, name)})


def _changed(knobs: Knobs, name: str) -> bool:
    return bool(getattr(knobs, name) != getattr(_DEFAULTS, name))


def _show_value(knobs: Knobs, name: str) -> Any:
    value = getattr(knobs, name)
    return getattr(value, "value", value)


def _show(knobs: Knobs, name: str) -> str:
    return str(_show_value(knobs, name))
