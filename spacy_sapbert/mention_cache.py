"""The linker's mention cache: normalised query → candidates, least recently used evicted first.

Most mentions repeat ("seizures" in every other abstract), so the linker searches each distinct
query once and keeps the answer. The cache is shared with a span finder that scores its proposals
through the linker while the linker's ``overlap`` links the batch before in another thread, so
lookups take a lock. ``save``/``load`` carry it to another process or a later run as JSON.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .encoder import PicklableLock, SapEncoder
from .fileio import atomic_open
from .kb import ConceptKB
from .normalize import word_key_fingerprint
from .qualities import QUALITY_MARGIN
from .query_encoder import identity
from .search import BROADER_MARGIN, Candidate, LinkingKB

CACHE_FORMAT = "spacy-sapbert-mention-cache"
CACHE_VERSION = 2  # 2: entries sorted by query, with their sha256


# How a query is searched (``query_search.search_queries``): 2 = a KB name spelt another way takes that
# name's vector (with ``exact_names``; ``ConceptKB.row_of_variant``), and a British spelling that is no KB
# name keeps the better of its own and its American spelling's lists; 3 = word keys fold accents, so "café-au-lait
# spots" is the name *Cafe-au-lait spots* spelt another way; 4 = a candidate keeping the quality the mention states
# comes first where the best one reverses it (``LinkingKB.candidates``, ``QualityWords.prefer_agreeing``), and a broader concept may
# name the quality with a synonym (``prefer_broader``). A cache saved before (another or no such key)
# holds other answers for those queries, so it is refused rather than mixed in. The word keys the lookup
# compares names by (``normalize.word_key``) are part of it: a cache saved before they changed is refused too.
LOOKUP_VERSION = 4


def cache_key(linking_kb: LinkingKB, encoder: SapEncoder, *, top_k: int, exact_names: bool, fusion_weight: float,
              query_encoder: Optional[SapEncoder] = None) -> Dict[str, Any]:
    """What cached candidates depend on: the KB, its index, the encoder, its precision, ``top_k``,
    ``exact_names``, how queries are searched (``LOOKUP_VERSION``), the fusion weight and the query
    encoder where one is set (a saved cache loads only where these are the same)."""
    key = {"kb": linking_kb.meta["kb_fingerprint"], "index": linking_kb.index.meta, "encoder": encoder.fingerprint,
           "precision": encoder.precision, "top_k": top_k, "exact_names": exact_names,
           "lookup": f"{LOOKUP_VERSION}/{word_key_fingerprint()}",
           "fusion_weight": fusion_weight}
    if query_encoder is not None:
        key["query_encoder"] = identity(query_encoder)
    return key


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
        """Write the entries to ``path`` as JSON, atomically, with ``key`` (what made them: ``cache_key``)
        and the sha256 of the entries. The entries are sorted by query, so the file does not depend on
        the order in which processes met them (``--n-process``); a loaded file's entries become the
        least recently used, in that order. Returns the number of entries written."""
        entries = sorted([query, [c.to_tuple() for c in cands]] for query, cands in self.entries.items())
        with atomic_open(path) as f:
            json.dump({"format": CACHE_FORMAT, "version": CACHE_VERSION, "key": key, "sha256": _entries_sha256(entries),
                       "entries": entries}, f, ensure_ascii=False)
        return len(entries)

    def load(self, path: Union[str, Path], key: Dict[str, Any], owner: str, kb: Optional[ConceptKB] = None) -> int:
        """Add the entries ``save`` wrote as the least recently used ones (a query cached already keeps
        its entry), up to ``size``. A file saved under another ``key`` is refused, naming both and
        ``owner`` (the linker's name); a damaged one (not JSON, a checksum that differs, an entry that
        is not candidates of ``kb``: ``check_entries``) or one of the same linker written by another
        version of its lookup (``LOOKUP_VERSION``: an upgrade) raises ``DamagedCacheError`` and adds nothing.
        Returns how many were added."""
        try:
            with open(path, encoding="utf8") as f:
                saved = json.load(f)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise DamagedCacheError(f"{path}: not a JSON mention cache ({e})") from None
        if not isinstance(saved, dict) or saved.get("format") != CACHE_FORMAT or saved.get("version") != CACHE_VERSION:
            raise DamagedCacheError(f"{path} is not a mention cache written by SapBertLinker.save_cache (version {CACHE_VERSION})")
        wanted, found = json.loads(json.dumps(key)), saved.get("key")
        if found != wanted:
            if isinstance(found, dict) and {**found, "lookup": wanted.get("lookup")} == wanted:  # this linker, another release
                raise DamagedCacheError(f"{path} was written by another version of the linker's lookup "
                                        f"(lookup {found.get('lookup', 'none')}, now {wanted.get('lookup')}): its answers may differ")
            raise ValueError(
                f"{path} caches the mentions of another linker ({saved.get('key')}), not of {owner} ({key}): "
                "delete it or keep caches of different KBs, encoders or settings apart"
            )
        entries = check_entries(path, saved, kb)
        room = self.size - len(self.entries)
        new = [(q, cands) for q, cands in entries if q not in self.entries][-room:] if room > 0 else []
        for query, cands in reversed(new):
            self.entries[query] = cands
            self.entries.move_to_end(query, last=False)
        return len(new)


class DamagedCacheError(ValueError):
    """A mention-cache file that cannot be trusted (damaged, edited, or not of this KB); ``str`` names it."""


def _entries_sha256(entries: Any) -> str:
    return hashlib.sha256(json.dumps(entries, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


def check_entries(path: Union[str, Path], saved: Dict[str, Any], kb: Optional[ConceptKB]) -> List[Tuple[str, List[Candidate]]]:
    """The entries of a loaded cache file as candidates, each checked: the file's checksum matches
    them; every candidate is ``[concept id, name, score, ambiguous]`` with a finite score, in
    descending order; with ``kb``, the id is a concept of it and the name one of that concept's
    names. A cache is only a speed-up: a wrong entry would link every later mention of its query
    to the wrong concept, silently, so any doubt discards the file (``DamagedCacheError``)."""
    entries = saved.get("entries")
    if not isinstance(entries, list) or saved.get("sha256") != _entries_sha256(entries):
        raise DamagedCacheError(f"{path}: its entries do not match the checksum written with them (edited or damaged)")
    out = []
    for entry in entries:
        try:
            query, rows = entry
            cands = [Candidate(str(c), str(n), float(s), bool(a)) for c, n, s, a in rows]
        except (TypeError, ValueError):
            raise DamagedCacheError(f"{path}: a malformed entry ({str(entry)[:80]})") from None
        scores = [c.score for c in cands]
        if not all(math.isfinite(s) for s in scores) or not ranked_as_searched(scores):
            raise DamagedCacheError(f"{path}: the scores of {query!r} are not finite and in the order a search gives ({scores})")
        for c in cands:
            problem = _not_in_kb(kb, c) if kb is not None else None
            if problem is not None:
                raise DamagedCacheError(f"{path}: the candidate {c.concept_id!r} ({c.name!r}) of {query!r} {problem}")
        out.append((str(query), cands))
    return out


def ranked_as_searched(scores: Sequence[float]) -> bool:
    """Whether candidate ``scores`` are in an order ``LinkingKB.candidates`` gives: descending, except that
    in a KB with a hierarchy a broader concept within ``BROADER_MARGIN`` of the best may come first
    (``LinkingKB.prefer_broader``), and one within ``QUALITY_MARGIN`` that keeps the mention's quality
    (``QualityWords.prefer_agreeing``)."""
    rest = scores[1:]
    if any(a < b for a, b in zip(rest, rest[1:])):
        return False
    return not rest or scores[0] >= rest[0] or rest[0] - scores[0] <= max(BROADER_MARGIN, QUALITY_MARGIN)


def _not_in_kb(kb: ConceptKB, cand: Candidate) -> Optional[str]:
    """Why ``cand`` is not a candidate ``kb`` can give (its id is no concept, or its name is not one of
    that concept's), or None."""
    try:
        row = kb.row_of_concept(cand.concept_id)
    except KeyError:
        return "is not a concept of the KB"
    name_row = kb.row_of_name(cand.name)
    if name_row is None or row not in kb.name_concepts[kb.name_offsets[name_row] : kb.name_offsets[name_row + 1]]:
        return "does not have that name in the KB"
    return None


class MentionCaches:
    """The linkers' mention caches in a folder (``<linker name>.mentions.json``), for one process of
    ``annotate``: loaded at the start, saved after each shard, merged with what another process
    sharing the folder wrote there since this one last did; a lock keeps them in turn.

    A file that cannot be trusted (``DamagedCacheError``) is not loaded: a warning names it and the
    next save replaces it (the cache is only a speed-up). A local run saves a shard's cache before
    the shard is committed, so a run killed in between resumes with the cache the uninterrupted run had."""

    def __init__(self, folder: Union[str, Path]):
        self.folder = Path(folder)
        self._written: Dict[str, Any] = {}  # the stamp of each file as this process last read or wrote it

    def _path(self, linker: Any) -> Path:
        return self.folder / f"{linker.name}.mentions.json"

    def load(self, linkers: Sequence[Any]) -> None:
        from .fileio import file_stamp

        for linker in linkers:
            path = self._path(linker)
            if path.is_file():
                self._load_checked(linker, path)
                self._written[str(path)] = file_stamp(path)

    def save(self, linkers: Sequence[Any]) -> None:
        import sys

        from .fileio import file_stamp
        from .locks import HeldLock

        self.folder.mkdir(parents=True, exist_ok=True)
        for linker in linkers:
            path = self._path(linker)
            # another run sharing the folder may be writing it: wait for it (the lock names it), then merge
            with HeldLock(Path(f"{path}.lock"), f"the mention cache {path}", "",
                          waiting=lambda message: print(message, file=sys.stderr, flush=True)):
                if path.is_file() and file_stamp(path) != self._written.get(str(path)):
                    self._load_checked(linker, path)
                linker.save_cache(path)
                self._written[str(path)] = file_stamp(path)

    @staticmethod
    def _load_checked(linker: Any, path: Path) -> None:
        import sys

        try:
            linker.load_cache(path)
        except DamagedCacheError as e:
            print(f"warning: {e}; not used (the mention cache is only a speed-up: it is written again)", file=sys.stderr, flush=True)
