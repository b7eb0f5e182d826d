"""A user's model factory in the trial process (family "factory"): the knobs apply around it, and
a factory that cannot work gets an `unsupported` result naming what is missing, never a crash.

The factories are real files written to tmp_path (file form) or the example module (module form,
importable because the repository root is on the trial's PYTHONPATH).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from autotuner.inputs import UserError, load_model_spec
from autotuner.spec import FailureClass, Knobs, ModelSpec, TrialConfig, TrialStatus
from workers.trial import run_trial

from .conftest import FAST, OpCounter

REPO = Path(__file__).resolve().parents[2]
SIZES = {"n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 512, "seq_len": 32}


def _config(factory: str, **knobs) -> TrialConfig:
    spec = ModelSpec.resolve({"factory": factory, "factory_args": {"mlp_ratio": 2}, **SIZES})
    return TrialConfig(
        model=spec,
        knobs=Knobs(**{"precision": "fp32", "attention": "math", **knobs}),
        measure=FAST,
    )


def _factory_file(tmp_path: Path, body: str, name: str = "user_model.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return f"{path}:build"


def test_example_factory_trains_with_the_knobs_applied() -> None:
    spec = load_model_spec(REPO / "examples" / "my-model.yaml")
    assert spec.factory and Path(spec.factory.rpartition(":")[0]).is_absolute()
    config = TrialConfig(
        model=spec,
        knobs=Knobs(
            precision="bf16",
            attention="flash",
            checkpointing="full",
            vocab_pad_multiple=128,
            micro_batch_size=2,
        ),
        measure=FAST,
    )
    with OpCounter() as ops:
        result = run_trial(config)
    assert result is not None and result.status == TrialStatus.OK, result.error_message
    # The attention hook ran the pinned kernel (CPU flash).
    assert ops.counts["_scaled_dot_product_flash_attention_for_cpu"] > 0
    # Parameters counted on the built module: 2 blocks x (3+1+4+4) d^2 + norms, embeddings,
    # positions and the head (512 is a multiple of 128 already: no padding).
    d, v, t = 64, 512, 64
    expected = 2 * (12 * d * d + 4 * d) + 2 * v * d + t * d + 2 * d
    assert result.param_count == expected
    assert result.flops_per_token == pytest.approx(6 * expected + 12 * 2 * d * t)


def test_checkpointing_wraps_the_listed_blocks() -> None:
    """Full checkpointing re-runs each block's matmuls in backward; selective keeps their
    outputs (so it runs as many as no checkpointing); both wrap exactly the listed blocks."""
    import torch

    from workers.models import build_model
    from workers.models.checkpointing import CheckpointedBlock

    idx = torch.randint(0, SIZES["vocab_size"], (2, SIZES["seq_len"]))
    matmuls = {}
    for mode in ("none", "full", "selective"):
        config = _config("examples.my_model:build", checkpointing=mode)
        model = build_model(config.model, config.knobs)
        wrapped = [isinstance(b, CheckpointedBlock) for b in model.inner.blocks]
        assert wrapped == [mode != "none"] * SIZES["n_layer"]
        with OpCounter() as ops:
            model(idx, idx).backward()
        matmuls[mode] = ops.counts["mm"] + ops.counts["bmm"]
    assert matmuls["full"] > matmuls["none"] == matmuls["selective"], matmuls


def test_module_form_and_padding_not_counted_in_flops() -> None:
    config = _config("examples.my_model:build", vocab_pad_multiple=128)
    config.model.vocab_size = 500  # padded to 512: 12 extra rows in the embedding and the head
    result = run_trial(config)
    assert result is not None and result.status == TrialStatus.OK, result.error_message
    d, t = 64, 32
    assert result.param_count == 2 * (8 * d * d + 4 * d) + 2 * 512 * d + t * d + 2 * d
    assert result.flops_per_token == pytest.approx(
        6 * (result.param_count - 2 * 12 * d) + 12 * 2 * d * t
    )


GOOD = """
import torch.nn as nn

class M(nn.Module):
    def __init__(self, vocab_size, d_model, attend):
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab_size, d_model), nn.Linear(d_model, vocab_size)
        self.attend = attend

    def forward(self, idx):
        x = self.emb(idx)
        return self.head(x)
