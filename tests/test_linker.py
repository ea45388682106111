"""The sapbert_linker component: annotations, batching, serialization, edge cases."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import spacy
from spacy.language import Language
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
def kb_path(kb_folder):
    return kb_folder(RECORDS)


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
def test_kb_names_are_searched_with_their_stored_vectors_not_encoded(kb_path, tiny_bert_path, monkeypatch):
    """The exact-name fast path: a query that is a KB name gets the candidates the encoder path
    gives it (its own name first, score 1.0), without the encoder; other queries are encoded."""
    from spacy_sapbert.encoder import SapEncoder

    queries = ["Convulsion", "ms", "bronchial  asthma", "sore head", "pyrexia and fits"]
    expected = make_nlp(kb_path, tiny_bert_path, exact_names=False).get_pipe("sapbert_linker").link_strings(queries)
    encoded = []
    encode = SapEncoder.encode
    monkeypatch.setattr(SapEncoder, "encode", lambda self, texts, **kw: encoded.extend(texts) or encode(self, texts, **kw))
    found = make_nlp(kb_path, tiny_bert_path).get_pipe("sapbert_linker").link_strings(queries)
    assert encoded == ["pyrexia and fits", "sore head"]
    assert [[(c.concept_id, c.name, c.ambiguous) for c in cands] for cands in found] == [
        [(c.concept_id, c.name, c.ambiguous) for c in cands] for cands in expected]
    assert [c.score for c in found[1][:2]] == [1.0, 1.0] and found[1][0].ambiguous  # "MS": both concepts
    assert all(abs(a.score - b.score) < 1e-5 for fa, ea in zip(found, expected) for a, b in zip(fa, ea))
    fresh = make_nlp(kb_path, tiny_bert_path).get_pipe("sapbert_linker")
    searched = []
    monkeypatch.setattr(fresh, "_lookup", lambda keys, lookup=fresh._lookup: searched.extend(keys) or lookup(keys))
    scores = fresh.top_scores(queries + [" "])  # what the span finder scores proposals with
    assert searched == ["pyrexia and fits", "sore head"]  # a KB name's best score is 1.0: no search
    assert scores == [c[0].score for c in found] + [float("-inf")]


def test_a_kb_name_spelt_another_way_is_searched_with_that_names_vector(kb_path, tiny_bert_path, monkeypatch):
    """Plural, case, British spelling and punctuation: "head pains" is the name *Head pain*. It takes
    that name's stored vector and neighbours (not the encoder's guess, which a random BERT, like an
    encoder reading "haematuria", may put elsewhere), the name first just below an exact name's 1.0;
    the span finder's KB-name test (a score of 1.0) still takes names as written only."""
    from spacy_sapbert.encoder import SapEncoder

    encoded = []
    encode = SapEncoder.encode
    monkeypatch.setattr(SapEncoder, "encode", lambda self, texts, **kw: encoded.extend(texts) or encode(self, texts, **kw))
    linker = make_nlp(kb_path, tiny_bert_path).get_pipe("sapbert_linker")
    queries = ["head pains", "CONVULSIONS", "bronchial-asthma", "Pyrexiae", "sore head"]
    found = linker.link_strings(queries)
    assert encoded == ["sore head"]
    assert [(c[0].concept_id, c[0].name) for c in found[:4]] == [
        ("HP:2", "Head pain"), ("HP:1", "Convulsion"), ("HP:6", "Bronchial asthma"), ("HP:3", "Pyrexia")]
    assert all(0.9999 < c[0].score < 1.0 for c in found[:4])
    exact = linker.link_strings(["head pain", "convulsion", "bronchial asthma", "pyrexia"])
    assert [[(c.concept_id, c.name) for c in cands] for cands in found[:4]] == [[(c.concept_id, c.name) for c in cands] for cands in exact]
    assert not any(linker.is_kb_name(q) for q in queries) and linker.top_scores(["head pains"])[0] < 1.0
    encoded.clear()
    make_nlp(kb_path, tiny_bert_path, exact_names=False).get_pipe("sapbert_linker").link_strings(queries)
    assert sorted(encoded) == sorted(linker.normalize(q) for q in queries)


