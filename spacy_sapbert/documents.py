"""Documents in: the corpus formats ``annotate`` and ``link --input`` read, one document at a time.

Every reader streams (memory stays flat whatever the file's size) and yields ``InputDocument``s.
A document that cannot be read (bad UTF-8, a malformed JSON line) comes out with its ``error`` set
instead of ending the stream: ``annotate`` records it and goes on, ``link`` (``read_documents``)
stops there with the ``InputError``, which names the file and the line. A file that is broken as a
whole (a PubTator abstract without its title, malformed XML) raises the ``InputError`` itself.

Each format is a reader registered by name in ``registries.input_formats``: a function of the path
that yields ``InputDocument``s. Another format is one module with such a function::

    @input_formats.register("my-format")
    def read_my_format(path: Path) -> Iterator[InputDocument]: ...

(or the ``spacy_sapbert_input_formats`` entry point); ``annotate --input-format my-format`` then
reads it, and ``auto`` picks it for a file whose suffix is its name (``.my-format``).
``link --input`` reads every registered format too (its ``auto`` only tells ``.tsv`` and ``.jsonl`` from text lines).
"""
from __future__ import annotations

import gzip
import json
import os
import re
import unicodedata
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from .fileio import PathLike
from .records import InputError
from .registries import all_entries, input_formats

# The built-in formats (all registered below).
INPUT_FORMATS = ("folder", "text", "tsv", "jsonl", "pubtator", "bioc")
InputReader = Callable[[Path], Iterable["InputDocument"]]
_PUBTATOR_TEXT = re.compile(r"^[^\t|]+\|[ta]\|")


@dataclass
class InputDocument:
    """One input document. ``id`` is None where the format has none (``text`` lines, a JSONL line
    without one): ``key`` then falls back to ``line``. ``fields`` are a JSONL line's other fields,
    passed through to the output; ``title_end`` is where the title ends in ``text`` (PubTator, BioC),
    so a PubTator output keeps title and abstract apart. ``file``: the file it was read from, where a
    document is a file of its own (``folder``), so that an error names it."""

    id: Any
    text: Optional[str]
    line: Optional[int] = None
    fields: Dict[str, Any] = field(default_factory=dict)
    error: Optional[InputError] = None
    title_end: Optional[int] = None
    file: Optional[str] = None

    @property
    def key(self) -> Any:
        """What names the document in the output and the errors file: its id, else its line number."""
        return self.id if self.id is not None else self.line


@dataclass
class PubtatorBlock:
    """A PubTator document as written: its ``PMID|t|`` and ``PMID|a|`` lines, and the lines that follow
    them (annotations, relations) as ``(line number, text, problem)``; ``problem`` is set for a line
    that is not UTF-8. ``error`` is set when the title or abstract line is not."""

    pmid: str
    title: str
    line: int
    abstract: Optional[str] = None
    annotations: List[Tuple[int, str, Optional[str]]] = field(default_factory=list)
    error: Optional[InputError] = None

    @property
    def text(self) -> str:
        """Title and abstract joined by a space: what PubTator offsets index."""
        return self.title if self.abstract is None else f"{self.title} {self.abstract}"


BOM = "\ufeff"  # a UTF-8 byte order mark at the start of a file: not text (offsets are counted without it)
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


