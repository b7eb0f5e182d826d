"""The code's shape, checked: no heavy imports, no import circles, no upward arrows.

- No control-plane module imports torch, NVML or `workers` (the data plane), so the CLI and the
  service start fast and install without torch.
- The data plane (`workers/`) imports from the control plane only the contract with it
  (docs/architecture.md, "The contract"): the rest of `autotuner/` may change without a trial.
- No import circle between modules, in `autotuner/` and `workers/` alike (function-level
  imports count: a circle hidden in a function is still a circle).
- SQL only in storage: no module of `autotuner/` outside `autotuner/storage/` builds or runs a
  query; it calls a repository method.
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

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("autotuner", "workers")

LAYERS: dict[str, int] = {
    "autotuner.spec": 0,
    "autotuner.presets": 0,
    "autotuner.flops": 0,
    "autotuner.inputs": 0,
    "autotuner.datafiles": 0,
    "autotuner.options": 0,
    "autotuner.option_defaults": 0,
    "autotuner.numbers": 0,
    "autotuner.status": 0,
    "autotuner.types": 0,
    "autotuner.purpose": 0,
    "autotuner.errors": 0,
    "autotuner.storage": 1,
    "autotuner.executors": 1,
    "autotuner.search": 2,
    "autotuner.study": 3,
    "autotuner.api": 4,
    "autotuner.dashboard": 4,
    "autotuner.cli": 5,
}

# What `workers/` may import from `autotuner/`: the contract and the pure helpers it rests on.
CONTRACT = {"autotuner", "autotuner.spec", "autotuner.flops", "autotuner.datafiles"}


def _modules(package: str) -> list[str]:
    out = []
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append(".".join(parts))
    return out


CONTROL = _modules("autotuner")
DATA = _modules("workers")
MODULES = CONTROL + DATA


def _file(module: str) -> Path:
    path = REPO / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _imports(module: str) -> set[str]:
    """Every module of ours this module imports, anywhere in its body (a function's lazy
    import included)."""
    file = _file(module)
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # `from . import x`, `from ..pkg import y`: relative to this package
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import sub` imports the module pkg.sub when it is one.
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def _layer(module: str) -> int:
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            return layer
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def test_every_module_has_a_layer() -> None:
    for module in CONTROL:
        if module != "autotuner":
            _layer(module)


def test_no_upward_imports() -> None:
    upward = [
        f"{m} (layer {_layer(m)}) imports {dep} (layer {_layer(dep)})"
        for m in CONTROL
        if m != "autotuner"
        for dep in sorted(_imports(m))
        if dep in CONTROL and dep != "autotuner" and _layer(dep) > _layer(m)
    ]
    assert not upward, "\n".join(upward)


# What builds a statement, imported from sqlalchemy, and what runs one, called on a session.
QUERY_BUILDERS = {"select", "update", "delete", "insert"}
QUERY_RUNNERS = {"execute", "scalars", "scalar"}


def _queries(module: str) -> list[str]:
    """Where `module` builds a query (imports a statement builder from sqlalchemy, or calls
    it on the imported module) or runs one (`.execute(`, `.scalars(`, `.scalar(`)."""
    found = []
    tree = ast.parse(_file(module).read_text())
    sqlalchemy_names = set()  # what `import sqlalchemy [as sa]` binds
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            sqlalchemy_names |= {
                (a.asname or a.name) for a in node.names if a.name.split(".")[0] == "sqlalchemy"
            }
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            for alias in node.names:
                if alias.name in QUERY_BUILDERS:
                    found.append(f"line {node.lineno}: imports {alias.name} from {node.module}")
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in QUERY_BUILDERS
            and isinstance(node.value, ast.Name)
            and node.value.id in sqlalchemy_names
        ):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in QUERY_RUNNERS
        ):
            found.append(f"line {node.lineno}: .{node.func.attr}(")
    return found


def test_queries_live_only_in_storage() -> None:
    outside = [m for m in CONTROL if not (m + ".").startswith("autotuner.storage.")]
    found = {m: q for m in outside if (q := _queries(m))}
    new = [f"{m} {q}" for m, q in found.items()]
    assert not new, (
        "queries outside autotuner/storage/: add a repository method there and call it\n"
        + "\n".join(new)
    )


def test_the_query_check_sees_builders_and_runners() -> None:
    assert _queries("autotuner.storage.study_repo")
    assert _queries("autotuner.storage.trial_list")
    assert not _queries("autotuner.study.submit_keys")


def test_the_data_plane_imports_only_the_contract() -> None:
    beyond = [
        f"{m} imports {dep}"
        for m in DATA
        for dep in sorted(_imports(m))
        if dep.startswith("autotuner") and dep not in CONTRACT
    ]
    assert not beyond, "\n".join(beyond)


def test_the_circle_check_sees_lazy_imports() -> None:
    # trial.py imports its distributed group inside a function: that edge must be seen.
    assert "workers.distributed" in _imports("workers.trial")


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
        f"mods = {[m for m in CONTROL if not m.endswith('__main__')]!r}\n"
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


@pytest.mark.parametrize("module", ["autotuner.cli.commands", "autotuner.api.app"])
def test_cli_and_service_do_not_import_ray_until_needed(module: str) -> None:
    code = f"import {module}, sys; print(len([m for m in sys.modules if m.startswith('ray')]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", f"importing {module} must not import Ray"
