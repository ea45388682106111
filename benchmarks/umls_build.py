"""A UMLS-sized ``build-kb`` run as a user runs it: from MRCONSO.RRF, on 2 cores, killed and resumed.

    python benchmarks/umls_build.py --names 7500000 --seed-chunks corpus/cache/umls-scale/names-7500000-40a62deb48c6/chunks
    python benchmarks/umls_build.py --names 200000 --kill encode:30     # everything encoded by build-kb itself
    python benchmarks/umls_build.py --names 7500000 --redo-index        # the index stage alone, again

The names are ``benchmarks/umls_scale.py``'s (``scaled_records``: the open bundle and UMLS-style
variants of its names), written as a synthetic META folder in the real RRF column layout:
MRCONSO.RRF, one row per name (a concept's first name its preferred atom), and MRSTY.RRF (the
bundle's types as TUIs). Two things differ from the benchmark's KB: the concept ids are CUIs
(C0000001, … in the bundle's order, so the file is sorted by CUI as a release is; the bundle's own
ids are not in sorted order), and '|', which no RRF field can hold (no UMLS string has one), is
written as '¦' (names holding one, and their variants, are other strings then).

``python -m spacy_sapbert build-kb META OUT --work-dir WORK --keep-work`` (the CLI) runs as a
subprocess on ``--threads`` threads, once per ``--kill STAGE:SECONDS`` (killed with SIGKILL that
many seconds after the stage starts; ``encode`` is killed as its progress bar appears when SECONDS
is 0), then once to the end. With ``--seed-chunks``, after the KB stage first finishes, the chunks
``umls_scale.py --encode-only`` encoded for the same names are linked into WORK/chunks (encoding
7.5M names takes hours of both cores): the benchmark KB's fingerprint must be the one their
``state.json`` records, build-kb's own ``state.json`` must name the same encoder, precision, chunk
size and count, and each chunk's names must have the same sha256 in both KBs; a chunk holding a
changed name is left for build-kb to encode, and so are ``--own-chunks`` more, spread over the names
(build-kb's own encoding rate at this size).

Recorded per run: each stage's seconds (build-kb's own "stage X: done in" lines), whether it was
skipped as verified, and resident memory: the process's peak (``machine.peak_rss_mb``: build-kb prints
it at the end; polled for a killed run) and, per stage, the highest resident memory sampled every
0.5 s (and of it, pages of mapped files and the rest).
Prints the JSON and writes ``benchmarks/results/umls_build_<names>.json``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import psutil
import typer

from spacy_sapbert.fileio import atomic_open, file_sha256, read_json, write_json
from spacy_sapbert.machine import machine_description, peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
STAGE_LINE = re.compile(r"stage (\w+): (.*)")
DONE = re.compile(r"done in ([\d.]+) s; peak resident memory so far ([\d,]+) MB")
VERIFIED = re.compile(r"verified by sha256 in ([\d.]+) s")
FINAL = re.compile(r"wrote .* in ([\d.]+)s \(peak resident memory ([\d,]+) MB\)")
PIPE_STAND_IN = "¦"  # what a '|' in a name is written as: RRF fields cannot hold '|'


# ---------------------------------------------------------------------------- the synthetic META folder
def mrconso_row(cui: str, atom: int, name: str, preferred: bool, sab: str, code: str) -> str:
    """One MRCONSO.RRF line (18 '|'-terminated fields): an English, unsuppressed atom."""
    ts, stt, ispref, tty = ("P", "PF", "Y", "PT") if preferred else ("S", "VO", "N", "SY")
    fields = [cui, "ENG", ts, f"L{atom:08d}", stt, f"S{atom:08d}", ispref, f"A{atom:08d}", "", "", "", sab, tty, code,
              name, "0", "N", ""]
    return "|".join(fields) + "|\n"


def write_meta(records: Iterable[Any], folder: Path) -> Iterator[Any]:
    """Write ``records`` as ``folder``/MRCONSO.RRF and MRSTY.RRF while passing them on (so that the
    benchmark's own KB is built from the same stream); CUIs are numbered in record order. Each file is
    written under a temporary name and renamed when complete."""
    folder.mkdir(parents=True, exist_ok=True)
    atom = 0
    with atomic_open(folder / "MRCONSO.RRF", "w") as conso, atomic_open(folder / "MRSTY.RRF", "w") as sty:
        for i, rec in enumerate(records, 1):
            cui = f"C{i:07d}"
            sab, code = (rec.sources[0][0], rec.sources[0][1]) if rec.sources else ("SYN", rec.id)
            for j, name in enumerate(rec.all_names):
                atom += 1
                conso.write(mrconso_row(cui, atom, name.replace("|", PIPE_STAND_IN), j == 0, sab, code))
            for k, tui in enumerate(dict.fromkeys(rec.types)):
                sty.write(f"{cui}|{tui.replace('|', PIPE_STAND_IN)}|||AT{i:07d}{k:03d}||\n")
            yield rec


def name_digests(names: List[str], chunk_size: int) -> List[str]:
    """sha256 of each encoding chunk's names (joined by the KB's separator)."""
    return [hashlib.sha256("\x1f".join(names[i : i + chunk_size]).encode("utf8")).hexdigest() for i in range(0, len(names), chunk_size)]


def synthesize(n_names: int, folder: Path, chunk_size: int) -> Dict[str, Any]:
    """The META folder for ``n_names`` names, and what the benchmark's KB of the same records is:
    its fingerprint and its chunks' name digests (``synthetic.json`` beside the files)."""
    from umls_scale import BUNDLE, scaled_records  # benchmarks/umls_scale.py, beside this script

    from spacy_sapbert.kb import ConceptKB

    t0 = time.perf_counter()
    kb = ConceptKB.from_records(write_meta(scaled_records(BUNDLE, n_names), folder))
    info = {
        "names": kb.n_names, "concepts": len(kb), "benchmark_kb_fingerprint": kb.fingerprint,
        "chunk_size": chunk_size, "chunk_name_sha256": name_digests(list(kb.names), chunk_size),
        "names_with_pipe": sum("|" in name for name in kb.names),
        "mrconso": {"bytes": (folder / "MRCONSO.RRF").stat().st_size, "sha256": file_sha256(folder / "MRCONSO.RRF")},
        "mrsty_bytes": (folder / "MRSTY.RRF").stat().st_size, "seconds": round(time.perf_counter() - t0, 1),
    }
    write_json(folder / "synthetic.json", info)
    return info