def _open(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _gzip_error(path: Path, e: BaseException) -> InputError:
    """One line naming a ``.gz`` file that ends early or whose bytes are damaged (``EOFError`` alone
    reads as "Aborted." on the command line; a CRC error comes only at the end of the stream)."""
    if isinstance(e, EOFError):
        return InputError(path, None, "truncated gzip file: it ends before its compressed stream does")
    return InputError(path, None, f"damaged gzip file ({e})")


def check_compressed(path: PathLike) -> None:
    """Read a regular ``.gz`` file through once, so that a truncated or damaged one is refused
    (``InputError``, naming it) before any output is written from its garbled text: gzip checks its
    CRC only at the end. Anything else (a folder, a pipe, plain text) is left alone."""
    path = Path(path)
    if path.suffix != ".gz" or not path.is_file():
        return
    try:
        with gzip.open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    except _GZIP_ERRORS as e:
        raise _gzip_error(path, e) from None


def _lines(path: Path) -> Iterator[Tuple[int, str, Optional[str]]]:
    """``(line number, text, problem)``: a line that is not UTF-8 is decoded with replacement characters
    and its ``problem`` says where it broke. A BOM starting the file is dropped; a ``.gz`` that ends
    early or is damaged raises ``InputError`` naming it."""
    with _open(path) as f:
        try:
            for n, raw in enumerate(f, 1):
                try:
                    text, problem = raw.decode("utf8"), None
                except UnicodeDecodeError as e:
                    text, problem = raw.decode("utf8", errors="replace"), f"not UTF-8 ({e.reason} at byte {e.start})"
                if n == 1 and text.startswith(BOM):
                    text = text[1:]
                yield n, text.rstrip("\n").rstrip("\r"), problem
        except _GZIP_ERRORS as e:
            raise _gzip_error(path, e) from None


def visible_span(text: str, start: int, end: int) -> Dict[str, Any]:
    """``{"text", "start_char", "end_char"}`` of ``text[start:end]`` without the control and format
    characters (NUL, BEL, DEL, bidi marks, zero-width ones: Unicode Cc and Cf) at its ends: they stay
    in the document's text, but a span written by ``link`` or ``annotate`` never starts or ends on one."""
    while start < end and unicodedata.category(text[start]) in ("Cc", "Cf"):
        start += 1
    while end > start and unicodedata.category(text[end - 1]) in ("Cc", "Cf"):
        end -= 1
    return {"text": text[start:end], "start_char": start, "end_char": end}


def input_format_names() -> List[str]:
    """The registered input formats: the built-in ones in ``INPUT_FORMATS``' order, then the others by name."""
    registered = all_entries(input_formats)
    return [f for f in INPUT_FORMATS if f in registered] + sorted(f for f in registered if f not in INPUT_FORMATS)


def input_format_help() -> str:
    """The choices of ``annotate --input-format``, from the registry."""
    return (f"auto (a folder, else by suffix, else PubTator when it looks like it) or one of: "
            f"{', '.join(input_format_names())} (text: a document per line)")


def input_reader(fmt: str) -> InputReader:
    """The registered reader of ``fmt``, or a ValueError that lists the choices."""
    registered = all_entries(input_formats)
    if fmt not in registered:
        raise ValueError(f"input format must be auto or one of {', '.join(input_format_names())}, not {fmt!r}")
    return registered[fmt]


def guess_input_format(path: PathLike) -> str:
    """A folder is a folder of ``.txt`` files; then by suffix (``.gz`` ignored): ``.jsonl``, ``.tsv``,
    ``.xml`` (BioC), ``.pubtator``, or the name of a format registered outside the package; else
    ``pubtator`` when the first line is a ``PMID|t|`` or ``PMID|a|`` line (the corpora's ``.txt``
    files), else ``text`` (a document per line)."""
    path = Path(path)
    if path.is_dir():
        return "folder"
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    by_suffix = {".jsonl": "jsonl", ".tsv": "tsv", ".xml": "bioc", ".pubtator": "pubtator"}
    if suffixes and suffixes[-1] in by_suffix:
        return by_suffix[suffixes[-1]]
    if suffixes and suffixes[-1][1:] not in INPUT_FORMATS and suffixes[-1][1:] in all_entries(input_formats):
        return suffixes[-1][1:]
    first = next((text for _, text, _ in _lines(path) if text.strip()), "")
    return "pubtator" if _PUBTATOR_TEXT.match(first) else "text"


def iter_documents(path: PathLike, fmt: str = "auto") -> Iterator[InputDocument]:
    """The documents of ``path`` in ``fmt`` (a registered input format, or ``auto``: ``guess_input_format``).

    ``folder``: every ``*.txt`` file, by name, its stem the id; ``text``: a document per line, an
    empty line too; ``tsv``: ``id<TAB>text``; ``jsonl``: ``{"id": ..., "text": ..., ...}`` (``id``
    optional, other fields passed through); ``pubtator``: title + " " + abstract (annotations
    ignored); ``bioc``: BioC XML, each document's passages placed at their offsets. Blank lines of
    ``tsv``/``jsonl`` are skipped.
    """
    path = Path(path)
    fmt = guess_input_format(path) if fmt == "auto" else fmt
    return iter(input_reader(fmt)(path))


def unlabelled_texts(paths: Iterable[PathLike], fmt: str = "auto") -> Iterator[str]:
    """The non-empty texts of the documents in ``paths`` (annotations, if any, unread); an unreadable
    document raises its error, which names the file and line. Context examples read text this way."""
    for path in paths:
        for d in iter_documents(path, fmt):
            if d.error is not None:
                raise d.error
            if d.text:
                yield d.text


def read_documents(path: PathLike, fmt: str = "auto") -> Iterator[Tuple[str, Dict[str, Any]]]:
    """``(text, context)`` per document of a ``link --input`` file; ``context`` has its 1-based
    ``line`` (none for a folder's file: a whole file is one document) and, where the format has one, its ``id``.
    Formats: the registered ones (``input_reader``); ``auto``: a folder of ``.txt`` files, else ``.tsv``/``.jsonl``
    by suffix, else ``text``. The first unreadable document raises its ``InputError``."""
    path = Path(path)
    if fmt == "auto":
        fmt = "folder" if path.is_dir() else {".tsv": "tsv", ".jsonl": "jsonl"}.get(path.suffix.lower(), "text")
    for doc in input_reader(fmt)(path):
        if doc.error is not None:
            raise doc.error
        where = {"line": doc.line} if doc.file is None else {}  # a folder's file is a document of its own
        yield doc.text, {**where, **({"id": doc.id} if doc.id is not None else {})}  # type: ignore[misc]


def _read_lines(path: Path, document: Callable[[Path, int, str], InputDocument], blank: bool = False) -> Iterator[InputDocument]:
    """A document per line: ``document(path, line number, line)``, or one with the error of a line that
    is not UTF-8; blank lines are skipped unless ``blank``."""
    for n, line, problem in _lines(path):
        if problem is not None:
            yield InputDocument(None, None, n, error=InputError(path, n, problem))
        elif blank or line.strip():
            yield document(path, n, line)


@input_formats.register("text")
def read_text(path: Path) -> Iterator[InputDocument]:
    """``text``: a document per line, an empty line too."""
    return _read_lines(path, lambda _, n, line: InputDocument(None, line, n), blank=True)


@input_formats.register("tsv")
def read_tsv(path: Path) -> Iterator[InputDocument]:
    """``tsv``: ``id<TAB>text`` lines."""
    return _read_lines(path, _tsv_document)


@input_formats.register("jsonl")
def read_jsonl(path: Path) -> Iterator[InputDocument]:
    """``jsonl``: ``{"id": ..., "text": ..., ...}`` lines (``id`` optional, other fields passed through)."""
    return _read_lines(path, _json_document)


def _tsv_document(path: Path, n: int, line: str) -> InputDocument:
    if "\t" not in line:
        return InputDocument(None, None, n, error=InputError(path, n, "expected 'id<TAB>text': the line has no tab"))
    doc_id, text = line.split("\t", 1)
    return InputDocument(doc_id, text, n)


def _json_document(path: Path, n: int, line: str) -> InputDocument:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        return InputDocument(None, None, n, error=InputError(path, n, f"not a JSON line ({e.msg}, column {e.colno})"))
    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
        problem = 'expected a JSON object with a "text" string (and optionally an "id")'
        return InputDocument(row.get("id") if isinstance(row, dict) else None, None, n, error=InputError(path, n, problem))
    return InputDocument(row.get("id"), row["text"], n, fields={k: v for k, v in row.items() if k not in ("id", "text")})


@input_formats.register("folder")
def read_folder(path: Path) -> Iterator[InputDocument]:
    """``folder``: every ``*.txt`` file of the folder, in name order, its stem the id (the names are listed once, up front)."""
    names = sorted(e.name for e in os.scandir(path) if e.name.endswith(".txt") and e.is_file())
    for name in names:
        raw = (path / name).read_bytes()
        try:
            yield InputDocument(name[: -len(".txt")], raw.decode("utf8").removeprefix(BOM), file=str(path / name))
        except UnicodeDecodeError as e:
            error = InputError(path / name, None, f"not UTF-8 ({e.reason} at byte {e.start})")
            yield InputDocument(name[: -len(".txt")], None, error=error, file=str(path / name))


@input_formats.register("pubtator")
def read_pubtator(path: Path) -> Iterator[InputDocument]:
    """``pubtator``: title + " " + abstract per document (annotations ignored)."""
    return (InputDocument(b.pmid, b.text, b.line, error=b.error, title_end=len(b.title)) for b in pubtator_blocks(path))


def pubtator_blocks(path: PathLike) -> Iterator[PubtatorBlock]:
    """The documents of a PubTator file, streamed: a ``PMID|t|title`` line starts one, its ``PMID|a|``
    line and every other line up to the next title belong to it. An abstract that does not follow its
    own title, or a line before the first title, raises ``InputError``."""
    path = Path(path)
    block: Optional[PubtatorBlock] = None
    for n, line, problem in _lines(path):
        if not line.strip():
            continue
        head = line.split("|", 2)
        is_text = len(head) == 3 and head[1] in ("t", "a") and "\t" not in head[0]
        if is_text and head[1] == "t":
            if block is not None:
                yield block
            block = PubtatorBlock(head[0], head[2], n)
        elif is_text:
            if block is None or block.pmid != head[0] or block.abstract is not None:
                raise InputError(path, n, f"abstract of {head[0]} before its title")
            block.abstract = head[2]
        elif block is None:
            raise InputError(path, n, "expected a 'PMID|t|title' line first")
        else:
            block.annotations.append((n, line, problem))
            continue
        if problem is not None and block.error is None:
            block.error = InputError(path, n, problem)
    if block is not None:
        yield block


@input_formats.register("bioc")
def read_bioc(path: Path) -> Iterator[InputDocument]:
    """``bioc``: BioC XML, parsed incrementally (each ``<document>`` is dropped once read), passages at their offsets."""
    import xml.etree.ElementTree as ET

    with _open(path) as f:
        root = None
        try:
            for event, elem in ET.iterparse(f, events=("start", "end")):
                if root is None:
                    root = elem
                elif event == "end" and elem.tag == "document":
                    yield _bioc_document(path, elem)
                    root.clear()
        except ET.ParseError as e:
            raise InputError(path, e.position[0], f"not well-formed XML ({e})") from None
        except _GZIP_ERRORS as e:
            raise _gzip_error(path, e) from None


def _bioc_document(path: Path, elem: Any) -> InputDocument:
    """A BioC document's text: its passages (or a passage's sentences) at their offsets, so that
    offsets into it are the BioC offsets (title + " " + abstract for PubMed)."""
    doc_id = (elem.findtext("id") or "").strip() or None
    text, title_end = "", None
    for passage in elem.iter("passage"):
        kind = next((i.text for i in passage.findall("infon") if i.get("key") in ("type", "section_type")), None)
        pieces = [passage] if passage.find("text") is not None else passage.findall("sentence")
        for piece in pieces:
            try:
                offset = int(piece.findtext("offset") or 0)
            except ValueError:
                return InputDocument(doc_id, None, error=InputError(path, None, f"document {doc_id}: offset is not an integer"))
            part = piece.findtext("text") or ""
            text += " " * (offset - len(text)) + part if offset >= len(text) else (" " if text else "") + part
        if title_end is None and (kind or "").lower() in ("title", "front"):
            title_end = len(text)
    if doc_id is None:
        return InputDocument(None, None, error=InputError(path, None, "a <document> without an <id>"))
    return InputDocument(doc_id, text, title_end=title_end)
