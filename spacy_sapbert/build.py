"""Building a KB folder on disk: the one place that encodes a source into ``OUTPUT``.

``build-kb`` and the default-KB cache both come here, so both get the same guarantees:

- one build per output at a time: an exclusive lock ``OUTPUT.lock`` beside the folder (a kernel
  ``flock``, released even when the holder is killed). A second ``build-kb`` into the same folder
  is refused (two builds sharing ``OUTPUT.partial`` would mix their chunks); the default cache
  instead waits and reuses what the first process wrote;
- resumable: encoded chunks go to ``OUTPUT.partial`` (under the lock) and a rerun after a crash
  continues there; it is removed after success;
- atomic: ``LinkingKB.to_disk`` swaps the new folder in, so a failure leaves the old KB;
- never empty: a source that yields no names is refused before anything is written.
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Union

from filelock import FileLock, Timeout

from .encoder import SapEncoder
from .index_kinds import check_kind
from .kb import ConceptKB
from .records import ConceptRecord, InputError
from .search import META_FILE, LinkingKB
from .word_variants import with_variant_names, write_variant_files

PathLike = Union[str, Path]


class BuildLockedError(RuntimeError):
    """Another process is building the same KB folder right now."""


def lock_path(output: PathLike) -> Path:
    """The lock file of a KB folder: ``OUTPUT.lock`` beside it (left in place; it holds no data)."""
    output = Path(output)
    return output.with_name(output.name + ".lock")


def work_path(output: PathLike) -> Path:
    """The resumable work folder of a KB folder: ``OUTPUT.partial`` beside it."""
    output = Path(output)
    return output.with_name(output.name + ".partial")


def build_kb_folder(
    source: Union[ConceptKB, Iterable[ConceptRecord]],
    encoder: Union[SapEncoder, Callable[[], SapEncoder]],
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
    """
    check_kind(index_kind)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path(output)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if not wait:
            raise BuildLockedError(
                f"{output} is being built by another process (it holds the lock {lock.lock_file}); "
                "wait for that build to finish or build into another folder"
            ) from None
        _say(progress, f"waiting for another process to finish building {output} (lock {lock.lock_file})")
        lock.acquire()
    try:
        if wait and (output / META_FILE).is_file():
            return LinkingKB.from_disk(output)  # built by the process we waited for
        t0 = time.perf_counter()
        generated = None
        if word_variants is not None:
            source, generated = with_variant_names(source, word_variants, variant_options or {})
        kb = source if isinstance(source, ConceptKB) else ConceptKB.from_records(
            source, on_duplicate=on_duplicate, strip_punctuation=strip_punctuation, priors=priors
        )
        if len(kb) == 0 or kb.n_names == 0:
            raise InputError(
                source_name or "the source",
                None,
                f"no concept names read ({len(kb)} concepts, {kb.n_names} names): the file is empty, holds only "
                "comments, every row was skipped (--lenient) or it is not in the format it was read as (--format); "
                + (f"the existing KB at {output} was left unchanged" if output.exists() else f"{output} was not written"),
            )
        if source_name is not None:
            _say(progress, f"read {source_name}: {kb.stats()} in {time.perf_counter() - t0:.1f}s")
        enc = encoder if isinstance(encoder, SapEncoder) else encoder()
        work = work_path(output)
        linking_kb = LinkingKB.build(
            kb, enc, index_kind=index_kind, batch_size=batch_size, progress=progress, work_dir=work, chunk_size=chunk_size,
            neighbours=neighbours,
        )
        linking_kb.to_disk(output)
        if word_variants is not None and generated is not None:
            write_variant_files(output, word_variants, generated, dict(variant_options or {}))
        shutil.rmtree(work, ignore_errors=True)
        return linking_kb
    finally:
        lock.release()


def _say(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)