def test_a_british_spelling_is_also_searched_as_its_american_one_and_the_better_list_kept(kb_path, tiny_bert_path, monkeypatch):
    """"Foetal headache" is no KB name: it is searched as written and as "fetal headache", and the
    list with the better top score answers it, for linking and for the span finder's scores alike;
    an American or case-keeping query is searched once."""
    from spacy_sapbert.search import Candidate

    linker = make_nlp(kb_path, tiny_bert_path).get_pipe("sapbert_linker")
    linker.ensure_ready()
    scores = {"foetal headache": 0.7, "fetal headache": 0.9, "oedematous fits": 0.8, "edematous fits": 0.6}
    searched = []

    def candidates(vectors, top_k, queries, **kw):  # the KB's search, answering by query string
        assert len(vectors) == len(queries)
        searched.extend(queries)
        return [[Candidate("HP:2", q, scores.get(q, 0.5), False)] for q in queries]

    monkeypatch.setattr(linker.linking_kb, "candidates", candidates)
    found = linker.link_strings(["Foetal headache", "oedematous fits", "fetal pain"])
    assert sorted(searched) == ["edematous fits", "fetal headache", "fetal pain", "foetal headache", "oedematous fits"]
    assert [c[0].name for c in found] == ["fetal headache", "oedematous fits", "fetal pain"]  # the better of the two
    searched.clear()
    assert linker.top_scores(["Foetal headache", "oedematous fits"]) == [0.9, 0.8] and searched == []  # cached as chosen
    assert sorted(linker._cache.entries) == ["fetal pain", "foetal headache", "oedematous fits"]
    monkeypatch.setattr(linker.linking_kb.kb, "lowercase", False)
    linker._cache.clear()
    linker.link_strings(["foetal headache"])
    assert searched == ["foetal headache"]


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


# ---------------------------------------------------------------------------- spaCy conventions (issue 13)
def test_saved_pipeline_follows_its_config_not_saved_settings(kb_path, tiny_bert_path, tmp_path):
    """The config is the one source of truth: overriding it at load time changes behaviour."""
    make_nlp(kb_path, tiny_bert_path, top_k=3).to_disk(tmp_path / "pipeline")
    assert not (tmp_path / "pipeline" / "sapbert_linker" / "cfg.json").exists()
    overrides = {"components.sapbert_linker.top_k": 1, "components.sapbert_linker.threshold": 2.0}
    nlp = spacy.load(tmp_path / "pipeline", config=overrides)
    linker = nlp.get_pipe("sapbert_linker")
    assert (linker.top_k, linker.threshold) == (1, 2.0)
    assert nlp.config["components"]["sapbert_linker"]["top_k"] == 1
    ent = nlp("Seizure").ents[0]
    assert ent._.cui is None and len(ent._.cui_candidates) == 1


@pytest.mark.parametrize("overlap", [True, False])
def test_linker_is_a_pipe_and_error_handlers_apply(kb_path, tiny_bert_path, overlap):
    from spacy.pipeline import Pipe

    nlp = make_nlp(kb_path, tiny_bert_path, overlap=overlap)
    linker = nlp.get_pipe("sapbert_linker")
    assert isinstance(linker, Pipe)

    def broken(docs, spans):
        raise RuntimeError("boom")

    predict = linker._predict
    linker._predict = broken  # what predict and the component's own pass both run
    seen = []
    nlp.set_error_handler(lambda name, proc, docs, e: seen.append((name, len(docs), str(e))))
    assert list(nlp.pipe(["Seizure", "fever"], batch_size=2)) == []  # the failing batch is dropped
    nlp("fever")
    assert seen == [("sapbert_linker", 2, "boom"), ("sapbert_linker", 1, "boom")]

    # a failing batch (with overlap, in the background thread) is dropped alone; the others are linked, in order
    def fails_on_fever(docs, spans):
        if docs[0].text == "fever":
            raise RuntimeError("boom")
        return predict(docs, spans)

    linker._predict = fails_on_fever
    seen.clear()
    assert [d.text for d in nlp.pipe(["Seizure", "asthma", "fever", "MS", "Headache"], batch_size=2)] == ["Seizure", "asthma", "Headache"]
    assert seen == [("sapbert_linker", 2, "boom")]


