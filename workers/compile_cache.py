"""The per-study compile cache, and how a trial tells whether its compile hit it.

Inductor and Triton cache compiled kernels on disk (machine-wide by default, under /tmp).
Left there, a later study's compiles look cheaper than a cold one, and a recommendation's
compile time would depend on what ran on the machine before. So every trial of one study gets
the same two directories, keyed by the study id, under a root of the node:
`$AUTOTUNER_COMPILE_CACHE_DIR` or `<tempdir>/autotuner-compile-cache`:

    <root>/<study id>/inductor     TORCHINDUCTOR_CACHE_DIR
    <root>/<study id>/triton       TRITON_CACHE_DIR

Trials of one study share them (a config measured again compiles from the cache); studies do
not. A trial outside any study gets directories of its own that go with it: always cold.
A trial's own `env` that sets either variable wins (the user chose a cache).

The worker side (`counters`, `delta`) reads inductor's FX-graph cache counters around the
compile so each TrialResult says how many graphs hit and missed (study/recommend.py reports the
winner's cold compile from them), and `drop_unfinished_builds` clears what a killed compile
left behind before the trial compiles.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from autotuner.spec import TrialConfig

ROOT_ENV = "AUTOTUNER_COMPILE_CACHE_DIR"
INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"
TRITON_ENV = "TRITON_CACHE_DIR"


def cache_root() -> Path:
    """This node's root of the per-study caches."""
    root = os.environ.get(ROOT_ENV)
    return Path(root) if root else Path(tempfile.gettempdir()) / "autotuner-compile-cache"


def study_dir(study_id: str) -> Path:
    # A study id is ours ("st-1234abcd"), but a path component must never climb out of the root.
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", study_id).lstrip(".") or "_"
    return cache_root() / safe


def cache_env(config: TrialConfig, trial_tmp: Path | None) -> dict[str, str]:
    """TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR for this trial's processes ({} for a
    trial outside a study with no directory of its own: torch's defaults)."""
    if config.study_id:
        base = study_dir(config.study_id)
    elif trial_tmp is not None:
        base = trial_tmp / "compile-cache"
    else:
        return {}
    env = {}
    for var, sub in ((INDUCTOR_ENV, "inductor"), (TRITON_ENV, "triton")):
        if var not in config.env:
            path = base / sub
            path.mkdir(parents=True, exist_ok=True)
            env[var] = str(path)
    return env


# ----------------------------------------------------------------- in the trial's process

_HIT, _MISSES = "fxgraph_cache_hit", ("fxgraph_cache_miss", "fxgraph_cache_bypass")


def counters() -> tuple[int, int]:
    """Inductor's FX-graph cache (hits, misses) so far in this process (bypass: a miss)."""
    from torch._dynamo.utils import counters as all_counters

    inductor = all_counters["inductor"]
    return int(inductor[_HIT]), sum(int(inductor[name]) for name in _MISSES)


def delta(before: tuple[int, int]) -> tuple[int, int]:
    hits, misses = counters()
    return hits - before[0], misses - before[1]


# Inductor builds a C++ kernel (CPU code, and the host side of some GPU graphs) by running the
# compiler with the cached library as its output, in a scratch `<name>_CxxBuild` folder beside
# it that it removes when the build is done, under a per-kernel file lock. A trial killed in the
# middle (its time limit, its compile budget, kill -9) leaves the folder and a truncated library
# (0 bytes on the CPU); the next compile of that kernel sees the library exists and
# loads it: "ImportError: ....main.so: file too short", a compile_error of every later trial
# with that graph in the study's cache. (torch 2.13, torch/_inductor/codecache.py:
# _worker_compile_cpp builds only `if not os.path.exists(target)`.)
_BUILD_SUFFIX = "_CxxBuild"


def inductor_dir() -> Path:
    """The directory inductor caches in, in this process (TORCHINDUCTOR_CACHE_DIR or torch's
    per-user default under the temp dir), as inductor itself resolves it."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir())


def drop_unfinished_builds(cache: Path) -> list[Path]:
    """Remove the libraries of C++ builds that did not finish (their scratch folder is still
    there) and that no process is building now (their lock is free), with the folder, so the
    next compile builds them again. Returns the libraries removed.

    Safe beside concurrent trials of the same study (one per GPU of a node share the cache):
    a build in progress holds its kernel's lock, and a build's folder is looked at again once
    the lock is ours, so a library another trial has just finished is never removed."""
    from filelock import FileLock, Timeout  # torch's own lock (a torch dependency)

    removed: list[Path] = []
    try:
        buckets = [e for e in os.scandir(cache) if e.is_dir() and e.name != "locks"]
    except OSError:  # no cache yet
        return removed
    for bucket in buckets:
        try:
            scratch = [e for e in os.scandir(bucket.path) if e.name.endswith(_BUILD_SUFFIX)]
        except OSError:
            continue
        for entry in scratch:
            name = entry.name.removesuffix(_BUILD_SUFFIX)  # "<key>.main" or "<key>"
            key = name.split(".", 1)[0]
            library = Path(bucket.path) / f"{name}.so"
            try:
                with FileLock(cache / "locks" / f"{key}.lock", timeout=0):
                    # Looked at again under the lock: a concurrent trial of the study may have
                    # finished this build between the scan and the lock (its scratch folder
                    # gone, its library whole), and loads the library after releasing the lock
                    # (inductor's load_fn), so removing it then failed that trial's compile.
                    if not os.path.isdir(entry.path):
                        continue
                    if library.exists():
                        library.unlink()
                        removed.append(library)
                    shutil.rmtree(entry.path, ignore_errors=True)
            except Timeout:  # being built now: that process finishes or leaves it for later
                continue
            except OSError:  # a read-only cache, a lock dir that cannot be made: leave it
                continue
    return removed
