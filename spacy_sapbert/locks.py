"""One writer at a time: an exclusive kernel ``flock`` on a lock file, held for a whole run and
released even when the holder is killed. ``build-kb`` takes ``OUTPUT.lock`` beside a KB folder (and
one lock per encoding part), ``annotate`` the same beside its OUTPUT (``lock_path``). A second run is
refused at once, or waits where asked, naming the lock file and the process that holds it: the holder
writes its pid and host into the lock file, which holds no other data.

Where ``fcntl`` is missing (Windows), ``filelock`` takes the same file, without the holder's name.
Worker processes forked while a lock is held share it: they exit with their driver."""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Callable, Optional, Type, Union

PathLike = Union[str, Path]


class LockHeldError(RuntimeError):
    """Another process holds the lock."""


class OutputLockedError(LockHeldError):
    """Another process is writing the same ``annotate`` OUTPUT right now."""


def lock_path(output: PathLike) -> Path:
    """The lock file of an output folder: ``OUTPUT.lock`` beside it (left in place; it holds no data)."""
    output = Path(output)
    return output.with_name(output.name + ".lock")


class HeldLock:
    """``with HeldLock(path, busy, advice):`` holds the lock at ``path`` for the block.

    Held elsewhere, it raises ``error`` at once ("``busy`` (pid … on host; it holds the lock …):
    ``advice``"), or with ``waiting`` set, tells it so and waits for the lock."""

    def __init__(self, path: PathLike, busy: str, advice: str, error: Type[LockHeldError] = LockHeldError,
                 waiting: Optional[Callable[[str], None]] = None):
        self.path = Path(path)
        self.busy, self.advice, self.error, self.waiting = busy, advice, error, waiting
        self._fd: Optional[int] = None
        self._fallback: Any = None

    def __enter__(self) -> "HeldLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return self._enter_filelock()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf8", errors="replace").strip() or "a process that did not say which"
            if self.waiting is None:
                os.close(fd)
                raise self._held(holder) from None
            self.waiting(f"waiting for another process to finish ({holder}; lock {self.path})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return self

    def _enter_filelock(self) -> "HeldLock":  # pragma: no cover - not POSIX
        from filelock import FileLock, Timeout

        self._fallback = FileLock(str(self.path))
        try:
            self._fallback.acquire(timeout=0)
        except Timeout:
            if self.waiting is None:
                raise self._held("another process") from None
            self.waiting(f"waiting for another process to finish (lock {self.path})")
            self._fallback.acquire()
        return self

    def _held(self, holder: str) -> LockHeldError:
        return self.error(f"{self.busy} ({holder}; it holds the lock {self.path}): {self.advice}")

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None
        if self._fallback is not None:  # pragma: no cover - not POSIX
            self._fallback.release()
            self._fallback = None


def held_elsewhere(path: PathLike) -> bool:
    """Whether another process holds the lock at ``path`` right now (taken and let go at once if not)."""
    try:
        with HeldLock(path, "", ""):
            return False
    except LockHeldError:
        return True


def output_lock(output: PathLike) -> HeldLock:
    """The lock of an ``annotate`` OUTPUT: a second run on it is refused at once, before it loads anything."""
    return HeldLock(lock_path(output), f"{output} is being written by another annotate run",
                    "wait for it to finish, or write to another folder", OutputLockedError)
