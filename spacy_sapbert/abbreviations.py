"""Schwartz–Hearst abbreviations: the detector, query expansion and the ``sapbert_abbreviations`` component.

One implementation serves the evaluation (``evaluation/preprocess.py`` expands gold mentions with
it) and the pipeline: the component stores the document's definitions in ``doc._.abbreviations``
(short form → long form, plain strings so they survive ``DocBin`` and ``n_process``), turns later
uses of a short form into entities, and the linker searches ``query_text(span)``, so "DM" is linked
through "diabetes mellitus".
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup

from .attributes import register_attribute
from .config_only import ConfigOnlyPipe

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")
_PARENTHESIS = re.compile(r"\(([^()]+)\)")
_LONG_FORM_WORD_SPLIT = re.compile(r"[\s-]+")
_WORD = re.compile(r"\S+")
_WORD_CHAR = re.compile(r"\w")

DEFAULT_ATTR = "abbreviations"


# ---------------------------------------------------------------------------- detection
def _is_short_form(candidate: str) -> bool:
    """Schwartz & Hearst: 2–10 characters, at most two words, a letter, starts alphanumeric."""
    return (
        2 <= len(candidate) <= 10
        and len(candidate.split()) <= 2
        and candidate[0].isalnum()
        and any(c.isalpha() for c in candidate)
    )


def best_long_form(short: str, candidate: str) -> Optional[str]:
    """The shortest tail of ``candidate`` whose characters contain ``short``'s, right to left,
    with the first short-form character starting a word (Schwartz & Hearst, PSB 2003)."""
    s = len(short) - 1
    c = len(candidate) - 1
    while s >= 0:
        ch = short[s].lower()
        if not ch.isalnum():
            s -= 1
            continue
        while c >= 0 and (candidate[c].lower() != ch or (s == 0 and c > 0 and candidate[c - 1].isalnum())):
            c -= 1
        if c < 0:
            return None
        c -= 1
        s -= 1
    start = candidate.rfind(" ", 0, c + 1) + 1
    return candidate[start:].strip()


def _accept_pair(short: str, long: str) -> bool:
    n_chars = sum(ch.isalnum() for ch in short)
    n_words = len([w for w in _LONG_FORM_WORD_SPLIT.split(long) if w])
    return (
        len(long) > len(short)
        and n_words <= min(n_chars + 5, 2 * n_chars)
        and short.lower() not in {w.lower() for w in long.split()}
    )


@dataclass(frozen=True)
class AbbreviationDefinition:
    """One ``long form (SF)`` / ``SF (long form)`` in a text, with character offsets into it.

    ``long`` is whitespace-normalised (the text at ``long_start:long_end`` may hold a line break
    where ``long`` has a space); ``short`` is exactly ``text[short_start:short_end]``.
    """

    short: str
    long: str
    short_start: int
    short_end: int
    long_start: int
    long_end: int


def _sentences_with_parentheses(text: str) -> Iterator[Tuple[int, str]]:
    """``(offset, sentence)`` pairs of the sentences (split where ``_SENTENCE_END`` matches) that hold
    a "(": only those can define an abbreviation, and most sentences are never cut out of the text."""
    pos = 0
    for m in _SENTENCE_END.finditer(text):
        if text.find("(", pos, m.start()) >= 0:
            yield pos, text[pos : m.start()]
        pos = m.end()
    if text.find("(", pos) >= 0:
        yield pos, text[pos:]


def _word_spans(text: str) -> Tuple[List[int], List[int]]:
    """Start and end offsets of the whitespace-separated words of ``text``."""
    spans = [m.span() for m in _WORD.finditer(text)]
    return [start for start, _ in spans], [end for _, end in spans]


def _words_before(text: str, starts: Sequence[int], ends: Sequence[int], n_before: int, before_end: int, n: int) -> List[str]:
    """The last ``n`` of the first ``n_before`` words of ``text`` (``starts``, ``ends``: their
    offsets), the last cut at ``before_end`` (a parenthesis may follow a word without a space)."""
    return [text[starts[i] : ends[i] if i < n_before - 1 else before_end] for i in range(max(0, n_before - n), n_before)]


def find_abbreviation_definitions(text: str) -> List[AbbreviationDefinition]:
    """Every abbreviation definition in ``text`` in reading order (a short form may recur).

    The words before each parenthesis are looked up in the sentence's word offsets, found once per
    sentence: splitting the text before every parenthesis anew made a long sentence (a note
    without full stops) quadratic."""
    found: List[AbbreviationDefinition] = []
    if "(" not in text:
        return found
    for offset, sentence in _sentences_with_parentheses(text):
        starts: List[int] = []
        ends: List[int] = []
        for n_match, match in enumerate(_PARENTHESIS.finditer(sentence)):
            if not n_match:
                starts, ends = _word_spans(sentence)
            group = match.group(1)
            first = re.split(r"[;,]", group)[0]
            inside = first.strip()
            # the words of ``sentence[: match.start()]``: those starting before the parenthesis, the last cut there
            n_before = bisect.bisect_left(starts, match.start())
            if not inside or not n_before:
                continue
            before_end = min(ends[n_before - 1], match.start())
            inside_start = offset + match.start(1) + (len(first) - len(first.lstrip()))
            if _is_short_form(inside):
                short = inside
                max_words = min(len(short) + 5, 2 * len(short))
                window = " ".join(_words_before(sentence, starts, ends, n_before, before_end, max_words))
                long = best_long_form(short, window)
                if long and _accept_pair(short, long):
                    long_start = offset + starts[n_before - len(long.split())]
                    found.append(
                        AbbreviationDefinition(
                            short, long, inside_start, inside_start + len(short), long_start, offset + before_end
                        )
                    )
            else:  # "SF (long form)": the word before the parenthesis is the short form
                short = _words_before(sentence, starts, ends, n_before, before_end, 1)[0]
                long = best_long_form(short, inside) if _is_short_form(short) and len(inside.split()) > 1 else None
                if long and _accept_pair(short, long):
                    long_end = inside_start + len(inside)
                    short_end = offset + before_end
                    found.append(
                        AbbreviationDefinition(
                            short, long, short_end - len(short), short_end, long_end - len(long), long_end
                        )
                    )
    return found


def find_abbreviations(text: str) -> Dict[str, str]:
    """Short form → long form for every ``long form (SF)`` (or ``SF (long form)``) in ``text``.

    The first definition of a short form in the document wins.
    """
    return _first_definitions(find_abbreviation_definitions(text))


def introduced_short_forms(text: str) -> Set[str]:
    """Every short form ``text`` puts in parentheses ("Myotonic dystrophy (DM)"), also where
    Schwartz–Hearst finds no long form for it (DM is Latin: dystrophia myotonica)."""
    return {inside for m in _PARENTHESIS.finditer(text) if _is_short_form(inside := m.group(1).strip())}


def _first_definitions(definitions: Iterable[AbbreviationDefinition]) -> Dict[str, str]:
    found: Dict[str, str] = {}
    for d in definitions:
        found.setdefault(d.short, d.long)
    return found


def abbreviation_expander(abbreviations: Mapping[str, str], max_rounds: int = 3) -> Callable[[str], str]:
    """A function that replaces whole-token short forms (also inside ``A/B`` and before a comma) by
    their long forms, its pattern compiled once for all the mentions of a document.

    Repeated a few rounds because a long form may itself contain a short form; a short form
    whose long form contains it is never expanded, so the loop cannot grow a mention forever.
    """
    usable = {short: long for short, long in abbreviations.items() if short not in long.split()}
    if not usable:
        return str
    pattern: Optional[re.Pattern] = None  # compiled on first use: many documents' mentions hold none of their short forms

    def expand(mention: str) -> str:
        nonlocal pattern
        if not any(short in mention for short in usable):
            return mention
        if pattern is None:
            pattern = re.compile(
                r"(?<![^\s/])(" + "|".join(re.escape(s) for s in sorted(usable, key=len, reverse=True)) + r")(?=$|[\s/,;:])"
            )
        for _ in range(max_rounds):
            expanded = pattern.sub(lambda m: usable[m.group(1)], mention)
            if expanded == mention:
                break
            mention = expanded
        return mention

    return expand


def expand_abbreviations(mention: str, abbreviations: Mapping[str, str], max_rounds: int = 3) -> str:
    """``mention`` with the short forms of ``abbreviations`` expanded (``abbreviation_expander``)."""
    return abbreviation_expander(abbreviations, max_rounds)(mention)


def query_expander(doc: Doc, attr: str = DEFAULT_ATTR) -> Callable[[str], str]:
    """What turns the text of a span of ``doc`` into the text to search: its abbreviations expanded
    when the doc has definitions (``doc._.<attr>``), else the text unchanged (no component run)."""
    if not Doc.has_extension(attr):
        return str
    abbreviations = getattr(doc._, attr)
    if not abbreviations or not isinstance(abbreviations, Mapping):
        return str
    return abbreviation_expander(abbreviations)


def query_text(span: Span, attr: str = DEFAULT_ATTR) -> str:
    """The text to search for ``span``: its abbreviations expanded when the doc has definitions.

    Works without the component too (no extension, or none found): then it is ``span.text``.
    """
    return query_expander(span.doc, attr)(span.text)


# ---------------------------------------------------------------------------- the doc attribute
def register_doc_attribute(name: str) -> None:
    """Register ``Doc._.<name>`` unless another package (scispacy's detector uses
    ``abbreviations`` for a list of spans) already owns that name."""
    register_attribute(Doc, name, taken=(
        f"Doc extension '{name}' is already registered by another package (scispacy's "
        f"AbbreviationDetector uses 'abbreviations'). spacy-sapbert will not overwrite it: choose "
        f"another name with the sapbert_abbreviations 'attr' setting."
    ))


# ---------------------------------------------------------------------------- later uses
def _head_label(spans_by_end: Mapping[int, Sequence[Span]], start: int, end: int) -> Optional[int]:
    """The label of a span ending where tokens ``start:end`` end and overlapping them (``spans_by_end``:
    the spans by their end, in order).

    Sharing the last token (the head) is what makes the long form name the entity: "von
    Hippel-Lindau tumor suppressor gene (VHL)" overlaps the disease "von Hippel-Lindau" but names
    a gene, and "glucose-6-phosphate dehydrogenase (G6PD) deficiency" is a disease whose short
    form names an enzyme.
    """
    for s in spans_by_end.get(end, ()):
        if s.start < end and start < s.end:
            return s.label
    return None


def _whole_word_matches(shorts: Sequence[str], text: str) -> Dict[str, List[Tuple[int, int]]]:
    """Per short form, its character ranges in ``text`` where no word character touches it
    (case-sensitive; a form's matches do not overlap each other, as ``re.finditer`` gives them).

    One pass over the text for all the forms, not one per form: a long note defines more of them."""
    found: Dict[str, List[Tuple[int, int]]] = {short: [] for short in shorts}
    if not shorts:
        return found
    # every position where some form starts and ends on a word boundary (zero-width: overlaps too)
    starts = re.compile(r"(?<!\w)(?=(?:" + "|".join(re.escape(s) for s in shorts) + r")(?!\w))")
    by_first: Dict[str, List[str]] = {}
    for short in shorts:
        by_first.setdefault(short[0], []).append(short)
    for m in starts.finditer(text):
        at = m.start()
        for short in by_first[text[at]]:
            end = at + len(short)
            if text.startswith(short, at) and not _WORD_CHAR.match(text, end):
                ranges = found[short]
                if not ranges or ranges[-1][1] <= at:
                    ranges.append((at, end))
    return found


def _whole_token_occurrences(doc: Doc, shorts: Sequence[str], text: str) -> Dict[str, List[Tuple[int, int]]]:
    """Per short form, its token ranges wherever it is whole tokens (case-sensitive) in ``doc`` (its ``text``)."""
    found: Dict[str, List[Tuple[int, int]]] = {}
    for short, ranges in _whole_word_matches(shorts, text).items():
        spans = (doc.char_span(start, end, alignment_mode="strict") for start, end in ranges)
        found[short] = [(span.start, span.end) for span in spans if span is not None]
    return found


def new_abbreviation_spans(
    doc: Doc, spans: Sequence[Span], definitions: Sequence[AbbreviationDefinition], allow_overlap: bool = False,
    text: Optional[str] = None,
) -> List[Tuple[int, int, int]]:
    """``(start, end, label)`` token ranges to add to ``spans`` for the uses of defined short forms.

    A short form gets the label of the span that shares the last token of its long form in a
    definition (or, when only the short form was detected, of the span that is exactly it, and
    the long form is added too). New ranges never overlap ``spans`` or each other unless
    ``allow_overlap`` (span groups), where only exact duplicates are skipped. The spans are looked
    up by their ends, offsets and tokens, never by a scan of all of them per use: a long note that
    uses a short form thousands of times stays linear.
    """
    taken = {(s.start, s.end) for s in spans}
    covered = {i for s in spans for i in range(s.start, s.end)}  # the tokens the ranges taken cover
    by_end: Dict[int, List[Span]] = {}
    exactly: Dict[Tuple[int, int], int] = {}
    for s in spans:
        by_end.setdefault(s.end, []).append(s)
        exactly.setdefault((s.start, s.end), s.label)
    labels: Dict[str, int] = {}
    added: List[Tuple[int, int, int]] = []

    def add(start: int, end: int, label: int) -> None:
        if allow_overlap:
            if (start, end) in taken:
                return
        elif any(i in covered for i in range(start, end)):
            return
        taken.add((start, end))
        covered.update(range(start, end))
        added.append((start, end, label))

    first_long = _first_definitions(definitions)
    for d in definitions:
        if first_long[d.short] != d.long:
            continue  # a later, different definition: the first one is the meaning used
        long_span = doc.char_span(d.long_start, d.long_end, alignment_mode="expand")
        short_span = doc.char_span(d.short_start, d.short_end, alignment_mode="expand")
        if long_span is None or short_span is None:
            continue
        label = _head_label(by_end, long_span.start, long_span.end)
        if label is None:  # only the short form was detected: it must be exactly a span
            label = exactly.get((short_span.start, short_span.end))
            if label is None:
                continue
            strict = doc.char_span(d.long_start, d.long_end, alignment_mode="strict")
            if strict is not None:
                add(strict.start, strict.end, label)
        labels.setdefault(d.short, label)
    text = doc.text if text is None else text  # spaCy joins it anew at each call
    occurrences = _whole_token_occurrences(doc, list(labels), text)
    for short, label in labels.items():
        for start, end in occurrences[short]:
            add(start, end, label)
    return sorted(added)


# ---------------------------------------------------------------------------- the component
@Language.factory(
    "sapbert_abbreviations",
    assigns=["doc._.abbreviations", "doc.ents"],
    default_config={"find_later_uses": True, "spans_key": None, "attr": DEFAULT_ATTR},
)
def make_sapbert_abbreviations(
    nlp: Language, name: str, find_later_uses: bool, spans_key: Optional[str], attr: str
) -> "AbbreviationComponent":
    """Place it after mention detection and before ``sapbert_linker``."""
    return AbbreviationComponent(nlp, name, find_later_uses=find_later_uses, spans_key=spans_key, attr=attr)


class AbbreviationComponent(ConfigOnlyPipe):
    """Stores the doc's abbreviation definitions and marks later uses of defined short forms.

    A ``Pipe`` without data (its settings are in the config; ``ConfigOnlyPipe``); no scorer: the
    entities it adds are scored with the detector's (``doc.ents``)."""

    data_format = "spacy-sapbert-abbreviations-v1"

    def __init__(
        self,
        nlp: Language,
        name: str = "sapbert_abbreviations",
        *,
        find_later_uses: bool = True,
        spans_key: Optional[str] = None,
        attr: str = DEFAULT_ATTR,
    ):
        self.name = name
        self.cfg: Dict[str, Any] = {"find_later_uses": find_later_uses, "spans_key": spans_key, "attr": attr}
        register_doc_attribute(attr)

    @property
    def attr(self) -> str:
        return self.cfg["attr"]

    def __call__(self, doc: Doc) -> Doc:
        text = doc.text
        definitions = find_abbreviation_definitions(text)
        doc._.set(self.attr, _first_definitions(definitions))
        if not definitions or not self.cfg["find_later_uses"]:
            return doc
        added = new_abbreviation_spans(doc, list(doc.ents), definitions, text=text)
        if added:  # new entities only: the existing ones (and their kb ids) stay untouched
            doc.set_ents([Span(doc, s, e, label=label) for s, e, label in added], default="unmodified")
        key = self.cfg["spans_key"]
        if key is not None and key in doc.spans:
            group = doc.spans[key]
            added = new_abbreviation_spans(doc, list(group), definitions, allow_overlap=True, text=text)
            if added:
                spans = list(group) + [Span(doc, s, e, label=label) for s, e, label in added]
                doc.spans[key] = SpanGroup(doc, name=key, attrs=dict(group.attrs), spans=spans)
        return doc
