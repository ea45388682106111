"""Threads that each run torch on one thread, for work split into independent shares.

On a CPU, torch's parallel kernels divide each small matrix product among its intra-op threads and
wait for all of them at every operation; short names make small products. Giving each of N threads a
whole share of the work instead (``SapEncoder.encode``: a share of a call's packed passes each) keeps
them busier: ``benchmarks/speed.py`` times the linker both ways in one run (``pass_threads`` in
``benchmarks/results/speed_avx2.json`` and ``speed_native_amd.json``).

torch keeps the thread count per thread, but a thread takes the process's last ``set_num_threads``
value when it first runs a parallel operation. The workers therefore fix their own count before
setting it to 1, and the thread that starts them sets its count again once they have, which makes
the process's value its own again.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence, TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


def _one_torch_thread(started: threading.Barrier) -> None:
    torch.get_num_threads()  # this thread's count is set now, from the process's, before that changes
    torch.set_num_threads(1)
    started.wait()


class OneThreadWorkers:
    """A pool of threads running torch on one thread each, as many as the calling thread's torch
    threads; started on first use and again after a fork or when that count changes. Pickles as a new,
    unstarted one (components holding an encoder are pickled into spawned ``nlp.pipe`` workers)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: Optional[ThreadPoolExecutor] = None
        self._key = (0, 0)  # (process id, threads) the pool was started for

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> List[R]:
        """``[fn(x) for x in items]``, the items shared among the workers."""
        return list(self._workers().map(fn, items))

    def _workers(self) -> ThreadPoolExecutor:
        key = (os.getpid(), torch.get_num_threads())
        with self._lock:
            if self._pool is None or self._key != key:
                if self._pool is not None and self._key[0] == key[0]:
                    self._pool.shutdown(wait=False)  # (a forked copy's threads are gone: nothing to stop)
                self._pool, self._key = self._start(key[1]), key
            return self._pool

    @staticmethod
    def _start(n: int) -> ThreadPoolExecutor:
        own = torch.get_num_threads()
        started = threading.Barrier(n + 1)
        pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="sapbert-pass", initializer=_one_torch_thread,
                                  initargs=(started,))
        for _ in range(n):  # each submit starts a thread while none is idle: n threads
            pool.submit(int)
        started.wait()
        torch.set_num_threads(own)
        return pool

    def __reduce__(self) -> tuple:
        return (OneThreadWorkers, ())
