"""One writer per ``annotate`` OUTPUT: the lock ``build-kb`` takes for a KB folder (``OUTPUT.lock``
beside the folder, ``build.lock_path``), a kernel ``flock`` held for the whole run and released
even when the holder is killed. A second run on the same OUTPUT is refused at once, before it
loads anything, naming the lock file and the process that holds it (its pid and host are written
into the lock file, which holds no other data)."""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Optional

from .build import lock_path
from .fileio import PathLike


class OutputLockedError(RuntimeError):
    """Another process is writing the same OUTPUT right now."""


class OutputLock:
    """``with OutputLock(output):`` holds ``OUTPUT.lock`` or raises ``OutputLockedError`` at once.

    Where ``fcntl`` is missing (Windows), ``filelock`` takes the same file, without the holder's name.
    Worker processes forked while it is held share it: they exit with their driver (``annotate``)."""

    def __init__(self, output: PathLike):
        self.output = Path(output)
        self.path = lock_path(self.output)
        self._fd: Optional[int] = None
        self._fallback: Any = None

    def __enter__(self) -> "OutputLock":
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
            os.close(fd)
            raise self._locked(holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return self

    def _enter_filelock(self) -> "OutputLock":  # pragma: no cover - not POSIX
        from filelock import FileLock, Timeout

        self._fallback = FileLock(str(self.path))
        try:
            self._fallback.acquire(timeout=0)
        except Timeout:
            raise self._locked("another process") from None
        return self

    def _locked(self, holder: str) -> OutputLockedError:
        return OutputLockedError(f"{self.output} is being written by another annotate run ({holder}; it holds the lock "
                                 f"{self.path}): wait for it to finish, or write to another folder")

    def __exit__(self, *exc: Any) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None
        if self._fallback is not None:  # pragma: no cover - not POSIX
            self._fallback.release()
