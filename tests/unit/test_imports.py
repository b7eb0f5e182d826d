"""The control plane never imports torch or NVML, so the CLI and the service start fast."""

from __future__ import annotations

import subprocess
import sys

import pytest

CONTROL_PLANE = [
    "autotuner.cli",
    "autotuner.coordinator",
    "autotuner.executors.ray_executor",
    "autotuner.storage.repository",
    "autotuner.views",
    "autotuner.space",
]


@pytest.mark.parametrize("module", CONTROL_PLANE)
def test_control_plane_does_not_import_torch_or_nvml(module: str) -> None:
    code = (
        f"import sys, {module}; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pynvml')); "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"{module} imports {out.stdout.strip()}"


def test_cli_help_is_fast() -> None:
    code = "import autotuner.cli, sys; print(len([m for m in sys.modules if m.startswith('ray')]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", "importing the CLI must not import Ray"