class _BatchMarker:
    """A component that notes each doc it makes and signals when the third (batch 2's first, in batches of 2) goes by."""

    def __init__(self) -> None:
        self.made = 0
        self.second_batch = threading.Event()

    def __call__(self, doc):
        self.made += 1
        if self.made == 3:
            self.second_batch.set()
        return doc


@Language.factory("overlap_test_marker")
def _batch_marker(nlp, name):
    return _BatchMarker()


def test_overlap_links_a_batch_while_the_components_before_make_the_next(kb_path, tiny_bert_path):
    """``overlap`` (on by default): batch 1 is linked in another thread while the components before the
    linker make batch 2; linking in turn, batch 1 waits for batch 2 in vain. Links and order are those
    of linking in turn."""
    texts = ["Convulsion.", "Pyrexia.", "Fever and seizure.", "Bronchial asthma.", "MS suspected."] * 3
    in_turn = [annotations(d) for d in make_nlp(kb_path, tiny_bert_path, overlap=False).pipe(texts, batch_size=2)]
    for overlap in (True, False):
        nlp = make_nlp(kb_path, tiny_bert_path, **({} if overlap else {"overlap": False}))
        marker = nlp.add_pipe("overlap_test_marker", before="sapbert_linker")
        linker = nlp.get_pipe("sapbert_linker")
        link, waited = linker._link, []

        def first_waits_for_the_second(docs, link=link, waited=waited, marker=marker):
            if not waited:
                waited.append(marker.second_batch.wait(timeout=5))
            link(docs)

        linker._link = first_waits_for_the_second
        assert [annotations(d) for d in nlp.pipe(texts, batch_size=2)] == in_turn
        assert waited == [overlap]


def test_nlp_evaluate_reports_kb_id_precision_recall_f(kb_path, tiny_bert_path):
    from spacy.training import Example

    nlp = make_nlp(kb_path, tiny_bert_path)
    examples = []
    for text, gold in [
        ("Convulsion and pyrexia.", [(0, 10, "HP:1"), (15, 22, "HP:2")]),  # right; wrong (HP:3 predicted)
        ("MS suspected", [(0, 2, "HP:5")]),  # ambiguous name: the likeliest, HP:4, is predicted
        ("Headache", [(0, 8, "")]),  # not annotated with an id: not scored
    ]:
        reference = nlp.make_doc(text)
        reference.ents = [Span(reference, *_tokens(reference, s, e), label="PHEN", kb_id=k) for s, e, k in gold]
        examples.append(Example(nlp.make_doc(text), reference))
    scores = nlp.evaluate(examples)
    assert (scores["kb_id_p"], scores["kb_id_r"], scores["kb_id_f"]) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert scores["kb_id_per_type"]["PHEN"]["p"] == pytest.approx(1 / 3)
    scores = make_nlp(kb_path, tiny_bert_path, ambiguous="none").evaluate(examples)
    assert (scores["kb_id_p"], scores["kb_id_r"]) == pytest.approx((1 / 2, 1 / 3))  # "MS" left unlinked


def _tokens(doc, start_char, end_char):
    span = doc.char_span(start_char, end_char)
    return span.start, span.end


