"""The encoder's packed passes shared among threads of one torch thread each (``pass_threads.py``)."""
from __future__ import annotations

import multiprocessing
import pickle
import threading
from contextlib import contextmanager
from typing import Iterator, List

import numpy as np
import pytest
import torch
from conftest import run_forked

from spacy_sapbert.encoder import MIN_THREAD_TOKENS, SapEncoder
from spacy_sapbert.pass_threads import OneThreadWorkers


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """The tests run torch on one thread; these need more."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def count_in_new_thread() -> int:
    """The torch thread count a thread started now gets: the process's."""
    seen: List[int] = []
    thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    return seen[0]


def names(n: int) -> List[str]:
    words = "renal failure breast cancer iron deficiency anemia acute myeloid leukemia of the left ventricle".split()
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(words, size=rng.integers(1, 8))) for _ in range(n)]


def test_threaded_passes_give_each_name_its_vector_in_order(tiny_bert_path):
    encoder = SapEncoder.load(tiny_bert_path, device="cpu", precision="fp32")
    texts = names(300)
    where: List[str] = []
    hook = encoder.model.embeddings.register_forward_hook(lambda *_: where.append(threading.current_thread().name))
    shares: List[int] = []
    pool_map = encoder._pass_workers.map
    encoder._pass_workers.map = lambda fn, items: shares.append(len(items)) or pool_map(fn, items)
    try:
        with torch_threads(2):
            assert encoder.pass_threads() == 2
            threaded = encoder.encode(texts, batch_size=64)
            assert {w.split("_")[0] for w in where} == {"sapbert-pass"}  # every pass ran in a worker
            assert shares and set(shares) == {2}  # each window in two shares
            encoder.threaded_passes = False
            where.clear()
            alone = encoder.encode(texts, batch_size=64)
            assert set(where) == {threading.current_thread().name}
            encoder.threaded_passes = True
            where.clear()
            few = texts[:3]  # fewer than MIN_THREAD_TOKENS tokens a thread: no worker
            assert sum(len(encoder.tokenize([t])["input_ids"][0]) for t in few) < 2 * MIN_THREAD_TOKENS
            np.testing.assert_allclose(encoder.encode(few), alone[:3], atol=2e-6)
            assert set(where) == {threading.current_thread().name}
        where.clear()
        one = encoder.encode(texts, batch_size=64)  # one torch thread: no worker either
        assert set(where) == {threading.current_thread().name}
    finally:
        hook.remove()
    np.testing.assert_allclose(threaded, alone, atol=2e-6)
    np.testing.assert_allclose(one, alone, atol=2e-6)
    for i in (0, 77, 299):
        np.testing.assert_allclose(encoder.encode([texts[i]])[0], threaded[i], atol=2e-6)


def test_workers_run_one_torch_thread_and_leave_the_process_count_as_it_was():
    workers = OneThreadWorkers()
    with torch_threads(2):
        counts = workers.map(lambda _: torch.get_num_threads(), range(8))
        assert counts == [1] * 8
        assert torch.get_num_threads() == 2
        assert count_in_new_thread() == 2  # a thread started later takes the caller's count, not the workers'
        with torch_threads(3):  # the pool follows the caller's count
            seen = workers.map(lambda _: (threading.current_thread().name, torch.get_num_threads()), range(30))
            assert {c for _, c in seen} == {1} and len({n for n, _ in seen}) <= 3
            assert count_in_new_thread() == 3
    fresh = pickle.loads(pickle.dumps(workers))
    assert isinstance(fresh, OneThreadWorkers) and fresh._pool is None


def _child(workers: OneThreadWorkers, queue) -> None:
    torch.set_num_threads(2)
    queue.put(workers.map(lambda x: (x, torch.get_num_threads()), range(4)))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform")
def test_a_forked_process_starts_its_own_workers():
    """A forked copy of a started pool has no threads: using it would wait for ever."""
    workers = OneThreadWorkers()
    with torch_threads(2):
        assert workers.map(lambda x: x, range(4)) == [0, 1, 2, 3]
        hung, result = run_forked(_child, workers)
    assert not hung, "the forked process waited for the parent's workers"
    assert result == [(0, 1), (1, 1), (2, 1), (3, 1)]


def test_token_shares_cut_runs_of_about_as_many_tokens():
    from spacy_sapbert.encoder import token_shares

    assert token_shares([0, 1, 2, 3, 4, 5], [1] * 6, 2) == [[0, 1, 2], [3, 4, 5]]
    assert token_shares([0, 1, 2, 3, 4], [1, 1, 1, 1, 10], 2) == [[0, 1, 2, 3], [4]]  # none empty
    assert token_shares([3, 1, 2, 0], [5, 1, 1, 1], 2) == [[3, 1, 2], [0]]  # widths by row, rows in their order
    assert token_shares([0, 1, 2], [1, 1, 9], 3) == [[0], [1], [2]]
    rows = list(range(100))
    widths = [3 + i // 10 for i in rows]
    shares = token_shares(rows, widths, 3)
    assert sum(shares, []) == rows
    tokens = [sum(widths[r] for r in share) for share in shares]
    assert max(tokens) - min(tokens) <= max(widths)
