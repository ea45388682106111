"""Corpus-scale annotation: documents in (``documents.py``), linked spans out, in resumable shards.

OUTPUT is a folder:

* ``part-00000.jsonl``, … (or ``.pubtator``, ``.spacy``): the documents of ``shard_size`` input
  documents each, every shard written atomically;
* ``manifest.json``: what decides the output (the input, the formats, the shard size, the pipeline's
  fingerprint) and the shards finished so far, in order, with their counts and checksums;
* ``errors.jsonl``: a line per document that failed, with its id and why.

A run restarted with the same arguments checks the finished shards against the manifest, skips
them (one that fails the check is redone: ``output_folder.py``) and writes the bytes an
uninterrupted run writes (nothing in the folder depends on timing; the mention cache is restored
as it was: ``mention_cache.MentionCaches``). One run at a time writes an OUTPUT (``locks.output_lock``);
``--max-seconds`` stops a document that runs too long (``time_limit.py``).
Each shard streams through ``nlp.pipe`` in one process: here, in one of ``n_process`` worker
processes (one task per shard), or on a Dask cluster's worker (``cluster.py``); each of them holds
a ``shards.ShardWorker``, and the shards are committed here through ``output_folder.OutputFolder``.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from itertools import chain, count, islice
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from .documents import InputDocument, check_compressed, guess_input_format, input_reader, iter_documents
from .fileio import PathLike
from .locks import output_lock
from .output_folder import OutputFolder, check_output_path
from .records import InputError
from .shards import CACHE_FOLDER, DEFAULT_MAX_CHARS, OUTPUT_FORMATS, PipelineSpec, Shard, ShardWorker, tasks_in_flight
from .time_limit import check_time_limit


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
    duplicate_ids: int = 0  # documents whose id an earlier document of the input has
    redone: Sequence[str] = ()  # finished shards that failed their check against the manifest and were redone

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
    batch_size: Optional[int] = None,
    max_chars: int = DEFAULT_MAX_CHARS,
    cache_dir: Optional[PathLike] = None,
    cache_size: Optional[int] = None,
    overwrite: bool = False,
    scheduler: Any = None,
    progress: bool = True,
    max_seconds: Optional[float] = None,
    unique_ids: bool = False,
    query_encoder: Optional[str] = None,
) -> AnnotateSummary:
    """Annotate every document of ``input`` into the folder ``output`` (see the module's docstring).

    The pipeline: ``pipeline`` (a saved one), else ``kb`` with ``detector``, else the embedded HPO
    default, as ``link`` does (``query_encoder``: their linker's, ``LinkerSettings.query_encoder``). ``scheduler``: a Dask scheduler address or ``distributed.Client``:
    one task per shard on its workers (``cluster.py``) instead of ``nlp.pipe`` here. ``cache_dir``:
    the linkers' mention caches are loaded from there at the start and saved with each shard, so a
    resumed or repeated run encodes no string twice (``shards.MentionCaches``); None: ``OUTPUT/
    mention-cache`` for a local run, none for a cluster's. ``cache_size``: the strings each linker's
    cache keeps (None: its setting). Documents that fail are listed in ``errors.jsonl`` and counted
    in the summary; the run goes on. ``max_seconds``: a document that takes longer is stopped and
    listed there (``time_limit.py``). Documents whose id an earlier one has are counted
    (``duplicate_ids``), or with ``unique_ids`` refused (``InputError`` naming the second).

    ``output`` is locked for the run (``locks.output_lock``): a second run on it is refused at once. An
    input without a document is refused (``InputError``), as ``link --input`` refuses it.
    """
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output format must be one of {', '.join(OUTPUT_FORMATS)}, not {output_format!r}")
    if shard_size < 1 or n_process == 0 or n_process < -1:
        raise ValueError("shard_size must be at least 1, n_process at least 1 (or -1: every CPU)")
    if max_seconds is not None and scheduler is not None:
        raise ValueError("--max-seconds works in local runs only: a Dask worker runs its tasks in threads, which cannot be interrupted")
    check_time_limit(max_seconds)
    input = Path(input).resolve()
    fmt = guess_input_format(input) if input_format == "auto" else input_format
    input_reader(fmt)  # a ValueError listing the registered formats for an unknown one
    with output_lock(output):
        return _annotate_locked(input, fmt, output, pipeline, kb, encoder, top_k, detector, output_format, shard_size, n_process,
                                batch_size, max_chars, cache_dir, cache_size, overwrite, scheduler, progress, max_seconds, unique_ids,
                                query_encoder)


def _annotate_locked(input: Path, fmt: str, output: PathLike, pipeline: Optional[PathLike], kb: Optional[PathLike],
                     encoder: Optional[PathLike], top_k: int, detector: str, output_format: str, shard_size: int, n_process: int,
                     batch_size: Optional[int], max_chars: int, cache_dir: Optional[PathLike], cache_size: Optional[int],
                     overwrite: bool, scheduler: Any, progress: bool, max_seconds: Optional[float], unique_ids: bool,
                     query_encoder: Optional[str]) -> AnnotateSummary:
    """``annotate`` once OUTPUT is locked: the input is checked and its first document read before
    the pipeline is loaded, so an empty or damaged input is refused at once."""
    check_output_path(output)
    check_compressed(input)
    ids = _IdCount(input, unique_ids)
    documents = ids.counted(iter_documents(input, fmt))
    first = next(documents, None)
    if first is None:
        raise InputError(input, None, "empty input: no documents to annotate")
    documents = chain([first], documents)
    spec = PipelineSpec(
        pipeline=str(Path(pipeline).resolve()) if pipeline else None, kb=str(Path(kb).resolve()) if kb else None,
        encoder=str(Path(encoder).resolve()) if encoder else None, top_k=top_k, detector=detector,
        query_encoder=str(Path(query_encoder).resolve()) if query_encoder and Path(query_encoder).is_dir() else query_encoder,
    )
    engine: Any
    if cache_dir is None and scheduler is None:
        cache_dir = Path(output) / CACHE_FOLDER
    if scheduler is not None:
        from .cluster import DaskShards

        engine = DaskShards(scheduler, spec, output_format, batch_size, max_chars, cache_dir, cache_size)
    elif n_process == 1:
        engine = _LocalShards(spec, output_format, batch_size, max_chars, cache_dir, cache_size, max_seconds)
    else:
        n = (os.cpu_count() or 1) if n_process == -1 else n_process
        engine = _ProcessShards(spec, output_format, n, batch_size, max_chars, cache_dir, cache_size, max_seconds)
    t0 = time.perf_counter()  # the pipeline is loaded: from here on, annotation
    try:
        run = {"input": str(input), "input_format": fmt, "output_format": output_format, "shard_size": shard_size,
               "max_chars": max_chars, "pipeline_fingerprint": engine.fingerprint}
        described = {**{k: v for k, v in vars(spec).items() if v is not None}, "components": engine.components}
        folder = OutputFolder(output, run, described, overwrite)
        skipped = len(folder.shards)
        bar = _Progress(progress)
        run_docs = run_mentions = 0
        try:
            if folder.complete:
                folder.check_complete(documents)
            else:
                todo = folder.skip_finished(documents)
                for shard in engine.shards(todo, skipped, shard_size, bar):
                    for entry in folder.commit(shard):
                        run_docs += entry["docs"]
                        run_mentions += entry["mentions"]
                folder.finish()
        finally:
            bar.close()
    finally:
        engine.close()
    return AnnotateSummary(Path(output), folder.totals(), len(folder.shards), skipped, run_docs, run_mentions, time.perf_counter() - t0,
                           ids.duplicates, folder.redone)


class _IdCount:
    """The documents of the input, their ids counted on the way: ``duplicates`` is how many have an
    id that an earlier one has (8 bytes of a hash kept per id; documents without one are numbered by
    their line, which cannot repeat). With ``unique`` the first repeated id is an ``InputError``."""

    def __init__(self, input: Path, unique: bool):
        self.input, self.unique = input, unique
        self.seen: Set[bytes] = set()
        self.duplicates = 0

    def counted(self, docs: Iterator[InputDocument]) -> Iterator[InputDocument]:
        for doc in docs:
            if doc.id is not None:
                key = hashlib.blake2b(json.dumps(doc.id, ensure_ascii=False).encode(), digest_size=8).digest()
                if key in self.seen:
                    if self.unique:
                        raise InputError(self.input, doc.line, f"the id {doc.id!r} repeats an earlier document's (--unique-ids)")
                    self.duplicates += 1
                self.seen.add(key)
            yield doc


class _LocalShards:
    """Shards made here, one after the other."""

    def __init__(self, spec: PipelineSpec, output_format: str, batch_size: Optional[int], max_chars: int,
                 cache_dir: Optional[PathLike], cache_size: Optional[int], max_seconds: Optional[float] = None):
        self.worker = ShardWorker(spec, max_chars, cache_dir, cache_size, max_seconds)
        self.fingerprint, self.components = self.worker.fingerprint, self.worker.components
        self.output_format, self.batch_size = output_format, batch_size

    def shards(self, docs: Iterator[InputDocument], start: int, shard_size: int, progress: _Progress) -> Iterator[Shard]:
        for index in count(start):
            chunk = list(islice(docs, shard_size))
            if not chunk:
                return
            yield self.worker.run(index, chunk, self.output_format, self.batch_size, progress)

    def close(self) -> None:
        pass


class _ProcessShards:
    """Shards made by ``n_process`` worker processes, one shard per task. Each process loads the
    pipeline once (the KB and index memory-mapped, so the processes share their pages) and keeps
    it, with its mention cache, for every shard it is given; the documents go to it and the
    shard's bytes come back. spaCy's ``nlp.pipe(n_process=...)`` would instead fork new workers for
    each shard and send every ``Doc`` back to be serialised here."""

    def __init__(self, spec: PipelineSpec, output_format: str, n_process: int, batch_size: Optional[int], max_chars: int,
                 cache_dir: Optional[PathLike], cache_size: Optional[int], max_seconds: Optional[float] = None):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        # forked on Linux (as spaCy's n_process is), so the workers know what this process registered (custom
        # components); the pipeline is loaded in each worker, not here, so no torch thread pool is forked in use
        context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        ready = context.Queue()
        threads = 0 if os.environ.get("OMP_NUM_THREADS") else max(1, (os.cpu_count() or 1) // n_process)
        self.n_process, self.output_format, self.batch_size = n_process, output_format, batch_size
        self.pool = ProcessPoolExecutor(n_process, mp_context=context, initializer=_start_worker,
                                        initargs=(spec, max_chars, cache_dir, cache_size, threads, ready, max_seconds))
        try:
            described = self._wait_ready(ready, [self.pool.submit(int) for _ in range(n_process)])
        except BrokenProcessPool:  # a worker died before all were started
            self.close()
            raise RuntimeError("a worker process died while loading the pipeline") from None
        except BaseException:
            self.close()
            raise
        self.fingerprint, self.components = described[0]

    def _wait_ready(self, ready: Any, started: Sequence[Any]) -> List[Tuple[str, List[str]]]:
        """What each worker reports once its pipeline is loaded (``started``: a trivial task per
        worker, which fails if the pool breaks: a worker that died without a word)."""
        import queue

        described: List[Tuple[str, List[str]]] = []
        while len(described) < self.n_process:
            try:
                found = ready.get(timeout=1.0)
            except queue.Empty:
                if any(f.done() and f.exception() is not None for f in started):
                    raise RuntimeError("a worker process died while loading the pipeline") from None
                continue
            if isinstance(found, str):
                raise RuntimeError(f"a worker process could not load the pipeline: {found}")
            described.append(found)
        if len({fp for fp, _ in described}) > 1:
            raise RuntimeError(f"the worker processes loaded different pipelines: {described}")
        return described

    def shards(self, docs: Iterator[InputDocument], start: int, shard_size: int, progress: _Progress) -> Iterator[Shard]:
        """Each shard of ``docs`` as a task, at most two per process waiting or running
        (``shards.tasks_in_flight``); ``OutputFolder`` commits them in order."""
        def submit(index: int, chunk: List[InputDocument]) -> Any:
            return self.pool.submit(_run_shard, index, chunk, self.output_format, self.batch_size)

        for future in tasks_in_flight(docs, shard_size, start, 2 * self.n_process, submit):
            yield self._result(future, progress)

    @staticmethod
    def _result(future: Any, progress: _Progress) -> Shard:
        shard = future.result()
        progress.add(shard.docs, shard.mentions)
        return shard

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


_worker: Optional[ShardWorker] = None  # a worker process's pipeline (set by its initializer; never in the main process)


def _start_worker(spec: PipelineSpec, max_chars: int, cache_dir: Optional[PathLike], cache_size: Optional[int],
                  threads: int, ready: Any, max_seconds: Optional[float] = None) -> None:
    global _worker
    import threading

    threading.Thread(target=_exit_with_driver, args=(os.getppid(),), daemon=True).start()
    try:
        if threads:
            import faiss
            import torch

            torch.set_num_threads(threads)
            faiss.omp_set_num_threads(threads)
        _worker = ShardWorker(spec, max_chars, cache_dir, cache_size, max_seconds)
        ready.put((_worker.fingerprint, _worker.components))
    except BaseException as e:
        ready.put(f"{type(e).__name__}: {e}")
        raise


def _exit_with_driver(driver: int) -> None:
    """A worker whose driver is gone (a SIGKILL leaves it no time to stop the pool) exits too, rather
    than wait for tasks that will never come."""
    while True:
        time.sleep(1.0)
        if os.getppid() != driver:
            os._exit(1)


def _run_shard(index: int, docs: Sequence[InputDocument], output_format: str, batch_size: Optional[int]) -> Shard:
    assert _worker is not None, "not a worker process"
    return _worker.run(index, docs, output_format, batch_size)