# ---------------------------------------------------------------------------- one build-kb run, watched
class Run:
    """``build-kb`` as a subprocess: its stderr kept (log file) and parsed for stage lines, its
    memory sampled, and a SIGKILL at a chosen point."""

    def __init__(self, cmd: List[str], env: Dict[str, str], log: Path, kill: Optional[Tuple[str, float]]):
        self.cmd, self.env, self.log, self.kill = cmd, env, log, kill
        self.stage = "start"
        self.stage_started: Dict[str, float] = {}
        self.lines: List[str] = []
        self.rss: Dict[str, Dict[str, float]] = {}
        self.vmhwm = 0.0
        self.killed_in: Optional[str] = None
        self.encoding_bar_at: Optional[float] = None
        self.lock = threading.Lock()

    def go(self) -> Dict[str, Any]:
        t0, load_before = time.time(), [round(x, 2) for x in os.getloadavg()]  # (1/5/15 min: the machine may be shared)
        proc = subprocess.Popen(self.cmd, env=self.env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=ROOT)
        sampler = threading.Thread(target=self._sample, args=(proc,), daemon=True)
        sampler.start()
        with open(self.log, "w", encoding="utf8") as log:
            for piece in self._pieces(proc):
                log.write(piece + "\n")
                self._see(piece, proc)
        rc = proc.wait()
        sampler.join()
        out = {"returncode": rc, "killed_in": self.killed_in, "wall_s": round(time.time() - t0, 1), "stages": self._stages(),
               "peak_rss_mb_polled": round(self.vmhwm, 1), "log": str(self.log), "load_before": load_before,
               "load_after": [round(x, 2) for x in os.getloadavg()]}
        final = next((FINAL.search(x) for x in reversed(self.lines) if FINAL.search(x)), None)
        if final:
            out.update(build_kb_seconds=float(final[1]), peak_rss_mb=float(final[2].replace(",", "")))
        if self.encoding_bar_at is not None:
            out["encoding_bar_at"] = self.encoding_bar_at
        return out

    def _pieces(self, proc: subprocess.Popen) -> Iterator[str]:
        """stderr split on line ends and tqdm's carriage returns."""
        buf = b""
        assert proc.stderr is not None
        while True:
            data = proc.stderr.read1(65536)  # type: ignore[attr-defined]
            if not data:
                break
            buf += data
            *done, buf = re.split(rb"[\r\n]", buf)
            yield from (x.decode("utf8", "replace") for x in done if x.strip())
            if buf.startswith(b"encoding names") and self.encoding_bar_at is None:  # tqdm's bar, not ended until it changes
                self.encoding_bar_at = time.time()
                self._see("", proc)
        if buf.strip():
            yield buf.decode("utf8", "replace")

    def _see(self, piece: str, proc: subprocess.Popen) -> None:
        """Follow the stage from a line of stderr (or nothing new: "") and kill where planned."""
        found = STAGE_LINE.match(piece)
        if found:
            self.lines.append(piece)
            if found[1] != self.stage:
                self.stage = found[1]
                self.stage_started[self.stage] = time.time()
        elif FINAL.search(piece) or "Error" in piece or piece.startswith("error"):
            self.lines.append(piece)
        if piece.startswith("encoding names") and self.encoding_bar_at is None:
            self.encoding_bar_at = time.time()
        if self.kill == ("encode", 0.0) and self.encoding_bar_at is not None:
            self._kill(proc)  # once encode_chunks has written its state.json and started its bar

    def _kill(self, proc: subprocess.Popen) -> None:
        with self.lock:
            if self.killed_in is not None:
                return
            self.killed_in = self.stage
            self.vmhwm = max(self.vmhwm, _status(proc.pid).get("peak", 0.0))
            proc.send_signal(signal.SIGKILL)

    def _sample(self, proc: subprocess.Popen) -> None:
        while proc.poll() is None:
            status = _status(proc.pid)
            if status:
                self.vmhwm = max(self.vmhwm, status["peak"])
                top = self.rss.setdefault(self.stage, {})
                for key in ("rss", "anon", "file"):
                    top[key] = max(top.get(key, 0.0), status[key])
            if self.kill is not None and self.stage == self.kill[0] and self.kill[1] > 0:
                if time.time() - self.stage_started[self.stage] >= self.kill[1]:
                    self._kill(proc)
            time.sleep(0.5)

    def _stages(self) -> Dict[str, Dict[str, Any]]:
        out: Dict[str, Dict[str, Any]] = {}
        for line in self.lines:
            found = STAGE_LINE.match(line)
            if not found:
                continue
            row = out.setdefault(found[1], {})
            done = DONE.search(found[2])
            if done:
                row.update(seconds=float(done[1]), peak_rss_mb_so_far=float(done[2].replace(",", "")))
            elif "skipped" in found[2] or "finished earlier" in found[2]:
                row["skipped_verified"] = found[2]
            row.setdefault("lines", []).append(found[2][:300])
        for stage, top in self.rss.items():
            out.setdefault(stage, {})["sampled_max_mb"] = {k: round(v, 1) for k, v in top.items()}
        return out


