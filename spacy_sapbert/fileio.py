"""Atomic writes: a crash mid-write must leave the previous artifact intact."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator, Union

PathLike = Union[str, os.PathLike]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_open(path: PathLike, mode: str = "w", encoding: str | None = "utf8") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; rename it over ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    binary = "b" in mode
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: PathLike, data: Any) -> None:
    with atomic_open(path, "w") as f:
        json.dump(data, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.write("\n")


def read_json(path: PathLike) -> Any:
    with open(path, encoding="utf8") as f:
        return json.load(f)


@contextmanager
def atomic_dir(path: PathLike) -> Iterator[Path]:
    """Build a directory under a temporary name; swap it in for ``path`` only on success.

    The old directory (if any) is moved aside first and removed after the swap, so at
    every moment either the complete old or the complete new artifact exists.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
