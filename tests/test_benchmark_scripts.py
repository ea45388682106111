"""The benchmark scripts' own logic that the README's figures rest on."""
import importlib.util
import json
from pathlib import Path

import pytest

from spacy_sapbert.kb import ConceptKB

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bundle(tmp_path):
    path = tmp_path / "bundle.jsonl"
    rows = [
        {"id": "C1", "name": "Asthma", "synonyms": ["bronchial asthma", "ASTHMA"]},
        {"id": "C2", "name": "Heart attack", "synonyms": ["myocardial infarction", "chronic asthma"]},
        {"id": "C3", "name": "Asthma", "synonyms": ["gout"]},  # a name another concept has
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf8")
    return path


@pytest.mark.parametrize("n_names", [3, 5, 12, 40])
def test_umls_scale_kb_has_exactly_the_asked_number_of_distinct_names(bundle, n_names):
    umls_scale = _load("umls_scale")
    records = list(umls_scale.scaled_records(bundle, n_names))
    kb = ConceptKB.from_records(records)
    assert kb.n_names == n_names  # variants colliding with existing names ("chronic asthma") are skipped
    assert {r.id for r in records} <= {"C1", "C2", "C3"}
    if n_names > 5:  # every bundle name is kept before any variant
        assert {"asthma", "bronchial asthma", "heart attack", "myocardial infarction", "chronic asthma", "gout"} <= set(kb.names)