def _status(pid: int) -> Dict[str, float]:
    """Peak and current resident memory of ``pid`` in MB (``peak``: ``machine.peak_rss_mb``; ``rss``,
    and of it ``file``: pages of mapped files, ``anon``: the rest), empty once it is gone."""
    try:
        info = psutil.Process(pid).memory_info()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return {}
    peak = peak_rss_mb(pid)
    return {"peak": peak, "rss": info.rss / 2**20, "file": info.shared / 2**20, "anon": (info.rss - info.shared) / 2**20} if peak else {}


# ---------------------------------------------------------------------------- seeding the chunks
def link_seed_chunks(seed: Path, work: Path, info: Dict[str, Any], own: int = 0) -> Dict[str, Any]:
    """Link the seed folder's chunks into ``work``/chunks where verified to be the same names' vectors,
    but for ``own`` chunks spread evenly over the names, left for build-kb to encode (its rate)."""
    from spacy_sapbert.kb import ConceptKB

    seed_state, build_state = read_json(seed / "state.json"), read_json(work / "chunks" / "state.json")
    kb = ConceptKB.from_disk(work / "kb")
    problems = []
    if seed_state["kb"] != info["benchmark_kb_fingerprint"]:
        problems.append(f"the seed chunks are for KB {seed_state['kb']}, not the benchmark KB {info['benchmark_kb_fingerprint']}")
    if build_state["kb"] != kb.fingerprint:
        problems.append("build-kb's state.json is not for its own KB stage")
    for key in ("encoder", "precision", "chunk_size", "n"):
        if seed_state[key] != build_state[key]:
            problems.append(f"{key}: the seed has {seed_state[key]!r}, build-kb {build_state[key]!r}")
    if problems:
        raise SystemExit("not seeding: " + "; ".join(problems))
    mine = name_digests(list(kb.names), int(build_state["chunk_size"]))
    spread = {round(x) for x in (i * (len(mine) - 1) / max(own - 1, 1) for i in range(own))}
    linked, left = 0, []
    for i, (a, b) in enumerate(zip(info["chunk_name_sha256"], mine)):
        target = work / "chunks" / f"chunk_{i:05d}.npy"
        if a != b or i in spread:
            left.append(i)
        elif not target.exists() and (seed / target.name).is_file():
            os.symlink((seed / target.name).resolve(), target)
            linked += 1
    return {"seed": str(seed), "linked": linked, "left_to_build_kb": left, "names_differ_in": [i for i, (a, b) in enumerate(zip(info["chunk_name_sha256"], mine)) if a != b],
            "chunks": len(mine),
            "seed_state": seed_state, "build_state": build_state, "kb_fingerprint": kb.fingerprint}


