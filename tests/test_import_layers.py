"""Imports point one way: runtime <- evaluation <- training <- benchmarks, and nothing imports in a
loop (``import_layers.py`` has the rule; every import counts, function-level ones included)."""
from __future__ import annotations

from pathlib import Path

from import_layers import LAYERS, import_cycles, import_graph, layer, upward_imports

ROOT = Path(__file__).resolve().parents[1]


def _tree(root: Path, files: dict) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_repository_imports_only_down_the_layers_and_in_no_loop():
    graph = import_graph(ROOT)
    assert {"spacy_sapbert.linker", "spacy_sapbert.evaluation.calibration", "training.report", "benchmarks.readme_tables"} <= set(graph)
    assert "benchmarks.readme_tables" in graph["benchmarks.evaluate_all"]  # a script's import of the script beside it
    assert upward_imports(graph) == []
    assert import_cycles(graph) == []


def test_each_module_has_its_layer():
    assert [layer(m) for m in ("spacy_sapbert.linker", "spacy_sapbert.ontologies.obo", "spacy_sapbert.evaluation.end_to_end",
                               "spacy_sapbert.calibration", "spacy_sapbert.cli", "spacy_sapbert.__main__", "spacy_sapbert.client",
                               "training.report", "benchmarks.speed")] == [0, 0, 1, 1, 1, 1, 0, 2, 3]
    assert LAYERS == ("runtime", "evaluation", "training", "benchmarks")


def test_an_upward_import_or_a_loop_is_reported(tmp_path):
    """A synthetic tree: each layer imports the next one up once (function-level, relative,
    ``TYPE_CHECKING`` and a script's sibling import among them); the allowed imports pass."""
    root = _tree(tmp_path, {
        "spacy_sapbert/__init__.py": "from .about import version\n",
        "spacy_sapbert/about.py": "version = '1'\n",
        "spacy_sapbert/linker.py": "def f():\n    from .evaluation.gold_spans import x\n",
        "spacy_sapbert/search.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from spacy_sapbert.cli import app\n",
        "spacy_sapbert/kb.py": "from . import index\n",
        "spacy_sapbert/index.py": "def g():\n    import spacy_sapbert.kb\n",
        "spacy_sapbert/cli.py": "from .linker import f\nfrom .evaluation import gold_spans\n",
        "spacy_sapbert/evaluation/__init__.py": "",
        "spacy_sapbert/evaluation/gold_spans.py": "import spacy_sapbert.linker\nimport training.pairs\n",
        "training/__init__.py": "",
        "training/pairs.py": "import numpy\n",
        "training/report.py": "from .pairs import x\nfrom benchmarks.readme_tables import update_readme\n",
        "benchmarks/readme_tables.py": "from training.report import render\nfrom spacy_sapbert.fileio import y\n",
        "benchmarks/speed.py": "from readme_tables import update_readme\nimport numpy\n",
    })
    graph = import_graph(root)
    assert graph["benchmarks.speed"] == {"benchmarks.readme_tables"}
    assert upward_imports(graph) == [
        "evaluation spacy_sapbert.evaluation.gold_spans imports training training.pairs",
        "runtime spacy_sapbert.linker imports evaluation spacy_sapbert.evaluation.gold_spans",
        "runtime spacy_sapbert.search imports evaluation spacy_sapbert.cli",
        "training training.report imports benchmarks benchmarks.readme_tables",
    ]
    assert import_cycles(graph) == [
        ["benchmarks.readme_tables", "training.report"],
        ["spacy_sapbert.evaluation.gold_spans", "spacy_sapbert.linker"],
        ["spacy_sapbert.index", "spacy_sapbert.kb"],
    ]


def test_a_tree_that_keeps_the_layers_passes(tmp_path):
    root = _tree(tmp_path, {
        "spacy_sapbert/__init__.py": "",
        "spacy_sapbert/linker.py": "import numpy\n",
        "spacy_sapbert/evaluation/__init__.py": "",
        "spacy_sapbert/evaluation/gold_spans.py": "from ..linker import x\n",
        "training/__init__.py": "",
        "training/report.py": "from spacy_sapbert.evaluation.gold_spans import y\n",
        "benchmarks/speed.py": "from training.report import z\nfrom spacy_sapbert import linker\n",
    })
    graph = import_graph(root)
    assert graph["benchmarks.speed"] == {"training.report", "spacy_sapbert", "spacy_sapbert.linker"}
    assert upward_imports(graph) == [] and import_cycles(graph) == []
