"""Schwartz–Hearst abbreviations: the detector, query expansion and the ``sapbert_abbreviations`` component.

One implementation serves the evaluation (``evaluation/preprocess.py`` expands gold mentions with
it) and the pipeline: the component stores the document's definitions in ``doc._.abbreviations``
(short form → long form, plain strings so they survive ``DocBin`` and ``n_process``), turns later
uses of a short form into entities, and the linker searches ``query_text(span)``, so "DM" is linked
through "diabetes mellitus".
"""
from __future__ import annotations

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


def _sentences(text: str) -> Iterator[Tuple[int, str]]:
    """``(offset, sentence)`` pairs, split where ``_SENTENCE_END`` matches."""
    pos = 0
    for m in _SENTENCE_END.finditer(text):
        yield pos, text[pos : m.start()]
        pos = m.end()
    yield pos, text[pos:]


def _start_of_last_words(text: str, n_words: int) -> int:
    """Offset in ``text`` of the first of its last ``n_words`` whitespace-separated words."""
    starts = [m.start() for m in re.finditer(r"\S+", text)]
    return starts[-n_words]


def find_abbreviation_definitions(text: str) -> List[AbbreviationDefinition]:
    """Every abbreviation definition in ``text`` in reading order (a short form may recur)."""
    found: List[AbbreviationDefinition] = []
    for offset, sentence in _sentences(text):
        for match in _PARENTHESIS.finditer(sentence):
            group = match.group(1)
            first = re.split(r"[;,]", group)[0]
            inside = first.strip()
            before = sentence[: match.start()].rstrip()
            if not inside or not before:
                continue
            inside_start = offset + match.start(1) + (len(first) - len(first.lstrip()))
            if _is_short_form(inside):
                short = inside
                max_words = min(len(short) + 5, 2 * len(short))
                window = " ".join(before.split()[-max_words:])
                long = best_long_form(short, window)
                if long and _accept_pair(short, long):
                    long_start = offset + _start_of_last_words(before, len(long.split()))
                    found.append(
                        AbbreviationDefinition(
                            short, long, inside_start, inside_start + len(short), long_start, offset + len(before)
                        )
                    )
            else:  # "SF (long form)": the word before the parenthesis is the short form
                short = before.split()[-1]
                long = best_long_form(short, inside) if _is_short_form(short) and len(inside.split()) > 1 else None
                if long and _accept_pair(short, long):
                    long_end = inside_start + len(inside)
                    short_end = offset + len(before)
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
def _overlaps(a: Tuple[int, int], b: Tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _head_label(spans: Sequence[Span], start: int, end: int) -> Optional[int]:
    """The label of a span ending where tokens ``start:end`` end and overlapping them.

    Sharing the last token (the head) is what makes the long form name the entity: "von
    Hippel-Lindau tumor suppressor gene (VHL)" overlaps the disease "von Hippel-Lindau" but names
    a gene, and "glucose-6-phosphate dehydrogenase (G6PD) deficiency" is a disease whose short
    form names an enzyme.
    """
    for s in spans:
        if s.end == end and s.start < end and start < s.end:
            return s.label
    return None


def _whole_token_occurrences(doc: Doc, short: str, text: str) -> Iterator[Tuple[int, int]]:
    """Token ranges of ``short`` wherever it is whole tokens (case-sensitive) in ``doc`` (its ``text``)."""
    for m in re.finditer(r"(?<!\w)" + re.escape(short) + r"(?!\w)", text):
        span = doc.char_span(m.start(), m.end(), alignment_mode="strict")
        if span is not None:
            yield span.start, span.end


def new_abbreviation_spans(
    doc: Doc, spans: Sequence[Span], definitions: Sequence[AbbreviationDefinition], allow_overlap: bool = False,
    text: Optional[str] = None,
) -> List[Tuple[int, int, int]]:
    """``(start, end, label)`` token ranges to add to ``spans`` for the uses of defined short forms.

    A short form gets the label of the span that shares the last token of its long form in a
    definition (or, when only the short form was detected, of the span that is exactly it, and
    the long form is added too). New ranges never overlap ``spans`` or each other unless
    ``allow_overlap`` (span groups), where only exact duplicates are skipped.
    """
    taken = [(s.start, s.end) for s in spans]
    labels: Dict[str, int] = {}
    added: List[Tuple[int, int, int]] = []

    def add(start: int, end: int, label: int) -> None:
        if allow_overlap:
            if (start, end) in taken:
                return
        elif any(_overlaps((start, end), t) for t in taken):
            return
        taken.append((start, end))
        added.append((start, end, label))

    first_long = _first_definitions(definitions)
    for d in definitions:
        if first_long[d.short] != d.long:
            continue  # a later, different definition: the first one is the meaning used
        long_span = doc.char_span(d.long_start, d.long_end, alignment_mode="expand")
        short_span = doc.char_span(d.short_start, d.short_end, alignment_mode="expand")
        if long_span is None or short_span is None:
            continue
        label = _head_label(spans, long_span.start, long_span.end)
        if label is None:  # only the short form was detected: it must be exactly a span
            label = next((s.label for s in spans if (s.start, s.end) == (short_span.start, short_span.end)), None)
            if label is None:
                continue
            strict = doc.char_span(d.long_start, d.long_end, alignment_mode="strict")
            if strict is not None:
                add(strict.start, strict.end, label)
        labels.setdefault(d.short, label)
    text = doc.text if text is None else text  # spaCy joins it anew at each call
    for short, label in labels.items():
        for start, end in _whole_token_occurrences(doc, short, text):
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
