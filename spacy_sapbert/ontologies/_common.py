"""What every reader shares: line-exact decoding, and the lenient-mode summary.

Files are read as bytes and decoded line by line so that a bad byte is reported with its
line number (a text-mode read fails on a buffer, not a line). ``.gz`` files are opened
transparently because ontology releases often ship compressed.
"""
from __future__ import annotations

import gzip
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, List, Optional, Tuple, Union

from ..records import InputError

PathLike = Union[str, Path]
logger = logging.getLogger(__name__)

#: at most this many skipped rows are kept with their problem (the count is always exact)
MAX_KEPT_PROBLEMS = 20


@dataclass
class ReadSummary:
    """Counts from one read; in lenient mode, which rows were skipped and why.

    Pass one to a reader to inspect it afterwards; a lenient reader also logs a warning
    when it skipped anything, so a partial read is never silent.
    """

    path: str = ""
    records: int = 0
    skipped: int = 0
    problems: List[str] = field(default_factory=list)

    def skip(self, error: InputError) -> None:
        self.skipped += 1
        if len(self.problems) < MAX_KEPT_PROBLEMS:
            self.problems.append(str(error))

    def report(self) -> None:
        if self.skipped:
            shown = "; ".join(self.problems[:3])
            logger.warning("%s: skipped %d bad row(s) (lenient mode), kept %d records; first: %s",
                           self.path, self.skipped, self.records, shown)

    def to_dict(self) -> dict:
        return {"path": self.path, "records": self.records, "skipped": self.skipped, "problems": list(self.problems)}


def open_binary(path: PathLike) -> IO[bytes]:
    """Open ``path`` for reading bytes, gunzipping ``*.gz``; a missing file names itself."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def iter_lines(path: PathLike, summary: ReadSummary, lenient: bool = False) -> Iterator[Tuple[int, str]]:
    """Yield ``(line number, text without the line break)``; bad UTF-8 is an error naming the line.

    In lenient mode an undecodable line is skipped and counted in ``summary``.
    """
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf8")
            except UnicodeDecodeError as e:
                error = InputError(path, lineno, f"not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r})")
                if not lenient:
                    raise error from None
                summary.skip(error)
                continue
            yield lineno, text.rstrip("\r\n")


def fail_or_skip(error: InputError, summary: ReadSummary, lenient: bool) -> None:
    """Strict mode raises ``error``; lenient mode counts it and the caller skips the row."""
    if not lenient:
        raise error
    summary.skip(error)


def make_summary(path: PathLike, summary: Optional[ReadSummary]) -> ReadSummary:
    """The caller's summary (re-pointed at ``path``) or a fresh one."""
    if summary is None:
        summary = ReadSummary()
    summary.path = str(path)
    return summary


def unique(items: List[str]) -> List[str]:
    """Drop empty strings and repeats, keeping first occurrence order."""
    return [x for x in dict.fromkeys(items) if x]
