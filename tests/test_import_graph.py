"""Imports point one way: the runtime (component, KB, search, pipelines) imports nothing from the
evaluation, the calibration, training/ or benchmarks/, and the package's import graph has no cycle.
Every import counts, function-level ones included."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parent.parent / "spacy_sapbert"
# Modules that may import the evaluation: the evaluation itself, the calibration and the CLI.
NOT_RUNTIME = ("spacy_sapbert.evaluation", "spacy_sapbert.calibration", "spacy_sapbert.cli",
               "spacy_sapbert.spacy_cli", "spacy_sapbert.__main__")
FORBIDDEN = ("spacy_sapbert.evaluation", "spacy_sapbert.calibration", "training", "benchmarks")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(name: str, path: Path, modules: Set[str]) -> Set[str]:
    """The package modules (and ``training``/``benchmarks``) that ``path`` imports."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
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
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                found.add(target)
            elif target.split(".")[0] in ("training", "benchmarks"):
                found.add(target.split(".")[0])
    return found


def import_graph() -> Dict[str, Set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports_of(name, path, set(paths)) for name, path in paths.items()}


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import cycle among the modules (the package ``__init__`` left out: it imports lazily), or []."""
    done: Set[str] = set()
    for start in sorted(graph):
        path: List[str] = []
        stack = [(start, iter(sorted(graph[start])))]
        on_path = {start}
        path.append(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                on_path.discard(path.pop())
                done.add(node)
            elif child in on_path:
                return path[path.index(child):] + [child]
            elif child in graph and child not in done and child != "spacy_sapbert":
                stack.append((child, iter(sorted(graph[child]))))
                on_path.add(child)
                path.append(child)
    return []


def test_the_runtime_imports_no_evaluation_calibration_training_or_benchmarks():
    graph = import_graph()
    assert "spacy_sapbert.linker" in graph and "spacy_sapbert.evaluation.gold_spans" in graph
    wrong = [f"{name} imports {target}" for name, targets in sorted(graph.items())
             if name != "spacy_sapbert" and not name.startswith(NOT_RUNTIME)
             for target in sorted(targets) if target.startswith(FORBIDDEN)]
    assert wrong == []


def test_the_import_graph_has_no_cycle():
    graph = {name: targets for name, targets in import_graph().items() if name != "spacy_sapbert"}
    assert find_cycle(graph) == []


def test_the_checks_see_function_level_imports_and_cycles(tmp_path):
    module = tmp_path / "spacy_sapbert" / "linker.py"
    module.parent.mkdir()
    module.write_text("def f():\n    from .evaluation.gold_spans import x\n    import training.pairs\n")
    found = imports_of("spacy_sapbert.linker", module, {"spacy_sapbert.linker", "spacy_sapbert.evaluation.gold_spans"})
    assert found == {"spacy_sapbert.evaluation.gold_spans", "training"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"b"}}) == []
