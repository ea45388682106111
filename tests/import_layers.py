"""The project's import layers, read from the source: runtime <- evaluation <- training <- benchmarks.

A module may import its own layer and the layers before it, never a later one, and no set of
modules imports itself round in a loop. Every import counts, function-level and ``TYPE_CHECKING``
ones included: a function-level import still ties the layers together, it only defers the cost.
The same rule as ``../shared/tools/check_imports.py`` (which guards the runtime only), extended to
``training/`` and ``benchmarks/``; ``test_import_layers.py`` runs it on the repository and on
small trees that break it.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Mapping, Set

TREES = ("spacy_sapbert", "training", "benchmarks")
LAYERS = ("runtime", "evaluation", "training", "benchmarks")
# The spacy_sapbert modules above the runtime: the evaluation, the calibration's old import path, and
# the command line, which may import anything in the package.
EVALUATION = ("spacy_sapbert.evaluation", "spacy_sapbert.calibration", "spacy_sapbert.cli", "spacy_sapbert.spacy_cli",
              "spacy_sapbert.__main__")
LAZY_PACKAGE = "spacy_sapbert"  # its __init__ imports its exports on first use: left out of the cycle check


def layer(module: str) -> int:
    """The index in ``LAYERS`` of a module of the three trees."""
    top = module.split(".")[0]
    if top in ("training", "benchmarks"):
        return LAYERS.index(top)
    return 1 if any(module == p or module.startswith(p + ".") for p in EVALUATION) else 0


def modules_under(root: Path) -> Dict[str, Path]:
    """Every module of the three trees in the repository ``root``, by dotted name (a script
    ``benchmarks/speed.py`` is ``benchmarks.speed``)."""
    found: Dict[str, Path] = {}
    for tree in TREES:
        for path in sorted((root / tree).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> Set[str]:
    """The modules of the three trees that the module ``name`` (at ``path``) imports. A benchmark
    script's plain ``import x`` of a script beside it (``from readme_tables import …``) is that script."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    scripts = not (path.parent / "__init__.py").exists()  # benchmarks/: scripts, run as ``python benchmarks/x.py``
    beside = {m.rpartition(".")[2] for m, p in modules.items() if scripts and p.parent == path.parent}
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] in beside:  # a script's folder comes first on its sys.path
                target = f"{package}.{target}"
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target in modules and target != name:
                found.add(target)
            elif target.split(".")[0] in ("training", "benchmarks"):
                found.add(target.split(".")[0])  # a module of a tree not read here still names its layer
    return found


def import_graph(root: Path) -> Dict[str, Set[str]]:
    """Module -> the modules of the three trees it imports, for the repository ``root``."""
    modules = modules_under(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def upward_imports(graph: Mapping[str, Set[str]]) -> List[str]:
    """Each import of a later layer, as ``"<layer> <module> imports <layer> <module>"``."""
    return [f"{LAYERS[layer(name)]} {name} imports {LAYERS[layer(target)]} {target}"
            for name, targets in sorted(graph.items()) for target in sorted(targets) if layer(target) > layer(name)]


def import_cycles(graph: Mapping[str, Set[str]]) -> List[List[str]]:
    """The sets of modules that import each other round in a loop (strongly connected components of
    more than one module; ``LAZY_PACKAGE`` left out), each sorted."""
    edges = {n: sorted(t for t in ts if t in graph and t != LAZY_PACKAGE) for n, ts in graph.items() if n != LAZY_PACKAGE}
    order: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the trees are a few hundred modules deep at most
        order[node] = low[node] = len(order)
        stack.append(node)
        on_stack.add(node)
        for child in edges[node]:
            if child not in order:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], order[child])
        if low[node] == order[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for start in sorted(edges):
        if start not in order:
            visit(start)
    return sorted(found)
