"""The winning knobs as trainer-neutral facts, which every trainer export renders in its terms.

One place reads the knobs (Knobs' own types and defaults), so no two exports can disagree on
what "bf16" or "selective checkpointing" meant for the trial that was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotuner.spec import (
    Attention,
    Checkpointing,
    CompileScope,
    Kernels,
    Knobs,
    MeasureSettings,
    Optimizer,
    Precision,
    TrialConfig,
    process_env,
)


@dataclass(frozen=True)
class Facts:
    """What the measured trial ran, independent of any trainer's vocabulary."""

    study_id: str
    trial_number: int
    tokens_per_s: float
    knobs: Knobs
    num_gpus: int  # ranks the trial ran on (1: no data parallelism)
    seq_len: int | None
    device_type: str  # "cuda" or "cpu": where it was measured
    partial: str | None = None
    data_source: str = "synthetic"  # the measurement's input (MeasureSettings.data_source)
    # Environment the trial's processes had: NCCL knobs, the allocator knob, the trial's env,
    # NVLS off.
    env: dict[str, str] = field(default_factory=dict)

    # ---------------------------------------------------------------- derived, neutral

    @property
    def env_note(self) -> str | None:
        """What every trainer's export says when the trial's processes had an environment: its
        variables are read at import or at CUDA's and NCCL's start, before any trainer code."""
        if not self.env:
            return None
        return (
            f"set the environment the trial ran with ({', '.join(sorted(self.env))}) before "
            "launching: --format env"
        )

    @property
    def amp_dtype(self) -> str | None:
        """The autocast dtype: "bfloat16", "float16", or None (fp32 matmuls)."""
        if self.knobs.precision == Precision.FP16:
            return "float16"
        return "bfloat16" if self.knobs.precision.is_half else None

    @property
    def tf32(self) -> bool:
        return self.knobs.precision == Precision.TF32

    @property
    def fp8_recipe(self) -> str | None:
        """torchao's float8 recipe name ("tensorwise", "rowwise"), or None."""
        if not self.knobs.precision.is_fp8:
            return None
        return "tensorwise" if self.knobs.precision == Precision.FP8_TENSORWISE else "rowwise"

    @property
    def compile_mode(self) -> str | None:
        """torch.compile's mode, or None when the trial ran eager."""
        mode = self.knobs.compile_mode.value
        return None if mode == "none" else mode

    @property
    def block_compile(self) -> bool:
        """Each transformer block compiled on its own (compile_scope=block), and the output
        layer with the loss as one more region (with kernels none); the embedding ran eagerly."""
        return self.compile_mode is not None and self.knobs.compile_scope == CompileScope.BLOCK

    @property
    def kernels(self) -> Kernels:
        """The fused kernels the trial ran: none, Liger's fused linear cross-entropy, that and
        Liger's norm, SwiGLU and RoPE kernels, or cut-cross-entropy's fused loss."""
        return self.knobs.kernels

    @property
    def kernels_label(self) -> str | None:
        """The kernels in words, None without them."""
        if self.kernels == Kernels.FUSED_CE:
            return "Liger's fused linear cross-entropy"
        if self.kernels == Kernels.LIGER:
            return "Liger's fused linear cross-entropy, RMSNorm/LayerNorm, SwiGLU and RoPE kernels"
        if self.kernels == Kernels.CCE:
            return "cut-cross-entropy's fused linear cross-entropy"
        return None

    @property
    def checkpointing(self) -> Checkpointing:
        return self.knobs.checkpointing

    @property
    def attention(self) -> Attention:
        return self.knobs.attention

    @property
    def fused_adamw(self) -> bool:
        return self.knobs.optimizer == Optimizer.ADAMW_FUSED

    @property
    def adamw_8bit(self) -> bool:
        """torchao's AdamW8bit (8-bit moments) in place of torch's AdamW."""
        return self.knobs.optimizer == Optimizer.ADAMW_8BIT

    @property
    def optimizer_label(self) -> str:
        """The optimizer in words: "fused AdamW", "foreach AdamW", "torchao AdamW8bit"."""
        if self.adamw_8bit:
            return "torchao AdamW8bit"
        return f"{'fused' if self.fused_adamw else 'foreach'} AdamW"

    @property
    def distributed(self) -> bool:
        return self.num_gpus > 1

    @property
    def sharded(self) -> bool:
        """FSDP2 (fully_shard) rather than DDP replicas."""
        return self.distributed and self.knobs.parallel != "ddp"

    @property
    def reshard_after_forward(self) -> bool:
        return self.knobs.parallel in ("fsdp2", "hsdp")

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step over all ranks."""
        k = self.knobs
        return k.micro_batch_size * k.grad_accum * max(self.num_gpus, 1)

    @property
    def loader(self) -> bool:
        """The trial read batches through a DataLoader (its worker/pinning knobs were real)."""
        return self.data_source != "synthetic"

    def header(self, comment: str = "#") -> list[str]:
        """The lines every export starts with: where the numbers come from."""
        lines = [
            f"{comment} autotuner study {self.study_id}, trial #{self.trial_number}: "
            f"{self.tokens_per_s:,.0f} tokens/s measured on {self.num_gpus} "
            f"{'GPU(s)' if self.device_type == 'cuda' else 'CPU process(es)'}."
        ]
        if self.partial:
            lines.append(f"{comment} CAUTION: {self.partial}")
        return lines


def facts_from(
    rec: dict[str, Any],
    *,
    study_id: str,
    config: dict[str, Any] | None,
    partial: str | None,
) -> Facts:
    """Facts from a recommendation and the best trial's stored TrialConfig (when kept)."""
    knobs = Knobs.model_validate(rec["knobs"])
    if config:
        trial = TrialConfig.model_validate(config)
    else:  # an old record without its config: the knobs alone, on one GPU
        trial = TrialConfig.model_construct(
            knobs=knobs, num_gpus=1, env={}, measure=MeasureSettings()
        )
    num_gpus = max(trial.num_gpus, 1)
    model = rec.get("model") or (config or {}).get("model") or {}
    return Facts(
        study_id=study_id,
        trial_number=int(rec["trial_number"]),
        tokens_per_s=float(rec.get("tokens_per_s") or 0.0),
        knobs=knobs,
        num_gpus=num_gpus,
        seq_len=model.get("seq_len"),
        device_type=(rec.get("fingerprint") or {}).get("device_type") or "cuda",
        partial=partial,
        data_source=str(getattr(trial.measure.data_source, "value", trial.measure.data_source)),
        env=process_env(trial),
    )
