"""``ConfigOnlyPipe``: the base of pipeline components whose whole state is their config.

The span finder and the abbreviation detector hold no data of their own (settings live in the
pipeline's ``config.cfg``; the span finder's vocabulary is its linker's KB), so, like the linker,
they save no settings: ``to_disk``/``to_bytes`` write a format marker only, so that a later version
that adds data can tell what it reads, and ``from_disk`` also accepts a folder without one
(pipelines saved before these components were ``Pipe`` subclasses).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Union

import srsly
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.training import Example

FORMAT_FILE = "format.json"


class ConfigOnlyPipe(Pipe):
    """A ``Pipe`` without data: serialization carries ``data_format`` and nothing else."""

    data_format = "spacy-sapbert-config-only-v1"

    def initialize(self, get_examples: Optional[Callable[[], Iterable[Example]]] = None, *, nlp: Optional[Language] = None) -> None:
        """Nothing to learn from examples."""

    def _check(self, saved: Dict[str, Any]) -> None:
        if saved.get("format") != self.data_format:
            raise ValueError(f"{self.name}: saved as {saved.get('format')!r}, this version reads {self.data_format!r}")

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        return srsly.msgpack_dumps({"format": self.data_format})

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()) -> "ConfigOnlyPipe":
        self._check(srsly.msgpack_loads(bytes_data))
        return self

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        srsly.write_json(path / FORMAT_FILE, {"format": self.data_format})

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> "ConfigOnlyPipe":
        """Also a folder saved without the marker, or none at all (an older pipeline's)."""
        marker = Path(path) / FORMAT_FILE
        if marker.is_file():
            self._check(srsly.read_json(marker))
        return self
