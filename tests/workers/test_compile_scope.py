"""compile_scope: which modules torch.compile wraps, found by structure in every family."""

from __future__ import annotations

import pytest
import torch

from autotuner.spec import CompileMode, CompileScope, Kernels, Knobs, ModelSpec
from tests.workers.test_models import HF_SPEC
from workers.compiling import compile_model, repeated_blocks
from workers.errors import UnsupportedConfig
from workers.models import build_model

pytest.importorskip("transformers")

TINY_OLMOE = {
    "hf_config": {
        "model_type": "olmoe",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": 256,
        "max_position_embeddings": 64,
    }
}


@pytest.mark.parametrize(
    "model, where, kind",
    [
        ({"preset": "tiny"}, "blocks", "Block"),
        ({"preset": "llama-tiny"}, "layers", "Block"),
        (TINY_OLMOE, "inner.model.layers", "OlmoeDecoderLayer"),
    ],
)
def test_the_repeated_blocks_are_the_outermost_list_of_like_modules(model, where, kind):
    built = build_model(ModelSpec.resolve(model), Knobs(attention="math"))
    blocks = repeated_blocks(built)
    assert blocks is not None and list(built.get_submodule(where)) == blocks
    # A mixture-of-experts layer's experts are a list of like modules too, one level deeper.
    assert {type(b).__name__ for b in blocks} == {kind}


def _compiled(fn) -> bool:
    return getattr(fn, "_torchdynamo_orig_callable", None) is not None


def test_block_scope_compiles_each_block_and_the_output_region_in_place():
    model = build_model(ModelSpec.resolve({"preset": "llama-tiny"}), Knobs(attention="math"))
    runnable, regions = compile_model(model, CompileMode.DEFAULT, CompileScope.BLOCK)
    assert runnable is model
    assert all(layer._compiled_call_impl is not None for layer in model.layers)
    assert model._compiled_call_impl is None and model.output._compiled_call_impl is None
    # The final norm, output layer and loss: one region of their own, the parameters the model's.
    assert _compiled(model.head_loss) and "head_loss" not in dict(model.named_modules())
    assert regions == f"{len(model.layers)} Block blocks and the output layer with its loss"


def test_block_scope_leaves_a_fused_kernels_loss_eager():
    """Liger's fused loss cannot be traced and cut-cross-entropy's traces in pieces: with the
    fused kernels only the blocks are compiled (building the model needs no kernel)."""
    model = build_model(ModelSpec.resolve({"preset": "llama-tiny"}), Knobs(attention="math"))
    model.kernels = Kernels.CCE
    _, regions = compile_model(model, CompileMode.DEFAULT, CompileScope.BLOCK)
    assert not _compiled(model.head_loss)
    assert regions == f"{len(model.layers)} Block blocks"


def test_model_scope_wraps_the_whole_model_and_no_compile_leaves_it_alone():
    model = build_model(ModelSpec.resolve({"preset": "tiny"}), Knobs(attention="math"))
    wrapped, regions = compile_model(model, CompileMode.DEFAULT, CompileScope.MODEL)
    assert isinstance(wrapped, torch._dynamo.eval_frame.OptimizedModule) and regions is None
    assert wrapped._orig_mod is model
    assert compile_model(model, CompileMode.NONE, CompileScope.BLOCK) == (model, None)


def test_a_model_without_repeated_blocks_refuses_block_scope_naming_the_knob():
    with pytest.raises(UnsupportedConfig, match="compile_scope 'model'") as refused:
        compile_model(torch.nn.Linear(4, 4), CompileMode.DEFAULT, CompileScope.BLOCK)
    assert refused.value.knobs == {"compile_scope": "block"}


@pytest.mark.slow
def test_block_scope_trains_to_the_same_losses_as_eager():
    spec = ModelSpec.resolve({"preset": "llama-tiny"})
    x = torch.randint(0, spec.vocab_size, (2, 32))
    losses = []
    for mode in (CompileMode.NONE, CompileMode.DEFAULT):
        torch.manual_seed(0)
        model = build_model(spec, Knobs(attention="math"))
        runnable, _ = compile_model(model, mode, CompileScope.BLOCK)
        loss = runnable(x, x)
        loss.backward()
        losses.append((loss.item(), model.layers[0].attention.wq.weight.grad.norm().item()))
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)


