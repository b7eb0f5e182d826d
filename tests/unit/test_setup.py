"""`make setup` installs the torch build the machine can use: the CPU build (from a local wheel,
else PyTorch's CPU index) when there is no NVIDIA GPU, never PyPI's CUDA build and its ~3 GB of
nvidia-* packages; the CUDA build when `nvidia-smi` finds a GPU. Checked with `make -n` (what
make would run) under a stand-in `nvidia-smi` that finds a GPU or not."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _setup_commands(tmp_path: Path, *, gpu: bool) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\n{'echo GPU 0: NVIDIA H200' if gpu else 'exit 9'}\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("TORCH", None)
    proc = subprocess.run(
        ["make", "-n", "setup", f"VENV={tmp_path / 'venv'}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _torch_installs(commands: str) -> list[str]:
    """Each pip command that installs torch, in the order they are tried (`a || b`)."""
    return [
        part
        for line in commands.splitlines()
        for part in line.split("||")
        if "pip install" in part and "torch" in part
    ]


def test_no_gpu_installs_the_cpu_build(tmp_path: Path) -> None:
    installs = _torch_installs(_setup_commands(tmp_path, gpu=False))
    assert installs, "no torch install in make setup"
    # Every attempt asks for the +cpu build: PyPI has none, so it can't silently get CUDA.
    assert all('"torch==2.13.0+cpu"' in line for line in installs), installs
    assert any("--extra-index-url https://download.pytorch.org/whl/cpu" in i for i in installs)
    # The configured sources (a local wheel) first, so a machine that has one needs no network.
    assert "--extra-index-url" not in installs[0]


def test_a_gpu_installs_the_cuda_build(tmp_path: Path) -> None:
    installs = _torch_installs(_setup_commands(tmp_path, gpu=True))
    assert installs and all('"torch==2.13.0"' in line for line in installs), installs
    # No fallback to the CPU index: `==2.13.0` would match its 2.13.0+cpu.
    assert not any("whl/cpu" in line for line in installs), installs