"""

BAD = {
    "attribute": ("examples.my_model:missing", None, "has no attribute 'missing'"),
    "not-callable": (None, GOOD + "build = 3\n", "not callable"),
    "not-a-module": (
        None,
        "def build(vocab_size, attend):\n    return 'model'\n",
        "not a torch.nn.Module",
    ),
    "shape": (
        None,
        GOOD
        + "def build(vocab_size, d_model, attend):\n"
        + "    return M(vocab_size + 1, d_model, attend)\n",
        "expected logits of shape (1, 32, 512)",
    ),
    "needs-argument": (
        None,
        GOOD + "def build(vocab_size, width, attend):\n    pass\n",
        "requires width",
    ),
    "raises": (None, "def build(attend):\n    raise KeyError('layers')\n", "raised KeyError"),
    "no-attention-hook": (
        None,
        GOOD + "def build(vocab_size, d_model):\n    return M(vocab_size, d_model, None)\n",
        "takes no `attend` argument",
    ),
    "checkpointing-without-blocks": (
        None,
        GOOD
        + "def build(vocab_size, d_model, attend):\n    return M(vocab_size, d_model, attend)\n",
        "needs the model's blocks",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_factory_is_unsupported_with_what_is_missing(case: str, tmp_path: Path) -> None:
    factory, body, message = BAD[case]
    if factory is None:
        factory = _factory_file(tmp_path, body)
    knobs = {"checkpointing": "full"} if case == "checkpointing-without-blocks" else {}
    result = run_trial(_config(factory, **knobs))
    assert result is not None and result.status == TrialStatus.FAILED
    assert result.failure_class == FailureClass.UNSUPPORTED, result.error_message
    assert message in (result.error_message or ""), result.error_message
    assert "Traceback" not in (result.error_message or "")
    if case == "no-attention-hook":
        # Every attention value is refused so: no knob to blame, no config can run; and no
        # advice about searching attention, which the study's space may not do.
        assert result.unsupported_knobs == {}
        assert "searched" not in (result.error_message or "")
    elif case == "checkpointing-without-blocks":
        assert result.unsupported_knobs == {"checkpointing": "full"}
    else:
        assert result.unsupported_knobs == {}  # the factory itself: no config of it can run


@pytest.mark.parametrize("where", ["module", "file"])
def test_factory_this_worker_cannot_import_is_an_environment_failure(
    where: str, tmp_path: Path
) -> None:
    """The factory's module, or a package it imports, is missing on the worker: no config
    can run here, so the trial says which package to install (the study stops on it)."""
    if where == "module":
        factory = "no_such_pkg.models:build"
    else:
        factory = _factory_file(tmp_path, "import no_such_pkg\n\ndef build(attend):\n    pass\n")
    result = run_trial(_config(factory))
    assert result is not None and result.failure_class == FailureClass.ENVIRONMENT
    assert "cannot import no_such_pkg" in (result.error_message or ""), result.error_message
    assert "install it" in (result.error_message or "")


def test_spec_errors_name_the_fix(tmp_path: Path) -> None:
    spec_file = tmp_path / "m.yaml"
    spec_file.write_text(
        "factory: missing.py:build\nn_layer: 2\nd_model: 64\nn_head: 4\n"
        "vocab_size: 512\nseq_len: 32\n"
    )
    with pytest.raises(UserError, match=r"factory file missing\.py not found"):
        load_model_spec(spec_file)
    spec_file.write_text(
        "family: factory\nn_layer: 2\nd_model: 64\nn_head: 4\nvocab_size: 512\nseq_len: 32\n"
    )
    with pytest.raises(UserError, match="family 'factory' needs factory"):
        load_model_spec(spec_file)


def test_a_pinned_factory_runs_only_code_under_its_allowed_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth (docs/trust-model.md): the worker imports a service-checked factory
    only from the directory it was allowed from, whatever its path or links say now."""
    from workers.models.factory import FactoryError, load_factory

    monkeypatch.setattr(sys, "path", list(sys.path))
    allowed, other = tmp_path / "allowed", tmp_path / "other"
    allowed.mkdir()
    other.mkdir()
    (allowed / "trust_mod_a.py").write_text("def build():\n    return 'a'\n")
    (other / "trust_mod_b.py").write_text("def build():\n    return 'b'\n")
    root = str(allowed)
    assert load_factory("trust_mod_a:build", root=root)() == "a"
    assert load_factory(f"{allowed}/trust_mod_a.py:build", root=root)() == "a"
    # A link swapped in after the service's check, a module found elsewhere on the path, a
    # library already imported: refused before their code runs.
    (allowed / "swapped.py").symlink_to(other / "trust_mod_b.py")
    sys.path.append(str(other))
    for ref in (f"{allowed}/swapped.py:build", "trust_mod_b:build", "json:loads"):
        with pytest.raises(FactoryError, match="is not under the factory directory"):
            load_factory(ref, root=root)
    assert "trust_mod_b" not in sys.modules


def test_a_worker_given_the_operator_directories_runs_only_factories_checked_against_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config that reached the worker without the service's check (no factory_root, or a
    root outside the directories `serve` exported to its workers) is refused, not imported."""
    from workers.models.factory import FACTORY_DIRS_ENV, FactoryError, load_factory

    allowed, other = tmp_path / "allowed", tmp_path / "other"
    for d in (allowed, other):
        d.mkdir()
        (d / "op_model.py").write_text("def build():\n    return 'ran'\n")
    monkeypatch.setenv(FACTORY_DIRS_ENV, str(allowed))
    assert load_factory(f"{allowed}/op_model.py:build", root=str(allowed))() == "ran"
    for ref, root in (
        (f"{other}/op_model.py:build", None),
        (f"{other}/op_model.py:build", str(other)),
    ):
        with pytest.raises(FactoryError, match="this worker runs model code only from"):
            load_factory(ref, root=root)
    monkeypatch.setenv(FACTORY_DIRS_ENV, "")  # a service that allowed none
    with pytest.raises(FactoryError, match=r"\(none\)"):
        load_factory(f"{allowed}/op_model.py:build", root=str(allowed))
