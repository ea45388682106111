"""The stages of a KB build, each kept in the build's work folder with a record of what it was made
from and the checksums of what it wrote.

A stage's folder holds its files and ``stage.json``: the stage's ``key`` (what its output depends on:
the source files' checksums and the options, or the previous stage's checksums), and each file's
size and sha256. A rerun, after a crash, a kill or with one setting changed, verifies a finished
stage's files against the record and skips the stage; a stage whose key differs, or one of whose
files no longer matches, is done again. A stage is written under a temporary name and renamed into
place with its record (``fileio.atomic_dir`` and ``commit``), so its folder is complete or absent.

Progress: each stage says when it starts, what it skipped, and when it ends with its time and the
process's peak resident memory so far (``stage_clock``; a line a minute while it runs).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional

from .fileio import file_sha256, read_json, write_json
from .machine import peak_rss_mb, rss_mb

STAGE_FILE = "stage.json"
HEARTBEAT_S = 60.0  # a running stage prints a line this often


def say(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


def digest(value: Any) -> str:
    """sha256 of ``value`` as canonical JSON: a short, stable key for options and records."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode("utf8")).hexdigest()


def canonical(key: Any) -> Any:
    """``key`` as it reads back from ``stage.json`` (tuples become lists), to compare with a record."""
    return json.loads(json.dumps(key, sort_keys=True, ensure_ascii=False, default=str))


def checksums(files: Iterable[Path]) -> Dict[str, Dict[str, object]]:
    """``{file name: {"size", "sha256"}}`` of ``files``."""
    return {f.name: {"size": f.stat().st_size, "sha256": file_sha256(f)} for f in files}


def read_record(folder: Path) -> Optional[Dict[str, Any]]:
    """The stage record in ``folder``, or None where there is none or it is unreadable."""
    try:
        record = read_json(folder / STAGE_FILE)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("files"), dict) else None


def damaged(folder: Path, record: Mapping[str, Any]) -> List[str]:
    """The names of the recorded files that are missing or whose size or sha256 differs now."""
    bad = []
    for name, expected in record["files"].items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != expected["size"] or file_sha256(path) != expected["sha256"]:
            bad.append(name)
    return bad


def write_record(folder: Path, key: Any, files: Iterable[Path], seconds: float, known: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Record ``files`` (in ``folder``) as the finished stage made from ``key`` (atomically).
    ``known``: checksums verified already, by file name (not computed again)."""
    files = list(files)
    known = known or {}
    sums = {**checksums(f for f in files if f.name not in known), **{f.name: known[f.name] for f in files if f.name in known}}
    record = {"key": canonical(key), "files": {f.name: sums[f.name] for f in files}, "seconds": round(seconds, 1)}
    write_json(folder / STAGE_FILE, record)
    return record


def finished(folder: Path, key: Any, name: str, progress: bool) -> Optional[Dict[str, Any]]:
    """The record of stage ``name`` in ``folder`` if it was made from ``key`` (None: never skipped)
    and every file still has its checksum; it is said what was verified. Otherwise None: a
    folder that does not verify is said why, and removed."""
    record = read_record(folder) if key is not None else None
    if record is None:
        return None
    if record.get("key") != canonical(key):
        say(progress, f"stage {name}: made from other input or settings; doing it again")
        shutil.rmtree(folder, ignore_errors=True)
        return None
    t0 = time.perf_counter()
    bad = damaged(folder, record)
    if bad:
        say(progress, f"stage {name}: {folder / bad[0]} does not match its recorded sha256 ({len(bad)} of "
                      f"{len(record['files'])} files damaged or missing); doing the stage again")
        shutil.rmtree(folder, ignore_errors=True)
        return None
    size = sum(int(f["size"]) for f in record["files"].values())
    say(progress, f"stage {name}: finished earlier; {len(record['files'])} files ({size / 2**20:,.0f} MB) verified "
                  f"by sha256 in {time.perf_counter() - t0:.1f} s; skipped")
    return record


def commit(folder: Path, key: Any, seconds: float) -> Dict[str, Any]:
    """Record the files written into ``folder`` (an ``atomic_dir`` being built: renamed into place
    when its block ends) as the finished stage made from ``key``."""
    return write_record(folder, key, sorted(p for p in folder.iterdir() if p.is_file()), seconds)


def remove_stale(work: Path, stages: Iterable[str]) -> None:
    """Remove the half-written stage folders a killed build left in ``work`` (``atomic_dir``'s
    temporary names, ``.STAGE.XXXXXXXX.tmp``, and set-aside ones, ``.STAGE.old-PID``)."""
    for stage in stages:
        pattern = re.compile(rf"\.{re.escape(stage)}\.([a-z0-9_]{{8}}\.tmp|old-\d+)")
        for stale in work.glob(f".{stage}.*") if work.is_dir() else ():
            if pattern.fullmatch(stale.name):
                shutil.rmtree(stale, ignore_errors=True)


@contextmanager
def stage_clock(name: str, progress: bool, what: str = "") -> Iterator[Dict[str, float]]:
    """Say that stage ``name`` starts, a line every ``HEARTBEAT_S`` while it runs, and its time and
    the peak resident memory so far when it ends; yields a dict that gets ``seconds``."""
    say(progress, f"stage {name}: {what or 'starting'}")
    timing: Dict[str, float] = {}
    stop = threading.Event()
    t0 = time.perf_counter()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            say(progress, f"stage {name}: running for {_minutes(time.perf_counter() - t0)}, resident memory {rss_mb():,.0f} MB")

    thread = threading.Thread(target=beat, name=f"stage-{name}", daemon=True)
    if progress:
        thread.start()
    try:
        yield timing
    finally:
        stop.set()
        if progress:
            thread.join()
    timing["seconds"] = time.perf_counter() - t0
    say(progress, f"stage {name}: done in {timing['seconds']:.1f} s; peak resident memory so far {peak_rss_mb():,.0f} MB")


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (no bytes copied), or a copy across file systems."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
