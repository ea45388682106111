"""OBO flat files (HPO, MONDO, DOID, GO, ...): ``[Term]`` stanzas into concept records.

Which synonym scopes count as synonyms is a choice (EXACT is safe; RELATED widens recall;
NARROW/BROAD are different concepts strictly speaking), so it is a parameter. Obsolete
terms are dropped: linking to a retired id helps nobody. Cross-references are kept
verbatim (``UMLS:C…``, ``MSH:D…``) because they are what merges vocabularies later.
"""
from __future__ import annotations

from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from ..records import ConceptRecord, InputError
from ._common import PathLike, ReadSummary, fail_or_skip, iter_lines, make_summary, unique

SCOPES = ("EXACT", "RELATED", "NARROW", "BROAD")
# OBO 1.0 spelled the scope in the tag
_LEGACY_SYNONYM_TAGS = {
    "exact_synonym": "EXACT",
    "related_synonym": "RELATED",
    "narrow_synonym": "NARROW",
    "broad_synonym": "BROAD",
}
_ESCAPES = {"n": "\n", "t": "\t", "W": " "}


def unescape(text: str) -> str:
    """Resolve OBO backslash escapes (``\\"`` → ``"``, ``\\n`` → newline, ``\\!`` → ``!``)."""
    if "\\" not in text:
        return text
    out = []
    chars = iter(text)
    for c in chars:
        if c == "\\":
            nxt = next(chars, "")
            out.append(_ESCAPES.get(nxt, nxt))
        else:
            out.append(c)
    return "".join(out)


def parse_synonym(value: str, default_scope: str = "RELATED") -> Tuple[str, str, str]:
    """``"text" SCOPE [type] [xrefs]`` → ``(text, scope, type)``; raises ValueError if malformed."""
    value = value.strip()
    if not value.startswith('"'):
        raise ValueError("synonym text must start with a double quote")
    i = 1
    while i < len(value):
        if value[i] == "\\":
            i += 2
            continue
        if value[i] == '"':
            break
        i += 1
    else:
        raise ValueError("synonym text has no closing double quote")
    text = unescape(value[1:i])
    rest = value[i + 1:].split("[", 1)[0].split()
    scope = rest[0] if rest and rest[0] in SCOPES else default_scope
    syn_type = rest[1] if len(rest) > 1 and rest[0] in SCOPES else ""
    return text, scope, syn_type


def _first_token(value: str) -> str:
    return value.split(None, 1)[0] if value.strip() else ""


def _strip_comment(value: str) -> str:
    """Drop a trailing ``! comment`` and ``{modifiers}`` (an unescaped ``!`` and ``{`` only: ``\\{`` is text)."""
    i, brace = 0, -1
    while i < len(value):
        if value[i] == "\\":
            i += 2
            continue
        if value[i] == "!":
            value = value[:i]
            break
        if value[i] == "{":
            brace = i
        i += 1
    value = value.rstrip()
    if value.endswith("}") and 0 <= brace:
        value = value[:brace]
    return value.strip()


def _iter_stanzas(path: PathLike, summary: ReadSummary, lenient: bool) -> Iterator[Tuple[int, Dict[str, List[str]]]]:
    """Yield ``(first line, {tag: [values]})`` for each ``[Term]`` stanza."""
    kind: Optional[str] = None
    start = 0
    tags: Dict[str, List[str]] = {}
    for lineno, line in iter_lines(path, summary, lenient):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            if kind == "Term":
                yield start, tags
            kind, start, tags = stripped[1:-1], lineno, {}
            continue
        if kind != "Term" or not stripped or stripped.startswith("!"):
            continue
        tag, sep, value = stripped.partition(":")
        if not sep or not tag or " " in tag:
            fail_or_skip(InputError(path, lineno, f"expected 'tag: value' in [Term] stanza, got {stripped[:60]!r}"), summary, lenient)
            continue
        tags.setdefault(tag, []).append(value.strip())
    if kind == "Term":
        yield start, tags


def read_obo(
    path: PathLike,
    synonym_scopes: Sequence[str] = ("EXACT", "RELATED"),
    lenient: bool = False,
    exclude_synonym_types: Iterable[str] = ("obsolete_synonym",),
    summary: Optional[ReadSummary] = None,
) -> Iterator[ConceptRecord]:
    """Stream the non-obsolete ``[Term]`` stanzas of an OBO file as concept records.

    ``synonym_scopes``: which of EXACT/RELATED/NARROW/BROAD become synonyms.
    ``exclude_synonym_types``: synonym types never used (HPO marks retired names
    ``obsolete_synonym``). Alt ids and xrefs go to ``xrefs``; the namespace to ``types``;
    ``is_a`` to ``parents``.
    A stanza without id or name, a duplicate id, or a malformed synonym is an error naming
    file and line; with ``lenient=True`` it is skipped and counted in ``summary``.
    """
    scopes = {s.upper() for s in synonym_scopes}
    bad = scopes - set(SCOPES)
    if bad:
        raise ValueError(f"unknown synonym scope(s) {sorted(bad)}; choose from {SCOPES}")
    excluded_types = set(exclude_synonym_types)
    summary = make_summary(path, summary)
    seen: Set[str] = set()
    for start, tags in _iter_stanzas(path, summary, lenient):
        if any(v.strip().lower() == "true" for v in tags.get("is_obsolete", [])):
            continue
        cid = _first_token(tags.get("id", [""])[0])
        name = unescape(_strip_comment(tags.get("name", [""])[0]))
        problem = None
        if not cid:
            problem = "[Term] stanza has no id"
        elif not name.strip():
            problem = f"term {cid} has no name"
        elif cid in seen:
            problem = f"duplicate term id {cid}"
        synonyms: List[str] = []
        if problem is None:
            try:
                for tag, default_scope in [("synonym", "RELATED"), *_LEGACY_SYNONYM_TAGS.items()]:
                    for value in tags.get(tag, []):
                        text, scope, syn_type = parse_synonym(value, default_scope)
                        if scope in scopes and syn_type not in excluded_types and text.strip():
                            synonyms.append(text.strip())
            except ValueError as e:
                problem = f"term {cid}: bad synonym ({e})"
        if problem is not None:
            fail_or_skip(InputError(path, start, problem), summary, lenient)
            continue
        seen.add(cid)
        name = name.strip()
        xrefs = [_first_token(v) for v in tags.get("alt_id", []) + tags.get("xref", [])]
        namespaces = [_first_token(v) for v in tags.get("namespace", [])]
        summary.records += 1
        yield ConceptRecord(
            id=cid,
            name=name,
            synonyms=[s for s in unique(synonyms) if s != name],
            types=unique(namespaces),
            xrefs=unique(xrefs),
            sources=[(cid.split(":", 1)[0] if ":" in cid else "OBO", cid)],
            parents=unique([_first_token(v) for v in tags.get("is_a", [])]),
        )
    summary.report()
