"""Which model factories a study may run: the local CLI any, the service only code under its
operator's factory directories (docs/trust-model.md), decided on the written path first (so
an outside file's refusal is the same whether it exists or not), then on the resolved one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotuner.inputs import UserError
from autotuner.spec import ModelSpec
from autotuner.study.factory_access import FactoryAccess, FactoryNotAllowed

SIZES = {"n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 512, "seq_len": 32}
OUTSIDE = "not model code under a directory this service runs code from"


def _spec(factory: str) -> ModelSpec:
    return ModelSpec.resolve({"factory": factory, **SIZES})


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    allowed, other = tmp_path / "models", tmp_path / "other"
    (allowed / "zoo").mkdir(parents=True)
    other.mkdir()
    (allowed / "mine.py").write_text("def build(): ...\n")
    (allowed / "zoo" / "__init__.py").write_text("")
    (allowed / "zoo" / "tiny.py").write_text("def build(): ...\n")
    return {"allowed": allowed, "other": other}


def _refusal(access: FactoryAccess, factory: str) -> str:
    with pytest.raises(FactoryNotAllowed) as err:
        access.check(_spec(factory))
    return str(err.value)


def test_the_local_cli_runs_any_factory_as_written(tree: dict[str, Path]) -> None:
    for factory in ("sympy:simplify", f"{tree['other']}/x.py:fn", "rel/x.py:fn"):
        assert FactoryAccess.anywhere().check(_spec(factory)).factory == factory


def test_with_no_directory_every_factory_is_refused_and_presets_pass(
    tree: dict[str, Path],
) -> None:
    message = _refusal(FactoryAccess.nowhere(), f"{tree['allowed']}/mine.py:build")
    assert "allowed no factory directory" in message
    assert "autotuner serve --factory-dir DIR" in message and "AUTOTUNER_FACTORY_DIRS" in message
    preset = ModelSpec.resolve({"preset": "tiny"})
    assert FactoryAccess.nowhere().check(preset) == preset


def test_a_file_inside_is_pinned_to_its_real_path_and_root(tree: dict[str, Path]) -> None:
    access = FactoryAccess.under([tree["allowed"]])
    checked = access.check(_spec(f"{tree['allowed']}/zoo/../mine.py:build"))
    root = os.path.realpath(tree["allowed"])
    assert checked.factory == f"{root}/mine.py:build" and checked.factory_root == root
    missing = _refusal(access, f"{tree['allowed']}/later.py:build")
    assert "no such file under the factory directories" in missing


def test_a_module_is_found_as_a_file_under_an_allowed_directory(tree: dict[str, Path]) -> None:
    access = FactoryAccess.under([tree["other"], tree["allowed"]])
    for factory in ("mine:build", "zoo.tiny:build", "zoo:build"):
        checked = access.check(_spec(factory))
        assert checked.factory == factory
        assert checked.factory_root == os.path.realpath(tree["allowed"])


def test_importable_code_elsewhere_is_refused(tree: dict[str, Path]) -> None:
    access = FactoryAccess.under([tree["allowed"]])
    (tree["other"] / "evil.py").write_text("def build(): ...\n")
    (tree["allowed"] / "link.py").symlink_to(tree["other"] / "evil.py")
    (tree["allowed"] / "os.py").write_text("def system(): ...\n")  # would import the stdlib's
    refused = [
        "sympy:simplify",  # a library on the service's path: not a file under the directory
        "os:system",
        "json.decoder:JSONDecoder",
        "workers.trial:main",
        f"{tree['other']}/evil.py:build",
        f"{tree['allowed']}/../other/evil.py:build",
        f"{tree['allowed']}/link.py:build",
        "link:build",  # a module whose file is a link out
        "mine.py:build",  # relative: the workers' working directory is not the caller's
    ]
    for factory in refused:
        message = _refusal(access, factory)
        assert OUTSIDE in message and str(tree["allowed"]) in message, (factory, message)
        assert "--factory-dir DIR" in message


def test_an_outside_file_gets_the_same_refusal_whether_it_exists_or_not(
    tree: dict[str, Path],
) -> None:
    access = FactoryAccess.under([tree["allowed"]])
    target = tree["other"] / "maybe.py"
    asked = [f"{target}:build", f"{tree['allowed']}/../other/maybe.py:build"]
    absent = [_refusal(access, f) for f in asked]
    target.write_text("def build(): ...\n")
    assert [_refusal(access, f) for f in asked] == absent


def test_directories_come_from_flags_and_the_environment(tree: dict[str, Path]) -> None:
    access = FactoryAccess.for_service([str(tree["allowed"])], f"{tree['other']}{os.pathsep}")
    assert access.dirs == (tree["allowed"], tree["other"])
    assert FactoryAccess.for_service(None, None) == FactoryAccess.nowhere()
    with pytest.raises(UserError, match=r"factory directory .*no such directory"):
        FactoryAccess.under([tree["allowed"] / "typo"])
    with pytest.raises(UserError, match="is relative"):
        FactoryAccess.under(["models"])


def test_a_request_cannot_choose_its_own_root(tree: dict[str, Path]) -> None:
    access = FactoryAccess.under([tree["allowed"]])
    spec = ModelSpec.resolve({"factory": "mine:build", "factory_root": str(tree["other"]), **SIZES})
    assert access.check(spec).factory_root == os.path.realpath(tree["allowed"])
    with pytest.raises(ValueError, match="factory_root goes with a factory"):
        ModelSpec.resolve({"preset": "tiny", "factory_root": "/x"})