def seed_encoding_span(seed: Path) -> Dict[str, Any]:
    """When the seed chunks were written: from ``state.json`` (written as encoding starts) to the
    last chunk, by file times."""
    chunks = sorted(seed.glob("chunk_*.npy"))
    start, end = (seed / "state.json").stat().st_mtime, max(f.stat().st_mtime for f in chunks)
    return {"chunks": len(chunks), "state_json_mtime": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start)),
            "last_chunk_mtime": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(end)), "wall_s": round(end - start, 1)}


def build_kb_encoding(work: Path, run: Dict[str, Any], chunk_size: int, n_names: int) -> Optional[Dict[str, Any]]:
    """build-kb's encoding rate in ``run``: the chunks it wrote itself (not links), from its progress
    bar's first appearance to the last of them."""
    started = run.get("encoding_bar_at")
    own = [f for f in (work / "chunks").glob("chunk_*.npy") if not f.is_symlink() and f.stat().st_mtime >= (started or 0)]
    if started is None or not own:
        return None
    names = sum(min(chunk_size, n_names - int(f.stem.split("_")[1]) * chunk_size) for f in own)
    seconds = max(f.stat().st_mtime for f in own) - started
    rate = names / seconds
    return {"chunks": len(own), "names": names, "seconds": round(seconds, 1), "names_per_s": round(rate, 1),
            "projected_s_for_all_names": round(n_names / rate, 1)}


