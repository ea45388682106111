"""Negated mentions ("No evidence of hepatosplenomegaly") with negspacy's NegEx component.

negspacy (>=1.1) registers the ``negex`` factory when ``negspacy.negation`` is imported, but it
declares no ``spacy_factories`` entry point, so ``spacy.load`` of a saved pipeline with negation
fails in a fresh process (E002: no factory ``negex``) unless something imported negspacy first. Our
entry point (setup.cfg) names negspacy's factory for that reason alone (without it, loading was
tried and fails). NegEx reads ``doc.sents`` (it raises E030 without sentence boundaries) and sets
``span._.negex`` on ``doc.ents`` (or on span groups), so ``add_negation`` adds a ``sentencizer``
when nothing earlier in the pipeline sets sentences.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, Optional

from spacy.language import Language

if TYPE_CHECKING:
    from negspacy.negation import Negex

SENT_ATTRS = ("token.is_sent_start", "doc.sents")


def _sets_sentences(nlp: Language, pipe_name: str) -> bool:
    return any(a in nlp.get_pipe_meta(pipe_name).assigns for a in SENT_ATTRS)


def add_negation(
    nlp: Language,
    ent_types: Optional[Iterable[str]] = None,
    *,
    termset: str = "en_clinical",
    span_keys: Optional[Iterable[str]] = None,
    extension_name: str = "negex",
    name: str = "negex",
    before: Optional[str] = None,
    after: Optional[str] = None,
) -> "Negex":
    """Add negspacy's ``negex`` (and a ``sentencizer`` before it if needed); returns the component.

    ``ent_types``: labels to check (all when None); ``termset``: negspacy's ``en``,
    ``en_clinical`` or ``en_clinical_sensitive``; ``span_keys``: check these span groups instead
    of ``doc.ents``. Place it after mention detection (it reads the spans); the default is last.
    """
    import negspacy.negation  # noqa: F401  (registers the "negex" factory)
    from negspacy.termsets import termset as negspacy_termset

    config: Dict[str, Any] = {
        "neg_termset": negspacy_termset(termset).get_patterns(),
        "ent_types": list(ent_types) if ent_types else None,
        "extension_name": extension_name,
        "span_keys": list(span_keys) if span_keys else None,
    }
    component: Negex = nlp.add_pipe("negex", name=name, config=config, before=before, after=after)  # type: ignore[assignment]
    position = nlp.pipe_names.index(name)
    if not any(_sets_sentences(nlp, p) for p in nlp.pipe_names[:position]):
        sentencizer = f"{name}_sentencizer"
        nlp.add_pipe("sentencizer", name=sentencizer, before=name)
    return component
