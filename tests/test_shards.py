"""``shards.tasks_in_flight``: the shards of a run submitted at most ``window`` at a time and yielded as
they finish, waiting with ``concurrent.futures.wait`` on process-pool and Dask-style futures alike."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from spacy_sapbert.shards import tasks_in_flight


class ForeignFuture:
    """A future ``concurrent.futures.wait`` cannot wait on (like Dask's): only ``add_done_callback``
    and ``result``."""

    def __init__(self, inner):
        self.inner = inner

    def add_done_callback(self, fn):
        self.inner.add_done_callback(lambda _: fn(self))

    def result(self):
        return self.inner.result()


@pytest.mark.parametrize("foreign", [False, True])
def test_every_shard_is_yielded_once_with_at_most_window_in_flight(foreign):
    in_flight, most, lock = [0], [0], threading.Lock()

    def work(index, chunk):
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.02 if index % 2 == 0 else 0.0)  # the second of each pair tends to finish first
        with lock:
            in_flight[0] -= 1
        return index, chunk

    with ThreadPoolExecutor(4) as pool:
        def submit(index, chunk):
            future = pool.submit(work, index, chunk)
            return ForeignFuture(future) if foreign else future

        found = [future.result() for future in tasks_in_flight(iter(range(11)), 2, 0, 2, submit)]
    assert sorted(found) == [(0, [0, 1]), (1, [2, 3]), (2, [4, 5]), (3, [6, 7]), (4, [8, 9]), (5, [10])]
    assert most[0] <= 2


def test_a_finished_shard_is_yielded_while_the_input_stalls_and_input_errors_reach_the_run():
    stall = threading.Event()

    def documents():
        yield from ("a", "b")
        stall.wait(5)  # the input stalls until the first shard has been yielded
        raise OSError("unreadable input")

    with ThreadPoolExecutor(1) as pool:
        tasks = tasks_in_flight(documents(), 2, 7, 4, lambda index, chunk: pool.submit(lambda: (index, chunk)))
        assert next(tasks).result() == (7, ["a", "b"])
        stall.set()
        with pytest.raises(OSError, match="unreadable input"):
            next(tasks)
