"""``annotate --max-seconds``: a document that runs longer than the limit is stopped and listed in
``errors.jsonl`` instead of stalling its shard.

How: a ``SIGALRM`` timer (``setitimer``), armed while the pipeline works and disarmed whenever a
document comes out, whose handler raises ``DocumentTimeout`` in the process's main thread.
``shards.link_documents`` arms it around each step of ``nlp.pipe``: the step that runs a batch
through the components may take ``max_seconds`` in all; a batch that takes longer is stopped and its
documents run again one at a time (as after any failing batch), each with ``max_seconds`` of its own;
one that is over the limit alone is reported. The output does not depend on how documents are
batched, so the other documents of a stopped batch are annotated as they would have been.

What it guarantees, and what not:

- Python code is stopped at the first bytecode after the deadline (negspacy, the span finder's
  loops, the linker's batching): a document cannot hold its shard much longer than the limit there.
- One call into compiled code (a transformer's forward pass, a regular expression, a Cython loop)
  is not cut short: the document is stopped when that call returns. A single call that never
  returns is not stopped; kill the run, which resumes where it stopped.
- Nothing here runs a subprocess: the normal path costs two ``setitimer`` calls per document.
- The timer needs POSIX signals and the main thread: a local run and each ``--n-process`` worker
  (tasks run in its main thread) have it; a Dask worker's tasks run in threads, so ``--scheduler``
  with ``--max-seconds`` is refused (``check_time_limit``).
- Whether a document near the limit passes depends on the machine's speed and load: choose a
  limit well above an ordinary document's (and a batch's: ``--batch-size``) time.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Optional


class DocumentTimeout(Exception):
    """A document (or a batch) ran longer than ``--max-seconds``."""


def check_time_limit(seconds: Optional[float]) -> None:
    """A ValueError when a limit of ``seconds`` cannot be kept here (no SIGALRM, or not the main thread)."""
    if seconds is None:
        return
    if not seconds > 0:
        raise ValueError(f"--max-seconds must be more than 0, not {seconds}")
    if not hasattr(signal, "setitimer"):
        raise ValueError("--max-seconds needs POSIX signals (setitimer), which this platform lacks")
    if threading.current_thread() is not threading.main_thread():
        raise ValueError("--max-seconds works in a process's main thread only (not in a Dask worker's task or another thread)")


class TimeLimit:
    """While entered, ``running()`` blocks may take ``seconds`` each (None: no limit, nothing set)."""

    def __init__(self, seconds: Optional[float]):
        check_time_limit(seconds)
        self.seconds = seconds
        self._previous: Any = None

    def __enter__(self) -> "TimeLimit":
        if self.seconds is not None:
            self._previous = signal.signal(signal.SIGALRM, self._expired)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.seconds is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)

    def _expired(self, signum: int, frame: Any) -> None:
        raise DocumentTimeout(f"took more than {self.seconds:g} s (--max-seconds)")

    @contextmanager
    def running(self) -> Iterator[None]:
        """The block raises ``DocumentTimeout`` once it has run ``seconds``."""
        if self.seconds is None:
            yield
            return
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