def _raised_in(filename: str) -> BaseException:
    """A compile error whose traceback passes through `filename` (as dynamo's does when it
    fails tracing a library's code)."""
    code = compile(
        "raise RuntimeError('Dynamo failed to run FX node with fake tensors')", filename, "exec"
    )
    try:
        exec(code, {})
    except RuntimeError as exc:
        try:
            raise torch._dynamo.exc.TorchRuntimeError(
                "RuntimeError when making fake tensor call"
            ) from exc
        except torch._dynamo.exc.TorchRuntimeError as wrapped:
            return wrapped
    raise AssertionError("unreachable")


def test_a_whole_model_compile_failing_in_ligers_code_blames_the_kernels_and_scope_pair():
    from workers.compiling import fused_loss_untraceable

    liger = _raised_in("/site/liger_kernel/ops/fused_linear_cross_entropy.py")
    knobs = Knobs(kernels="fused-ce", compile_mode="default", compile_scope="model")
    refusal = fused_loss_untraceable(liger, knobs)
    assert refusal is not None and "compile_scope 'block'" in str(refusal)
    assert refusal.knobs == {"kernels": "fused-ce", "compile_scope": "model"}
    # Compiled blocks, no kernels, or a failure elsewhere stay compile errors.
    assert (
        fused_loss_untraceable(liger, knobs.model_copy(update={"compile_scope": "block"})) is None
    )
    assert fused_loss_untraceable(liger, knobs.model_copy(update={"kernels": "none"})) is None
    assert fused_loss_untraceable(_raised_in("/site/torch/x.py"), knobs) is None


def test_a_whole_model_compile_failing_in_cces_code_blames_cce_not_liger():
    from workers.compiling import fused_loss_untraceable

    cce = _raised_in("/site/cut_cross_entropy/cce.py")
    knobs = Knobs(kernels="cce", compile_mode="default", compile_scope="model")
    refusal = fused_loss_untraceable(cce, knobs)
    assert refusal is not None and "cut-cross-entropy's kernels" in str(refusal)
    assert refusal.knobs == {"kernels": "cce", "compile_scope": "model"}
    # Each value is blamed only for a failure in its own package's code.
    assert fused_loss_untraceable(_raised_in("/site/liger_kernel/ops/x.py"), knobs) is None
    fused_ce = knobs.model_copy(update={"kernels": "fused-ce"})
    assert fused_loss_untraceable(cce, fused_ce) is None


@pytest.mark.parametrize("scope", [CompileScope.BLOCK, CompileScope.MODEL])
def test_checkpointed_hugging_face_blocks_compile_without_graph_breaks(scope):
    """transformers' output-capturing hook on every decoder layer is a side effect dynamo will not
    trace inside a checkpoint region: before compile_model allowed it, the blocks ran eagerly
    (graph breaks, no compiled block). Compiled, the loss and the gradients are eager's."""
    from torch._dynamo.utils import counters

    from workers.compiling import graph_breaks

    spec = ModelSpec.resolve({**HF_SPEC, "seq_len": 32})
    knobs = Knobs(attention="math", checkpointing="selective")
    torch.manual_seed(0)
    eager = build_model(spec, knobs)
    compiled = build_model(spec, knobs)
    compiled.load_state_dict(eager.state_dict())
    x = torch.randint(0, spec.vocab_size, (2, 32), generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, spec.vocab_size, (2, 32), generator=torch.Generator().manual_seed(2))
    torch._dynamo.reset()
    counters.clear()
    runnable, _ = compile_model(compiled, CompileMode.DEFAULT, scope)
    losses = []
    for model in (eager, runnable):
        loss = model(x, y)
        loss.backward()
        losses.append(loss.item())
    assert graph_breaks() is None
    assert counters["stats"]["unique_graphs"] >= 1  # something was compiled
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-3, atol=1e-5, msg=name)