def test_from_disk_honours_exclude(kb_path, tiny_bert_path, tmp_path):
    make_nlp(kb_path, tiny_bert_path).to_disk(tmp_path / "pipeline")
    folder = tmp_path / "pipeline" / "sapbert_linker"
    linker = make_nlp(kb_path, tiny_bert_path).get_pipe("sapbert_linker")
    linker.from_disk(folder, exclude=["kb", "encoder"])
    assert linker.linking_kb is None and linker.encoder is None
    linker.from_disk(folder, exclude=["kb"])
    assert linker.linking_kb is None and linker.encoder is not None
    assert linker.encoder.source == str(folder / "encoder")
    linker.from_disk(folder)
    assert str(folder / "kb") in str(linker.linking_kb.index._source)


def test_bytes_round_trip_carries_kb_and_encoder(kb_path, tiny_bert_path, tmp_path):
    def linker_pipeline(kb, encoder):  # (no entity_ruler: spaCy's loses its matches through from_bytes)
        nlp = spacy.blank("en")
        nlp.add_pipe("sapbert_linker", config={"kb": str(kb), "encoder": str(encoder), "precision": "fp32", "top_k": 2})
        return nlp

    nlp = linker_pipeline(kb_path, tiny_bert_path)
    mentions = ["convulsion", "pyrexia", "ms", "head pain"]
    before = nlp.get_pipe("sapbert_linker").link_strings(mentions)
    data = nlp.to_bytes()
    # the copy's config points at no KB or encoder: what it links with can only come from the bytes
    other = linker_pipeline(tmp_path / "missing_kb", tmp_path / "missing_encoder").from_bytes(data)
    linker = other.get_pipe("sapbert_linker")
    assert linker.link_strings(mentions) == before
    assert linker.linking_kb.kb.fingerprint == nlp.get_pipe("sapbert_linker").linking_kb.kb.fingerprint
    with pytest.raises(ValueError, match="not a sapbert_linker"):
        linker.from_bytes(b"\x80")


def test_to_disk_of_an_unused_default_linker_builds_nothing(tmp_path, monkeypatch):
    import spacy_sapbert.linker as linker_module

    monkeypatch.setattr(linker_module, "default_kb_path", lambda *a, **k: pytest.fail("built the default KB"))
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker")
    nlp.to_disk(tmp_path / "pipeline")
    assert list((tmp_path / "pipeline" / "sapbert_linker").iterdir()) == []
    assert spacy.load(tmp_path / "pipeline").get_pipe("sapbert_linker").linking_kb is None


def test_a_linker_without_a_kb_uses_the_default_the_factory_hands_it(kb_path, tiny_bert_path, monkeypatch):
    import spacy_sapbert.linker as linker_module

    asked = []
    monkeypatch.setattr(linker_module, "default_kb_path", lambda encoder: asked.append(encoder) or kb_path)
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"encoder": str(tiny_bert_path)})  # no KB: the embedded default's place
    assert nlp.get_pipe("sapbert_linker").link_strings(["convulsion"])[0][0].concept_id == "HP:1"
    assert len(asked) == 1 and asked[0].fingerprint == LinkingKB.from_disk(kb_path).encoder_fingerprint
    from spacy_sapbert.linker import SapBertLinker

    bare = SapBertLinker(nlp.vocab, encoder_path=str(tiny_bert_path))  # built without the factory: no default
    with pytest.raises(ValueError, match="no KB folder given"):
        bare.initialize()


def test_wrong_kb_path_fails_before_any_doc_naming_it(tmp_path, tiny_bert_path):
    wrong = tmp_path / "no_such_kb"
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"kb": str(wrong), "encoder": str(tiny_bert_path)})
    with pytest.raises(FileNotFoundError, match=str(wrong)):
        nlp.initialize()
    with pytest.raises(FileNotFoundError, match=str(wrong)):
        nlp("no mention in this one")  # not only once a doc has a mention
    with pytest.raises(FileNotFoundError, match=str(wrong)):
        list(nlp.pipe([""]))


