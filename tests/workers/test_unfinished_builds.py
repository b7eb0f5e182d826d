"""workers/compile_cache.drop_unfinished_builds on a cache laid out as inductor lays it out:
a kernel's library with its build's scratch folder still beside it is half-built, unless its
lock says another process is building it now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workers.compile_cache import drop_unfinished_builds


def _kernel(cache: Path, key: str, *, finished: bool) -> Path:
    bucket = cache / key[1:3]
    bucket.mkdir(parents=True, exist_ok=True)
    (bucket / f"{key}.main.cpp").write_text("// kernel")
    library = bucket / f"{key}.main.so"
    library.write_bytes(b"\x7fELF" + b"\0" * 60 if finished else b"")
    if not finished:
        (bucket / f"{key}.main_CxxBuild").mkdir()
    return library


def test_a_half_built_library_is_removed_and_a_finished_one_kept(tmp_path: Path) -> None:
    half = _kernel(tmp_path, "cabcdef", finished=False)
    done = _kernel(tmp_path, "cxyz123", finished=True)
    assert drop_unfinished_builds(tmp_path) == [half]
    assert not half.exists() and not (half.parent / "cabcdef.main_CxxBuild").exists()
    assert done.exists() and (half.parent / "cabcdef.main.cpp").exists()  # the source stays
    assert drop_unfinished_builds(tmp_path) == []


def test_a_library_being_built_now_is_left_alone(tmp_path: Path) -> None:
    half = _kernel(tmp_path, "cbusy99", finished=False)
    lock = tmp_path / "locks" / "cbusy99.lock"
    lock.parent.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, filelock; l = filelock.FileLock(sys.argv[1]); l.acquire();"
            " print('held', flush=True); sys.stdin.read()",
            str(lock),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert drop_unfinished_builds(tmp_path) == []
        assert half.exists()
    finally:
        holder.communicate("")
    assert drop_unfinished_builds(tmp_path) == [half]  # the builder died: now it is stale


def test_no_cache_yet_is_nothing_to_do(tmp_path: Path) -> None:
    assert drop_unfinished_builds(tmp_path / "absent") == []
