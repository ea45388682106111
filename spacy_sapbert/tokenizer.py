"""spaCy's tokenizer with a chunk cache sized for biomedical text.

spaCy's tokenizer remembers the tokens of each whitespace-separated chunk it has split, but only
the first ``max_cache_size`` distinct chunks (10,000 by default), and that setting is neither in
the config nor saved with a pipeline. Abstracts hold far more distinct chunks (drug names, gene
symbols, "(71%)," ...): once the cache is full, every later chunk goes through the prefix, suffix
and infix expressions again at each occurrence. ``build_pipeline`` names this tokenizer in the
pipeline's config, so the larger cache travels with a saved pipeline (``benchmarks/README.md``,
"Where the pipelines spend their time", has the seconds).
"""
from __future__ import annotations

from typing import Any, Callable, Dict

from spacy.language import Language
from spacy.tokenizer import Tokenizer
from spacy.util import registry

# Distinct chunks cached, at most: an entry holds the chunk's lexeme pointers, so the cache stays a
# small share of a pipeline's memory while covering the chunks that recur in a corpus.
CACHED_CHUNKS = 200_000
TOKENIZER_CONFIG: Dict[str, Any] = {"@tokenizers": "spacy_sapbert.Tokenizer.v1", "max_cache_size": CACHED_CHUNKS}


@registry.tokenizers("spacy_sapbert.Tokenizer.v1")
def create_tokenizer(max_cache_size: int = CACHED_CHUNKS) -> Callable[[Language], Tokenizer]:
    """spaCy's own tokenizer (``spacy.Tokenizer.v1``: the language's rules, or those the pipeline
    saved) that caches up to ``max_cache_size`` distinct chunks."""
    if max_cache_size < 0:
        raise ValueError(f"max_cache_size must be at least 0, got {max_cache_size}")
    make_spacy_tokenizer = registry.tokenizers.get("spacy.Tokenizer.v1")()

    def make_tokenizer(nlp: Language) -> Tokenizer:
        tokenizer = make_spacy_tokenizer(nlp)
        tokenizer.max_cache_size = max_cache_size
        return tokenizer

    return make_tokenizer
