"""Long documents cost in proportion to their length: the steps that once compared every span (or
every word before a parenthesis) with all the others grew with the square of a document's length.

Each test times a step at a size n and at 4n (best of a few runs): linear work takes about 4 times
as long, quadratic 16 times; the bound, 8 times plus a small constant, is generous for a shared machine.
"""
from __future__ import annotations

import gc
import time
from typing import Callable

import pytest
import spacy
from spacy.tokens import Span

from spacy_sapbert.abbreviations import find_abbreviation_definitions, new_abbreviation_spans
from spacy_sapbert.pipelines import build_pipeline
from spacy_sapbert.records import ConceptRecord as R

# "Tumor tumor …": a name that writes its word twice lets a proposal repeat it (span_proposals), the worst case below
RECORDS = [R("D:1", "Tumor", ["Neoplasm", "Tumor tumor"]), R("D:2", "Breast cancer", []), R("D:3", "Cancer", [])]
GROWTH = 8.0  # linear: 4, quadratic: 16
SLACK_S = 0.05


def best_seconds(run: Callable[[], object], repeats: int = 3) -> float:
    """The best of ``repeats`` runs, the garbage collector off while timing (its full collections
    fall at other points at each size: noise here, amortised linear in a real run)."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
    return best


def assert_linear(run_at: Callable[[int], Callable[[], object]], n: int) -> None:
    small, large = best_seconds(run_at(n)), best_seconds(run_at(4 * n))
    assert large < GROWTH * small + SLACK_S, f"{n}: {small:.3f} s, {4 * n}: {large:.3f} s"


@pytest.fixture(scope="module")
def finder_nlp(kb_folder, tiny_bert_path):
    """The span finder as the HPO default runs it (nested mentions kept, heads only), every proposal accepted."""
    return build_pipeline(
        kb_folder(RECORDS), "span_finder", encoder=tiny_bert_path, label="DISEASE", linker_config={"precision": "fp32"},
        nested="heads", abbreviations=False, assertion=False,
        span_finder_config={"min_exact_score": 0.0, "min_partial_score": 0.0, "max_generic_share": 1.0},
    )


def test_span_finder_on_a_repeated_word_is_linear(finder_nlp):
    """"tumors tumors …": every n-gram of up to 8 words is a proposal (the KB writes "Tumor tumor") and accepted,
    so the nested span group is checked for about 8 spans per word (this took 6.7 s at 20k characters, 18.9 s at 40k)."""
    finder = finder_nlp.get_pipe("sapbert_span_finder")
    finder(finder_nlp.make_doc("tumors " * 20))  # the few distinct queries are searched once, here

    def run_at(n_words: int) -> Callable[[], object]:
        doc = finder_nlp.make_doc("tumors " * n_words)
        return lambda: finder(finder_nlp.make_doc(doc.text))

    doc = finder(finder_nlp.make_doc("tumors " * 50))
    assert len(doc.ents) == 7 and len(doc.spans["sapbert_nested"]) > 40  # 8-word entities, and nested heads ("tumors")
    assert_linear(run_at, 600)


def test_abbreviation_definitions_in_one_long_sentence_are_linear():
    """A note without full stops is one sentence: each parenthesis once split all the text before it."""
    unit = "history of attention deficit hyperactivity disorder (ADHD) and seizures (grade 2) "
    found = find_abbreviation_definitions(unit * 3)
    assert [d.long for d in found if d.short == "ADHD"] == ["attention deficit hyperactivity disorder"] * 3
    assert_linear(lambda n: lambda: find_abbreviation_definitions(unit * n), 800)


def test_later_uses_of_a_short_form_are_linear():
    """Each later use of a short form was compared with every span and every use added before it."""
    nlp = spacy.blank("en")
    definition = "attention deficit hyperactivity disorder (ADHD) "

    def run_at(n: int) -> Callable[[], object]:
        doc = nlp(definition + "ADHD and seizures . " * n)
        spans = [Span(doc, 0, 4, label="D")] + [Span(doc, i + 2, i + 3, label="D") for i in range(7, len(doc), 4)]
        definitions = find_abbreviation_definitions(doc.text)
        return lambda: new_abbreviation_spans(doc, spans, definitions)

    doc_run = run_at(3)
    assert len(doc_run()) == 4  # "ADHD" in the definition and each later one
    assert_linear(run_at, 1500)


def test_writing_a_long_documents_span_records_is_linear():
    """``link``/``annotate`` write each span's record from the document's text: read once per
    document (spaCy joins ``doc.text`` anew at each call), not once per span."""
    from types import SimpleNamespace

    from spacy_sapbert.shards import span_records

    nlp = spacy.blank("en")

    def doc_with(n: int):
        doc = nlp.make_doc("fever " * n)
        doc.ents = [Span(doc, i, i + 1, label="X") for i in range(len(doc))]
        return doc

    linker = SimpleNamespace(spans_to_link=lambda doc: list(doc.ents), linking_kb=SimpleNamespace(kb=None),
                             cui_attr="test_long_cui", candidates_attr="test_long_candidates")
    for name in (linker.cui_attr, linker.candidates_attr):
        Span.set_extension(name, default=None, force=True)
    small, large = doc_with(1500), doc_with(6000)
    assert len(span_records(large, [linker])) == 6000
    t_small = best_seconds(lambda: span_records(small, [linker]))
    t_large = best_seconds(lambda: span_records(large, [linker]))
    assert t_large <= GROWTH * t_small + SLACK_S, (t_small, t_large)
