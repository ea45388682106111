"""Gold-span linking through the shipped pipeline: what ``sapbert_linker`` in ``nlp.pipe`` gives
when the mentions are known.

Each test document becomes a spaCy ``Doc`` whose gold mentions are spans at exactly the gold
offsets (a token is split where a gold boundary falls inside it, "K(+)-channel" → "K", "(+)-channel",
so no span is widened to token edges). The spans are the doc's entities, or a span group when
they overlap; the pipeline (abbreviations, composite splitting, linking) runs with ``nlp.pipe``,
and the linker's ``span._.cui_parts`` is read back per gold mention.

The spell-check list of NCBI-disease is the one step the pipeline does not do: ``spelling_fixed``
applies it to the mention words of the document text beforehand, so it can be measured on and off.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from spacy.language import Language
from spacy.tokens import Doc, Span

from ..abbreviations import query_text
from .datasets import Document, Mention
from .metrics import Ranking

Key = Tuple[str, int, int]  # doc id, start, end: a mention's offsets in the unmodified document
Parts = List[Tuple[str, List[Tuple[str, str, float, bool]]]]  # span._.cui_parts: (query, candidates)
GOLD_SPANS_KEY = "gold_mentions"  # the span group used for documents whose gold mentions overlap


def mention_key(m: Mention) -> Key:
    return (m.doc_id, m.start, m.end)


def trimmed(text: str, start: int, end: int) -> Tuple[int, int]:
    """``start:end`` without the blanks a few NCBI annotations include at their edges."""
    segment = text[start:end]
    return start + len(segment) - len(segment.lstrip()), end - len(segment) + len(segment.rstrip())


def annotated_mentions(documents: Iterable[Document]) -> Iterator[Tuple[str, int, int, Tuple[str, ...]]]:
    """Each gold mention as ``(text, start, end, ids)``, its edges trimmed: what
    ``context.annotated_examples`` turns into prototype examples."""
    for document in documents:
        for m in document.mentions:
            yield (document.text, *trimmed(document.text, m.start, m.end), m.ids)


# ---------------------------------------------------------------------------- the spell-check list
def spelling_fixed(document: Document, spelling: Mapping[str, str]) -> Tuple[Document, Dict[Key, Key]]:
    """``document`` with the listed typos corrected in the words of its gold mentions (the words
    ``clean_text`` corrects in a query), and each new mention's key → its original key."""
    edits: List[Tuple[int, int, str]] = []
    for m in document.mentions:
        for w in re.finditer(r"\S+", document.text[m.start : m.end]):
            fix = spelling.get(w.group().lower())
            if fix is not None:
                edits.append((m.start + w.start(), m.start + w.end(), fix))
    kept: List[Tuple[int, int, str]] = []
    for a, b, fix in sorted(set(edits)):
        if not kept or a >= kept[-1][1]:
            kept.append((a, b, fix))
    if not kept:
        return document, {mention_key(m): mention_key(m) for m in document.mentions}

    def moved(offset: int) -> int:
        return offset + sum(len(fix) - (b - a) for a, b, fix in kept if b <= offset)

    pieces, pos = [], 0
    for a, b, fix in kept:
        pieces += [document.text[pos:a], fix]
        pos = b
    text = "".join(pieces) + document.text[pos:]
    fixed = Document(document.doc_id, text)
    origin: Dict[Key, Key] = {}
    for m in document.mentions:
        start, end = moved(m.start), moved(m.end)
        new = Mention(m.doc_id, start, end, text[start:end].strip(), m.entity_type, m.ids)
        fixed.mentions.append(new)
        origin[mention_key(new)] = mention_key(m)
    return fixed, origin


# ---------------------------------------------------------------------------- docs with gold spans
@dataclass
class GoldDocStats:
    """What turning gold offsets into spans took."""

    tokens_split: int = 0  # tokens cut in two (or more) at a gold boundary
    spans_expanded: int = 0  # gold offsets no token split could align (widened to tokens)
    docs_with_overlaps: int = 0  # documents whose spans went to a span group, not doc.ents

    def as_dict(self) -> Dict[str, int]:
        return {"tokens_split": self.tokens_split, "spans_expanded": self.spans_expanded, "docs_with_overlaps": self.docs_with_overlaps}