# ---------------------------------------------------------------------------- main
def main(
    names: int = typer.Option(7_500_000, help="KB size in names (umls_scale.py's scaled_records)"),
    work: Path = typer.Option(ROOT / "corpus" / "cache" / "umls-build", help="META folder, work folder and output"),
    threads: int = typer.Option(2, help="OMP/MKL threads of build-kb (torch and FAISS)"),
    kill: List[str] = typer.Option([], help="STAGE:SECONDS, one run killed that long into STAGE (repeatable, in order)"),
    seed_chunks: Optional[Path] = typer.Option(None, help="umls_scale.py --encode-only chunks of the same names to link in"),
    chunk_size: int = typer.Option(50_000, help="build-kb's chunk size (the seed's)"),
    own_chunks: int = typer.Option(0, help="With --seed-chunks: this many chunks, spread over the names, encoded by build-kb anyway"),
    redo_index: bool = typer.Option(False, help="Remove the kept index stage and run build-kb once more (index and write timed)"),
    synthetic_only: bool = typer.Option(False, hidden=True),
) -> None:
    """Write the synthetic META folder, run build-kb on it (killed and resumed) and record the stages."""
    meta, out, stages_dir = work / f"meta-{names}", work / f"kb-{names}", work / f"kb-{names}.work"
    if synthetic_only:
        typer.echo(json.dumps(synthesize(names, meta, chunk_size)))
        return
    if not (meta / "synthetic.json").is_file():  # in a process of its own: the benchmark KB takes GBs
        subprocess.run([sys.executable, str(Path(__file__)), "--names", str(names), "--work", str(work), "--chunk-size",
                        str(chunk_size), "--synthetic-only"], check=True, stdout=subprocess.DEVNULL)
    info = read_json(meta / "synthetic.json")
    cmd = [sys.executable, "-m", "spacy_sapbert", "build-kb", str(meta / "MRCONSO.RRF"), str(out), "--work-dir", str(stages_dir), "--keep-work"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    result_path = RESULTS / f"umls_build_{names}.json"
    if redo_index:
        result = read_json(result_path) if result_path.is_file() else {"names": info["names"]}
        for name in ("index", "write"):
            (stages_dir / name / "stage.json").unlink(missing_ok=True)
        run = Run(cmd, env, work / f"run-redo-index-{time.strftime('%Y%m%dT%H%M%S')}.log", None).go()
        result["redo_index_runs"] = result.get("redo_index_runs", []) + [run]
        write_json(result_path, result)
        typer.echo(json.dumps(run, indent=2))
        return
    for stale in (out, stages_dir):  # a measured build starts from nothing but the META folder
        shutil.rmtree(stale, ignore_errors=True)
    plan = [(spec.split(":")[0], float(spec.split(":")[1])) for spec in kill] + [None]
    runs, seeding, encoding = [], None, None
    for i, step in enumerate(plan, 1):
        run = Run(cmd, env, work / f"run-{names}-{i}.log", step).go()  # type: ignore[arg-type]
        run["run"], run["kill_plan"] = i, list(step) if step else None
        runs.append(run)
        typer.echo(f"run {i}: {json.dumps({k: v for k, v in run.items() if k != 'stages'})}", err=True)
        if seed_chunks is not None and seeding is None and (stages_dir / "kb" / "stage.json").is_file() and (stages_dir / "chunks" / "state.json").is_file():
            seeding = link_seed_chunks(seed_chunks, stages_dir, info, own_chunks)
            typer.echo(f"seeded: {json.dumps({k: v for k, v in seeding.items() if 'state' not in k})}", err=True)
        encoding = build_kb_encoding(stages_dir, run, chunk_size, info["names"]) or encoding
    final = runs[-1]
    if final["returncode"] != 0:
        raise SystemExit(f"the last build-kb run failed (exit {final['returncode']}); see {final['log']}")
    stages = stage_summary(runs)
    result = {
        "command": "python benchmarks/umls_build.py " + " ".join(sys.argv[1:]),
        "build_kb_command": " ".join(["python", "-m", "spacy_sapbert", *cmd[3:]]),
        "threads": threads, "machine": machine_description(),
        "names": info["names"], "concepts": info["concepts"], "synthetic": {k: v for k, v in info.items() if k != "chunk_name_sha256"},
        "runs": runs, "seeding": seeding, "seed_encoding": seed_encoding_span(seed_chunks) if seed_chunks else None,
        "build_kb_encoding": encoding, "stages": stages,
        "peak_rss_mb": max(r.get("peak_rss_mb", r["peak_rss_mb_polled"]) for r in runs),
        "output": describe_output(out),
    }
    write_json(result_path, result)
    typer.echo(json.dumps(result, indent=2, ensure_ascii=False))


def stage_summary(runs: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Per stage: the seconds of the last run that did its work (a run killed in it did not finish
    it), that run's peak resident memory at its end and sampled maximum; and, from the last run,
    how long verifying it took where it was skipped."""
    out: Dict[str, Dict[str, Any]] = {}
    for run in runs:
        for name, row in run["stages"].items():
            skipped = "skipped_verified" in row
            if "seconds" in row and not skipped and run["killed_in"] != name:
                out[name] = {"seconds": row["seconds"], "run": run["run"], "peak_rss_mb_so_far": row["peak_rss_mb_so_far"],
                             "sampled_max_mb": row.get("sampled_max_mb")}
    for name, row in runs[-1]["stages"].items():
        if "skipped_verified" in row:
            found = VERIFIED.search(" ".join(row["lines"]))
            out.setdefault(name, {}).update(last_run=row["skipped_verified"], verify_s=float(found[1]) if found else None,
                                            last_run_seconds=row.get("seconds"))
    return out


def describe_output(out: Path) -> Dict[str, Any]:
    """The finished folder, loaded as a user loads it."""
    from spacy_sapbert.search import LinkingKB

    lkb = LinkingKB.from_disk(out)
    return {"stats": lkb.kb.stats(), "kb_fingerprint": lkb.kb.fingerprint, "index": lkb.index.describe(),
            "mb": round(sum(f.stat().st_size for f in out.iterdir() if f.is_file()) / 2**20, 1)}


if __name__ == "__main__":
    typer.run(main)
