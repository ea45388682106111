"""The dev figures a change to the mention -> concept path moves, before and after it, in one run.

    git worktree add /tmp/before HEAD~1    # or any checkout of the old code
    python benchmarks/dev_before_after.py --before-code /tmp/before --output benchmarks/results/dev_before_after.json

For NCBI-disease and BC5CDR-disease dev, ``python -m spacy_sapbert evaluate --split dev`` as a user runs
it: gold spans against MEDIC alone (``--dictionary ontology``) and with the train mentions
(``paper``), lenient and strict Acc@1 and Acc@5; and the span finder with MEDIC end to end
(``--end-to-end --detector span_finder --dictionary ontology``), link P/R/F1. Each runs in a child
process whose working directory is the checkout measured (so ``-m`` imports its code, and its
``corpus/cache`` holds the KBs: the old checkout's is linked to this one's when it has none).
Dev only: nothing here reads a test split.

Where both checkouts give each document's counts (``evaluate --per-document``), each row also has
``paired``: the change in lenient Acc@1 (gold spans) or link F1 (end to end) with its 95% interval
over resamples of the documents, both runs scored on the same resamples, and the share of them in
which the change is above 0 (``spacy_sapbert.evaluation.bootstrap.paired_difference``): whether a
change of a few mentions could be chance.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from spacy_sapbert.evaluation.bootstrap import paired_difference
from spacy_sapbert.evaluation.end_to_end import Counts, f1_of
from spacy_sapbert.evaluation.metrics import Hits, accuracy
from spacy_sapbert.fileio import write_json
from spacy_sapbert.machine import machine_description

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("ncbi-disease", "bc5cdr-disease")
RUNS: Dict[str, List[str]] = {
    "gold spans, MEDIC alone": ["--dictionary", "ontology"],
    "gold spans, MEDIC + train mentions": ["--dictionary", "paper"],
    "span_finder + MEDIC end to end": ["--dictionary", "ontology", "--end-to-end", "--detector", "span_finder"],
}
FIGURES = ("lenient_acc@1", "lenient_acc@5", "strict_acc@1", "strict_acc@5", "link_p", "link_r", "link_f1")


def evaluate(code: Path, dataset: str, options: Sequence[str]) -> Dict[str, Any]:
    """The figures of one ``evaluate`` run of the code in ``code``, and its ``per_document`` counts
    where that code gives them (``--per-document``; an older checkout runs without)."""
    command = [sys.executable, "-m", "spacy_sapbert", "evaluate", "--dataset", dataset, "--split", "dev", *options]
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(command + ["--per-document"], cwd=code, env=env, capture_output=True, text=True)
    if out.returncode and "--per-document" in out.stderr:
        out = subprocess.run(command, cwd=code, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{' '.join(command)} in {code} failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout)
    return {**{k: result[k] for k in FIGURES if isinstance(result.get(k), (int, float))}, "per_document": result.get("per_document")}


def paired(before: Optional[List[Dict[str, Any]]], after: Optional[List[Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    """After minus before, document by document (``paired_difference``): lenient Acc@1 where the runs
    give gold-span hits, link F1 where they give end-to-end counts; None unless both runs give them
    for the same documents."""
    if not before or not after or [d["doc"] for d in before] != [d["doc"] for d in after]:
        return None
    if "lenient_acc@1" in before[0]:
        hits = [[Hits(*d["lenient_acc@1"]) for d in run] for run in (after, before)]
        return {"figure": "lenient_acc@1", **paired_difference(hits[0], hits[1], accuracy)}
    counts = [[Counts(**{k: v for k, v in d.items() if k != "doc"}) for d in run] for run in (after, before)]
    return {"figure": "link_f1", **paired_difference(counts[0], counts[1], f1_of("link"))}


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before-code", type=Path, required=True, help="a checkout of the code before the change")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "dev_before_after.json")
    args = parser.parse_args(argv)
    before = args.before_code.resolve()
    if not (before / "corpus" / "cache").exists() and (ROOT / "corpus" / "cache").exists():
        (before / "corpus").mkdir(exist_ok=True)
        (before / "corpus" / "cache").symlink_to(ROOT / "corpus" / "cache")
    before_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=before, capture_output=True, text=True).stdout.strip()
    rows = []
    for dataset in DATASETS:
        for label, options in RUNS.items():
            figures = {code: evaluate(path, dataset, options) for code, path in (("before", before), ("after", ROOT))}
            change = paired(*(figures[code].pop("per_document") for code in ("before", "after")))
            rows.append({"dataset": dataset, "run": label, **figures, "paired": change})
            print(f"{dataset}, {label}: " + ", ".join(
                f"{k} {figures['before'][k]} -> {figures['after'].get(k)}" for k in figures["before"])
                + (f"; paired change in {change['figure']} {change['difference']:+} [{change['low']:+}, {change['high']:+}]"
                   if change else ""), flush=True)
    result = {"command": "python benchmarks/dev_before_after.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "before_commit": before_commit, "machine": machine_description(), "rows": rows}
    write_json(args.output, result)
    return result


if __name__ == "__main__":
    main()
