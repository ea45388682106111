"""The plain record every ontology reader yields and every KB is built from.

Readers know file formats; the KB knows search. A ``ConceptRecord`` is the only thing
that crosses between them, so a new format needs a reader and nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Tuple


@dataclass
class ConceptRecord:
    """One concept: its id, a display name, its other names, and optional metadata.

    ``names`` keeps the original casing (for display); the KB normalises for search.
    ``xrefs`` holds cross-references such as ``UMLS:C0011849`` or ``MESH:D003920``;
    ``sources`` the (vocabulary, local id) pairs merged into this concept; ``parents`` the ids
    of the broader concepts it is a kind of (OBO ``is_a``).
    """

    id: str
    name: str
    synonyms: List[str] = field(default_factory=list)
    types: List[str] = field(default_factory=list)
    xrefs: List[str] = field(default_factory=list)
    sources: List[Tuple[str, str]] = field(default_factory=list)
    parents: List[str] = field(default_factory=list)

    @property
    def all_names(self) -> List[str]:
        """The canonical name followed by the synonyms, original casing, first occurrence kept."""
        seen = set()
        out = []
        for n in [self.name, *self.synonyms]:
            if n and n not in seen:
                seen.add(n)
                out.append(n)
        return out

    def to_dict(self) -> Dict[str, object]:
        d: Dict[str, object] = {"id": self.id, "name": self.name, "synonyms": list(self.synonyms)}
        if self.types:
            d["types"] = list(self.types)
        if self.xrefs:
            d["xrefs"] = list(self.xrefs)
        if self.sources:
            d["sources"] = [list(s) for s in self.sources]
        if self.parents:
            d["parents"] = list(self.parents)
        return d

    @classmethod
    def from_dict(cls, d: Dict[str, object]) -> "ConceptRecord":
        return cls(
            id=str(d["id"]),
            name=str(d["name"]),
            synonyms=[str(s) for s in d.get("synonyms", []) or []],  # type: ignore[union-attr]
            types=[str(t) for t in d.get("types", []) or []],  # type: ignore[union-attr]
            xrefs=[str(x) for x in d.get("xrefs", []) or []],  # type: ignore[union-attr]
            sources=[(str(a), str(b)) for a, b in d.get("sources", []) or []],  # type: ignore[union-attr]
            parents=[str(x) for x in d.get("parents", []) or []],  # type: ignore[union-attr]
        )


class InputError(ValueError):
    """Bad input in a file: the message names the file, the line and the problem."""

    def __init__(self, path: object, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # pickled with its parts (a cluster worker receives unreadable documents' errors)
        return (type(self), (self.path, self.line, self.problem))
