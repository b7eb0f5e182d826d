"""The control plane's shape, checked: no heavy imports, no import circles, no upward arrows.

- No control-plane module imports torch, NVML or `workers` (the data plane), so the CLI and the
  service start fast and install without torch.
- No import circle between modules (function-level imports count: a circle hidden in a function
  is still a circle).
- Layers, lowest first: the foundation (the contract with `workers/` and the edge parsing), then
  storage and executors, then search, then study, then the HTTP API and dashboard, then the CLI.
  A module may import its own layer or a lower one, never a higher one.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "autotuner"

LAYERS: dict[str, int] = {
    "autotuner.spec": 0,
    "autotuner.presets": 0,
    "autotuner.flops": 0,
    "autotuner.inputs": 0,
    "autotuner.datafiles": 0,
    "autotuner.options": 0,
    "autotuner.numbers": 0,
    "autotuner.status": 0,
    "autotuner.storage": 1,
    "autotuner.executors": 1,
    "autotuner.search": 2,
    "autotuner.study": 3,
    "autotuner.api": 4,
    "autotuner.dashboard": 4,
    "autotuner.cli": 5,
}


def _modules() -> list[str]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] in ("__init__", "__main__"):
            parts = parts[:-1] if parts[-1] == "__init__" else parts
        out.append(".".join(parts))
    return out


MODULES = _modules()


def _imports(module: str) -> set[str]:
    """Every autotuner module this module imports, anywhere in its body."""
    path = ROOT.parent / Path(*module.split("."))
    file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if not file.exists():
        file = path.with_suffix(".py")
    found: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import sub` imports the module pkg.sub when it is one.
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module and name.startswith("autotuner"):
                found.add(name)
    return found


def _layer(module: str) -> int:
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        if module != "autotuner":
            _layer(module)


def test_no_upward_imports() -> None:
    upward = [
        f"{m} (layer {_layer(m)}) imports {dep} (layer {_layer(dep)})"
        for m in MODULES
        if m != "autotuner"
        for dep in sorted(_imports(m))
        if dep != "autotuner" and _layer(dep) > _layer(m)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_circles() -> None:
    graph = {m: {d for d in _imports(m) if not m.startswith(d + ".")} for m in MODULES}
    circles = []
    # Tarjan's strongly connected components: any component of two or more is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert not circles, f"import circles: {circles}"


def test_control_plane_does_not_import_torch_nvml_or_workers() -> None:
    # One interpreter imports every module in turn and records what each one pulled in.
    code = (
        "import importlib, json, sys\n"
        f"mods = {[m for m in MODULES if not m.endswith('__main__')]!r}\n"
        "bad = {}\n"
        "for m in mods:\n"
        "    importlib.import_module(m)\n"
        "    top = {n.split('.')[0] for n in sys.modules}\n"
        "    heavy = sorted(top & {'torch', 'pynvml', 'workers'})\n"
        "    if heavy:\n"
        "        bad[m] = heavy\n"
        "        break\n"
        "print(json.dumps(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {}, f"heavy import: {out.stdout}"


@pytest.mark.parametrize("module", ["autotuner.cli", "autotuner.api.app"])
def test_cli_and_service_do_not_import_ray_until_needed(module: str) -> None:
    code = f"import {module}, sys; print(len([m for m in sys.modules if m.startswith('ray')]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", f"importing {module} must not import Ray"
