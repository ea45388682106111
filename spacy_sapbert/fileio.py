"""Atomic writes (a crash mid-write must leave the previous artifact intact; a generated block of a
hand-written file rewritten in place), and file stamps: how objects memory-mapped from a file pickle
by path instead of by value."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Iterator, Tuple, TypeVar, Union

PathLike = Union[str, os.PathLike]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


ENV_CACHE = "SPACY_SAPBERT_CACHE"


def cache_dir() -> Path:
    """The user cache folder (``SPACY_SAPBERT_CACHE``, else ~/.cache/spacy-sapbert): the default HPO KB,
    the int8 encoder's calibration."""
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "spacy-sapbert")


@contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """A temporary file name beside ``path`` for a writer that wants a name (FAISS, ``np.memmap``);
    renamed over ``path`` only when the block succeeds, removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextmanager
def atomic_open(path: PathLike, mode: str = "w", encoding: str | None = "utf8") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; rename it over ``path`` only on success."""
    binary = "b" in mode
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=None if binary else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())


def write_json(path: PathLike, data: Any) -> None:
    with atomic_open(path, "w") as f:
        json.dump(data, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.write("\n")


def read_json(path: PathLike) -> Any:
    with open(path, encoding="utf8") as f:
        return json.load(f)


def replace_between_markers(text: str, content: str, block: str, source: str = "text") -> str:
    """``text`` with everything between ``<!-- {block}:START -->`` and ``<!-- {block}:END -->``
    replaced by ``content``: a generated block inside a hand-written file (a README's tables from
    results JSON) is rewritten, the rest stays as written."""
    start_marker, end_marker = f"<!-- {block}:START -->", f"<!-- {block}:END -->"
    start = text.find(start_marker)
    end = text.find(end_marker)
    if start < 0 or end < 0 or end < start:
        raise ValueError(f"{source}: needs the markers {start_marker} and {end_marker}, in that order")
    if text.count(start_marker) != 1 or text.count(end_marker) != 1:
        raise ValueError(f"{source}: each {block} marker must appear exactly once")
    head = text[: start + len(start_marker)]
    return head + "\n" + content.strip("\n") + "\n" + text[end:]


def rewrite_between_markers(path: PathLike, content: str, block: str) -> None:
    """Rewrite one generated block of the file ``path`` (``replace_between_markers``), atomically;
    a file whose block already holds ``content`` is left untouched."""
    path = Path(path)
    text = path.read_text(encoding="utf8")
    new = replace_between_markers(text, content, block, str(path))
    if new != text:
        with atomic_open(path) as f:
            f.write(new)


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
    replace_dir(tmp, path)


def replace_dir(new: PathLike, path: PathLike) -> None:
    """Put the complete folder ``new`` in place of ``path``: the old folder (if any) is moved aside
    first and removed after the swap, so at every moment one complete folder is there."""
    new, path = Path(new), Path(path)
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)
    os.replace(new, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def file_sha256(path: PathLike) -> str:
    """The sha256 of a file's bytes, read in blocks (a shard or checkpoint file may be large)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()


FileStamp = Tuple[str, int, int]


def file_stamp(path: PathLike) -> FileStamp:
    """``(absolute path, size, mtime_ns)`` of a file: what a memory-mapped table or index pickles
    as (a worker process maps the file again instead of receiving a copy of its bytes)."""
    st = os.stat(path)
    return (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def stamped_path(stamp: FileStamp) -> Path:
    """The file ``stamp`` names, if it is still the file that was stamped; otherwise an error
    naming it (a KB rebuilt in place must not be mixed with the one a process had loaded)."""
    path, size, mtime_ns = stamp
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: memory-mapped by the process that pickled it, but gone now; load the KB again") from None
    if (st.st_size, st.st_mtime_ns) != (size, mtime_ns):
        raise ValueError(f"{path} changed on disk after it was memory-mapped (rebuilt?); load the KB again")
    return Path(path)


T = TypeVar("T")


def folder_to_bytes(write: Callable[[Path], None], fmt: str) -> bytes:
    """What ``write(folder)`` puts in an empty folder, as one msgpack message tagged ``fmt``:
    ``to_bytes`` of a component whose ``to_disk`` writes files."""
    import srsly

    with tempfile.TemporaryDirectory(prefix="sapbert-bytes-") as tmp:
        root = Path(tmp)
        write(root)
        files = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    return srsly.msgpack_dumps({"format": fmt, "files": files})


def folder_from_bytes(data: bytes, fmt: str, read: Callable[[Path], T], owner: str) -> T:
    """``read(folder)`` over the files ``folder_to_bytes`` packed (in a temporary folder, removed
    after): ``from_bytes`` of a component whose ``from_disk`` reads files. ``owner``: the kind of
    component, for errors."""
    import srsly

    message = srsly.msgpack_loads(data)
    if not isinstance(message, dict) or message.get("format") != fmt:
        raise ValueError(f"these bytes are not a {owner}'s to_bytes() output ({fmt})")
    with tempfile.TemporaryDirectory(prefix="sapbert-bytes-") as tmp:
        root = Path(tmp)
        for name, content in message["files"].items():
            rel = PurePosixPath(name)
            if rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"{owner}: refusing the file name {name!r} in the bytes (outside the folder)")
            target = root.joinpath(*rel.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return read(root)


def tab_pairs(path: Union[str, Path]) -> Iterator[Tuple[int, str, str, str]]:
    """The lines of a ``key<TAB>value`` file a user writes (priors, extra names): ``(line number,
    key, value, line)``, both stripped, ``#`` comments and blank lines skipped; a line without a tab
    gives an empty key and value, for the caller to refuse with its own message."""
    with open(path, encoding="utf8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip() or line.startswith("#"):
                continue
            key, sep, value = line.partition("\t")
            yield (n, key.strip(), value.strip(), line) if sep else (n, "", "", line)

