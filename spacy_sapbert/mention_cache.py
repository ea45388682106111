"""The linker's mention cache: normalised query → candidates, least recently used evicted first.

Most mentions repeat ("seizures" in every other abstract), so the linker searches each distinct
query once and keeps the answer. The cache is shared with a span finder that scores its proposals
through the linker while the linker's ``overlap`` links the batch before in another thread, so
lookups take a lock. ``save``/``load`` carry it to another process or a later run as JSON.
"""
from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Union

from .encoder import PicklableLock, SapEncoder
from .fileio import atomic_open
from .search import Candidate, LinkingKB

CACHE_FORMAT = "spacy-sapbert-mention-cache"
CACHE_VERSION = 1


def cache_key(linking_kb: LinkingKB, encoder: SapEncoder, *, top_k: int, exact_names: bool, fusion_weight: float) -> Dict[str, Any]:
    """What cached candidates depend on: the KB, its index, the encoder, its precision, ``top_k``,
    ``exact_names`` and the fusion weight (a saved cache loads only where these are the same)."""
    return {"kb": linking_kb.meta["kb_fingerprint"], "index": linking_kb.index.meta, "encoder": encoder.fingerprint,
            "precision": encoder.precision, "top_k": top_k, "exact_names": exact_names, "fusion_weight": fusion_weight}


class MentionCache:
    """An LRU map of normalised queries to their candidates, at most ``size`` entries."""

    def __init__(self, size: int):
        self.size = size
        self.entries: "OrderedDict[str, List[Candidate]]" = OrderedDict()
        # one lookup at a time: a span finder and the linker's overlap thread share it
        self.lock = PicklableLock()

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, query: str) -> bool:
        return query in self.entries

    def clear(self) -> None:
        self.entries.clear()

    def lookup(self, keys: List[str], search: Callable[[List[str]], Sequence[List[Candidate]]]) -> Dict[str, List[Candidate]]:
        """Candidates of normalised queries: cached ones from the cache, the rest from one ``search``
        call (given the missing queries in order, it returns their candidates in that order)."""
        if not keys:
            return {}
        with self.lock:
            return self._lookup_unlocked(keys, search)

    def _lookup_unlocked(self, keys: List[str], search: Callable[[List[str]], Sequence[List[Candidate]]]) -> Dict[str, List[Candidate]]:
        cache = self.entries
        missing = [k for k in keys if k not in cache]
        for k in keys:
            if k in cache:
                cache.move_to_end(k)
        if missing:
            for key, cands in zip(missing, search(missing)):
                cache[key] = cands
        found = {k: cache[k] for k in keys}
        # Evict least recently used entries, never the ones this batch needs.
        excess = len(cache) - self.size
        if excess > 0:
            needed = set(keys)
            for key in [k for k in cache if k not in needed][:excess]:
                del cache[key]
        return found

    def save(self, path: Union[str, Path], key: Dict[str, Any]) -> int:
        """Write the entries (least recently used first) to ``path`` as JSON, atomically, with ``key``:
        what made them (``cache_key``). Returns the number of entries written."""
        entries = [[query, [c.to_tuple() for c in cands]] for query, cands in self.entries.items()]
        with atomic_open(path) as f:
            json.dump({"format": CACHE_FORMAT, "version": CACHE_VERSION, "key": key, "entries": entries}, f, ensure_ascii=False)
        return len(entries)

    def load(self, path: Union[str, Path], key: Dict[str, Any], owner: str) -> int:
        """Add the entries ``save`` wrote as the least recently used ones (a query cached already keeps
        its entry), up to ``size``. A file saved under another ``key`` is refused, naming both and
        ``owner`` (the linker's name). Returns how many were added."""
        with open(path, encoding="utf8") as f:
            saved = json.load(f)
        if not isinstance(saved, dict) or saved.get("format") != CACHE_FORMAT or saved.get("version") != CACHE_VERSION:
            raise ValueError(f"{path} is not a mention cache written by SapBertLinker.save_cache")
        if saved["key"] != json.loads(json.dumps(key)):
            raise ValueError(
                f"{path} caches the mentions of another linker ({saved['key']}), not of {owner} ({key}): "
                "delete it or keep caches of different KBs, encoders or settings apart"
            )
        room = self.size - len(self.entries)
        new = [(q, cands) for q, cands in saved["entries"] if q not in self.entries][-room:] if room > 0 else []
        for query, cands in reversed(new):
            self.entries[query] = [Candidate(str(c), str(n), float(s), bool(a)) for c, n, s, a in cands]
            self.entries.move_to_end(query, last=False)
        return len(new)
