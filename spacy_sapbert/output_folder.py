"""``annotate``'s OUTPUT folder: the manifest, the shards and the errors file.

Shards are committed in order whatever order they finish in, so the folder's bytes never depend on
it; ``manifest.json`` lists the committed ones with their size and sha256. A resumed run trusts
nothing it cannot check: every listed shard is checked against the manifest first, and the first
one that is missing, emptied or edited is redone, with every shard after it (a warning names it):
the errors file and the mention cache are written in shard order, so the shards after it are
rewritten too. Files the manifest does not list (a killed run's temporary files, shards of another
shard size) are removed. A manifest that is not valid JSON is refused, naming it, unless
``--overwrite`` starts the folder afresh.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from itertools import islice
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from .documents import InputDocument
from .fileio import PathLike, atomic_open, file_sha256, read_json, write_json
from .shards import CACHE_FOLDER, OUTPUT_FORMATS, Shard, add_document_id

MANIFEST = "manifest.json"
ERRORS = "errors.jsonl"
FORMAT = "spacy-sapbert-annotations"
VERSION = 1
_OUR_FILES = re.compile(r"^(part-\d{5}\.(jsonl|pubtator|spacy)|manifest\.json|errors\.jsonl|\..*\.tmp)$")
_SHARD = re.compile(r"^part-\d{5}\.(jsonl|pubtator|spacy)$")
_ENTRY_KEYS = ("file", "docs", "annotated", "errors", "mentions", "sha256", "ids_sha256", "errors_end")


class OutputFolder:
    """OUTPUT: its manifest, shards and errors file. Shards are committed in order whatever order they
    finish in, so the folder's bytes never depend on it; the manifest lists the committed ones."""

    def __init__(self, path: PathLike, run: Dict[str, Any], pipeline: Dict[str, Any], overwrite: bool = False):
        self.path = Path(path)
        self.run = run
        check_output_path(self.path)
        manifest = self.path / MANIFEST
        found = _read_manifest(manifest, overwrite)
        self.redone: List[str] = []  # the finished shards found damaged, redone by this run
        if overwrite:
            found = None
        elif found is not None and found["run"] != run:
            changed = ", ".join(f"{k}: {found['run'].get(k)!r} then, {run.get(k)!r} now" for k in run if found["run"].get(k) != run.get(k))
            raise ValueError(f"{self.path} holds the output of another run ({changed}); resume it with its arguments, or pass --overwrite")
        elif found is None and self.path.is_dir() and any(self.path.iterdir()):
            raise ValueError(f"{self.path} is not empty and has no {MANIFEST}: choose a new output folder, or pass --overwrite")
        if found is not None:
            found["shards"] = self._verified(found["shards"])
            found["complete"] = found["complete"] and not self.redone
        self.path.mkdir(parents=True, exist_ok=True)
        listed = {e["file"] for e in found["shards"]} if found is not None else set()
        for p in self.path.iterdir():  # temporary files of a killed run, unlisted shards; with --overwrite, the old output
            if found is None and p.name == CACHE_FOLDER:
                shutil.rmtree(p)
            elif p.name.startswith(".") and p.name.endswith(".tmp") or (found is None and _OUR_FILES.match(p.name)):
                p.unlink()
            elif _SHARD.match(p.name) and p.name not in listed:
                p.unlink()
        self.manifest: Dict[str, Any] = found or {"format": FORMAT, "version": VERSION, "run": run, "shards": [], "complete": False}
        self.manifest["pipeline"] = pipeline
        errors_end = self.shards[-1]["errors_end"] if self.shards else 0
        with open(self.path / ERRORS, "ab") as f:  # back to what the finished shards wrote
            f.truncate(errors_end)
        self._waiting: Dict[int, Shard] = {}
        write_json(manifest, self.manifest)

    def _verified(self, entries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The finished shards up to the first that does not match the manifest (or whose errors the
        errors file no longer holds); that one and those after it are redone, with a warning."""
        errors = self.path / ERRORS
        errors_size = errors.stat().st_size if errors.is_file() else 0
        for i, entry in enumerate(entries):
            problem = _shard_problem(self.path / entry["file"], entry)
            if problem is None and entry["errors_end"] > errors_size:
                problem = f"its errors are no longer in {errors} ({errors_size:,} bytes, not at least {entry['errors_end']:,})"
            if problem is not None:
                self.redone = [e["file"] for e in entries[i:]]
                after = len(entries) - i - 1
                print(f"warning: {self.path / entry['file']}: {problem}; redoing it" + (f" and the {after} shard(s) after it" if after else ""),
                      file=sys.stderr, flush=True)
                return entries[:i]
        return entries

    @property
    def shards(self) -> List[Dict[str, Any]]:
        return self.manifest["shards"]

    @property
    def complete(self) -> bool:
        return bool(self.manifest["complete"])

    def skip_finished(self, docs: Iterator[InputDocument]) -> Iterator[InputDocument]:
        """``docs`` after those of the finished shards, which are checked to be the same documents."""
        size = self.run["shard_size"]
        for entry in self.shards:
            ids = hashlib.sha256()
            n = 0
            for doc in islice(docs, size):
                add_document_id(ids, doc)
                n += 1
            if (n, ids.hexdigest()) != (entry["docs"], entry["ids_sha256"]):
                raise ValueError(f"{self.run['input']}: the documents of {entry['file']} are not those it was written from; the input changed")
        return docs

    def check_complete(self, docs: Iterator[InputDocument]) -> None:
        """For an output written to its end: ``docs`` are the documents it was written from, and no more.
        A document added to the input since (or one replaced) would otherwise be left out without a word."""
        if next(self.skip_finished(docs), None) is not None:
            raise ValueError(f"{self.run['input']}: more documents than the {self.totals()['docs']:,} that {self.path} was written from; "
                             "the input changed (annotate it into a new OUTPUT, or with --overwrite)")

    def commit(self, shard: Shard) -> List[Dict[str, Any]]:
        """Take a finished shard; write it and every shard it was the last one missing for, in order.
        Returns the manifest entries written."""
        self._waiting[shard.index] = shard
        written = []
        while len(self.shards) in self._waiting:
            written.append(self._write(self._waiting.pop(len(self.shards))))
        return written

    def _write(self, shard: Shard) -> Dict[str, Any]:
        name = f"part-{shard.index:05d}{OUTPUT_FORMATS[self.run['output_format']]}"
        with atomic_open(self.path / name, "wb") as f:
            f.write(shard.data)
        with open(self.path / ERRORS, "ab") as f:
            f.writelines((json.dumps(e, ensure_ascii=False) + "\n").encode() for e in shard.errors)
            f.flush()
            os.fsync(f.fileno())
            errors_end = f.tell()
        entry = {
            "file": name, "docs": shard.docs, "annotated": shard.annotated, "errors": len(shard.errors),
            "mentions": shard.mentions, "bytes": len(shard.data), "sha256": hashlib.sha256(shard.data).hexdigest(),
            "ids_sha256": shard.ids_sha256,
            "errors_end": errors_end,
        }
        self.shards.append(entry)
        write_json(self.path / MANIFEST, self.manifest)
        return entry

    def finish(self) -> None:
        if self._waiting:
            raise RuntimeError(f"shards {sorted(self._waiting)} finished but not the ones before them")
        self.manifest["complete"] = True
        write_json(self.path / MANIFEST, self.manifest)

    def totals(self) -> Dict[str, int]:
        return {k: sum(int(e[k]) for e in self.shards) for k in ("docs", "annotated", "errors", "mentions")}


def check_output_path(path: PathLike) -> None:
    """A ValueError naming ``path`` when it is a file: OUTPUT is a folder (or not there yet)."""
    if Path(path).exists() and not Path(path).is_dir():
        raise ValueError(f"{path}: a file, not a folder: annotate writes its shards, {MANIFEST} and {ERRORS} "
                         "into a folder; choose another OUTPUT")


def _read_manifest(path: Path, overwrite: bool) -> Optional[Dict[str, Any]]:
    """The manifest at ``path``, None if there is none; one that is not valid JSON or lacks what a
    manifest holds is refused, naming it (with ``overwrite``: None, the folder starts afresh); one
    written by something else is refused either way."""
    if not path.is_file():
        return None
    try:
        found = read_json(path)
        problem = _manifest_problem(found)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        problem = f"not valid JSON ({e})"
    else:
        if isinstance(found, dict) and found.get("format") not in (None, FORMAT):
            raise ValueError(f"{path} was not written by annotate")
    if problem is None:
        return found
    if overwrite:
        return None
    raise ValueError(f"{path}: {problem}: damaged or half written; pass --overwrite to start {path.parent} afresh")


def _manifest_problem(found: Any) -> Optional[str]:
    if not isinstance(found, dict) or found.get("format") is None:
        return "not an annotate manifest (no format)"
    if not isinstance(found.get("run"), dict) or not isinstance(found.get("complete"), bool):
        return "no run or complete field"
    shards = found.get("shards")
    if not isinstance(shards, list) or not all(isinstance(e, dict) and all(k in e for k in _ENTRY_KEYS) for e in shards):
        return "its shard list is malformed"
    return None


def _shard_problem(path: Path, entry: Dict[str, Any]) -> Optional[str]:
    """Why the finished shard at ``path`` is not the one ``entry`` lists, or None."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if "bytes" in entry and size != entry["bytes"]:
        return f"{size:,} bytes, not the {entry['bytes']:,} the manifest lists"
    if file_sha256(path) != entry["sha256"]:
        return "its sha256 differs from the manifest's (edited or damaged)"
    return None
