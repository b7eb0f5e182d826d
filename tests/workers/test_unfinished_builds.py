"""workers/compile_cache.drop_unfinished_builds on a cache laid out as inductor lays it out:
a kernel's library with its build's scratch folder still beside it is half-built, unless its
lock says another process is building it now."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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


# A concurrent trial's build, as inductor runs it (codecache._worker_compile_cpp): under the
# kernel's lock, the library written whole and the scratch folder removed; on a line of stdin,
# finishes and releases the lock. Inductor loads the library after releasing it.
_BUILDER = """
import os, shutil, sys, filelock
lock, library, scratch = sys.argv[1:]
held = filelock.FileLock(lock)
held.acquire()
print("building", flush=True)
sys.stdin.readline()
with open(library, "wb") as f:
    f.write(b"\\x7fELF" + b"\\0" * 60)
shutil.rmtree(scratch)
held.release()
print("built", flush=True)
sys.stdin.read()
"""


def test_a_build_another_trial_finishes_during_the_cleanup_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two trials of one study on two GPUs share the compile cache. The cleanup saw the other
    trial's build folder, the build then finished and let go of its lock: the cleanup took the
    lock and removed the finished library, which the other trial loads next."""
    library = _kernel(tmp_path, "crace42", finished=False)
    scratch = library.parent / "crace42.main_CxxBuild"
    lock = tmp_path / "locks" / "crace42.lock"
    lock.parent.mkdir()
    builder = subprocess.Popen(
        [sys.executable, "-c", _BUILDER, str(lock), str(library), str(scratch)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert builder.stdin is not None and builder.stdout is not None
    scandir = os.scandir

    def scan_then_finish_the_build(path: Any) -> Any:
        # The cleanup has listed this bucket (the build folder in it); the build ends now.
        entries = list(scandir(path))
        if Path(path) == library.parent and builder.poll() is None:
            assert builder.stdin is not None and builder.stdout is not None
            builder.stdin.write("finish\n")
            builder.stdin.flush()
            assert builder.stdout.readline().strip() == "built"
        return iter(entries)

    try:
        assert builder.stdout.readline().strip() == "building"
        monkeypatch.setattr(os, "scandir", scan_then_finish_the_build)
        assert drop_unfinished_builds(tmp_path) == []
        assert library.stat().st_size > 0, "the other trial's finished library was removed"
    finally:
        monkeypatch.undo()
        builder.communicate("")


def test_no_cache_yet_is_nothing_to_do(tmp_path: Path) -> None:
    assert drop_unfinished_builds(tmp_path / "absent") == []
