"""The span finder reads its token data as arrays, not Token objects: the columns must say what the
tokens say (offsets, keys, sentence starts, attached tokens), whitespace tokens and empty docs included."""
from __future__ import annotations

import spacy

from spacy_sapbert.span_finder import char_bounds
from spacy_sapbert.span_proposals import NameIndex, token_columns

NLP = spacy.blank("en")
NAMES = ["Cleft lip", "Cleft palate", "Abnormality of the hand", "Tonic-clonic seizure"]
TEXT = "Tonic-clonic seizures and  cleft lip.\n\nAbnormality of the hand (AH) in 2 of them."


def test_char_bounds_are_each_tokens_offsets():
    doc = NLP(TEXT)
    starts, ends = char_bounds(doc)
    assert list(zip(starts, ends)) == [(t.idx, t.idx + len(t.text)) for t in doc]
    assert [TEXT[s:e] for s, e in zip(starts, ends)] == [t.text for t in doc]
    assert char_bounds(NLP("")) == ([], [])


def test_token_columns_match_the_tokens_one_by_one():
    doc = NLP(TEXT)
    doc[9].is_sent_start = True  # "Abnormality": a sentence start set by a component
    index = NameIndex(NAMES)
    columns = token_columns(doc, index)
    strings = doc.vocab.strings
    assert columns.lower == [t.lower for t in doc]
    assert columns.keys == [None if t.is_space else index.token_keys(t.lower, strings) for t in doc]
    assert all(columns.keys[i] is None for i, t in enumerate(doc) if t.is_space)  # a mention never spans a blank line
    assert columns.sent_start == [t.is_sent_start is True for t in doc]
    assert columns.attached == [not t.whitespace_ for t in doc]
    assert token_columns(doc, index) == columns  # the words are known now: the same answer from the index's table
    assert token_columns(NLP(""), index) == ([], [], [], [])


def test_keys_of_works_out_only_the_words_it_has_not_seen():
    index = NameIndex(NAMES)
    doc = NLP("cleft palate of the hand")
    strings = doc.vocab.strings
    lower = [t.lower for t in doc]
    assert index.keys_of(lower[:2], strings) == [index.token_keys(h, strings) for h in lower[:2]]
    assert index.keys_of(lower, strings) == [index.token_keys(h, strings) for h in lower]
    assert index.keys_of([], strings) == []