# ---------------------------------------------------------------------------- stable types, one normaliser
def test_candidates_keep_their_type_through_serialisation(kb_path, tiny_bert_path):
    from spacy.tokens import Doc, DocBin

    nlp = make_nlp(kb_path, tiny_bert_path)
    doc = nlp("Convulsion and pyrexia; MS.")
    expected = [(e._.cui_candidates, e._.cui_parts) for e in doc.ents]
    assert all(isinstance(c, tuple) for cands, _ in expected for c in cands)
    assert all(isinstance(p, tuple) and isinstance(p[1][0], tuple) for _, parts in expected for p in parts)
    bin_ = DocBin(store_user_data=True, docs=[doc])
    (from_bin,) = DocBin(store_user_data=True).from_bytes(bin_.to_bytes()).get_docs(nlp.vocab)
    from_bytes = Doc(nlp.vocab).from_bytes(doc.to_bytes())
    for copy in (from_bin, from_bytes):
        assert [(e._.cui_candidates, e._.cui_parts) for e in copy.ents] == expected
        assert all(type(c) is tuple for e in copy.ents for c in e._.cui_candidates)


def test_an_ambiguous_name_gets_its_likeliest_concept_unless_asked_not_to_guess(kb_path, tiny_encoder, tiny_bert_path, tmp_path):
    ent = make_nlp(kb_path, tiny_bert_path)("MS suspected").ents[0]
    # default "first": HP:4 and HP:5 have two names each, so record order decides
    assert ent._.cui == ent.kb_id_ == "HP:4" and [c[0] for c in ent._.cui_candidates[:2]] == ["HP:4", "HP:5"]
    assert all(c[3] for c in ent._.cui_candidates[:2])  # both flagged ambiguous
    ent = make_nlp(kb_path, tiny_bert_path, ambiguous="none")("MS suspected").ents[0]
    assert ent._.cui is None and ent.kb_id_ == ""
    assert {c[0] for c in ent._.cui_candidates[:2]} == {"HP:4", "HP:5"}
    with pytest.raises(ValueError, match="ambiguous must be one of"):
        make_nlp(kb_path, tiny_bert_path, ambiguous="guess")
    from spacy_sapbert.kb import ConceptKB

    with_prior = tmp_path / "prior"
    LinkingKB.build(ConceptKB.from_records(RECORDS, priors={"HP:5": 3}), tiny_encoder).to_disk(with_prior)
    assert make_nlp(with_prior, tiny_bert_path)("MS suspected").ents[0]._.cui == "HP:5"


def test_queries_follow_the_kbs_own_normalisation(tiny_encoder, tiny_bert_path, tmp_path):
    """One rule: the linker, ``LinkingKB.link`` and the KB's names all use ``ConceptKB.normalize``."""
    from spacy_sapbert.kb import ConceptKB

    kb = ConceptKB.from_records(RECORDS, lowercase=False, strip_punctuation=True)
    LinkingKB.build(kb, tiny_encoder).to_disk(tmp_path / "kb")
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("sapbert_linker", config={"kb": str(tmp_path / "kb"), "encoder": str(tiny_bert_path), "precision": "fp32"})
    mentions = ["Head-pain!", "  Bronchial   ASTHMA ", "fits"]
    assert [linker.normalize(m) for m in mentions] == [kb.normalize(m) for m in mentions] == ["Head pain", "Bronchial ASTHMA", "fits"]
    via_linker = linker.link_strings(mentions)
    via_kb = linker.linking_kb.link(linker.encoder, mentions, top_k=linker.top_k)
    assert [[c.concept_id for c in cs] for cs in via_linker] == [[c.concept_id for c in cs] for cs in via_kb]
    assert [c.score for cs in via_linker for c in cs] == pytest.approx([c.score for cs in via_kb for c in cs], abs=1e-6)


# ---------------------------------------------------------------------------- multiprocessing
NAMES_FOR_PQ = [R(f"X:{i}", f"finding {i} of the {w}", []) for i, w in enumerate(["heart", "lung", "kidney", "colon"] * 75)]


