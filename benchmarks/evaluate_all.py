"""Every benchmark × dictionary × system: writes benchmarks/results/evaluation.json and the table in benchmarks/README.md.

Each evaluation runs in a fresh process, so its peak memory is its own. Results are written
after every run; rows of ``--output`` outside the selected grid are kept, and ``--only-missing``
also keeps those inside it and runs the rest.

    python benchmarks/evaluate_all.py                         # exact, TF-IDF, untrained MiniLM
    python benchmarks/evaluate_all.py --encoder "SapBERT-MiniLM (ours)=models/sapbert-minilm"
    python benchmarks/evaluate_all.py --only-missing --scispacy-python /tmp/scivenv/bin/python
    python benchmarks/evaluate_all.py --baselines "all-MiniLM-L6-v2, untrained"   # rerun these rows, keep the rest
"""
from __future__ import annotations

import argparse
import multiprocessing
import shlex
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from readme_tables import render_table, update_readme  # benchmarks/readme_tables.py, beside this script

from spacy_sapbert.evaluation.datasets import BENCHMARKS
from spacy_sapbert.evaluation.runner import DICTIONARIES, evaluate
from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import machine_description

BASELINES: Dict[str, Tuple[str, Optional[str]]] = {
    "exact match": ("exact", None),
    "char 3-gram TF-IDF": ("tfidf", None),
    "all-MiniLM-L6-v2, untrained": ("encoder", "minilm"),
}
SCISPACY_LABEL = "scispacy candidate generator"


def run_one(dataset: str, dictionary: str, label: str, system: str, encoder: Optional[str], batch_size: int, precision: str) -> Dict[str, object]:
    """One evaluation (in a child process); a missing resource is recorded, not raised."""
    try:
        result = evaluate(dataset, encoder, dictionary, system, batch_size=batch_size, precision=precision)
    except (FileNotFoundError, ImportError) as e:
        result = {"dataset": dataset, "dictionary": dictionary, "system": system, "skipped": f"{type(e).__name__}: {e}"}
    result["label"] = label
    return result


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=list(BENCHMARKS), choices=list(BENCHMARKS))
    p.add_argument("--dictionaries", nargs="+", default=list(DICTIONARIES), choices=list(DICTIONARIES))
    p.add_argument("--baselines", nargs="*", default=list(BASELINES), choices=list(BASELINES))
    p.add_argument("--encoder", action="append", default=[], metavar="LABEL=PATH", help="a trained encoder folder to evaluate too")
    p.add_argument("--scispacy-python", help="python of an environment with scispacy (see benchmarks/scispacy_worker.py)")
    p.add_argument("--output", type=Path, default=Path("benchmarks/results/evaluation.json"))
    p.add_argument("--readme", type=Path, default=Path("benchmarks/README.md"))
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"])
    p.add_argument("--only-missing", action="store_true", help="keep results already in --output and run only the others")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    systems = [(label, *BASELINES[label]) for label in args.baselines]
    for spec in args.encoder:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            sys.exit(f"--encoder expects LABEL=PATH, got {spec!r}")
        systems.append((label, "encoder", path))
    if args.scispacy_python:
        systems.append((SCISPACY_LABEL, "scispacy", args.scispacy_python))

    previous: List[Dict[str, object]] = []
    if args.output.is_file():
        earlier = read_json(args.output)
        previous = [r for r in earlier["results"] if not r.get("skipped")]
        for r in previous:  # rows kept from an earlier run keep the CPU they were measured on
            r.setdefault("machine_cpu", earlier.get("machine", {}).get("cpu"))
    done = {(r["dataset"], r["dictionary"], r["label"]) for r in previous}
    jobs = [
        (d, dic, label, system, enc)
        for d in args.datasets
        for dic in args.dictionaries
        for label, system, enc in systems
        if not (args.only_missing and (d, dic, label) in done)
    ]
    command = shlex.join(["python", "benchmarks/evaluate_all.py", *(sys.argv[1:] if argv is None else argv)])
    machine = machine_description()
    results = list(previous)  # a rerun row replaces its old one in place; rows not rerun stay
    context = multiprocessing.get_context("spawn")
    for n, (dataset, dictionary, label, system, encoder) in enumerate(jobs, 1):
        print(f"[{n}/{len(jobs)}] {dataset} / {dictionary} / {label}", file=sys.stderr, flush=True)
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            result = pool.submit(run_one, dataset, dictionary, label, system, encoder, args.batch_size, args.precision).result()
        result["command"] = command
        result["machine_cpu"] = machine["cpu"]
        key = (dataset, dictionary, label)
        at = next((i for i, r in enumerate(results) if (r["dataset"], r["dictionary"], r["label"]) == key), None)
        if at is None:
            results.append(result)
        else:
            results[at] = result
        write_json(args.output, {"machine": machine, "results": results})

    table = render_table(results, machine)
    try:
        update_readme(args.readme, table, block="EVALUATION-TABLE")
    except (OSError, ValueError) as e:
        print(f"README not updated ({e}); the table is:\n\n{table}", file=sys.stderr)


if __name__ == "__main__":
    main()
