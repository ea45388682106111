"""Keeping memory-mapped files out of a long build's resident memory.

A UMLS-sized index build reads gigabytes of memory-mapped vector chunks and writes its index files
through maps. Every page a map has touched stays in the process's resident memory (RSS counts it)
until the map is closed, though it is only a cached copy of the file: left alone, the build's RSS
grows to the size of its inputs and outputs (11.5 GB of chunks at 7.5M names). ``paged_out`` runs
a thread that every ``interval`` seconds takes those pages out of the process:

- the caller's own read-only maps (``np.load(..., mmap_mode="r")`` arrays) are unmapped from it
  (``MADV_DONTNEED`` on a shared file map: the pages stay in the page cache, a page read again is
  mapped again, nothing is lost). This is cheap, so it keeps up with a build that samples rows
  from every chunk in a few seconds (IVF training: 327,680 rows spread over 7.5M);
- maps the process made of other files (found by path in ``/proc/self/maps``: an index written
  through a map) are paged out (``MADV_PAGEOUT``, Linux 5.4 or later: a dirty page is written to
  its file first, a clean one dropped; harmless whatever the range holds by then).

Elsewhere than Linux it does nothing.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

MADV_PAGEOUT = 21  # linux/mman.h; not in Python's mmap module before 3.13
MAPS = "/proc/self/maps"


def _madvise() -> Optional[ctypes._CFuncPtr]:  # type: ignore[name-defined]
    """libc's ``madvise``, or None where there is none or no ``/proc/self/maps`` to find maps in."""
    if not os.path.exists(MAPS):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def mapped_ranges(paths: Iterable[Union[str, Path]]) -> List[Tuple[int, int, str, bool]]:
    """``(start, end, file, writable)`` of this process's maps of the files ``paths`` name (a folder:
    every file under it), from ``/proc/self/maps``; links are followed, as the kernel lists targets."""
    files, folders = set(), []
    for p in paths:
        real = os.path.realpath(p)
        if os.path.isdir(real):
            folders.append(real + os.sep)
        else:
            files.add(real)
    found = []
    with open(MAPS, encoding="utf8", errors="replace") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) < 6:
                continue
            name = parts[5].rstrip("\n")
            if name in files or any(name.startswith(d) for d in folders):
                start, end = (int(x, 16) for x in parts[0].split("-"))
                found.append((start, end, name, parts[1][1] == "w"))
    return found


def page_out(paths: Iterable[Union[str, Path]]) -> int:
    """Page out this process's mapped pages of ``paths`` now; returns how many maps were advised
    (0 where the kernel or platform cannot). A writable map's file is synced first, so its dirty
    pages are clean and can go."""
    madvise = _madvise()
    if madvise is None:
        return 0
    advised = 0
    for start, end, name, writable in mapped_ranges(paths):
        if writable:
            try:
                fd = os.open(name, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError:
                pass  # renamed or removed meanwhile: the kernel still pages it out
        if madvise(start, end - start, MADV_PAGEOUT) == 0:
            advised += 1
    return advised


def unmap_pages(arrays: Iterable[Any]) -> int:
    """Unmap the resident pages of read-only memory-mapped arrays (``np.memmap`` in mode ``r``; any
    other array is left alone, since dropping an anonymous or private page loses it). Returns how
    many maps were advised."""
    import numpy as np

    advised = 0
    for array in arrays:
        mapped = getattr(array, "_mmap", None)  # the mmap object np.memmap keeps (and keeps mapped)
        if isinstance(array, np.memmap) and array.mode == "r" and isinstance(mapped, mmap.mmap) and hasattr(mapped, "madvise"):
            try:
                mapped.madvise(mmap.MADV_DONTNEED)
                advised += 1
            except (OSError, ValueError):  # closed meanwhile
                pass
    return advised


@contextmanager
def paged_out(paths: Iterable[Union[str, Path]] = (), arrays: Sequence[Any] = (), interval: float = 0.1) -> Iterator[None]:
    """While the block runs, every ``interval`` seconds unmap the resident pages of ``arrays``
    (``unmap_pages``) and page out this process's maps of ``paths`` (files, or folders whose files
    may be created meanwhile: ``page_out``), in a background thread."""
    chosen, held = list(paths), list(arrays)
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(interval):
            unmap_pages(held)
            try:
                page_out(chosen)
            except OSError:
                chosen.clear()  # no /proc here after all

    thread = threading.Thread(target=run, name="paged-out", daemon=True) if _madvise() is not None else None
    if thread is not None:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if thread is not None:
            thread.join()
        held.clear()