def test_memory_mapped_ivf_pq_kb_pickles_by_path(tiny_encoder, tmp_path):
    import pickle

    kb = LinkingKB.build(NAMES_FOR_PQ, tiny_encoder, index_kind="ivf-pq")
    kb.to_disk(tmp_path / "kb")
    loaded = LinkingKB.from_disk(tmp_path / "kb")
    data = pickle.dumps(loaded)
    assert len(data) < (tmp_path / "kb" / "index.faiss").stat().st_size  # paths and stamps, not the index
    copy = pickle.loads(data)
    queries = tiny_encoder.encode(["finding 3 of the lung", "kidney"])
    assert copy.candidates(queries) == loaded.candidates(queries)
    assert copy.kb.names == loaded.kb.names and copy.kb.concept_types == loaded.kb.concept_types
    kb.to_disk(tmp_path / "kb")  # rebuilt in place: the pickle must not silently mix the two
    with pytest.raises(ValueError, match="changed on disk"):
        pickle.loads(data)


@pytest.mark.slow
def test_n_process_under_spawn_gives_the_same_links(kb_path, tiny_bert_path, tmp_path):
    make_nlp(kb_path, tiny_bert_path).to_disk(tmp_path / "pipeline")
    code = f"""
import json, multiprocessing, torch
torch.set_num_threads(1)
import spacy
if __name__ == "__main__":
    multiprocessing.set_start_method("spawn", force=True)
    nlp = spacy.load({str(tmp_path / "pipeline")!r})
    texts = {TEXTS!r}
    one = [[(e.text, e.kb_id_, e._.cui_candidates) for e in d.ents] for d in nlp.pipe(texts)]
    two = [[(e.text, e.kb_id_, e._.cui_candidates) for e in d.ents] for d in nlp.pipe(texts, n_process=2, batch_size=2)]
    print(json.dumps([one == two, sum(map(len, one))]))
"""
    (tmp_path / "run.py").write_text(code)
    out = subprocess.run([sys.executable, str(tmp_path / "run.py")], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [True, 8]


CONSISTENCY_RECORDS = [
    R("HP:10", "Preauricular pits", []),
    R("HP:11", "Skin pit", ["Dermal pit"]),
    R("HP:12", "Ulcerative colitis", []),
    R("HP:13", "Colitis", []),
    R("HP:14", "Hearing loss", []),
]


def test_consistency_gives_a_later_mention_an_earlier_confident_concept(kb_folder, tiny_bert_path):
    """"pits" after "preauricular pits" (its last word) takes HP:10; "colitis" after "ulcerative
    colitis" keeps its own exact name; at 0 nothing changes."""
    kb = kb_folder(CONSISTENCY_RECORDS)
    text = "Preauricular pits and ulcerative colitis. The pits grew; the colitis did not."

    def linked(consistency: float):
        nlp = spacy.blank("en")
        ruler = nlp.add_pipe("entity_ruler", config={"phrase_matcher_attr": "LOWER"})
        ruler.add_patterns([{"label": "PHEN", "pattern": p} for p in ("preauricular pits", "ulcerative colitis", "pits", "colitis")])
        nlp.add_pipe("sapbert_linker", config={"kb": str(kb), "encoder": str(tiny_bert_path), "precision": "fp32",
                                               "consistency": consistency})
        return [(e.text, e._.cui, [c[0] for c in e._.cui_candidates]) for e in next(nlp.pipe([text])).ents]

    off = linked(0.0)
    assert [cui for _, cui, _ in off[:2]] == ["HP:10", "HP:12"]  # both exact names: score 1.0
    assert off[2][0] == "pits" and off[2][1] != "HP:10"  # the random tiny encoder puts another concept first
    on = linked(0.9)
    assert on[:2] == off[:2] and on[3] == off[3]  # "colitis" is an exact name: kept
    assert on[2][1] == "HP:10" and on[2][2] == ["HP:10"] + [c for c in off[2][2] if c != "HP:10"][: len(off[2][2]) - 1]
    with pytest.raises(ValueError, match="consistency must be in"):
        linked(1.5)
