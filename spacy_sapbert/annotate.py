"""Corpus-scale annotation: documents in (``documents.py``), linked spans out, in resumable shards.

OUTPUT is a folder:

* ``part-00000.jsonl``, … (or ``.pubtator``, ``.spacy``): the documents of ``shard_size`` input
  documents each, every shard written atomically;
* ``manifest.json``: what decides the output (the input, the formats, the shard size, the pipeline's
  fingerprint) and the shards finished so far, in order, with their counts and checksums;
* ``errors.jsonl``: a line per document that failed, with its id and why.

A run restarted with the same arguments skips the finished shards and writes the bytes an
uninterrupted run writes (nothing in the folder depends on timing; the mention cache is restored
as it was: ``shards.MentionCaches``).
Locally each shard streams through ``nlp.pipe`` (``n_process`` as spaCy does it); on a Dask
cluster (``cluster.py``) each task is one shard; both make a shard with ``shards.annotate_shard``
and commit it through ``shards.OutputFolder``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import count, islice
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from .documents import INPUT_FORMATS, InputDocument, guess_input_format, iter_documents
from .fileio import PathLike
from .shards import (
    CACHE_FOLDER,
    DEFAULT_MAX_CHARS,
    OUTPUT_FORMATS,
    MentionCaches,
    OutputFolder,
    PipelineSpec,
    Shard,
    annotate_shard,
    pipeline_fingerprint,
    prepare_pipeline,
)


# ---------------------------------------------------------------------------- the run
class _Progress:
    """A tqdm bar of documents (its rate: docs/s) with mentions/s beside it."""

    def __init__(self, enabled: bool):
        from tqdm import tqdm

        self.bar = tqdm(desc="annotating", unit="doc", disable=not enabled, mininterval=1.0, smoothing=0.1)
        self.mentions = 0
        self.t0 = time.perf_counter()

    def add(self, docs: int, mentions: int) -> None:
        self.mentions += mentions
        self.bar.update(docs)
        self.bar.set_postfix_str(f"{self.mentions / max(time.perf_counter() - self.t0, 1e-9):,.0f} mentions/s", refresh=False)

    def close(self) -> None:
        self.bar.close()


@dataclass
class AnnotateSummary:
    """What ``annotate`` did: the output folder's totals, and this run's share and speed."""

    output: Path
    totals: Dict[str, int]
    shards: int
    shards_skipped: int
    run_docs: int = 0
    run_mentions: int = 0
    seconds: float = 0.0

    @property
    def failed(self) -> int:
        return self.totals["errors"]


def annotate(
    input: PathLike,
    output: PathLike,
    *,
    pipeline: Optional[PathLike] = None,
    kb: Optional[PathLike] = None,
    encoder: Optional[PathLike] = None,
    top_k: int = 5,
    detector: str = "span_finder",
    input_format: str = "auto",
    output_format: str = "jsonl",
    shard_size: int = 1000,
    n_process: int = 1,
    batch_size: int = 64,
    max_chars: int = DEFAULT_MAX_CHARS,
    cache_dir: Optional[PathLike] = None,
    cache_size: Optional[int] = None,
    overwrite: bool = False,
    scheduler: Any = None,
    progress: bool = True,
) -> AnnotateSummary:
    """Annotate every document of ``input`` into the folder ``output`` (see the module's docstring).

    The pipeline: ``pipeline`` (a saved one), else ``kb`` with ``detector``, else the embedded HPO
    default, as ``link`` does. ``scheduler``: a Dask scheduler address or ``distributed.Client``:
    one task per shard on its workers (``cluster.py``) instead of ``nlp.pipe`` here. ``cache_dir``:
    the linkers' mention caches are loaded from there at the start and saved with each shard, so a
    resumed or repeated run encodes no string twice (``shards.MentionCaches``); None: ``OUTPUT/
    mention-cache`` for a local run, none for a cluster's. ``cache_size``: the strings each linker's
    cache keeps (None: its setting). Documents that fail are listed in ``errors.jsonl`` and counted
    in the summary; the run goes on.
    """
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output format must be one of {', '.join(OUTPUT_FORMATS)}, not {output_format!r}")
    if shard_size < 1 or n_process == 0 or n_process < -1:
        raise ValueError("shard_size must be at least 1, n_process at least 1 (or -1: every CPU)")
    input = Path(input).resolve()
    fmt = guess_input_format(input) if input_format == "auto" else input_format
    if fmt not in INPUT_FORMATS:
        raise ValueError(f"input format must be auto or one of {', '.join(INPUT_FORMATS)}, not {fmt!r}")
    spec = PipelineSpec(
        pipeline=str(Path(pipeline).resolve()) if pipeline else None, kb=str(Path(kb).resolve()) if kb else None,
        encoder=str(Path(encoder).resolve()) if encoder else None, top_k=top_k, detector=detector,
    )
    engine: Any
    if cache_dir is None and scheduler is None:
        cache_dir = Path(output) / CACHE_FOLDER
    if scheduler is not None:
        from .cluster import DaskShards

        engine = DaskShards(scheduler, spec, output_format, batch_size, max_chars, cache_dir, cache_size)
    else:
        engine = _LocalShards(spec, output_format, n_process, batch_size, max_chars, cache_dir, cache_size)
    t0 = time.perf_counter()  # the pipeline is loaded: from here on, annotation
    try:
        run = {"input": str(input), "input_format": fmt, "output_format": output_format, "shard_size": shard_size,
               "max_chars": max_chars, "pipeline_fingerprint": engine.fingerprint}
        described = {**{k: v for k, v in vars(spec).items() if v is not None}, "components": engine.components}
        folder = OutputFolder(output, run, described, overwrite)
        engine.start()
        skipped = len(folder.shards)
        bar = _Progress(progress)
        run_docs = run_mentions = 0
        if not folder.complete:
            todo = folder.skip_finished(iter_documents(input, fmt))
            for shard in engine.shards(todo, skipped, shard_size, bar):
                for entry in folder.commit(shard):
                    run_docs += entry["docs"]
                    run_mentions += entry["mentions"]
            folder.finish()
        bar.close()
    finally:
        engine.close()
    return AnnotateSummary(Path(output), folder.totals(), len(folder.shards), skipped, run_docs, run_mentions, time.perf_counter() - t0)


class _LocalShards:
    """Shards made here, one after the other (``nlp.pipe`` with ``n_process`` workers)."""

    def __init__(self, spec: PipelineSpec, output_format: str, n_process: int, batch_size: int, max_chars: int,
                 cache_dir: Optional[PathLike], cache_size: Optional[int]):
        self.nlp = spec.load()
        self.linkers = prepare_pipeline(self.nlp, max_chars, None, cache_size)
        self.caches = MentionCaches(cache_dir) if cache_dir is not None else None
        self.fingerprint = pipeline_fingerprint(self.nlp)
        self.components = list(self.nlp.pipe_names)
        self.output_format, self.n_process, self.batch_size, self.max_chars = output_format, n_process, batch_size, max_chars

    def start(self) -> None:
        """Load the mention caches: once OUTPUT is known to be this run's (the default cache is in it)."""
        if self.caches is not None:
            self.caches.load(self.linkers)

    def shards(self, docs: Iterator[InputDocument], start: int, shard_size: int, progress: _Progress) -> Iterator[Shard]:
        for index in count(start):
            chunk = list(islice(docs, shard_size))
            if not chunk:
                return
            shard = annotate_shard(self.nlp, self.linkers, index, chunk, self.output_format, n_process=self.n_process,
                                   batch_size=self.batch_size, max_chars=self.max_chars, progress=progress)
            if self.caches is not None:  # before the shard is committed: see MentionCaches
                self.caches.save(self.linkers)
            yield shard

    def close(self) -> None:
        pass
