"""Batches of a component's ``pipe`` processed in a background thread, one batch in flight.

The linker's ``overlap``: while a batch is linked in the thread, the generator takes the next batch
from the components before it, so a CNN NER and the linker run on two cores at once, as far as the
GIL lets them (torch releases it in its kernels). Batches come out in order, each once processed;
a batch whose processing raised goes to ``on_error`` and is dropped unless that re-raises.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple, TypeVar

from spacy.util import minibatch

T = TypeVar("T")


def pipe_batches(
    batches: Iterable[List[T]],
    process: Callable[[List[T]], Any],
    on_error: Callable[[List[T], Exception], Any],
    *,
    overlap: bool,
    thread_name: str,
) -> Iterator[T]:
    """The items of ``batches`` once ``process`` has processed their batch, in order: in turn, or
    with ``overlap`` in one background thread (named after ``thread_name``) while the next batch is read."""
    if not overlap:
        for batch in batches:
            yield from _settled(batch, lambda batch=batch: process(batch), on_error)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name) as pool:
        in_flight: Optional[Tuple[List[T], Future]] = None
        for batch in batches:
            submitted = (batch, pool.submit(process, batch))
            if in_flight is not None:
                yield from _settled(in_flight[0], in_flight[1].result, on_error)
            in_flight = submitted
        if in_flight is not None:
            yield from _settled(in_flight[0], in_flight[1].result, on_error)


def _settled(batch: List[T], wait: Callable[[], Any], on_error: Callable[[List[T], Exception], Any]) -> List[T]:
    """``batch`` once ``wait()`` returns; none when it raised and ``on_error`` did not."""
    try:
        wait()
    except Exception as e:
        on_error(batch, e)
        return []
    return batch


def pipe_predicted(component: Any, stream: Iterable[T], batch_size: int, *, overlap: bool = False) -> Iterator[T]:
    """A ``Pipe``'s batched ``pipe``: ``stream`` a batch at a time, ``predict`` then ``set_annotations``;
    a batch that raises goes to the component's error handler (``nlp.set_error_handler``)."""
    handler = component.get_error_handler()
    return pipe_batches(minibatch(stream, size=batch_size), lambda docs: component.set_annotations(docs, component.predict(docs)),
                        lambda docs, e: handler(component.name, component, docs, e), overlap=overlap, thread_name=component.name)
