"""Every benchmark × detector × dictionary end to end: writes benchmarks/results/end_to_end.json and
the README's end-to-end table.

Each run is `python -m spacy_sapbert evaluate --end-to-end …` in a fresh process (its peak memory
is its own); a missing resource (no trained NER, no MeSH tables) is recorded as skipped. Results
are written after every run; ``--only-missing`` keeps earlier results and runs the rest.

    python benchmarks/end_to_end.py                                   # the whole grid
    python benchmarks/end_to_end.py --datasets ncbi-disease --detectors ruler span_finder
    python benchmarks/end_to_end.py --only-missing --ner-model training_runs/ner/model-best
    python benchmarks/end_to_end.py --dictionaries ontology --pipelines bc5cdr=pipelines/bc5cdr:ner bc5cdr-trf=pipelines/bc5cdr-trf:ner-trf
"""
from __future__ import annotations

import argparse
import multiprocessing
import shlex
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

from readme_tables import render_end_to_end_table, update_readme  # benchmarks/readme_tables.py, beside this script

from spacy_sapbert.evaluation.end_to_end import DETECTORS, SPECS, THRESHOLD_GRID, evaluate_end_to_end
from spacy_sapbert.evaluation.runner import DICTIONARIES
from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import machine_description

README_BLOCK = "END-TO-END"


def run_one(dataset: str, detector: str, dictionary: str, options: Dict[str, object], pipeline: Optional[str] = None,
            tune_threshold: bool = False) -> Dict[str, object]:
    """One evaluation (in a child process); a missing resource is recorded, not raised. ``pipeline``
    ``NAME=DIR``: a saved pipeline run as it is. ``tune_threshold``: first run the dev split (its
    lexicon the train mentions) at every NIL threshold of ``THRESHOLD_GRID``, then the test split at
    the one with the best dev link F1."""
    name, folder = pipeline.split("=", 1) if pipeline else (None, None)
    key = {"dataset": dataset, "detector": detector, "dictionary": dictionary, "pipeline_name": name}
    try:
        tuned: Dict[str, object] = {}
        if tune_threshold:
            dev = evaluate_end_to_end(dataset, detector, dictionary, pipeline=folder, split="dev",
                                      threshold_sweep=THRESHOLD_GRID, **options)  # type: ignore[arg-type]
            sweep: List[Dict[str, object]] = dev["threshold_sweep"]  # type: ignore[assignment]
            best = max(sweep, key=lambda r: (r["link_f1"], -float(r["threshold"])))  # type: ignore[arg-type]
            tuned = {"threshold_chosen_on_dev": best["threshold"], "dev_threshold_sweep": sweep}
            options = {**options, "linker_config": {"threshold": best["threshold"]}}
        return {**evaluate_end_to_end(dataset, detector, dictionary, pipeline=folder, **options), **key, **tuned}  # type: ignore[arg-type]
    except (FileNotFoundError, ImportError, OSError) as e:
        return {**key, "skipped": f"{type(e).__name__}: {e}"}


def row_key(result: Dict[str, object]) -> tuple:
    """A row: dataset, detector, dictionary, saved pipeline (if any), NIL threshold chosen on dev or not."""
    return (result["dataset"], result["detector"], result["dictionary"], result.get("pipeline_name"),
            "threshold_chosen_on_dev" in result)


def _grid_order(result: Dict[str, object]) -> tuple:
    """Datasets, then dictionaries, then detectors, in their declared order."""
    def at(values, value) -> int:
        return list(values).index(value) if value in values else len(values)

    return (at(SPECS, result["dataset"]), at(DICTIONARIES, result["dictionary"]), bool(result.get("pipeline_name")),
            at(DETECTORS, result["detector"]))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=list(SPECS), choices=list(SPECS))
    p.add_argument("--detectors", nargs="*", default=list(DETECTORS), choices=list(DETECTORS))
    p.add_argument("--dictionaries", nargs="+", default=list(DICTIONARIES), choices=list(DICTIONARIES))
    p.add_argument("--encoder", help="encoder folder (default: the offline MiniLM)")
    p.add_argument("--ner-model", help="spaCy NER pipeline for the ner detectors (default: the shipped one)")
    p.add_argument("--pipelines", nargs="*", default=[], metavar="NAME=DIR:DETECTOR",
                   help="saved pipelines to run as they are, each scored on every --datasets (their KBs are ontologies)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--output", type=Path, default=Path("benchmarks/results/end_to_end.json"))
    p.add_argument("--readme", type=Path, default=Path("benchmarks/README.md"))
    p.add_argument("--only-missing", action="store_true", help="keep results already in --output and run only the others")
    p.add_argument("--tune-threshold", action="store_true",
                   help="choose each row's NIL threshold on the dev split first (a dev run per row), then run test with it")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    args = parse_args(argv)
    options: Dict[str, object] = {
        "encoder_path": args.encoder, "ner_model": args.ner_model, "precision": args.precision, "threads": args.threads,
    }
    previous: List[Dict[str, object]] = []
    if args.output.is_file():
        previous = [r for r in read_json(args.output)["results"] if not r.get("skipped")]
    grid: List[tuple] = [(d, x, dic, None) for d in args.datasets for dic in args.dictionaries for x in args.detectors]
    for spec in args.pipelines:  # NAME=DIR:DETECTOR
        named, _, detector = spec.rpartition(":")
        grid += [(d, detector, "ontology", named) for d in args.datasets]
    def job_key(job: tuple) -> tuple:
        return (*job[:3], job[3] and job[3].split("=")[0], args.tune_threshold)

    if args.only_missing:
        done = {row_key(r) for r in previous}
        grid = [job for job in grid if job_key(job) not in done]
    rerun = {job_key(job) for job in grid}
    results = [r for r in previous if row_key(r) not in rerun]
    machine = machine_description()
    context = multiprocessing.get_context("spawn")
    for n, (dataset, detector, dictionary, pipeline) in enumerate(grid, 1):
        print(f"[{n}/{len(grid)}] {dataset} / {detector} / {dictionary}{' / ' + pipeline if pipeline else ''}", file=sys.stderr, flush=True)
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            result = pool.submit(run_one, dataset, detector, dictionary, options, pipeline, args.tune_threshold).result()
        result["benchmark_command"] = shlex.join(["python", "benchmarks/end_to_end.py", *(sys.argv[1:] if argv is None else argv)])
        results.append(result)
        results.sort(key=_grid_order)
        write_json(args.output, {"machine": machine, "results": results})

    table = render_end_to_end_table(results, machine)
    try:
        update_readme(args.readme, table, block=README_BLOCK)
    except (OSError, ValueError) as e:
        print(f"README not updated ({e}); the table is:\n\n{table}", file=sys.stderr)


if __name__ == "__main__":
    main()
