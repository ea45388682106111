"""The document bootstrap of end-to-end scores (``evaluation.bootstrap``)."""
import pytest

from spacy_sapbert.evaluation.bootstrap import paired_difference, score_interval
from spacy_sapbert.evaluation.end_to_end import Counts, f1_of, intervals

link_f1 = f1_of("link")


def doc(right: int, predicted: int, gold: int) -> Counts:
    return Counts(link_right=right, link_predicted=predicted, link_gold=gold)


def test_an_interval_holds_the_score_and_widens_with_documents_that_disagree():
    same = [doc(3, 4, 4)] * 10
    alike = score_interval(same, link_f1)
    assert alike["value"] == alike["low"] == alike["high"] == 0.75  # every resample is the same corpus
    mixed = [doc(4, 4, 4)] * 5 + [doc(0, 4, 4)] * 5  # half the documents all right, half all wrong
    spread = score_interval(mixed, link_f1, resamples=500)
    assert spread["value"] == 0.5 and spread["low"] < 0.4 and spread["high"] > 0.6
    assert spread["documents"] == 10 and spread["resamples"] == 500
    assert score_interval(mixed, link_f1, resamples=500, seed=3) == score_interval(mixed, link_f1, resamples=500, seed=3)  # seeded


def test_the_paired_difference_resamples_both_systems_on_the_same_documents():
    first = [doc(4, 4, 4), doc(0, 4, 4)] * 5
    second = [doc(3, 4, 4), doc(0, 4, 4)] * 5  # one mention fewer than the first in every other document
    paired = paired_difference(first, second, link_f1)
    # the documents' own difficulty cancels out: the first scores higher in every resample holding an easy document
    assert paired["difference"] == pytest.approx(link_f1(doc(20, 40, 40)) - link_f1(doc(15, 40, 40)), abs=1e-4)
    assert paired["low"] >= 0.0 and paired["first_higher"] > 0.99
    swapped = paired_difference(second, first, link_f1)
    assert swapped["difference"] == -paired["difference"] and swapped["first_higher"] < 0.01


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="same documents: 2 against 3"):
        paired_difference([doc(1, 1, 1)] * 2, [doc(1, 1, 1)] * 3, link_f1)
    with pytest.raises(ValueError, match="at least 2 documents, got 1"):
        score_interval([doc(1, 1, 1)], link_f1)


def test_evaluate_reports_mention_and_link_f1_with_their_intervals():
    per_doc = [Counts(gold=4, predicted=4, exact=3, link_gold=4, link_predicted=4, link_right=2)] * 5
    found = intervals(per_doc)
    assert set(found) == {"mention_f1", "link_f1"}
    assert found["mention_f1"]["value"] == 0.75 and found["link_f1"]["value"] == 0.5
    assert found["link_f1"]["low"] == found["link_f1"]["high"] == 0.5 and found["link_f1"]["documents"] == 5


def test_gold_span_accuracy_is_resampled_by_document_with_nil_queries_left_out():
    import numpy as np

    from spacy_sapbert.evaluation.metrics import Hits, accuracy, hits_per_document

    per_doc = hits_per_document(["a", "a", "b", "a", "c"], np.array([1, 0, 1, 1, 0], bool), np.array([0, 0, 0, 1, 1], bool))
    assert per_doc == [Hits(right=1, counted=2), Hits(right=1, counted=1), Hits(right=0, counted=0)]  # NIL queries left out
    assert accuracy(Hits(3, 4)) == 75.0 and accuracy(Hits()) == 0.0
    found = score_interval(per_doc, accuracy, resamples=200)
    assert found["value"] == pytest.approx(100 * 2 / 3, abs=1e-3) and found["documents"] == 3