def gold_doc(nlp: Language, document: Document, stats: Optional[GoldDocStats] = None) -> Doc:
    """The tokenised document with its gold mentions as entities (a span group if they overlap)."""
    stats = stats if stats is not None else GoldDocStats()
    offsets = [trimmed(document.text, m.start, m.end) for m in document.mentions]
    bounds = {b for pair in offsets for b in pair}
    base = nlp.make_doc(document.text)
    words: List[str] = []
    spaces: List[bool] = []
    for t in base:
        cuts = sorted(b - t.idx for b in bounds if t.idx < b < t.idx + len(t.text))
        stats.tokens_split += bool(cuts)
        edges = [0, *cuts, len(t.text)]
        words += [t.text[i:j] for i, j in zip(edges, edges[1:])]
        spaces += [False] * len(cuts) + [bool(t.whitespace_)]
    doc = Doc(nlp.vocab, words=words, spaces=spaces) if len(words) != len(base) else base
    spans: Dict[Tuple[int, int], Span] = {}
    for m, (start, end) in zip(document.mentions, offsets):
        span = doc.char_span(start, end, label=m.entity_type)
        if span is None:
            stats.spans_expanded += 1
            span = doc.char_span(start, end, label=m.entity_type, alignment_mode="expand")
        if span is not None:
            spans.setdefault((span.start, span.end), span)
    ordered = sorted(spans.values(), key=lambda s: (s.start, s.end))
    if any(b.start < a.end for a, b in zip(ordered, ordered[1:])):
        stats.docs_with_overlaps += 1
        doc.spans[GOLD_SPANS_KEY] = ordered
    else:
        doc.ents = ordered
    return doc


# ---------------------------------------------------------------------------- reading the linker back
def ranking_of(candidates: Sequence[Sequence[Any]]) -> Ranking:
    """The linker's concept candidates ``(id, name, score, ambiguous)`` as the metrics' ranked names:
    the concepts that one ambiguous name gave (same name, same score, side by side) are one name."""
    names: List[List[str]] = []
    previous = None
    for cid, name, score, ambiguous in candidates:
        if ambiguous and previous == (name, score):
            names[-1].append(cid)
        else:
            names.append([cid])
        previous = (name, score) if ambiguous else None
    return [tuple(n) for n in names]


def find_linker(nlp: Language) -> Any:
    """The pipeline's (last) ``sapbert_linker``."""
    from ..linker import SapBertLinker

    found = [proc for _, proc in nlp.pipeline if isinstance(proc, SapBertLinker)]
    if not found:
        raise ValueError("the pipeline has no sapbert_linker component")
    return found[-1]


@dataclass
class GoldLinks:
    """The linker's output per gold mention (keyed by its original offsets) and how it was got."""

    parts: Dict[Key, Parts] = field(default_factory=dict)
    docs: int = 0
    seconds: float = 0.0
    unlinked: int = 0  # gold spans the linker left without output
    abbreviations_expanded: int = 0
    composites_split: int = 0
    spans: GoldDocStats = field(default_factory=GoldDocStats)

    def stats(self) -> Dict[str, object]:
        return {
            "docs": self.docs,
            "mentions": len(self.parts) + self.unlinked,
            "unlinked": self.unlinked,
            "abbreviations_expanded": self.abbreviations_expanded,
            "composites_split": self.composites_split,
            **self.spans.as_dict(),
        }


def link_gold_mentions(
    nlp: Language,
    documents: Iterable[Document],
    spelling: Optional[Mapping[str, str]] = None,
    batch_size: int = 64,
) -> GoldLinks:
    """Run ``nlp`` over ``documents`` with their gold mentions as spans and collect the linker's parts.

    ``seconds`` times ``nlp.pipe`` only (tokenising and span setting happen before; the linker's
    KB and encoder are loaded before the clock starts).
    """
    linker = find_linker(nlp)
    if linker.linking_kb is None or linker.encoder is None:
        linker.initialize()
    out = GoldLinks()
    prepared: List[Tuple[Doc, Document, Dict[Key, Key]]] = []
    for document in documents:
        origin = {mention_key(m): mention_key(m) for m in document.mentions}
        if spelling:
            document, origin = spelling_fixed(document, spelling)
        prepared.append((gold_doc(nlp, document, out.spans), document, origin))
    out.docs = len(prepared)
    t0 = time.perf_counter()
    docs = list(nlp.pipe([doc for doc, _, _ in prepared], batch_size=batch_size))
    out.seconds = time.perf_counter() - t0
    parts_attr = getattr(linker, "parts_attr", None)
    for doc, (_, document, origin) in zip(docs, prepared):
        for m in document.mentions:
            start, end = trimmed(document.text, m.start, m.end)
            span = doc.char_span(start, end, alignment_mode="expand")
            parts = span._.get(parts_attr) if span is not None and parts_attr else None
            if parts is None and span is not None:
                cands = span._.get(linker.candidates_attr)
                parts = None if cands is None else [(span.text, cands)]
            if parts is None:
                out.unlinked += 1
                continue
            out.parts[origin[mention_key(m)]] = parts
            out.abbreviations_expanded += query_text(span) != span.text
            out.composites_split += len(parts) > 1
    return out
