"""Mention strings in, ranked concept candidates out: the KB, its vector index and the
record of which encoder built it, kept together in one folder.

The index is only meaningful with the encoder that produced its vectors, so the folder
stores that encoder's fingerprint and refuses to be searched with any other.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from .composites import clause_as_name
from .context import ContextPrototypes
from .encoder import SapEncoder
from .fileio import atomic_dir, atomic_open, read_json, write_json
from .index import VectorIndex
from .kb import ConceptKB
from .normalize import STOPWORDS, WORD, content_keys, word_key
from .qualities import QUALITY_MARGIN, QualityWords
from .records import ConceptRecord
from .sparse import CharTfidf

FORMAT = "spacy-sapbert-linking-kb"
VERSION = 1
META_FILE = "meta.json"
CALIBRATION_KEY = "calibration"  # the NIL threshold chosen on dev mentions (``calibration.py``), in the meta
FUSION_KEY = "fusion"  # the sparse + dense fusion weight chosen on dev (``store_fusion``), in the meta
CONTEXT_KEY = "context"  # the context reranking weight chosen on dev (``store_context_weight``), in the meta
BELOW_ONE = float(np.nextafter(1.0, 0.0))  # the highest score a name that is not the query itself gets
# A broader concept this close to the top candidate's score is ranked first when the top name adds
# words the mention lacks ("systolic murmur": "Systolic heart murmur" 0.963 over its subtype
# "Late systolic murmur" 0.977; see ``prefer_broader``).
BROADER_MARGIN = 0.03


class EncoderMismatchError(ValueError):
    """The encoder at hand is not the one the index was built with."""


@dataclass(frozen=True)
class Candidate:
    """One ranked concept for a mention: the best-matching of its names and that name's score.

    ``ambiguous`` is True when the matched name belongs to several concepts, i.e. the
    string alone cannot decide between them.
    """

    concept_id: str
    name: str
    score: float
    ambiguous: bool

    def to_tuple(self) -> tuple:
        return (self.concept_id, self.name, self.score, self.ambiguous)


class LinkingKB:
    """A ``ConceptKB``, the ``VectorIndex`` over its names, and the encoder record."""

    def __init__(self, kb: ConceptKB, index: VectorIndex, meta: Dict[str, object]):
        if len(index) != kb.n_names:
            raise ValueError(f"index has {len(index)} vectors but the KB has {kb.n_names} names")
        self.kb = kb
        self.index = index
        self.meta = meta
        self.context: Optional[ContextPrototypes] = None  # concept prototypes for context reranking, if built
        self._sparse: Optional[CharTfidf] = None
        self._qualities: Optional[QualityWords] = None

    # ------------------------------------------------------------------ building
    @classmethod
    def build(
        cls,
        source: Union[ConceptKB, Iterable[ConceptRecord]],
        encoder: SapEncoder,
        index_kind: str = "auto",
        batch_size: int = 256,
        progress: bool = False,
        work_dir: Optional[Union[str, Path]] = None,
        chunk_size: int = 50_000,
        neighbours: Optional[bool] = None,
    ) -> "LinkingKB":
        """Encode every KB name and index the vectors (``neighbours``: ``VectorIndex.build``'s).

        With ``work_dir``, encoded chunks are kept there so that an interrupted build resumes
        where it stopped (only if the KB and the encoder are the same).
        """
        kb = source if isinstance(source, ConceptKB) else ConceptKB.from_records(source)
        if work_dir is None:
            vectors: Union[np.ndarray, List[np.ndarray]] = encoder.encode(list(kb.names), batch_size=batch_size, progress=progress)
        else:  # the index reads the memory-mapped chunks: millions of vectors never sit in memory twice
            files = encode_chunks(encoder, kb.names, kb.fingerprint, work_dir, batch_size, progress, chunk_size)
            vectors = [np.load(f, mmap_mode="r", allow_pickle=False) for f in files] or np.zeros((0, encoder.dim), np.float32)
        return cls.assemble(kb, VectorIndex.build(vectors, kind=index_kind, neighbours=neighbours, progress=progress), encoder)

    @classmethod
    def assemble(cls, kb: ConceptKB, index: VectorIndex, encoder: SapEncoder) -> "LinkingKB":
        """Put together a KB and an index built from its names with ``encoder``."""
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "kb_fingerprint": kb.fingerprint,
            "encoder": encoder.describe(),
            "index": index.meta,
            "stats": kb.stats(),
        }
        return cls(kb, index, meta)

    @property
    def calibrated_threshold(self) -> Optional[float]:
        """The NIL threshold chosen on dev mentions and stored in the meta (``calibration.py``), if any."""
        found = self.meta.get(CALIBRATION_KEY)
        return float(found["threshold"]) if isinstance(found, dict) and found.get("threshold") is not None else None

    @property
    def tuned_fusion_weight(self) -> Optional[float]:
        """The sparse + dense fusion weight chosen on dev and stored in the meta (``store_fusion``), if any."""
        found = self.meta.get(FUSION_KEY)
        return float(found["weight"]) if isinstance(found, dict) and found.get("weight") is not None else None

    @property
    def tuned_context_weight(self) -> Optional[float]:
        """The context reranking weight chosen on dev and stored in the meta (``store_context_weight``), if any."""
        found = self.meta.get(CONTEXT_KEY)
        return float(found["weight"]) if isinstance(found, dict) and found.get("weight") is not None else None

    @property
    def sparse(self) -> CharTfidf:
        """The names' character 3-gram TF-IDF (fitted on first use: a second or two per 100k names)."""
        if self._sparse is None:
            self._sparse = CharTfidf(self.kb.names)
        return self._sparse

    @property
    def qualities(self) -> QualityWords:
        """The quality words the names contrast and equate (``qualities.py``; mined on first use)."""
        if self._qualities is None:
            self._qualities = QualityWords.from_names(self.kb.names, lambda i: self.kb.concepts_of_name(i).tolist())
        return self._qualities

    # ------------------------------------------------------------------ checks
    @property
    def encoder_fingerprint(self) -> str:
        return str(self.meta["encoder"]["fingerprint"])  # type: ignore[index]

    def check_encoder(self, encoder: SapEncoder) -> None:
        if encoder.fingerprint != self.encoder_fingerprint:
            built = self.meta["encoder"]
            raise EncoderMismatchError(
                "This KB's index was built with a different encoder "
                f"(fingerprint {self.encoder_fingerprint}, source {built.get('source')!r}, "  # type: ignore[union-attr]
                f"pooling {built.get('pooling')}, max_length {built.get('max_length')}) than the one given "  # type: ignore[union-attr]
                f"(fingerprint {encoder.fingerprint}, source {encoder.source!r}, pooling {encoder.settings.pooling}, "
                f"max_length {encoder.settings.max_length}). Rebuild the KB with this encoder "
                "(python -m spacy_sapbert build-kb) or load the encoder it was built with."
            )

    # ------------------------------------------------------------------ search
    def search_names(self, vectors: np.ndarray, k: int, name_rows: Optional[np.ndarray] = None) -> tuple:
        """Raw nearest names: (scores, name rows), each (n, k). A query whose vector is the stored one
        of the name at ``name_rows[i]`` (-1: any other vector) is answered from the index's neighbour
        table where it has one: the same search, made when the KB was built."""
        named = name_rows is not None and bool((name_rows >= 0).any())
        table = self.index.neighbours_of(np.maximum(name_rows, 0), k) if named else None  # type: ignore[arg-type]
        if table is None:
            return self.index.search(vectors, k)
        scores, rows = table
        rest = np.flatnonzero(name_rows < 0)
        if len(rest):
            scores[rest], rows[rest] = self.index.search(vectors[rest], k)
        return scores, rows

    def candidates(
        self, vectors: np.ndarray, top_k: int = 5, name_k: Optional[int] = None, queries: Optional[Sequence[str]] = None,
        fusion_weight: float = 0.0, name_rows: Optional[np.ndarray] = None,
        calibration: Optional[Sequence[Sequence[float]]] = None,
    ) -> List[List[Candidate]]:
        """Concept candidates per query vector: best name score per concept, best first.

        Scores are cosines, so they are clipped to [-1, 1] (float rounding gave an exact name
        1.0000001). With ``queries`` (the normalised query strings), a name equal to its query
        scores exactly 1.0 and every other name less, so ``threshold=1.0`` keeps exact names only;
        in a KB with a hierarchy, a broader concept may then be ranked first (``prefer_broader``).
        ``fusion_weight`` w > 0 (needs ``queries``): each of the ``name_k`` nearest names scores
        (1 - w) × its cosine + w × the cosine of the query's and the name's character 3-gram TF-IDF
        vectors (``sparse.CharTfidf``), which rewards shared spelling the encoder missed.
        ``name_rows``: where a vector is a KB name's stored one (``search_names``). ``calibration``: knots
        ``[x, y]`` through which the cosines of the other vectors pass first (a distilled query
        encoder's onto its teacher's scale: ``query_encoder.py``); increasing, so no order changes.
        """
        name_k = name_k or max(4 * top_k, 20)
        scores, rows = self.search_names(vectors, name_k, name_rows)
        scores = np.clip(np.asarray(scores, dtype=np.float64), -1.0, 1.0)
        if calibration is not None:
            encoded = np.ones(len(scores), dtype=bool) if name_rows is None else name_rows < 0
            scores[encoded] = np.interp(scores[encoded], *calibration)
        if queries is not None and len(queries) != len(scores):
            raise ValueError(f"{len(queries)} queries for {len(scores)} vectors")
        if fusion_weight:
            if queries is None:
                raise ValueError("sparse + dense fusion needs the query strings")
            sparse_scores = self.sparse.pair_scores(queries, rows).astype(np.float64)
            scores = (1.0 - fusion_weight) * scores + fusion_weight * sparse_scores
        # each found name's concepts: a name of one concept (most) read for the whole batch at once
        offsets, flat = self.kb.name_offsets, self.kb.name_concepts
        found = np.maximum(rows, 0)  # (-1: no name; an empty KB has one offset)
        starts = np.asarray(offsets[np.minimum(found, len(offsets) - 1)])
        counts = np.asarray(offsets[np.minimum(found + 1, len(offsets) - 1)]) - starts
        firsts = np.asarray(flat[np.minimum(starts, max(len(flat) - 1, 0))]) if len(flat) else starts
        hierarchy = queries is not None and self.kb.concept_parents is not None
        out: List[List[Candidate]] = []
        for i, (srow, rrow) in enumerate(zip(scores, rows)):
            best: Dict[int, Tuple[float, int, bool]] = {}  # concept row: (score, name row, ambiguous)
            own = self._own_row(queries[i]) if queries is not None else None
            for score, name_row, count, first in zip(srow.tolist(), rrow.tolist(), counts[i].tolist(), firsts[i].tolist()):
                if name_row < 0:
                    continue
                if queries is not None:
                    score = 1.0 if name_row == own else min(score, BELOW_ONE)
                for c in (first,) if count == 1 else self.kb.concepts_of_name(name_row).tolist():
                    held = best.get(c)
                    if held is None or score > held[0]:
                        best[c] = (score, name_row, count > 1)
            ranked = sorted(best.items(), key=lambda item: -item[1][0])
            # Candidates for the first top_k, and with a hierarchy for all that prefer_broader may move up
            n = top_k
            if hierarchy and ranked:
                n = max(n, sum(1 for _, (score, _, _) in ranked if ranked[0][1][0] - score <= BROADER_MARGIN))
            cands = [Candidate(self.kb.concept_ids[c], self.kb.display_names[row], score, ambiguous)
                     for c, (score, row, ambiguous) in ranked[:n]]
            if hierarchy:
                cands = self.prefer_broader(cands, queries[i])  # type: ignore[index]
            if queries is not None and cands and cands[0].score < 1.0:
                words = self._quality_first(queries[i])
                if self.qualities.reverses_first(words, content_keys(WORD.findall(cands[0].name))):
                    # it may choose any candidate within QUALITY_MARGIN, whatever top_k: those below the n made
                    top = ranked[0][1][0]
                    more = [Candidate(self.kb.concept_ids[c], self.kb.display_names[row], score, ambiguous)
                            for c, (score, row, ambiguous) in ranked[n:] if top - score <= QUALITY_MARGIN]
                    cands = self.qualities.prefer_agreeing(cands + more, words, lambda c: content_keys(WORD.findall(c.name)),
                                                           lambda c: c.score)
            out.append(cands[:top_k])
        return out

    def _own_row(self, query: str) -> Optional[int]:
        """The row of the name that is exactly ``query``, if any (one lookup instead of a string per name)."""
        row = self.kb.row_of_name(query)
        return row if row is not None and self.kb.names[row] == query else None

    def prefer_broader(self, ranked: List[Candidate], query: str) -> List[Candidate]:
        """``ranked`` with a broader concept first where the mention does not say what the top one
        adds: when the top name has content words the query lacks ("*late* systolic murmur" for
        "systolic murmur") and an ancestor of its concept whose name holds all the query's words
        scores within ``BROADER_MARGIN`` ("Systolic heart murmur"). A subtype's qualifier that
        the text does not state is a guess; its parent is what the text says. A quality word's
        synonym counts as the word (``QualityWords.holds``): "reduced muscle tone" is *Hypotonia*
        ("Low muscle tone"), not its subtype "*Severely* decreased muscle tone"."""
        if len(ranked) < 2 or ranked[0].score >= 1.0:
            return ranked
        top = ranked[0]
        said = content_keys(WORD.findall(query))
        if self.qualities.holds(said, content_keys(WORD.findall(top.name))):
            return ranked
        ancestors = set(self.kb.ancestors(top.concept_id))
        for j, cand in enumerate(ranked[1:], 1):
            if top.score - cand.score > BROADER_MARGIN:
                break
            if cand.concept_id in ancestors and self.qualities.holds(content_keys(WORD.findall(cand.name)), said):
                return [cand] + ranked[:j] + ranked[j + 1 :]
        return ranked

    @staticmethod
    def _quality_first(query: str) -> List[str]:
        """The query's content-word keys with the quality it states first: its first word, or the last of a
        clause ("platelet count was reduced"), for ``QualityWords.prefer_agreeing``: a candidate that keeps
        it comes first where the top one reverses it ("decreased ferritin": "Low ferritin level" 0.968 over
        "Increased ferritin" 0.984)."""
        return [word_key(w) for w in WORD.findall(clause_as_name(query) or query) if w.lower() not in STOPWORDS]

    def link(
        self, encoder: SapEncoder, mentions: Sequence[str], top_k: int = 5, batch_size: int = 128, fusion_weight: Optional[float] = None
    ) -> List[List[Candidate]]:
        """Normalise, encode and search ``mentions`` (checks the encoder first); ``fusion_weight``
        None: the stored one (``tuned_fusion_weight``), else 0."""
        self.check_encoder(encoder)
        queries = [self.kb.normalize(m) for m in mentions]
        vectors = encoder.encode(queries, batch_size=batch_size)
        weight = self.tuned_fusion_weight if fusion_weight is None else fusion_weight
        return self.candidates(vectors, top_k=top_k, queries=queries, fusion_weight=weight or 0.0)

    # ------------------------------------------------------------------ disk
    def to_disk(self, path: Union[str, Path]) -> None:
        """Write the whole folder atomically: the old one stays until the new one is complete."""
        with atomic_dir(path) as tmp:
            self.kb.to_disk(tmp)
            self.index.to_disk(tmp)
            if self.context is not None:
                self.context.to_disk(tmp)
            write_json(tmp / META_FILE, self.meta)

    @classmethod
    def from_disk(cls, path: Union[str, Path], mmap: bool = True) -> "LinkingKB":
        path = Path(path)
        if not (path / META_FILE).is_file():
            raise FileNotFoundError(f"{path} is not a spacy-sapbert KB folder (no {META_FILE}); build one with 'build-kb'")
        meta = read_json(path / META_FILE)
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise ValueError(f"{path}/{META_FILE}: unsupported format {meta.get('format')!r} v{meta.get('version')}")
        kb = ConceptKB.from_disk(path, mmap=mmap)
        if kb.fingerprint != meta["kb_fingerprint"]:
            raise ValueError(f"{path}: the name table does not match the one the index was built from; rebuild the KB")
        linking_kb = cls(kb, VectorIndex.from_disk(path, mmap=mmap), meta)
        linking_kb.context = ContextPrototypes.from_disk(path, mmap=mmap)
        return linking_kb


def store_calibration(kb_folder: Union[str, Path], calibration: Dict[str, object]) -> None:
    """Write ``calibration`` into the KB folder's ``meta.json`` (atomically; the KB data is untouched)."""
    _store_meta_entry(kb_folder, CALIBRATION_KEY, calibration)


def store_fusion(kb_folder: Union[str, Path], fusion: Dict[str, object]) -> None:
    """Write the fusion weight chosen on dev (``{"weight": w, ...}`` with how it was chosen) into the
    KB folder's ``meta.json``; a linker whose ``fusion_weight`` is None then uses it."""
    if not isinstance(fusion.get("weight"), (int, float)) or not 0.0 <= float(fusion["weight"]) < 1.0:  # type: ignore[arg-type]
        raise ValueError(f"a fusion weight must be in [0, 1), got {fusion.get('weight')!r}")
    _store_meta_entry(kb_folder, FUSION_KEY, fusion)


def store_context(kb_folder: Union[str, Path], prototypes: ContextPrototypes) -> None:
    """Write context prototypes (``context.ContextPrototypes``) into a KB folder, beside its index."""
    if not (Path(kb_folder) / META_FILE).is_file():
        raise FileNotFoundError(f"{kb_folder} is not a spacy-sapbert KB folder (no {META_FILE})")
    prototypes.to_disk(kb_folder)


def store_context_weight(kb_folder: Union[str, Path], record: Dict[str, object]) -> None:
    """Write the context reranking weight chosen on dev (``{"weight": w, ...}`` with how it was chosen)
    into the KB folder's ``meta.json``; a linker whose ``context_weight`` is None then uses it."""
    if not isinstance(record.get("weight"), (int, float)) or not 0.0 <= float(record["weight"]) <= 1.0:  # type: ignore[arg-type]
        raise ValueError(f"a context weight must be in [0, 1], got {record.get('weight')!r}")
    if ContextPrototypes.from_disk(kb_folder) is None:
        raise ValueError(f"{kb_folder} has no context prototypes to weigh; build them first ('build-context')")
    _store_meta_entry(kb_folder, CONTEXT_KEY, record)


def _store_meta_entry(kb_folder: Union[str, Path], key: str, value: Dict[str, object]) -> None:
    path = Path(kb_folder) / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{kb_folder} is not a spacy-sapbert KB folder (no {META_FILE})")
    meta = read_json(path)
    meta[key] = dict(value)
    write_json(path, meta)


class ChunksIncomplete(RuntimeError):
    """``encode_chunks`` finished its part, but other parts' chunks are not there yet."""


def encode_chunks(
    encoder: SapEncoder,
    names: Sequence[str],
    kb_fingerprint: str,
    work_dir: Union[str, Path],
    batch_size: int = 256,
    progress: bool = False,
    chunk_size: int = 50_000,
    part: Tuple[int, int] = (0, 1),
) -> List[Path]:
    """Encode ``names`` into ``.npy`` chunk files under ``work_dir`` and return them in order.

    A chunk already there (same KB, encoder and chunk size) is kept, so a killed build resumes;
    the files can be memory-mapped, so millions of vectors need not fit in memory at once.
    ``part=(i, n)`` encodes only every n-th chunk starting at chunk i, so n processes (one per
    core, say) can share one KB's encoding; the chunk list is returned only once it is complete.
    """
    which, parts = part
    if not 0 <= which < parts:
        raise ValueError(f"part must be (i, n) with 0 <= i < n, got {part}")
    work = Path(work_dir)
    state = {
        "kb": kb_fingerprint, "encoder": encoder.fingerprint, "precision": encoder.precision,
        "chunk_size": chunk_size, "n": len(names),
    }
    if (work / "state.json").is_file() and read_json(work / "state.json") != state:
        shutil.rmtree(work)  # left over from another KB or encoder: not reusable
    work.mkdir(parents=True, exist_ok=True)
    write_json(work / "state.json", state)
    files = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(names), desc="encoding names", unit="name", smoothing=0.05)
    for i, start in enumerate(range(0, len(names), chunk_size)):
        f = work / f"chunk_{i:05d}.npy"
        count = min(chunk_size, len(names) - start)
        if not f.is_file() and i % parts == which:
            arr = encoder.encode(list(names[start : start + count]), batch_size=batch_size)
            with atomic_open(f, "wb") as fh:
                np.save(fh, arr, allow_pickle=False)
        files.append(f)
        if bar is not None:
            bar.update(count)
    if bar is not None:
        bar.close()
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise ChunksIncomplete(f"{work}: {len(missing)} chunks are left to other parts (first: {missing[0]})")
    return files
