"""Lenient vs strict accuracy on hand-made rankings whose right answers are worked out by hand."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_sapbert.evaluation.metrics import (
    concept_predictions,
    lenient_hit,
    score_queries,
    strict_hit,
    summarize,
)

MS = ("MESH:D009103", "MESH:D008946")  # "ms": multiple sclerosis, mitral stenosis


def test_ambiguous_name_is_a_lenient_hit_but_a_strict_miss():
    gold = {"MESH:D009103"}
    ranking = [MS, ("MESH:D000001",)]
    assert lenient_hit([ranking], gold, 1)
    assert not strict_hit([ranking], gold, 1)
    assert not strict_hit([ranking], gold, 5)  # no later name gives multiple sclerosis alone


def test_ambiguous_name_whose_concepts_are_all_gold_is_a_strict_hit():
    assert strict_hit([[MS]], set(MS), 1)


def test_concept_predictions_keep_only_new_concepts_of_each_name():
    ranking = [("B",), ("A", "B"), ("B",), ("C", "D")]
    assert concept_predictions(ranking) == [("B",), ("A",), ("C", "D")]
    assert strict_hit([ranking], {"A"}, 2)  # "A" is unambiguous once "B" ranked above it
    assert not strict_hit([ranking], {"A"}, 1)
    assert not strict_hit([ranking], {"C"}, 5)  # {C, D} is ambiguous and D is not gold


def test_composite_query_needs_every_part_and_accepts_any_gold_id_per_part():
    gold = {"MESH:D001943", "MESH:D010051"}  # breast cancer | ovarian cancer
    breast = [("MESH:D001943",)]
    ovarian_second = [("MESH:D000001",), ("MESH:D010051",)]
    assert not lenient_hit([breast, ovarian_second], gold, 1)
    assert lenient_hit([breast, ovarian_second], gold, 5)
    assert not strict_hit([breast, ovarian_second], gold, 1)
    assert strict_hit([breast, ovarian_second], gold, 5)
    # SapBERT's check_label: a part predicted as the *other* gold concept still counts
    assert lenient_hit([breast, breast], gold, 1)


def test_alternative_ids_identify_a_concept():
    aliases = {"OMIM:114500": ["MESH:D015179"]}
    ranking = [("OMIM:114500",)]
    assert lenient_hit([ranking], {"MESH:D015179"}, 1, aliases)
    assert strict_hit([ranking], {"MESH:D015179"}, 1, aliases)
    assert not lenient_hit([ranking], {"MESH:D015179"}, 1)


def test_nil_queries_are_counted_but_left_out_of_the_rates():
    golds = [("A",), (), ("B",)]
    rankings = [[[("A",)]], [[("A",)]], [[("A", "B")]]]
    summary = summarize(score_queries(golds, rankings))
    assert summary["n_nil"] == 1
    assert summary["n_queries"] == 2
    assert summary["lenient_acc@1"] == 100.0
    assert summary["strict_acc@1"] == 50.0
    assert summary["ambiguous_top1_share"] == 50.0


def test_empty_ranking_is_a_miss_and_subsets_are_summarised_separately():
    scores = score_queries([("A",), ("A",), ("B",)], [[[]], [[("A",)]], [[("B",)]]])
    assert summarize(scores)["lenient_acc@5"] == pytest.approx(66.67)
    subset = np.array([True, True, False])
    part = summarize(scores, subset)
    assert part["n_queries"] == 2 and part["lenient_acc@1"] == 50.0
    assert "n_nil" not in part


def test_strict_at_k_counts_concepts_not_names():
    ranking = [("X",), ("X",), ("G",)]  # two synonyms of X, then the gold concept
    assert not lenient_hit([ranking], {"G"}, 2)
    assert strict_hit([ranking], {"G"}, 2)


def test_mismatched_lengths_are_an_error():
    with pytest.raises(ValueError):
        score_queries([("A",)], [])


# An independent re-statement of SapBERT's string-based check: dictionary rows carry "A|B" cui
# strings, golds "A|B" or "A+B"; a row is a hit if the '|'-split sets intersect.
def _sapbert_label(row_cui: str, gold: str) -> bool:
    return bool(set(row_cui.split("|")) & set(gold.replace("+", "|").split("|")))


concept = st.sampled_from(list("ABCDEF"))
name = st.lists(concept, min_size=1, max_size=3, unique=True)


@settings(max_examples=200, deadline=None)
@given(
    gold=st.lists(concept, min_size=1, max_size=3, unique=True),
    parts=st.lists(st.lists(name, max_size=6), min_size=1, max_size=3),
    k=st.integers(1, 6),
)
def test_lenient_matches_sapbert_string_check(gold, parts, k):
    gold_str = "+".join(gold)
    expected = all(any(_sapbert_label("|".join(n), gold_str) for n in ranking[:k]) for ranking in parts)
    assert lenient_hit(parts, set(gold), k) == expected
    if k == 1:  # at k=1 strict only ever removes hits (deeper, it may reach past repeated concepts)
        assert not strict_hit(parts, set(gold), 1) or expected
