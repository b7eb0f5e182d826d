"""User input: model specs and search spaces fail with a message naming the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotuner.cli.submit import _read_model_arg
from autotuner.inputs import UserError, load_model_spec, parse_model_spec
from autotuner.search.space import SpaceError, builtin_space_names, load_space, parse_space
from autotuner.spec import Knobs, ModelSpec, TrialConfig, TrialResult


def test_presets_resolve_and_overrides_apply() -> None:
    spec = parse_model_spec({"preset": "gpt2-124m", "seq_len": 2048})
    assert (spec.n_layer, spec.d_model, spec.seq_len, spec.vocab_size) == (12, 768, 2048, 50257)
    llama = parse_model_spec({"preset": "llama-1b"})
    assert llama.kv_heads == 8 and llama.ffn_dim == 8192


# A mixture of experts in a Hugging Face config (Qwen2-MoE's names).
SMALL_HF_MOE = {
    "model_type": "qwen2_moe",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"preset": "gpt5"}, "unknown preset 'gpt5'; known presets"),
        (
            {
                "family": "bert",
                "n_layer": 2,
                "d_model": 64,
                "n_head": 4,
                "vocab_size": 9,
                "seq_len": 8,
            },
            "family",
        ),
        (
            {
                "family": "gpt2",
                "n_layer": 2,
                "d_model": 100,
                "n_head": 3,
                "vocab_size": 9,
                "seq_len": 8,
            },
            "n_head=3 must divide d_model=100",
        ),
        (
            {
                "family": "gpt2",
                "n_layer": 0,
                "d_model": 64,
                "n_head": 4,
                "vocab_size": 9,
                "seq_len": 8,
            },
            "n_layer: Input should be greater than 0",
        ),
        ({"preset": "tiny", "n_layers": 4}, "n_layers: unknown field"),
        (
            {
                "family": "llama",
                "n_layer": 2,
                "d_model": 64,
                "n_head": 4,
                "n_kv_head": 3,
                "vocab_size": 9,
                "seq_len": 8,
            },
            "n_kv_head=3 must divide n_head=4",
        ),
        ({"family": "gpt2", "n_layer": 2}, "missing"),
        (
            {"preset": "llama-tiny", "head_size": 32, "qkv_bias": True},
            "head_size, qkv_bias: read from a Hugging Face config",
        ),
        ({"preset": "llama-tiny", "n_experts": 8}, "n_experts: mixture-of-experts sizes are for"),
        (
            {"hf_config": {**SMALL_HF_MOE, "num_experts_per_tok": 9}},
            "n_experts_active=9 is more than n_experts=8",
        ),
        (["not", "a", "mapping"], "must be a mapping"),
    ],
)
def test_bad_model_specs_name_the_field(data: object, needle: str) -> None:
    with pytest.raises(UserError) as info:
        parse_model_spec(data, source="m.yaml")
    assert needle in str(info.value)
    assert str(info.value).startswith("m.yaml: ")


def test_hf_config_sizes_are_read(tmp_path: Path) -> None:
    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "intermediate_size": 688,
        "vocab_size": 1000,
        "max_position_embeddings": 128,
    }
    spec = parse_model_spec({"hf_config": cfg})
    assert spec.family == "hf" and spec.n_layer == 4 and spec.kv_heads == 2


SMALL_HF = {
    "model_type": "qwen2",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 512,
    "max_position_embeddings": 32768,
}


@pytest.mark.parametrize("wrapped", [False, True])
def test_hf_config_file_is_read_beside_the_spec_and_inlined(tmp_path: Path, wrapped: bool) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "small.config.json").write_text(json.dumps(SMALL_HF, indent=2))
    body = "hf_config: small.config.json\nseq_len: 256\n"
    spec_file = tmp_path / "specs" / "small.yaml"
    spec_file.write_text(
        "model:\n" + "".join(f"  {line}\n" for line in body.splitlines()) if wrapped else body
    )
    spec = load_model_spec(spec_file)
    assert spec.family == "hf" and spec.hf_config == SMALL_HF
    assert (spec.n_layer, spec.d_model, spec.seq_len, spec.qkv_bias) == (2, 64, 256, True)
    # `submit` sends the file's data to the service: the mapping, never the path.
    sent = _read_model_arg(str(spec_file))
    assert (sent["model"] if wrapped else sent)["hf_config"] == SMALL_HF


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "hf_config file gone.json not found (looked at "),
        ('{"model_type": "llama",\n  "hidden_size": }', "gone.json: line 2: malformed JSON"),
        ("[1, 2]", "gone.json holds a JSON list, not an object"),
    ],
)
def test_a_bad_hf_config_file_names_the_spec_and_the_file(
    tmp_path: Path, content: str | None, needle: str
) -> None:
    if content is not None:
        (tmp_path / "gone.json").write_text(content)
    spec_file = tmp_path / "m.yaml"
    spec_file.write_text("hf_config: gone.json\nseq_len: 256\n")
    with pytest.raises(UserError) as info:
        load_model_spec(spec_file)
    assert str(info.value).startswith(f"{spec_file}: hf_config file gone.json")
    assert needle in str(info.value)


def test_the_service_refuses_an_hf_config_path() -> None:
    """What reaches the service (the API, `submit`'s body) is parsed without a spec file: a
    path there is never opened on the server, and the error says what to send instead."""
    with pytest.raises(UserError, match=r"is a file name.*send the config\.json contents"):
        parse_model_spec({"hf_config": "/etc/passwd", "seq_len": 256}, source="model")


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("preset: tiny\nseq_len: [1, 2\n")
    with pytest.raises(UserError, match=r"m.yaml: line \d+, column \d+: malformed YAML"):
        load_model_spec(f)


def test_every_builtin_space_loads() -> None:
    names = builtin_space_names()
    assert {"cpu-demo", "single-gpu", "single-gpu-quick", "multi-gpu"} <= set(names)
    for name in names:
        space = load_space(name)
        knobs = space.knobs_for(space.seed_params(), parse_model_spec({"preset": "tiny"}), 1)
        assert isinstance(knobs, Knobs)


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"name": "x", "knobs": {"micro_batch": [1]}}, "knobs.micro_batch: unknown knob"),
        (
            {"name": "x", "knobs": {"precision": ["bf16", "fp12"]}},
            "knobs.precision: 'fp12' is not a valid precision",
        ),
        (
            {"name": "x", "knobs": {"micro_batch_size": [0, 1]}},
            "knobs.micro_batch_size: 0 is not a valid micro_batch_size",
        ),
        ({"name": "x", "knobs": {}}, "at least one knob"),
        (
            {
                "name": "x",
                "knobs": {"micro_batch_size": [1, 2]},
                "defaults": {"micro_batch_size": 4},
            },
            "defaults.micro_batch_size: 4 is not one of",
        ),
        ({"name": "x", "knobs": {"micro_batch_size": {"low": 8, "high": 2}}}, "low (8) must be"),
        (
            {"name": "x", "knobs": {"grad_accum": [1, 2]}, "global_batch_tokens": 1024},
            "global_batch_tokens derives grad_accum",
        ),
        (
            {"name": "x", "knobs": {"precision": ["bf16"]}, "measure": {"repeats": 0}},
            "measure.repeats",
        ),
        ({"name": "x", "knobs": {"precision": ["bf16"]}, "colour": 1}, "colour: unknown field"),
    ],
)
def test_bad_spaces_name_the_field(data: dict, needle: str) -> None:
    with pytest.raises(SpaceError) as info:
        parse_space(data, source="s.yaml")
    assert needle in str(info.value)


def test_unknown_space_lists_builtins() -> None:
    with pytest.raises(SpaceError, match=r"built-ins: .*cpu-demo"):
        load_space("no-such-space")


def test_global_batch_derives_accumulation() -> None:
    space = parse_space(
        {"name": "x", "knobs": {"micro_batch_size": [4, 8]}, "global_batch_tokens": 65536}
    )
    model = parse_model_spec({"preset": "gpt2-124m"})
    assert space.knobs_for({"micro_batch_size": 8}, model, 1).grad_accum == 8
    assert space.knobs_for({"micro_batch_size": 4}, model, 2).grad_accum == 8


def test_records_round_trip_json() -> None:
    config = TrialConfig(model=ModelSpec.resolve({"preset": "llama-tiny"}))
    assert TrialConfig.model_validate_json(config.model_dump_json()) == config
    ok = TrialResult(status="ok", tokens_per_s=10.0, tokens_per_s_min=9.0, tokens_per_s_max=11.0)
    assert TrialResult.model_validate_json(ok.model_dump_json()) == ok
    assert ok.spread_rel == pytest.approx(0.1)
    with pytest.raises(ValueError, match="positive tokens_per_s"):
        TrialResult(status="ok", tokens_per_s=0.0)
    with pytest.raises(ValueError, match="needs a failure_class"):
        TrialResult(status="failed")


def test_a_global_batch_is_held_exactly_never_rounded() -> None:
    space = parse_space(
        {"name": "x", "knobs": {"micro_batch_size": [8, 24, 64]}, "global_batch_tokens": 32768}
    )
    model = parse_model_spec({"preset": "gpt2-124m"})  # seq_len 1024
    exact = space.knobs_for({"micro_batch_size": 8}, model, 1)  # 8 x 1024 x 4
    assert space.global_batch_mismatch(exact, model, 1) is None
    odd = space.knobs_for({"micro_batch_size": 24}, model, 1)  # 32768 / 24576 is not whole
    why = space.global_batch_mismatch(odd, model, 1)
    assert why is not None and "does not divide the global batch of 32,768 tokens" in why
    big = space.knobs_for({"micro_batch_size": 64}, model, 1)  # one micro-batch is already 2x
    assert space.global_batch_mismatch(big, model, 1) is not None
    assert space.global_batch_mismatch(exact, model, 2) is not None  # 2 GPUs double it


def test_a_requested_global_batch_replaces_the_spaces(tmp_path) -> None:
    from autotuner.study.data_access import DataAccess
    from autotuner.study.operations import validate_request
    from autotuner.study.request import StudyRequest

    req = StudyRequest(
        model={"preset": "tiny"}, space="cpu-demo", max_trials=2, global_batch_tokens=2048
    )
    _, space = validate_request(req, data_access=DataAccess.nowhere())
    assert space.global_batch_tokens == 2048
    model = parse_model_spec({"preset": "tiny"})
    assert space.knobs_for({"micro_batch_size": 8}, model, 1).grad_accum == 4  # 8 x 64 x 4
