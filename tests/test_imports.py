"""Start-up cost: what importing the package and running ``link`` import (``benchmarks/load_time.py``
has the seconds). Each check runs in a fresh interpreter."""
from __future__ import annotations

import json
import subprocess
import sys

from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.search import LinkingKB

HEAVY = ("torch", "faiss", "transformers", "sympy", "torch._dynamo", "spacy_sapbert.evaluation", "training")


def _imported(code: str) -> list:
    out = subprocess.run(
        [sys.executable, "-c", code + f"\nimport sys, json; print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r})))"],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_package_imports_neither_torch_nor_faiss():
    assert _imported("import spacy_sapbert; spacy_sapbert.__version__") == []
    assert "torch" in _imported("from spacy_sapbert import SapEncoder")  # the lazy names still work


def test_link_imports_no_transformers_evaluation_or_training(tiny_encoder, tiny_bert_path, tmp_path):
    kb = tmp_path / "kb"
    LinkingKB.build([R("HP:1", "Seizure", ["Convulsion"]), R("HP:2", "Fever", ["Pyrexia"])], tiny_encoder).to_disk(kb)
    code = (
        "from spacy_sapbert.cli import app\n"
        f"app(['link', 'Convulsion and pyrexia.', '--kb', {str(kb)!r}, '--encoder', {str(tiny_bert_path)!r}, '--detector', 'ruler'],"
        " standalone_mode=False)"
    )
    imported = _imported(code)
    assert "torch" in imported and "faiss" in imported  # it did link
    assert not [m for m in imported if m.startswith(("transformers", "sympy", "torch._dynamo", "spacy_sapbert.evaluation", "training"))]
