"""Gold-span linking, the previous harness path against the pipeline path, query by query.

The README's encoder rows used to rank the harness's preprocessed strings (abbreviations expanded
and composites split knowing the gold id count, spell-checked, cleaned) on an exact index; they now
come from ``sapbert_linker`` in ``nlp.pipe``. This script runs both on the same KB folder and
encoder, and sorts every query whose outcome differs by why: the two paths searched the same
strings (then only the metric's top-k differs: the linker ranks concepts, the old path names),
split a composite mention differently, or searched other strings. It also measures the one step
left outside the pipeline, NCBI-disease's spell-check list. Writes benchmarks/results/linking_paths.json.

    python benchmarks/linking_paths.py --datasets ncbi-disease bc5cdr-disease
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional

from spacy_sapbert.encoder import SapEncoder, resolve_encoder_path
from spacy_sapbert.evaluation import datasets, runner
from spacy_sapbert.evaluation.gold_spans import link_gold_mentions, ranking_of
from spacy_sapbert.evaluation.metrics import score_queries, summarize
from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import machine_description
from spacy_sapbert.search import LinkingKB

METRICS = (("lenient", 1), ("strict", 1), ("lenient", 5), ("strict", 5))
EXAMPLES = 5


def compare(dataset: str, dictionary: str, encoder: SapEncoder, cache_dir: str) -> Dict[str, object]:
    test, _ = runner.load_queries(dataset, "test")
    kb = runner.build_dictionary(dataset, dictionary, runner.seen_queries(dataset))
    folder, _ = runner.dictionary_kb_folder(kb, encoder, cache_dir, progress=True)
    linking_kb = LinkingKB.from_disk(folder)
    aliases = kb.concept_aliases()
    golds = [q.gold for q in test]

    old_strings = [tuple(kb.normalize(p) for p in q.parts) for q in test]
    vectors = encoder.encode([s for parts in old_strings for s in parts], batch_size=128)
    _, rows = linking_kb.index.search(vectors, runner.NAME_DEPTH)
    old = score_queries(golds, runner._rankings(test, [[int(r) for r in row if r >= 0] for row in rows], kb), aliases)

    nlp = runner.gold_span_pipeline(folder, linking_kb, encoder)
    documents = datasets.load_split(dataset, "test")
    spelling = runner.load_spelling(dataset)
    out: Dict[str, object] = {"dataset": dataset, "dictionary": dictionary, "previous_path": summarize(old)}
    for name, fixes in (("pipeline", spelling), ("pipeline_without_spelling_list", None)):
        if name != "pipeline" and not spelling:
            continue
        links = link_gold_mentions(nlp, documents, fixes)
        parts = [links.parts.get((q.doc_id, q.start, q.end)) or [("", [])] for q in test]
        new = score_queries(golds, [[ranking_of(c) for _, c in p] for p in parts], aliases)
        out[name] = summarize(new)
        if name != "pipeline":
            continue
        reasons: Counter = Counter()
        examples: Dict[str, List[object]] = {}
        for i, q in enumerate(test):
            searched = tuple(s for s, _ in parts[i])
            if searched == old_strings[i]:
                why = "same strings (top-k over concepts, not names)"
            elif len(searched) != len(old_strings[i]):
                why = "composite split differently"
            else:
                why = "other strings"
            for metric, k in METRICS:
                before, after = getattr(old, metric)[k][i], getattr(new, metric)[k][i]
                if before != after:
                    key = f"{metric}@{k} {'gained' if after else 'lost'}: {why}"
                    reasons[key] += 1
                    if len(examples.setdefault(key, [])) < EXAMPLES:
                        examples[key].append({"mention": q.mention, "previous": old_strings[i], "pipeline": searched, "gold": q.gold})
        out["queries"] = len(test)
        out["same_strings"] = sum(tuple(s for s, _ in p) == o for p, o in zip(parts, old_strings))
        out["differences"] = dict(sorted(reasons.items()))
        out["examples"] = examples
    return out


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=list(datasets.BENCHMARKS), choices=list(datasets.BENCHMARKS))
    p.add_argument("--dictionaries", nargs="+", default=list(runner.DICTIONARIES), choices=list(runner.DICTIONARIES))
    p.add_argument("--encoder", help="encoder folder (default: the offline MiniLM)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"])
    p.add_argument("--cache-dir", default="corpus/cache")
    p.add_argument("--output", type=Path, default=Path("benchmarks/results/linking_paths.json"))
    args = p.parse_args(argv)
    runner.set_threads(1)
    encoder = SapEncoder.load(resolve_encoder_path(args.encoder), device="cpu", precision=args.precision)
    results = read_json(args.output)["results"] if args.output.is_file() else []
    for dataset in args.datasets:
        for dictionary in args.dictionaries:
            print(f"{dataset} / {dictionary}", file=sys.stderr, flush=True)
            result = compare(dataset, dictionary, encoder, args.cache_dir)
            result["command"] = " ".join(["python", "benchmarks/linking_paths.py", *(sys.argv[1:] if argv is None else argv)])
            results = [r for r in results if (r["dataset"], r["dictionary"]) != (dataset, dictionary)] + [result]
            write_json(args.output, {"machine": machine_description(), "encoder": encoder.describe(), "results": results})


if __name__ == "__main__":
    main()
