"""Which data paths a study may read: the local CLI any, the service only under its operator's
directories, decided on the written path first (so an outside path's refusal is the same
whether it exists or not) and then on the resolved one (so no link leads out)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotuner.inputs import UserError
from autotuner.study.data_access import DataAccess, DataNotAllowed


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    allowed = tmp_path / "allowed"
    other = tmp_path / "other"
    for d in (allowed, other):
        d.mkdir()
    (allowed / "train.bin").write_bytes(b"\0" * 256)
    return {"allowed": allowed, "other": other}


def _refusal(access: DataAccess, path: str | Path) -> str:
    with pytest.raises(DataNotAllowed) as err:
        access.check(str(path))
    return str(err.value)


def test_the_local_cli_reads_any_path(tree: dict[str, Path]) -> None:
    DataAccess.anywhere().check(str(tree["other"] / "anything.bin"))
    DataAccess.anywhere().check("/etc/hostname")


def test_with_no_directory_every_path_is_refused_with_how_to_allow_one(
    tree: dict[str, Path],
) -> None:
    message = _refusal(DataAccess.nowhere(), tree["allowed"] / "train.bin")
    assert "allowed no data directory" in message
    assert "autotuner serve --data-dir DIR" in message and "AUTOTUNER_DATA_DIRS" in message
    assert "synthetic tokens" in message


def test_paths_inside_are_accepted_existing_or_not(tree: dict[str, Path]) -> None:
    access = DataAccess.under([tree["allowed"]])
    access.check(str(tree["allowed"] / "train.bin"))
    access.check(str(tree["allowed"] / "sub" / ".." / "train.bin"))
    access.check(str(tree["allowed"] / "later.bin"))  # inspect says it is missing, not this


def test_outside_escaping_and_linked_paths_are_refused(tree: dict[str, Path]) -> None:
    access = DataAccess.under([tree["allowed"]])
    secret = tree["other"] / "secret.bin"
    secret.write_bytes(b"\1" * 256)
    (tree["allowed"] / "link.bin").symlink_to(secret)
    (tree["allowed"] / "linkdir").symlink_to(tree["other"], target_is_directory=True)
    refused = [
        secret,
        f"{tree['allowed']}/../other/secret.bin",
        tree["allowed"] / "link.bin",
        tree["allowed"] / "linkdir" / "secret.bin",
        f"{tree['allowed']}-sibling/x.bin",  # a prefix of the name is not the directory
        f"{tree['allowed']}/x\0.bin",
    ]
    for path in refused:
        message = _refusal(access, path)
        assert "not under a directory this service reads data from" in message, path
        assert str(tree["allowed"]) in message and "--data-dir DIR" in message
        assert "other/secret.bin" not in message.replace(str(path), ""), "resolved target leaked"


def test_an_outside_path_is_refused_in_the_same_words_whether_it_exists_or_not(
    tree: dict[str, Path],
) -> None:
    access = DataAccess.under([tree["allowed"]])
    path = tree["other"] / "maybe.bin"
    link = tree["allowed"] / "maybe-link.bin"
    link.symlink_to(path)
    before = (_refusal(access, path), _refusal(access, link))
    path.write_bytes(b"\2" * 4096)
    after = (_refusal(access, path), _refusal(access, link))
    assert before == after
    (tree["other"] / "dir.bin").mkdir()
    assert _refusal(access, tree["other"] / "dir.bin") == _refusal(
        access, tree["other"] / "nodir.bin"
    ).replace("nodir.bin", "dir.bin")


def test_links_between_allowed_places_and_a_linked_allowed_directory_work(
    tree: dict[str, Path], tmp_path: Path
) -> None:
    (tree["allowed"] / "alias.bin").symlink_to(tree["allowed"] / "train.bin")
    mounted = tmp_path / "mnt"
    mounted.symlink_to(tree["allowed"], target_is_directory=True)
    access = DataAccess.under([mounted])  # the operator named the link
    access.check(str(tree["allowed"] / "alias.bin"))  # by its real path
    access.check(str(mounted / "alias.bin"))  # and by the name the operator gave


def test_the_services_directories_come_from_flags_and_the_environment(
    tree: dict[str, Path], tmp_path: Path
) -> None:
    third = tmp_path / "third"
    third.mkdir()
    env = os.pathsep.join([str(tree["other"]), "", str(third)])
    access = DataAccess.for_service([str(tree["allowed"])], env)
    assert access.dirs == (tree["allowed"], tree["other"], third)
    assert DataAccess.for_service(None, None) == DataAccess.nowhere()
    with pytest.raises(UserError, match="data directory 'data' is relative; give an absolute"):
        DataAccess.for_service(["data"], None)
    with pytest.raises(UserError, match=r"no such directory; create it, or fix the path given"):
        DataAccess.for_service(None, str(tmp_path / "missing"))
    assert "only under" in access.describe() and "none" in DataAccess.nowhere().describe()
