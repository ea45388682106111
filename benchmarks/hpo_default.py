"""The default HPO pipeline's detector: tuned on GSC+ dev, its misses by kind, and its speed.

    python benchmarks/hpo_default.py [--gsc ../shared/data/gscplus-dev/GSCplus_dev_gold.tsv] [--threads 2]

1. Scores the exact-name ruler and a grid of span-finder settings on GSC+ dev (phenotype mentions in
   PubMed abstracts, HPO ids) end to end through ``nlp.pipe``, with the end-to-end metrics;
2. sorts what the chosen setting still misses into kinds;
3. times both detectors on the NCBI-disease and BC5CDR test abstracts (a fresh pipeline each, so
   every distinct string is encoded once; KB loading excluded), abstracts/s and their ratio.
Writes ``benchmarks/results/hpo_default.json``. Only dev data tunes anything here.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

import torch

from spacy_sapbert.defaults import DEFAULT_DETECTOR, DEFAULT_SPAN_FINDER, default_kb_path
from spacy_sapbert.evaluation.datasets import DEFAULT_DATA_DIR, read_gscplus, read_pubtator
from spacy_sapbert.evaluation.end_to_end import Counts, gold_spans, predicted_spans, score_document, summarize_counts
from spacy_sapbert.pipelines import build_pipeline
from spacy_sapbert.span_finder import STOPWORDS, _WORD, content_keys, propose, word_key

GSC_DEV = Path("../shared/data/gscplus-dev/GSCplus_dev_gold.tsv")
OUT = Path("benchmarks/results/hpo_default.json")
GRID = [
    {"threshold": t, "partial_threshold": p, "resolve": r}
    for r in ("longest", "best")
    for t in (0.85, 0.95)
    for p in (0.9, 0.93, 0.96, 0.98, 1.01)
]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def pipeline(kb: Path, detector: str, settings: Dict[str, object]):
    return build_pipeline(kb, detector, label="PHENOTYPE", span_finder_config=settings if detector == "span_finder" else None)


def score(nlp, docs) -> Dict[str, float]:
    linker = nlp.get_pipe("sapbert_linker")
    total = Counts()
    for d, doc in zip(docs, nlp.pipe([d.text for d in docs])):
        total.add(score_document(gold_spans(d), predicted_spans(doc, linker)))
    return summarize_counts(total)


def miss_kinds(nlp, docs) -> Dict[str, List[str]]:
    """Why each gold mention was not found with exact boundaries, first reason that applies."""
    finder = nlp.get_pipe("sapbert_span_finder")
    index = finder.name_index()
    kinds: Dict[str, List[str]] = {}
    for d, doc in zip(docs, nlp.pipe([d.text for d in docs])):
        found = {(e.start_char, e.end_char) for e in doc.ents}
        proposed = {(doc[p.start].idx, doc[p.end - 1].idx + len(doc[p.end - 1])) for p in propose(doc, index, finder.max_words)}
        for g in gold_spans(d):
            if (g.start, g.end) in found:
                continue
            text = d.text[g.start : g.end]
            words = _WORD.findall(text.lower())
            if (g.start, g.end) in proposed:
                kind = "proposed, below threshold or lost an overlap"
            elif any(g.start < e[1] and e[0] < g.end for e in found):
                kind = "overlaps a found span (nested or other boundaries)"
            elif text.isupper() and len(text) <= 10:
                kind = "abbreviation"
            elif any(w in ("and", "or") for w in words) or "," in text:
                kind = "coordination"
            elif any(word_key(w) not in index.vocab for w in words):
                kind = "a word outside the KB vocabulary"
            elif not content_keys(w for w in words if w not in STOPWORDS):
                kind = "function words only"
            else:
                kind = "words in the KB, no name nearly matches"
            kinds.setdefault(kind, []).append(text)
    return kinds


def speed(kb: Path, detector: str, settings: Dict[str, object], texts: Sequence[str], batch_size: int = 64) -> Dict[str, float]:
    nlp = pipeline(kb, detector, settings)
    nlp("warm-up: seizures and microcephaly.")  # loads the KB and encoder; not timed
    t0 = time.perf_counter()
    n_ents = sum(len(doc.ents) for doc in nlp.pipe(texts, batch_size=batch_size))
    seconds = time.perf_counter() - t0
    return {"abstracts": len(texts), "seconds": round(seconds, 2), "abstracts_per_s": round(len(texts) / seconds, 1), "mentions": n_ents}


def main(argv: Sequence[str] = ()) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsc", type=Path, default=GSC_DEV)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args(list(argv) or None)
    torch.set_num_threads(args.threads)
    kb = default_kb_path()
    dev = read_gscplus(args.gsc)
    result: Dict[str, object] = {
        "command": "python benchmarks/hpo_default.py " + " ".join(argv or sys.argv[1:]),
        "cpu": cpu_model(),
        "threads": args.threads,
        "dev": {"file": str(args.gsc), "abstracts": len(dev), "mentions": sum(len(d.mentions) for d in dev)},
        "kb": str(kb),
    }
    rows = [{"detector": "ruler", **score(pipeline(kb, "ruler", {}), dev)}]
    print(json.dumps(rows[-1]), flush=True)
    for settings in GRID:
        rows.append({"detector": "span_finder", **settings, **score(pipeline(kb, "span_finder", settings), dev)})
        print(json.dumps(rows[-1]), flush=True)
    best = max(rows[1:], key=lambda r: (r["link_f1"], r["mention_f1"]))
    chosen = {k: best[k] for k in ("threshold", "partial_threshold", "resolve")}
    result["grid"] = rows
    result["best_on_dev"] = chosen
    result["shipped_default"] = {"detector": DEFAULT_DETECTOR, **DEFAULT_SPAN_FINDER}
    misses = miss_kinds(pipeline(kb, "span_finder", DEFAULT_SPAN_FINDER), dev)
    result["default_misses_on_dev"] = {k: {"count": len(v), "examples": v[:8]} for k, v in sorted(misses.items(), key=lambda kv: -len(kv[1]))}
    texts = [d.text for name in ("ncbi-disease/NCBItestset_corpus.txt", "bc5cdr/CDR_TestSet.PubTator.txt") for d in read_pubtator(DEFAULT_DATA_DIR / name)]
    ruler_speed = speed(kb, "ruler", {}, texts)
    finder_speed = speed(kb, "span_finder", DEFAULT_SPAN_FINDER, texts)
    result["speed"] = {
        "texts": "NCBI-disease test + BC5CDR test abstracts",
        "ruler": ruler_speed,
        "span_finder": finder_speed,
        "span_finder_to_ruler": round(finder_speed["abstracts_per_s"] / ruler_speed["abstracts_per_s"], 3),
    }
    print(json.dumps({k: result[k] for k in ("best_on_dev", "shipped_default", "default_misses_on_dev", "speed")}, indent=1))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    from spacy_sapbert.fileio import write_json

    write_json(args.output, result)
    return result


if __name__ == "__main__":
    main()
