"""Context reranking (KRISSBERT-style prototypes): a mention's sentence decides between near candidates.

A name alone cannot tell "MS" (multiple sclerosis) from "MS" (mitral stenosis), nor a mention from
the sibling concept ranked just above it; the sentence around it often can. Each concept gets a
*prototype*: the mean vector of sentences in which it is mentioned, the mention marked with
brackets. The examples come from unlabelled text, where a KB name that belongs to one concept only
appears verbatim (the KRISSBERT recipe: self-supervision, no annotation), and optionally from
annotated mentions. At link time the linker adds ``weight × cosine(mention's sentence, prototype)``
to the score of each candidate near the top and re-sorts them (``rerank``).

The sentence vectors come from the linker's own encoder weights read differently: mean pooling over
up to ``CONTEXT_MAX_LENGTH`` tokens (``context_encoder``), so no second model is loaded. The
prototypes are stored in the KB folder with the fingerprint of that reading; the linker refuses to
rerank with prototypes that an encoder reading sentences otherwise made.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .encoder import SapEncoder
from .fileio import atomic_open, read_json, write_json
from .kb import ConceptKB

PROTOTYPES_FILE = "context_prototypes.npy"
CONCEPTS_FILE = "context_concepts.json"
CONTEXT_POOLING = "mean"  # how the base MiniLM was trained to embed sentences
CONTEXT_MAX_LENGTH = 96
WINDOW_CHARS = 300  # the most text kept on either side of a mention when no sentence end is near
MAX_NGRAM_WORDS = 6  # the longest KB name looked for verbatim in unlabelled text
MIN_NAME_CHARS = 4  # shorter names ("MS", "AD") are too ambiguous to label text by themselves
_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z0-9(\[])")
# How ``mention_in_context`` cuts a sentence. Prototypes record it, and a linker refuses prototypes cut
# by another rule: the query sentences and the prototypes must be read alike. 2: a mention that opens a
# sentence no longer drags the previous sentence in (rule 1's lookahead could not see the mention).
SENTENCE_RULE = 2
_WORD = re.compile(r"\w+(?:[-']\w+)*")


def mention_in_context(text: str, start: int, end: int) -> str:
    """The sentence around ``text[start:end]`` with the mention in brackets; at most ``WINDOW_CHARS``
    on each side. One rule for building prototypes and for linking."""
    left_limit, right_limit = max(0, start - WINDOW_CHARS), min(len(text), end + WINDOW_CHARS)
    left = left_limit
    for m in _SENTENCE_END.finditer(text, left_limit, start + 1):  # + 1: the lookahead sees the mention's first character
        if m.end() <= start:
            left = m.end()
    found = _SENTENCE_END.search(text, end, right_limit)
    right = found.end() if found else right_limit
    return f"{text[left:start].lstrip()}[{text[start:end]}]{text[end:right].rstrip()}"


def context_encoder(encoder: SapEncoder) -> SapEncoder:
    """``encoder``'s weights reading sentences: mean pooling, ``CONTEXT_MAX_LENGTH`` tokens or as many
    as the model has positions for (shared weights)."""
    positions = int(getattr(encoder.model.config, "max_position_embeddings", CONTEXT_MAX_LENGTH))
    settings = replace(encoder.settings, pooling=CONTEXT_POOLING, max_length=min(CONTEXT_MAX_LENGTH, positions))
    view = SapEncoder(encoder.model, encoder.tokenizer, settings, device=str(encoder.device),
                      precision=encoder.precision, source=encoder.source)
    view.pass_rows, view.threaded_passes = encoder.pass_rows, encoder.threaded_passes
    view._tokenizer_lock = encoder._tokenizer_lock  # one tokenizer, one lock
    view._pass_workers = encoder._pass_workers  # and one pool of pass threads
    return view


def self_supervised_examples(kb: ConceptKB, texts: Iterable[str], max_per_concept: int = 20) -> Iterator[Tuple[str, str]]:
    """``(concept id, mention in context)`` wherever a name of exactly one concept appears verbatim in
    ``texts`` (longest match first, names of at least ``MIN_NAME_CHARS`` characters), at most
    ``max_per_concept`` per concept."""
    counts: Dict[str, int] = {}
    for text in texts:
        words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
        i = 0
        while i < len(words):
            step = 1
            for n in range(min(MAX_NGRAM_WORDS, len(words) - i), 0, -1):
                start, end = words[i][0], words[i + n - 1][1]
                if end - start < MIN_NAME_CHARS:
                    continue
                row = kb.row_of_name(text[start:end])
                if row is None:
                    continue
                concepts = kb.concepts_of_name(row)
                if len(concepts) == 1:
                    cid = kb.concept_ids[int(concepts[0])]
                    if counts.get(cid, 0) < max_per_concept:
                        counts[cid] = counts.get(cid, 0) + 1
                        yield cid, mention_in_context(text, start, end)
                step = n
                break
            i += step


def annotated_examples(kb: ConceptKB, mentions: Iterable[Tuple[str, int, int, Sequence[str]]]) -> Iterator[Tuple[str, str]]:
    """``(concept id, mention in context)`` for each annotated mention ``(text, start, end, ids)`` with
    exactly one id that names a KB concept (its own id or one of its cross-references); composite and
    unknown ids are left out. KRISSBERT's supervised prototypes: annotations settle the ambiguous
    names that self-supervision never labels."""
    primary = {alias: cid for cid, aliases in kb.concept_aliases().items() for alias in aliases}
    primary.update((cid, cid) for cid in kb.concept_ids)
    for text, start, end, ids in mentions:
        if len(ids) == 1 and ids[0] in primary:
            yield primary[ids[0]], mention_in_context(text, start, end)


@dataclass
class ContextPrototypes:
    """One unit vector per concept (``concept_ids[i]`` ↔ ``vectors[i]``) and how they were made."""

    concept_ids: List[str]
    vectors: np.ndarray
    meta: Dict[str, object]

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2 or len(self.vectors) != len(self.concept_ids):
            raise ValueError(f"{len(self.concept_ids)} concepts but vectors of shape {self.vectors.shape}")
        self._row = {cid: i for i, cid in enumerate(self.concept_ids)}

    @classmethod
    def build(cls, examples: Iterable[Tuple[str, str]], encoder: SapEncoder, batch_size: int = 64,
              sources: Optional[Mapping[str, object]] = None) -> "ContextPrototypes":
        """The mean sentence vector of each concept's examples (``(concept id, mention in context)``), normalised."""
        pairs = list(examples)
        reader = context_encoder(encoder)
        ids = sorted({cid for cid, _ in pairs})
        row = {cid: i for i, cid in enumerate(ids)}
        sums = np.zeros((len(ids), reader.dim), dtype=np.float64)
        if pairs:
            vectors = reader.encode([sentence for _, sentence in pairs], batch_size=batch_size)
            np.add.at(sums, [row[cid] for cid, _ in pairs], vectors)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        unit = (sums / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        meta = {"encoder": reader.describe(), "sentence_rule": SENTENCE_RULE, "examples": len(pairs), "sources": dict(sources or {})}
        return cls(ids, unit, meta)

    def __len__(self) -> int:
        return len(self.concept_ids)

    @property
    def encoder_fingerprint(self) -> str:
        return str(self.meta["encoder"]["fingerprint"])  # type: ignore[index]

    def check_reader(self, encoder: SapEncoder, folder: Union[str, Path] = "") -> None:
        """Refuse prototypes made with another encoder than ``encoder`` (read as ``context_encoder`` reads),
        or from sentences cut by another rule than this version's ``mention_in_context``."""
        rule = self.meta.get("sentence_rule", 1)  # prototypes from before the rule was recorded were cut by rule 1
        if rule != SENTENCE_RULE:
            raise ValueError(
                f"{folder}: the context prototypes were built from sentences cut by rule {rule}, and this version cuts "
                f"a mention's sentence by rule {SENTENCE_RULE}; rebuild them with 'build-context'"
            )
        mine = context_encoder(encoder).fingerprint
        if mine != self.encoder_fingerprint:
            raise ValueError(
                f"{folder}: the context prototypes were built with another encoder (fingerprint {self.encoder_fingerprint}, "
                f"this one reads sentences as {mine}); rebuild them with 'build-context'"
            )

    @property
    def fingerprint(self) -> str:
        """A hash of the concepts and their vectors (what a resumed annotation run must find again)."""
        h = hashlib.sha256(json.dumps(self.concept_ids).encode())
        h.update(np.ascontiguousarray(self.vectors, dtype=np.float32).tobytes())
        return h.hexdigest()[:32]

    def similarities(self, concept_ids: Sequence[str], sentence_vector: np.ndarray) -> List[Optional[float]]:
        """Cosine of ``sentence_vector`` with each concept's prototype; None for a concept without one."""
        return [float(self.vectors[self._row[c]] @ sentence_vector) if c in self._row else None for c in concept_ids]

    # ------------------------------------------------------------------ disk
    def to_disk(self, folder: Union[str, Path]) -> None:
        """The vectors, then the concepts with the pair's fingerprint: each file is written atomically,
        and ``from_disk`` refuses a pair whose files come from different builds (a write cut between them)."""
        folder = Path(folder)
        with atomic_open(folder / PROTOTYPES_FILE, "wb") as f:
            np.save(f, self.vectors, allow_pickle=False)
        write_json(folder / CONCEPTS_FILE, {"concept_ids": self.concept_ids, **self.meta, "fingerprint": self.fingerprint})

    @classmethod
    def from_disk(cls, folder: Union[str, Path], mmap: bool = True) -> Optional["ContextPrototypes"]:
        """The prototypes stored in a KB folder, or None where it has none."""
        folder = Path(folder)
        if not (folder / CONCEPTS_FILE).is_file():
            return None
        data = read_json(folder / CONCEPTS_FILE)
        ids = data.pop("concept_ids")
        written = data.pop("fingerprint", None)
        if not (folder / PROTOTYPES_FILE).is_file():
            raise FileNotFoundError(f"{folder}: {CONCEPTS_FILE} names context prototypes but {PROTOTYPES_FILE} is missing; "
                                    "rebuild them with 'build-context'")
        vectors = np.load(folder / PROTOTYPES_FILE, mmap_mode="r" if mmap else None, allow_pickle=False)
        if vectors.shape != (len(ids), int(data["encoder"]["dim"])):
            raise ValueError(f"{folder / PROTOTYPES_FILE}: shape {vectors.shape}, expected {(len(ids), data['encoder']['dim'])}; "
                             "rebuild them with 'build-context'")
        prototypes = cls(ids, vectors, data)
        if written is not None and prototypes.fingerprint != written:
            raise ValueError(f"{folder}: {PROTOTYPES_FILE} does not belong to {CONCEPTS_FILE} (another build's vectors; "
                             "a write was cut between them); rebuild them with 'build-context'")
        return prototypes


def contested(candidates: Sequence, weight: float) -> int:
    """How many leading candidates the sentence can reorder: those within ``2 × weight`` of the top
    score (a cosine moves a score by at most ``weight`` either way), none when the top is an exact
    name of one concept (score 1.0, not ambiguous: the string has decided). 1 or 0: nothing to
    decide, and the linker skips encoding the sentence."""
    if not candidates:
        return 0
    if candidates[0].score >= 1.0 and not candidates[0].ambiguous:
        return 1
    floor = candidates[0].score - 2.0 * weight
    return sum(1 for c in candidates if c.score >= floor)


def rerank(candidates: Sequence, similarities: Sequence[Optional[float]], weight: float) -> List:
    """``candidates`` (``search.Candidate``, best first) with the ``contested`` ones re-sorted by
    ``score + weight × similarity`` (stable); the rest keep their places after them. ``similarities``
    follow the candidates and need cover only the contested ones.

    A candidate without a prototype counts as the least similar of the contested ones that have one
    (0 where none has). Scores stay the name scores, so the NIL threshold keeps its meaning; a
    candidate keeps ``ambiguous`` only while another of the same name has the same reranked score
    (the sentence did not separate them)."""
    n = contested(candidates, weight)
    head, sims = list(candidates[:n]), list(similarities[:n])
    known = [s for s in sims if s is not None]
    floor = min(known) if known else 0.0
    fused = [c.score + weight * (floor if s is None else s) for c, s in zip(head, sims)]
    out = []
    for i in sorted(range(n), key=lambda i: -fused[i]):
        c = head[i]
        if c.ambiguous:
            tied = any(j != i and head[j].name == c.name and fused[j] == fused[i] for j in range(n))
            c = replace(c, ambiguous=tied)
        out.append(c)
    return out + list(candidates[n:])
