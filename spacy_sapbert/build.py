"""Building a KB folder on disk: the one place that encodes a source into ``OUTPUT``.

``build-kb`` and the default-KB cache both come here, so both get the same guarantees:

- one build per output at a time: an exclusive lock ``OUTPUT.lock`` beside the folder (a kernel
  ``flock``, released even when the holder is killed). A second ``build-kb`` into the same folder
  is refused (two builds sharing one work folder would mix their chunks); the default cache
  instead waits and reuses what the first process wrote;
- in stages, each resumable (``build_stages``): the work folder (``OUTPUT.partial`` beside the
  output, or ``work_dir``) keeps ``kb/`` (the KB tables, streamed from the source by
  ``kb_writer.write_kb``), ``chunks/`` (the encoded names: ``search.encode_chunks``, resumed chunk by
  chunk) and ``index/`` (the vector index). A rerun verifies each finished stage by its recorded
  checksums and skips it. The work folder is removed after success (``keep_work``: kept, so that a
  later run redoes only what changed, e.g. the index once ``auto`` picks another kind);
- encoding split over processes or machines: ``encode_part`` encodes every n-th chunk into a work
  folder they share (or whose chunks are copied together); the build then finds every chunk there.
  Chunks it did not encode itself are checked against a sample of names encoded again;
- bounded memory at UMLS size: the KB is written as the source streams in, the index reads the
  chunks memory-mapped, and their pages are paged out of the process as it goes (``mapped_pages``);
- atomic: the output is assembled from the stages' files (hard links) under a temporary name and
  swapped in, so a failure leaves the old KB;
- never empty: a source that yields no names is refused before anything is encoded.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

import numpy as np

from .about import __version__
from .build_stages import (
    checksums,
    commit,
    damaged,
    digest,
    finished,
    link_or_copy,
    read_record,
    remove_stale,
    say,
    stage_clock,
    write_record,
)
from .encoder import SapEncoder
from .fileio import atomic_dir, read_json, write_json
from .index_kinds import check_kind
from .index_kinds.base import VectorIndex, choose_kind
from .kb import ConceptKB
from .kb_writer import write_kb
from .locks import HeldLock, LockHeldError, held_elsewhere, lock_path
from .mapped_pages import paged_out
from .records import ConceptRecord, InputError
from .search import META_FILE, ChunksIncomplete, LinkingKB, encode_chunks
from .word_variants import with_variant_names, write_variant_files

PathLike = Union[str, Path]
Encoder = Union[SapEncoder, Callable[[], SapEncoder]]
SPOT_CHECK_NAMES = 64  # names encoded again to check chunks this build did not encode
SPOT_CHECK_COSINE = 0.95  # below this, a chunk row is not the vector of its name (another encoder or precision)


class BuildLockedError(LockHeldError):
    """Another process is building the same KB folder right now."""


def work_path(output: PathLike) -> Path:
    """The resumable work folder of a KB folder: ``OUTPUT.partial`` beside it."""
    output = Path(output)
    return output.with_name(output.name + ".partial")


@dataclass
class SourceOptions:
    """How the source becomes KB tables (``ConceptKB.from_records``' options, word variants), and
    ``key``: what identifies the source (e.g. its files' checksums). With a key, a finished KB stage
    made from the same key and options is reused; without one it is built again on every run."""

    on_duplicate: str = "error"
    strip_punctuation: bool = False
    priors: Optional[Mapping[str, float]] = None
    word_variants: Optional[Mapping[str, object]] = None
    variant_options: Optional[Mapping[str, int]] = None
    source_name: Optional[str] = None
    key: Optional[Mapping[str, Any]] = field(default=None)

    def stage_key(self) -> Optional[Dict[str, Any]]:
        if self.key is None:
            return None
        return {
            "source": dict(self.key), "on_duplicate": self.on_duplicate, "strip_punctuation": self.strip_punctuation,
            "priors": None if self.priors is None else digest(sorted(self.priors.items())),
            "word_variants": None if self.word_variants is None else digest([self.word_variants, self.variant_options]),
            "version": __version__,
        }


def build_kb_folder(
    source: Union[ConceptKB, Iterable[ConceptRecord]],
    encoder: Encoder,
    output: PathLike,
    index_kind: str = "auto",
    batch_size: int = 256,
    progress: bool = True,
    chunk_size: int = 50_000,
    *,
    on_duplicate: str = "error",
    strip_punctuation: bool = False,
    wait: bool = False,
    source_name: Optional[str] = None,
    priors: Optional[Mapping[str, float]] = None,
    neighbours: Optional[bool] = None,
    word_variants: Optional[Mapping[str, object]] = None,
    variant_options: Optional[Mapping[str, int]] = None,
    work_dir: Optional[PathLike] = None,
    source_key: Optional[Mapping[str, Any]] = None,
    keep_work: bool = False,
) -> LinkingKB:
    """Read ``source``, encode its names and write the KB folder ``output``; return the KB.

    ``encoder`` may be a zero-argument function that loads it: it is then called only once the
    lock is held and the source has names, so a refused build does not load weights first.
    ``source`` may be a lazy reader (a generator): it is read under the lock.

    ``wait=False`` (``build-kb``): if another process holds the lock, raise ``BuildLockedError``.
    ``wait=True`` (caches whose folder name identifies their content): wait for the other
    process, then reuse the KB it wrote instead of building it again.

    A source without a single name raises ``InputError`` naming ``source_name`` and leaves an
    existing ``output`` as it is. ``priors``: a weight per concept id (``ConceptKB.from_records``);
    ``neighbours``: the index's neighbour table (``VectorIndex.build``; None: its size rule).
    ``index_kind``: ``auto`` or a registered kind (checked first: an unknown one is refused before reading).
    ``word_variants``: a word-variant table (``word_variants.load_table``): names generated from it
    are added under their concepts (``variant_options``: ``VariantTable``'s ``min_votes`` and
    ``min_substitution_votes``, and ``max_variants`` per name), and the table and the generated names
    are stored in the folder (``word_variants.json``, ``generated_names.json``).
    ``work_dir``: the stages' folder (default ``OUTPUT.partial``); ``source_key``: what identifies the
    source (``SourceOptions.key``); ``keep_work``: keep the work folder after success.
    """
    check_kind(index_kind)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    options = SourceOptions(on_duplicate, strip_punctuation, priors, word_variants, variant_options, source_name, source_key)
    with _build_lock(lock_path(output), f"{output} is being built by another process", progress, wait):
        if wait and (output / META_FILE).is_file():
            return LinkingKB.from_disk(output)  # built by the process we waited for
        remove_stale(output.parent, [output.name])  # what a killed build left beside the output
        work = Path(work_dir) if work_dir is not None else work_path(output)
        remove_stale(work, ("index",) if _parts_running(work) else ("kb", "index"))
        kb_dir = _kb_stage(source, work, options, progress, output)
        kb = ConceptKB.from_disk(kb_dir)
        enc = encoder if isinstance(encoder, SapEncoder) else encoder()
        files, chunks_record = _encode_stage(kb, enc, work / "chunks", batch_size, chunk_size, progress)
        index_dir = _index_stage(kb, files, chunks_record, work, index_kind, neighbours, progress)
        linking_kb = _write_stage(kb_dir, index_dir, enc, output, progress)
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
        return linking_kb


def encode_part(
    source: Union[ConceptKB, Iterable[ConceptRecord]],
    encoder: Encoder,
    work_dir: PathLike,
    part: Tuple[int, int],
    batch_size: int = 256,
    progress: bool = True,
    chunk_size: int = 50_000,
    options: Optional[SourceOptions] = None,
) -> Tuple[int, int]:
    """Write the KB stage (or verify it) and encode chunks ``i, i + n, …`` (``part=(i, n)``) of its
    names into ``work_dir``: one of n processes or machines sharing the encoding. Returns the
    chunks now in the folder and the chunks in all; a build with this ``work_dir`` finishes the KB."""
    which, parts = part
    if not 0 <= which < parts:
        raise ValueError(f"part must be I/N with 0 <= I < N, got {which}/{parts}")
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    options = options or SourceOptions()
    with _build_lock(work / f"encode-part-{which}-of-{parts}.lock", f"part {which}/{parts} of {work} is being encoded by another process", progress):
        kb = ConceptKB.from_disk(_kb_stage(source, work, options, progress, None))
        enc = encoder if isinstance(encoder, SapEncoder) else encoder()
        with stage_clock("encode", progress, f"encoding part {which}/{parts} of {kb.n_names:,} names into {work / 'chunks'}"):
            try:
                encode_chunks(enc, kb.names, kb.fingerprint, work / "chunks", batch_size, progress, chunk_size, part=part)
            except ChunksIncomplete:
                pass  # the other parts' chunks are theirs to encode
    total = -(-kb.n_names // chunk_size)
    return len(list((work / "chunks").glob("chunk_*.npy"))), total


def source_key(source: Path, fmt: str, reader: Callable[..., Any], lenient: bool, priors_file: Optional[Path] = None,
               extra_names_file: Optional[Path] = None) -> Dict[str, Any]:
    """What identifies a source read from files (``SourceOptions.key``): its format, the reader's
    leniency, and the size and sha256 of every file read: the source file, a folder's files, or
    what a reader that also reads files beside its path lists as its ``input_files`` (UMLS's
    MRSTY.RRF and MRREL.RRF), the priors file and the extra-names file. Names are kept without
    their folder, so the same files elsewhere (another machine) give the same key."""
    listed = getattr(reader, "input_files", None)
    files = listed(source) if listed is not None else sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
    key = {"format": fmt, "lenient": lenient, "inputs": sorted(checksums(files).items()),
           "priors_file": None if priors_file is None else checksums([priors_file])[priors_file.name]}
    if extra_names_file is not None:  # only where given: a KB stage finished before the option keeps its key
        key["extra_names_file"] = checksums([extra_names_file])[extra_names_file.name]
    return key


# ---------------------------------------------------------------------------- the stages
def _kb_stage(source: Union[ConceptKB, Iterable[ConceptRecord]], work: Path, options: SourceOptions, progress: bool,
              output: Optional[Path]) -> Path:
    """``work/kb``: the KB tables (and word-variant files), verified and reused where finished."""
    folder, key = work / "kb", options.stage_key()
    if finished(folder, key, "kb", progress) is not None:
        return folder
    started = time.perf_counter()
    try:
        with stage_clock("kb", progress, f"reading {options.source_name or 'the source'} into KB tables"), atomic_dir(folder) as tmp:
            generated = None
            if options.word_variants is not None:
                source, generated = with_variant_names(source, options.word_variants, options.variant_options or {})
            if isinstance(source, ConceptKB):
                source.to_disk(tmp)
                kb = ConceptKB.from_disk(tmp)
            else:
                kb = write_kb(source, tmp, options.on_duplicate, strip_punctuation=options.strip_punctuation,
                              priors=options.priors, progress=progress, desc=f"reading {options.source_name or 'concepts'}")
            if len(kb) == 0 or kb.n_names == 0:
                where = output if output is not None else work
                raise InputError(
                    options.source_name or "the source",
                    None,
                    f"no concept names read ({len(kb)} concepts, {kb.n_names} names): the file is empty, holds only "
                    "comments, every row was skipped (--lenient) or it is not in the format it was read as (--format); "
                    + (f"the existing KB at {where} was left unchanged" if where.exists() and output is not None
                       else f"{where} was not written"),
                )
            if generated is not None:
                write_variant_files(tmp, options.word_variants or {}, generated, dict(options.variant_options or {}))
            say(progress, f"read {options.source_name or 'the source'}: {kb.stats()}")
            del kb
            commit(tmp, key, time.perf_counter() - started)
    except BaseException:
        _remove_if_empty(work)
        raise
    return folder


def _encode_stage(kb: ConceptKB, encoder: SapEncoder, folder: Path, batch_size: int, chunk_size: int,
                  progress: bool) -> Tuple[List[Path], Dict[str, Any]]:
    """``work/chunks``: the names' vectors (``encode_chunks``, which resumes chunk by chunk), recorded
    with their checksums. A recorded chunk that no longer matches, or an unrecorded one that cannot
    be read, is encoded again; chunks found there that no record vouches for (another part's, a
    copy's, a killed run's) are checked against names encoded again. Returns the files and the record."""
    with stage_clock("encode", progress, f"encoding {kb.n_names:,} names into {folder} (chunks there are checked and kept)") as clock:
        record, verified = _verified_chunks(folder, encoder.dim, chunk_size, progress)
        before, state_before = {f.name for f in folder.glob("chunk_*.npy")}, _state(folder)
        files = encode_chunks(encoder, kb.names, kb.fingerprint, folder, batch_size, progress, chunk_size)
        state = _state(folder)
        if state != state_before:  # encode_chunks started over: the folder held another KB's or encoder's chunks
            record, verified, before = None, {}, set()
        if record is not None and len(verified) == len(files) == len(record["files"]):
            say(progress, f"stage encode: all {len(files)} chunks finished earlier (verified by sha256)")
            return files, record
        if before - set(verified):
            _spot_check(files, kb.names, encoder, folder, progress)
        record = write_record(folder, state, files, 0.0, known=verified)
    record["seconds"] = round(clock["seconds"], 1)
    write_json(folder / "stage.json", record)
    return files, record


def _verified_chunks(folder: Path, dim: int, chunk_size: int, progress: bool) -> Tuple[Optional[Dict[str, Any]], Dict[str, Any]]:
    """The chunks' record (if it is for the chunks' current ``state.json``) and the checksums of the
    recorded chunks that still match it; damaged and unreadable chunk files are removed (a link is
    removed, not its target), so that ``encode_chunks`` encodes them again."""
    record, state = read_record(folder), _state(folder)
    verified: Dict[str, Any] = {}
    if record is not None and state is not None and record.get("key") == state:
        t0 = time.perf_counter()
        bad = set(damaged(folder, record))
        for name in sorted(bad):
            say(progress, f"stage encode: {folder / name} is missing or does not match its recorded sha256; encoding it again")
            (folder / name).unlink(missing_ok=True)
        verified = {name: sums for name, sums in record["files"].items() if name not in bad}
        say(progress, f"stage encode: {len(verified)} recorded chunks verified by sha256 in {time.perf_counter() - t0:.1f} s")
    for f in sorted(folder.glob("chunk_*.npy")):
        if f.name not in verified and not _readable_chunk(f, dim, chunk_size):
            say(progress, f"stage encode: {f} is truncated or not a chunk of {dim}-dimensional vectors; encoding it again")
            f.unlink()
    return record, verified


def _state(folder: Path) -> Optional[Dict[str, Any]]:
    """``encode_chunks``' ``state.json`` in ``folder`` (what its chunks were encoded from), if any."""
    try:
        return read_json(folder / "state.json")
    except (OSError, ValueError):
        return None


def _index_stage(kb: ConceptKB, files: List[Path], chunks_record: Mapping[str, Any], work: Path, index_kind: str,
                 neighbours: Optional[bool], progress: bool) -> Path:
    """``work/index``: the vector index over the chunks, built by ``VectorIndex.build`` (``auto``:
    the kind it picks for this many names), the chunks' mapped pages paged out as it goes."""
    folder = work / "index"
    kind = choose_kind(kb.n_names)[0] if index_kind == "auto" else index_kind
    key = {"vectors": digest(chunks_record["files"]), "kind": kind, "requested": index_kind, "neighbours": neighbours,
           "version": __version__}
    if finished(folder, key, "index", progress) is not None:
        return folder
    started = time.perf_counter()
    with stage_clock("index", progress, f"building a {kind} index over {kb.n_names:,} vectors"), atomic_dir(folder) as tmp:
        chunks = [np.load(f, mmap_mode="r", allow_pickle=False) for f in files]
        with paged_out([tmp], chunks):  # the chunks' pages leave the process as fast as the build maps them
            index = VectorIndex.build(chunks, kind=index_kind, neighbours=neighbours, progress=progress)
            index.to_disk(tmp)
            say(progress, f"stage index: {index.describe()}")
        del index, chunks
        commit(tmp, key, time.perf_counter() - started)
    return folder


def _write_stage(kb_dir: Path, index_dir: Path, encoder: SapEncoder, output: Path, progress: bool) -> LinkingKB:
    """The output folder: the KB and index files (hard links into the stages) and ``meta.json``,
    swapped in atomically, then loaded as a check."""
    with stage_clock("write", progress, f"writing {output}"):
        kb, index = ConceptKB.from_disk(kb_dir), VectorIndex.from_disk(index_dir)
        meta = LinkingKB.assemble(kb, index, encoder).meta
        del kb, index
        with atomic_dir(output) as tmp:
            for folder in (kb_dir, index_dir):
                for f in sorted(folder.iterdir()):
                    if f.is_file() and f.name != "stage.json":
                        link_or_copy(f, tmp / f.name)
            write_json(tmp / META_FILE, meta)
        return LinkingKB.from_disk(output)


# ---------------------------------------------------------------------------- helpers
def _build_lock(path: Path, busy: str, progress: bool, wait: bool = False) -> HeldLock:
    """The lock at ``path``; without ``wait``, a held one is a ``BuildLockedError``."""
    return HeldLock(path, busy, "wait for it to finish or build into another folder", BuildLockedError,
                    (lambda message: say(progress, message)) if wait else None)


def _parts_running(work: Path) -> bool:
    """Whether an ``encode_part`` process holds its lock in ``work`` (its KB stage may be half-written there)."""
    return any(held_elsewhere(path) for path in work.glob("encode-part-*.lock"))


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _readable_chunk(path: Path, dim: int, chunk_size: int) -> bool:
    """Whether ``path`` holds a whole float32 chunk (header and size agree): a chunk copied from
    another machine may have been cut short."""
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return False
    return arr.ndim == 2 and arr.shape[1] == dim and 0 < arr.shape[0] <= chunk_size and arr.dtype == np.float32


def _spot_check(files: List[Path], names: Any, encoder: SapEncoder, folder: Path, progress: bool) -> None:
    """Encode ``SPOT_CHECK_NAMES`` names spread over the KB again and compare them with their rows in
    the chunks: chunks encoded elsewhere (another part, another machine) must be these names'
    vectors, in this order, from this encoder. Each stored row must be at least as close to its own
    name encoded now as to any other sampled name's (ties allowed: long names cut to the same
    tokens share a vector), and within ``SPOT_CHECK_COSINE`` of it (reduced precisions differ a little)."""
    sizes = np.array([np.load(f, mmap_mode="r", allow_pickle=False).shape[0] for f in files])
    n = int(sizes.sum())
    if n != len(names):
        raise ValueError(f"{folder}: the chunks hold {n:,} vectors for {len(names):,} names; delete the folder and build again")
    rows = np.unique(np.linspace(0, n - 1, min(SPOT_CHECK_NAMES, n)).astype(np.int64))
    ends = np.cumsum(sizes)
    which = np.searchsorted(ends, rows, side="right")
    local = rows - (ends[which] - sizes[which])
    stored = np.stack([np.load(files[w], mmap_mode="r", allow_pickle=False)[r] for w, r in zip(which.tolist(), local.tolist())])
    fresh = encoder.encode([names[int(r)] for r in rows])
    unit = lambda x: x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-12)  # noqa: E731
    sims = unit(stored.astype(np.float64)) @ unit(fresh.astype(np.float64)).T
    own = np.diag(sims)
    wrong = (own < sims.max(axis=1) - 1e-3) | (own < SPOT_CHECK_COSINE)  # 1e-3: bf16 noise
    if wrong.any():
        worst = int(np.flatnonzero(wrong)[np.argmin(own[wrong])])
        raise ValueError(
            f"{files[which[worst]]}: row {local[worst]} is not the vector of name {int(rows[worst]):,} "
            f"({names[int(rows[worst])]!r}): cosine {own[worst]:.3f} with that name encoded now, {sims[worst].max():.3f} with "
            f"another. These chunks were encoded from other names, in another order or with another encoder; delete "
            f"{folder} and build again"
        )
    say(progress, f"stage encode: {len(rows)} names spread over the chunks encoded again match their rows "
                  f"(lowest cosine {float(own.min()):.4f})")
