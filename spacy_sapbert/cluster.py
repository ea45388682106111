"""``annotate`` on a Dask cluster (``pip install spacy-sapbert[cluster]``): one task per shard.

Each worker loads the pipeline once, when the run registers its plugin, from paths every worker
can read (a pipeline folder or KB on shared storage); the KB and its index are memory-mapped, so
workers on one host share their pages. The driver reads the input, sends each shard's documents
to a worker, and commits the shards that come back through the same ``OutputFolder`` as a local
run, in order.
"""
from __future__ import annotations

import threading
import uuid
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from .documents import InputDocument
from .fileio import PathLike
from .shards import PipelineSpec, Shard, ShardWorker, tasks_in_flight

try:
    from distributed import WorkerPlugin
except ImportError:  # pragma: no cover - only the plugin class needs it at import
    WorkerPlugin = object  # type: ignore[assignment,misc]


class PipelinePlugin(WorkerPlugin):  # type: ignore[misc,valid-type]
    """Loads the pipeline on each worker once (``setup``) and keeps it for the run's shards."""

    def __init__(self, spec: PipelineSpec, max_chars: int, cache_dir: Optional[PathLike], cache_size: Optional[int]):
        self.spec, self.max_chars, self.cache_dir, self.cache_size = spec, max_chars, cache_dir, cache_size

    def setup(self, worker: Any) -> None:
        self.worker: Optional[ShardWorker] = ShardWorker(self.spec, self.max_chars, self.cache_dir, self.cache_size)
        self.lock = threading.Lock()  # one shard at a time per worker, however many threads it has

    def teardown(self, worker: Any) -> None:
        self.worker = None


def _plugin(name: str, dask_worker: Any = None) -> PipelinePlugin:
    if dask_worker is None:
        from distributed import get_worker

        dask_worker = get_worker()
    return dask_worker.plugins[name]


def _describe(name: str, dask_worker: Any = None) -> Tuple[str, List[str]]:
    worker = _plugin(name, dask_worker).worker
    return worker.fingerprint, worker.components  # type: ignore[union-attr]


def _run_shard(name: str, index: int, docs: Sequence[InputDocument], output_format: str, batch_size: Optional[int]) -> Tuple[str, Shard]:
    plugin = _plugin(name)
    with plugin.lock:
        return plugin.worker.fingerprint, plugin.worker.run(index, docs, output_format, batch_size)  # type: ignore[union-attr]


class DaskShards:
    """Shards made by a Dask cluster's workers (``scheduler``: an address or a ``distributed.Client``)."""

    def __init__(self, scheduler: Any, spec: PipelineSpec, output_format: str, batch_size: Optional[int], max_chars: int,
                 cache_dir: Optional[PathLike], cache_size: Optional[int]):
        try:
            from distributed import Client
        except ImportError:
            raise RuntimeError("a cluster run needs Dask: pip install 'spacy-sapbert[cluster]'") from None
        self.own_client = not isinstance(scheduler, Client)
        self.client = Client(scheduler) if self.own_client else scheduler
        self.name = f"spacy-sapbert-annotate-{uuid.uuid4().hex[:12]}"
        self.output_format, self.batch_size = output_format, batch_size
        try:
            self.client.register_plugin(PipelinePlugin(spec, max_chars, cache_dir, cache_size), name=self.name)
            described = self.client.run(_describe, self.name)
        except BaseException:
            self.close()
            raise
        if not described:
            self.close()
            raise RuntimeError(f"the Dask cluster at {self.client.scheduler.address} has no workers")
        if len({fp for fp, _ in described.values()}) > 1:
            self.close()
            raise ValueError(f"the workers loaded different pipelines (fingerprints {sorted(described.items())}); give them the same files")
        self.fingerprint, self.components = next(iter(described.values()))

    def shards(self, docs: Iterator[InputDocument], start: int, shard_size: int, progress: Any) -> Iterator[Shard]:
        """Each shard of ``docs`` as a task, at most two per worker thread waiting or running
        (``shards.tasks_in_flight``); ``OutputFolder`` commits them in order."""
        def submit(index: int, chunk: List[InputDocument]) -> Any:
            return self.client.submit(_run_shard, self.name, index, chunk, self.output_format, self.batch_size, pure=False)

        for future in tasks_in_flight(docs, shard_size, start, 2 * max(1, sum(self.client.nthreads().values())), submit):
            yield self._result(future, progress)

    def _result(self, future: Any, progress: Any) -> Shard:
        fingerprint, shard = future.result()
        if fingerprint != self.fingerprint:
            raise ValueError(f"a worker that joined later loaded another pipeline (fingerprint {fingerprint}, not {self.fingerprint})")
        progress.add(shard.docs, shard.mentions)
        return shard

    def close(self) -> None:
        try:
            self.client.unregister_worker_plugin(self.name)
        except Exception:  # never registered, or the cluster is gone: nothing is left to free
            pass
        if self.own_client:
            self.client.close()
