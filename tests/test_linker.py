"""The sapbert_linker component: annotations, batching, serialization, edge cases."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import spacy
from spacy.tokens import Span

from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.search import LinkingKB

RECORDS = [
    R("HP:1", "Seizure", ["Epileptic seizure", "Convulsion", "Fits"]),
    R("HP:2", "Headache", ["Cephalgia", "Head pain"]),
    R("HP:3", "Fever", ["Pyrexia", "Elevated body temperature"]),
    R("HP:4", "Multiple sclerosis", ["MS"]),
    R("HP:5", "Mitral stenosis", ["MS"]),
    R("HP:6", "Asthma", ["Bronchial asthma"]),
]


@pytest.fixture(scope="module")
def kb_path(tiny_encoder, tmp_path_factory):
    path = tmp_path_factory.mktemp("kb") / "kb"
    LinkingKB.build(RECORDS, tiny_encoder).to_disk(path)
    return path


def make_nlp(kb_path, encoder_path, **config):
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler", config={"phrase_matcher_attr": "LOWER"})
    names = ["seizure", "convulsion", "ms", "bronchial asthma", "pyrexia", "headache", "fever", "asthma"]
    ruler.add_patterns([{"label": "PHEN", "pattern": n} for n in names])
    # fp32 like the KB's vectors: a random tiny BERT's vectors are so alike that bf16 rounding
    # (the "auto" choice on CPUs with AMX) can reorder them; precision has its own tests
    config = {"precision": "fp32", **config}
    nlp.add_pipe("sapbert_linker", config={"kb": str(kb_path), "encoder": str(encoder_path), **config})
    return nlp


TEXTS = [
    "Convulsion and pyrexia since Monday.",
    "",
    "No complaints today.",
    "Bronchial asthma; MS suspected. Headache.",
    "   ",
    "Fever, fever and seizure.",
]


def annotations(doc):
    return [(e.text, e.label_, e.kb_id_, e._.cui, e._.cui_candidates) for e in doc.ents]


def test_links_known_names_to_their_concepts(kb_path, tiny_bert_path):
    nlp = make_nlp(kb_path, tiny_bert_path)
    doc = nlp("Convulsion and pyrexia, then bronchial asthma.")
    assert [(e.text, e._.cui, e.kb_id_) for e in doc.ents] == [
        ("Convulsion", "HP:1", "HP:1"),
        ("pyrexia", "HP:3", "HP:3"),
        ("bronchial asthma", "HP:6", "HP:6"),
    ]
    cid, name, score, ambiguous = doc.ents[0]._.cui_candidates[0]
    assert (cid, name, ambiguous) == ("HP:1", "Convulsion", False) and score == pytest.approx(1.0, abs=1e-4)
    assert all(t.ent_kb_id_ == "HP:6" for t in doc.ents[2])


def test_ambiguous_name_is_flagged_with_both_concepts(kb_path, tiny_bert_path):
    nlp = make_nlp(kb_path, tiny_bert_path)
    ent = nlp("MS suspected").ents[0]
    top2 = ent._.cui_candidates[:2]
    assert {c[0] for c in top2} == {"HP:4", "HP:5"}
    assert all(c[3] for c in top2)


def test_pipe_equals_call_and_handles_empty_docs(kb_path, tiny_bert_path):
    nlp = make_nlp(kb_path, tiny_bert_path)
    one_by_one = [annotations(nlp(t)) for t in TEXTS]
    batched = [annotations(d) for d in nlp.pipe(TEXTS, batch_size=4)]
    assert one_by_one == batched
    assert one_by_one[1] == [] and one_by_one[2] == [] and one_by_one[4] == []
    assert len(one_by_one[5]) == 3


def test_round_trip_through_disk_gives_identical_candidates(kb_path, tiny_bert_path, tmp_path):
    nlp = make_nlp(kb_path, tiny_bert_path, top_k=3)
    before = [annotations(d) for d in nlp.pipe(TEXTS)]
    nlp.to_disk(tmp_path / "pipeline")
    assert (tmp_path / "pipeline" / "sapbert_linker" / "encoder" / "config.json").is_file()
    assert (tmp_path / "pipeline" / "sapbert_linker" / "kb" / "index.faiss").is_file()
    loaded = spacy.load(tmp_path / "pipeline")
    assert [annotations(d) for d in loaded.pipe(TEXTS)] == before


def test_saved_pipeline_loads_in_a_fresh_process_without_import(kb_path, tiny_bert_path, tmp_path):
    nlp = make_nlp(kb_path, tiny_bert_path)
    nlp.to_disk(tmp_path / "pipeline")
    # a fresh process that never imports spacy_sapbert: the entry point must find the factory
    code = (
        "import spacy, json, sys, torch; torch.set_num_threads(1);"
        f"nlp = spacy.load({str(tmp_path / 'pipeline')!r});"
        "doc = nlp('Seizure and fever');"
        "print(json.dumps([(e.text, e.kb_id_, e._.cui) for e in doc.ents]));"
        "print('spacy_sapbert.linker' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert json.loads(out[0]) == [["Seizure", "HP:1", "HP:1"], ["fever", "HP:3", "HP:3"]]


def test_threshold_gives_nil_and_labels_filter(kb_path, tiny_bert_path):
    nlp = make_nlp(kb_path, tiny_bert_path, threshold=1.01)
    doc = nlp("Seizure and fever")
    assert [e._.cui for e in doc.ents] == [None, None]
    assert [e.kb_id_ for e in doc.ents] == ["", ""]
    assert doc.ents[0]._.cui_candidates  # candidates are still there for inspection
    nlp = make_nlp(kb_path, tiny_bert_path, labels=["OTHER"])
    doc = nlp("Seizure and fever")
    assert [e._.cui for e in doc.ents] == [None, None] and doc.ents[0]._.cui_candidates is None


def test_span_group_linking_long_and_unicode_spans(kb_path, tiny_bert_path):
    nlp = spacy.blank("en")
    nlp.add_pipe(
        "sapbert_linker",
        config={"kb": str(kb_path), "encoder": str(tiny_bert_path), "spans_key": "mentions", "link_ents": False},
    )
    doc = nlp.make_doc("Fièvre élevée; headache " + "very " * 60 + "bad; fever")
    doc.spans["mentions"] = [
        Span(doc, 0, 2, "PHEN"),  # non-ASCII
        Span(doc, 3, len(doc) - 2, "PHEN"),  # far longer than max_length
        Span(doc, len(doc) - 1, len(doc), "PHEN"),
    ]
    doc = nlp(doc)
    spans = list(doc.spans["mentions"])
    assert all(s._.cui_candidates for s in spans)
    assert spans[2]._.cui == "HP:3" and spans[2].kb_id_ == "HP:3"
    assert doc.ents == ()


def test_whitespace_only_span_gets_no_candidates(kb_path, tiny_bert_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"kb": str(kb_path), "encoder": str(tiny_bert_path), "spans_key": "sc"})
    doc = nlp.make_doc("fever  \n  now")
    doc.spans["sc"] = [Span(doc, 1, 2, "X")]
    assert doc[1].is_space
    doc = nlp(doc)
    assert doc.spans["sc"][0]._.cui is None and doc.spans["sc"][0]._.cui_candidates == []


def test_refuses_to_overwrite_another_packages_extension(kb_path, tiny_bert_path):
    Span.set_extension("umls_cui", default=None, force=True)
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="already registered by another package"):
        nlp.add_pipe("sapbert_linker", config={"kb": str(kb_path), "cui_attr": "umls_cui"})
    nlp.add_pipe("sapbert_linker", config={"kb": str(kb_path), "encoder": str(tiny_bert_path), "cui_attr": "my_cui"})
    assert Span.has_extension("my_cui")


def test_kb_built_with_another_encoder_is_refused(kb_path, tmp_path):
    from conftest import make_tiny_bert

    other = make_tiny_bert(tmp_path / "other", seed=1)
    nlp = make_nlp(kb_path, other)
    with pytest.raises(ValueError, match="different encoder"):
        nlp("Seizure")


def test_cache_is_bounded_and_results_stable(kb_path, tiny_bert_path):
    nlp = make_nlp(kb_path, tiny_bert_path, cache_size=2)
    linker = nlp.get_pipe("sapbert_linker")
    first = [annotations(d) for d in nlp.pipe(TEXTS, batch_size=2)]
    assert len(linker._cache) == 2  # the last batch's two distinct mentions
    again = [annotations(d) for d in nlp.pipe(TEXTS, batch_size=2)]
    assert first == again


@pytest.mark.slow
def test_real_encoder_links_unseen_synonyms(tmp_path):
    """With the real MiniLM weights, surface variants not in the KB reach the right concept."""
    from spacy_sapbert.encoder import SapEncoder

    enc = SapEncoder.load(None, device="cpu")
    LinkingKB.build(RECORDS, enc).to_disk(tmp_path / "kb")
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("sapbert_linker", config={"kb": str(tmp_path / "kb")})
    got = [c[0].concept_id for c in linker.link_strings(["convulsions", "head ache", "pyrexial", "asthmatic bronchitis"])]
    assert got == ["HP:1", "HP:2", "HP:3", "HP:6"]


@pytest.mark.slow
def test_spacy_package_of_a_linker_pipeline_installs_and_loads(kb_path, tiny_bert_path, tmp_path):
    nlp = make_nlp(kb_path, tiny_bert_path)
    nlp.meta.update({"name": "sapbert_test", "version": "0.0.1"})
    nlp.to_disk(tmp_path / "pipeline")
    (tmp_path / "out").mkdir()
    run = [sys.executable, "-m"]
    subprocess.run(run + ["spacy", "package", str(tmp_path / "pipeline"), str(tmp_path / "out")], check=True, capture_output=True)
    (sdist,) = (tmp_path / "out").glob("*/dist/*.tar.gz")
    site = tmp_path / "site"
    pip = ["pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site), str(sdist)]
    subprocess.run(run + pip, check=True, capture_output=True)
    code = "import spacy, json; nlp = spacy.load('en_sapbert_test'); print(json.dumps([e._.cui for e in nlp('Fits, pyrexia').ents]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(site)})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["HP:3"]
