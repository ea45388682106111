"""A pathological name (megabytes long) encodes in bounded time and memory, to the vector of
its first ``max_length`` tokens (issue 13, item 5)."""
from __future__ import annotations

import time

import numpy as np

from spacy_sapbert.encoder import CHARS_PER_TOKEN, clip_text


def test_the_tokenizer_never_sees_more_than_the_character_bound(tiny_encoder, monkeypatch):
    seen = []
    real = tiny_encoder.tokenizer

    class Recording:
        def __call__(self, texts, **kwargs):
            seen.extend(len(t) for t in texts)
            return real(texts, **kwargs)

        def __getattr__(self, name):
            return getattr(real, name)

    monkeypatch.setattr(tiny_encoder, "tokenizer", Recording())
    huge = "fever " * 200_000  # 1.2 MB
    t0 = time.perf_counter()
    vecs = tiny_encoder.encode([huge, "seizure"])
    assert time.perf_counter() - t0 < 5
    assert max(seen) <= tiny_encoder.settings.max_length * (CHARS_PER_TOKEN + 1) and 7 in seen
    assert np.isfinite(vecs).all()


def test_a_clipped_name_encodes_exactly_like_the_whole_one(tiny_encoder):
    n = tiny_encoder.settings.max_length
    whole = "heart attack , " * n + "fever"  # a little over max_length tokens: the tokenizer truncates it
    long = "   " + "heart   attack\t, " * 5_000 + "fever" * 3  # the same first tokens, hidden in 90 kB
    word = "x" * 300_000 + " fever"  # one endless word: a single [UNK] whole or clipped
    a, b, c, d = tiny_encoder.encode([whole, long, word, "x" * 200 + " fever"])
    np.testing.assert_allclose(a, b, atol=1e-6)
    np.testing.assert_allclose(c, d, atol=1e-6)


def test_clip_text_keeps_the_first_words_each_cut_short():
    assert clip_text("short name", 2, 5) == "short name"  # not longer than 2 * 5: unchanged
    assert clip_text("a  b\n\nc " * 10, 4, 5) == "a b c a"
    assert clip_text("y" * 50 + " z", 2, 10) == "y" * 10 + " z"
    assert clip_text(" " * 1000 + "fever", 3, 10) == "fever"
