"""A process forked after torch ran a parallel operation still runs torch (``machine.one_torch_thread_after_fork``):
the workers of ``nlp.pipe(n_process=...)`` hung in their first parallel operation when the parent had linked a text."""
import multiprocessing

import pytest
import torch
from conftest import run_forked

from spacy_sapbert.machine import one_torch_thread_after_fork


def _child(queue) -> None:
    queue.put((torch.get_num_threads(), float((torch.ones(4_000_000) * 2).sum())))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform")
def test_a_forked_process_runs_torch_after_its_parent_did(tiny_encoder):  # an encoder registers the handler
    one_torch_thread_after_fork()  # registered once: a second call adds nothing
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the tests run torch on one thread; a pool of two is what a fork broke
    try:
        (torch.ones(4_000_000) * 2).sum()  # the parent's parallel region: OpenMP makes its thread pool
        hung, result = run_forked(_child)
        assert not hung, "the forked process hung in its first parallel torch operation"
        assert result == (1, 8_000_000.0)
    finally:
        torch.set_num_threads(threads)
