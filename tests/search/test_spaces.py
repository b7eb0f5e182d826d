"""Search spaces: the built-ins load and are coherent; a bad user space names file, line, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotuner.executors.base import Target
from autotuner.search.space import SpaceError, builtin_space_names, load_space
from tests.search.conftest import H200, make_policy


@pytest.mark.parametrize("name", ["single-gpu", "single-gpu-quick", "multi-gpu", "cpu-demo"])
def test_builtin_spaces_load_and_seed_a_runnable_expert_default(name: str) -> None:
    assert name in builtin_space_names()
    space = load_space(name)
    target = Target("cpu", 0) if name == "cpu-demo" else H200
    gpus = 2 if name == "multi-gpu" else 1
    policy = make_policy(space, target=target, gpus=gpus)
    expert = policy.expert_params()
    assert set(expert) == set(space.knobs)
    assert policy.screen(expert, policy.knobs(expert)) is None, expert
    if name != "cpu-demo":
        assert expert["precision"] == "bf16" and expert["compile_mode"] == "default"


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        (
            "name: s\nknobs:\n  micro_batch_size: [4, 8]\n  precision: [bf16, fp64]\n",
            4,
            "knobs.precision",
        ),
        (
            "name: s\nknobs:\n  micro_batch_size: [4]\nrules:\n  - if: {attention: [flash]}\n"
            "    then: {precison: [bf16]}\n    why: x\n",
            6,
            "rules[0].then.precison",
        ),
        (
            "name: s\nknobs:\n  micro_batch_size: [4]\nmeasure:\n  repeats: lots\n",
            5,
            "measure.repeats",
        ),
        ("name: s\nknobs:\n  grad_accum: [1, 2]\nfixed:\n  grad_accum: 2\n", 3, "knobs.grad_accum"),
        # A name is printed in other users' terminals: no escape sequences in it.
        ('name: "a\\e]8;;http://evil\\e\\\\b"\nknobs:\n  grad_accum: [1, 2]\n', 1, "name"),
    ],
)
def test_a_bad_space_names_the_file_line_and_field(
    tmp_path: Path, text: str, line: int, field: str
) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(SpaceError) as err:
        load_space(str(path))
    assert str(err.value).startswith(f"{path}: line {line}: {field}:")
