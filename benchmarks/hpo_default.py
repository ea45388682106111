"""The default HPO pipeline's detector: tuned on GSC+ dev, its misses by kind, and its speed.

    python benchmarks/hpo_default.py [--gsc ../shared/data/gscplus-dev/GSCplus_dev_gold.tsv] [--threads 1]

1. Scores the exact-name ruler and a grid of span-finder settings on GSC+ dev (phenotype mentions in
   PubMed abstracts, HPO ids) end to end through ``nlp.pipe``, with the end-to-end metrics;
2. sorts what the chosen setting still misses into kinds;
3. times both detectors on the NCBI-disease and BC5CDR test abstracts (a fresh pipeline each, so
   every distinct string is encoded once; KB loading excluded), abstracts/s and their ratio;
4. with ``--fasthpocr-python PY`` (FastHPOCR's own environment, see ``fasthpocr_worker.py``), scores
   FastHPOCR, a dictionary tagger for HPO, on the same dev abstracts with the same scorer, its
   concepts restricted to the default KB's (HPO's phenotypic abnormalities, where every GSC+ dev
   gold concept is).
Writes ``benchmarks/results/hpo_default.json`` and the HPO-DEFAULT block of benchmarks/README.md
(``--render-only`` re-renders the block from the JSON). Only dev data tunes anything here.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import spacy
import torch
from fasthpocr_worker import run_fasthpocr  # benchmarks/fasthpocr_worker.py, beside this script
from readme_tables import update_readme  # benchmarks/readme_tables.py, beside this script

from spacy_sapbert.defaults import DEFAULT_DETECTOR, HPO_NESTED, HPO_SPAN_FINDER
from spacy_sapbert.evaluation.bootstrap import paired_difference, score_interval
from spacy_sapbert.evaluation.datasets import DEFAULT_DATA_DIR, read_gscplus, read_pubtator
from spacy_sapbert.evaluation.end_to_end import (
    Counts,
    PredictedSpan,
    f1_of,
    gold_spans,
    predicted_spans,
    score_document,
    summarize_counts,
)
from spacy_sapbert.hpo_kb import default_kb_path
from spacy_sapbert.kb import ConceptKB
from spacy_sapbert.machine import machine_description
from spacy_sapbert.normalize import STOPWORDS, WORD, content_keys, word_key
from spacy_sapbert.pipelines import build_pipeline

GSC_DEV = Path("../shared/data/gscplus-dev/GSCplus_dev_gold.tsv")
OUT = Path("benchmarks/results/hpo_default.json")
FASTHPOCR_INDEX = Path("corpus/cache/fasthpocr-index")
README = Path("benchmarks/README.md")
BLOCK = "HPO-DEFAULT"
SETTINGS = ("min_exact_score", "min_partial_score", "max_generic_share", "resolve", "nested")
GRID = [
    {"min_exact_score": t, "min_partial_score": p, "max_generic_share": g, "resolve": r, "nested": None}
    for r in ("longest", "best")
    for t in (0.85, 0.95)
    for p in (0.93, 0.96, 1.01)
    for g in (0.01, 0.03, 1.0)
    if r == "longest" or (g == 0.03 and p == 0.96)
] + [
    {"min_exact_score": t, "min_partial_score": p, "max_generic_share": g, "resolve": "all", "nested": n}
    for n in ("all", "coordinations", "heads")
    for t in (0.9, 0.95)
    for p in (0.96, 0.98)
    for g in (0.01, 0.03)
]


def shipped_settings() -> Dict[str, object]:
    """What the default pipeline's span finder runs with: the factory's defaults, the HPO overrides
    and the nested mentions it keeps (``resolve`` is ``all`` where it keeps them)."""
    config = {**spacy.blank("en").get_factory_meta("sapbert_span_finder").default_config, **HPO_SPAN_FINDER}
    settings = {k: config[k] for k in ("min_exact_score", "min_partial_score", "max_generic_share", "resolve")}
    return {**settings, "resolve": "all", "nested": HPO_NESTED} if HPO_NESTED else {**settings, "nested": None}


def pipeline(kb: Path, detector: str, settings: Dict[str, object]):
    """The default pipeline's assembly (``defaults.default_pipeline``) with these span-finder settings."""
    if detector != "span_finder":
        return build_pipeline(kb, detector, label="PHENOTYPE")
    config = {k: v for k, v in settings.items() if k != "nested"}
    if settings.get("nested"):
        config.pop("resolve")  # build_pipeline's nested mode sets resolve "all"
    return build_pipeline(kb, detector, label="PHENOTYPE", span_finder_config=config, nested=settings.get("nested"))  # type: ignore[arg-type]


def document_counts(nlp, docs) -> Tuple[List[Counts], List[Counts]]:
    """Each document's end-to-end counts of one run, every linked span counted, nested ones (the span
    group) included, and the same scored on ``doc.ents`` alone."""
    linker = nlp.get_pipe("sapbert_linker")
    every, ents_only = [], []
    for d, doc in zip(docs, nlp.pipe([d.text for d in docs])):
        every.append(score_document(gold_spans(d), predicted_spans(doc, linker)))
        ents_only.append(score_document(gold_spans(d), predicted_spans(doc, linker, nested=False)))
    return every, ents_only


def score(nlp, docs) -> Dict[str, object]:
    """End-to-end scores counting every linked span (``document_counts``), and, under ``ents_only``,
    the same run scored on ``doc.ents`` alone."""
    return summarized(*document_counts(nlp, docs))


def summarized(every: Sequence[Counts], ents_only: Sequence[Counts]) -> Dict[str, object]:
    """``score``'s figures from the documents' counts."""
    return {**summarize_counts(Counts.total(every)), "ents_only": summarize_counts(Counts.total(ents_only))}


def fasthpocr_label(longest_match: bool) -> str:
    return f"FastHPOCR, {'longest match' if longest_match else 'all matches'}"


def fasthpocr_counts(python: str, kb: Path, docs, longest_match: bool) -> List[Counts]:
    """FastHPOCR's annotations of each document scored as ours are: one predicted span per distinct
    offsets, with every concept FastHPOCR gives it that the KB holds."""
    concepts = set(ConceptKB.from_disk(kb).concept_ids)
    found = run_fasthpocr(python, [d.text for d in docs], FASTHPOCR_INDEX, longest_match=longest_match)
    per_doc = []
    for d, tagged in zip(docs, found["annotations"]):
        spans: Dict[tuple, List[str]] = {}
        for start, end, concept in tagged:
            if concept in concepts:
                spans.setdefault((start, end), []).append(concept)
        per_doc.append(score_document(gold_spans(d), [PredictedSpan(s, e, tuple(dict.fromkeys(c))) for (s, e), c in spans.items()]))
    return per_doc


def uncertainty(shipped: Sequence[Counts], peers: Dict[str, Sequence[Counts]]) -> Dict[str, object]:
    """Link F1 with its bootstrap interval over the dev documents, for the shipped default and each
    peer, and the paired interval of the shipped default's lead over each peer (``evaluation.bootstrap``)."""
    link_f1 = f1_of("link")
    out: Dict[str, object] = {"span finder, shipped": score_interval(shipped, link_f1)}
    for name, counts in peers.items():
        out[name] = score_interval(counts, link_f1)
        out[f"span finder, shipped - {name}"] = paired_difference(shipped, counts, link_f1)
    return out


def miss_kinds(nlp, docs) -> Dict[str, List[str]]:
    """Why each gold mention was not found with exact boundaries, first reason that applies."""
    finder = nlp.get_pipe("sapbert_span_finder")
    index = finder.name_index()
    kinds: Dict[str, List[str]] = {}
    linker = nlp.get_pipe("sapbert_linker")
    for d, doc in zip(docs, nlp.pipe([d.text for d in docs])):
        found = {(p.start, p.end) for p in predicted_spans(doc, linker)}  # nested ones included
        proposed = {(doc[p.start].idx, doc[p.end - 1].idx + len(doc[p.end - 1])) for p in finder.proposals(doc)}
        for g in gold_spans(d):
            if (g.start, g.end) in found:
                continue
            text = d.text[g.start : g.end]
            words = WORD.findall(text.lower())
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
    linker = nlp.get_pipe("sapbert_linker")
    n_ents = sum(len(linker.spans_to_link(doc)) for doc in nlp.pipe(texts, batch_size=batch_size))
    seconds = time.perf_counter() - t0
    return {"abstracts": len(texts), "seconds": round(seconds, 2), "abstracts_per_s": round(len(texts) / seconds, 1), "mentions": n_ents}


def uncertainty_sentence(found: Dict[str, Dict[str, float]]) -> str:
    """The intervals of ``uncertainty`` in words, the shipped default's first."""
    found = dict(sorted(found.items(), key=lambda kv: not kv[0].startswith("span finder, shipped")))
    first = next(iter(found.values()))
    scores = "; ".join(f"{name} {v['value']:.3f} [{v['low']:.3f}, {v['high']:.3f}]" for name, v in found.items() if "value" in v)
    leads = "; ".join(f"{name.split(' - ')[0]} minus {name.split(' - ')[1]} {v['difference']:+.3f} [{v['low']:+.3f}, "
                      f"{v['high']:+.3f}], higher in {100 * v['first_higher']:.0f}% of the resamples"
                      for name, v in found.items() if "difference" in v)
    return (f"How far these link F1 figures could move with other abstracts ({100 * first['level']:.0f}% intervals over "
            f"{first['resamples']:,} bootstrap resamples of the {first['documents']} dev abstracts, "
            f"`spacy_sapbert.evaluation.bootstrap`): {scores}" + (f". Paired, on the same resamples: {leads}." if leads else "."))


def render(result: Dict[str, object]) -> str:
    """The HPO-DEFAULT block: ruler vs the shipped span finder on GSC+ dev, the misses, the speed."""
    rows = result["grid"]  # type: ignore[index]
    shipped = result["shipped_on_dev"]
    keys = ("mention_p", "mention_r", "mention_f1", "overlap_f1", "link_p", "link_r", "link_f1", "doc_f1")
    lines = [
        f"Generated by `{result['command'].strip()}` (JSON: `benchmarks/results/hpo_default.json`) on {result['cpu']}, "
        f"torch on {result['threads']} thread(s). Dev: {result['dev']['abstracts']} GSC+ dev abstracts, "  # type: ignore[index]
        f"{result['dev']['mentions']} phenotype mentions, end to end through `nlp.pipe` with the default HPO KB. "  # type: ignore[index]
        "Scoring: every distinct linked character span counts once, the entities (`doc.ents`, never overlapping) and "
        "the nested mentions of the span group (`doc.spans[\"sapbert_nested\"]`) alike; a gold mention nested in "
        "another counts like any other. *entities only*: the same run scored on `doc.ents` alone."
        + (" *FastHPOCR* (`--fasthpocr-python`): FastHPOCR 0.1.4, a dictionary tagger for HPO, on the same abstracts in its own "
           "environment (`benchmarks/fasthpocr_worker.py`), its annotations as it gives them (all matches, or its "
           "`longestMatch`), their concepts restricted to the default KB's (HPO's phenotypic abnormalities, where every "
           "GSC+ dev gold concept is), scored the same way." if result.get("fasthpocr") else ""),
        "",
        "| detector | settings | " + " | ".join(keys) + " |",
        "|---|---|" + "--:|" * len(keys),
    ]
    best = {k: result["best_on_dev"][k] for k in SETTINGS}  # type: ignore[index]  # in SETTINGS' order: the JSON sorts its keys
    longest = max((r for r in rows[1:] if r["resolve"] == "longest"), key=lambda r: (r["link_f1"], r["mention_f1"]))  # type: ignore[index]
    table = (("ruler (exact KB names)", rows[0]), ("span finder, best without nested mentions", longest),  # type: ignore[index]
             ("span finder, shipped", shipped), ("span finder, shipped, entities only", shipped and shipped["ents_only"]))
    table += tuple((f"{row['detector']} (peer, its own code)", row) for row in result.get("fasthpocr", []))  # type: ignore[union-attr]
    for name, row in table:
        if row:
            settings = "–" if "resolve" not in row else ", ".join(f"{k} {row[k]}" for k in best)  # type: ignore[index]
            lines.append(f"| {name} | {settings} | " + " | ".join(f"{row[k]:.3f}" for k in keys) + " |")  # type: ignore[index]
    if result.get("uncertainty"):
        lines += ["", uncertainty_sentence(result["uncertainty"])]  # type: ignore[arg-type]
    lines += ["", f"Best of the {len(rows) - 1} span-finder settings on dev by link F1: "
              + ", ".join(f"{k} {v}" for k, v in best.items()) + "."]  # type: ignore[union-attr]
    misses = result["default_misses_on_dev"]
    lines += ["", "What the shipped span finder misses on dev (first reason that applies, with examples):", ""]
    for kind, found in sorted(misses.items(), key=lambda kv: -kv[1]["count"]):  # type: ignore[union-attr]
        lines.append(f"- {kind}: {found['count']} (" + "; ".join(f'"{x}"' for x in found["examples"][:4]) + ")")
    sp = result["speed"]
    lines += [
        "",
        f"Speed on the {sp['ruler']['abstracts']} {sp['texts']} (a fresh pipeline each, KB loading excluded): "  # type: ignore[index]
        f"ruler {sp['ruler']['abstracts_per_s']} abstracts/s, span finder {sp['span_finder']['abstracts_per_s']} "  # type: ignore[index]
        f"abstracts/s (ratio {sp['span_finder_to_ruler']}).",  # type: ignore[index]
    ]
    if result.get("load_average"):
        lines[-1] += f" Load average during the run: {result['load_average']}."
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsc", type=Path, default=GSC_DEV)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (2 threads thrash when another process holds a core)")
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--fasthpocr-python", help="FastHPOCR's Python (its own environment): score it on the same dev abstracts")
    parser.add_argument("--render-only", action="store_true", help="re-render the README block from the JSON")
    args = parser.parse_args(list(argv) or None)
    if args.fasthpocr_python and not os.access(args.fasthpocr_python, os.X_OK):
        parser.error(f"--fasthpocr-python {args.fasthpocr_python}: no such python; make FastHPOCR's environment "
                     "(benchmarks/fasthpocr_worker.py says how) or leave the option out")
    if args.render_only:
        from spacy_sapbert.fileio import read_json

        result = read_json(args.output)
        update_readme(README, render(result), block=BLOCK)
        return result
    torch.set_num_threads(args.threads)
    kb = default_kb_path()
    dev = read_gscplus(args.gsc)
    result: Dict[str, object] = {
        "command": "python benchmarks/hpo_default.py " + " ".join(argv or sys.argv[1:]),
        "cpu": machine_description()["cpu"],
        "threads": args.threads,
        "dev": {"file": str(args.gsc), "abstracts": len(dev), "mentions": sum(len(d.mentions) for d in dev)},
        "kb": str(kb),
    }
    rows = [{"detector": "ruler", **score(pipeline(kb, "ruler", {}), dev)}]
    print(json.dumps(rows[-1]), flush=True)
    documents: List[List[Counts]] = []  # each span-finder row's documents, nested spans counted (the intervals read them)
    for settings in GRID:
        every, ents_only = document_counts(pipeline(kb, "span_finder", settings), dev)
        documents.append(every)
        rows.append({"detector": "span_finder", **settings, **summarized(every, ents_only)})
        print(json.dumps(rows[-1]), flush=True)
    best = max(rows[1:], key=lambda r: (r["link_f1"], r["mention_f1"]))
    chosen = {k: best[k] for k in SETTINGS}
    result["grid"] = rows
    result["best_on_dev"] = chosen
    shipped = shipped_settings()
    result["shipped_default"] = {"detector": DEFAULT_DETECTOR, **shipped}
    at = next((i for i, r in enumerate(rows[1:]) if all(r[k] == v for k, v in shipped.items())), None)
    result["shipped_on_dev"] = rows[1 + at] if at is not None else None
    misses = miss_kinds(pipeline(kb, "span_finder", shipped), dev)
    result["default_misses_on_dev"] = {k: {"count": len(v), "examples": v[:8]} for k, v in sorted(misses.items(), key=lambda kv: -len(kv[1]))}
    peers = {fasthpocr_label(longest): fasthpocr_counts(args.fasthpocr_python, kb, dev, longest)
             for longest in (False, True)} if args.fasthpocr_python else {}
    if peers:
        result["fasthpocr"] = [{"detector": name, **summarize_counts(Counts.total(c))} for name, c in peers.items()]
        print(json.dumps(result["fasthpocr"]), flush=True)
    shipped_documents = documents[at] if at is not None else document_counts(pipeline(kb, "span_finder", shipped), dev)[0]
    result["uncertainty"] = uncertainty(shipped_documents, peers)
    print(json.dumps(result["uncertainty"]), flush=True)
    texts = [d.text for name in ("ncbi-disease/NCBItestset_corpus.txt", "bc5cdr/CDR_TestSet.PubTator.txt") for d in read_pubtator(DEFAULT_DATA_DIR / name)]
    ruler_speed = speed(kb, "ruler", {}, texts)
    finder_speed = speed(kb, "span_finder", shipped, texts)
    result["speed"] = {
        "texts": "NCBI-disease test + BC5CDR test abstracts",
        "ruler": ruler_speed,
        "span_finder": finder_speed,
        "span_finder_to_ruler": round(finder_speed["abstracts_per_s"] / ruler_speed["abstracts_per_s"], 3),
    }
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps({k: result[k] for k in ("best_on_dev", "shipped_default", "default_misses_on_dev", "speed")}, indent=1))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    from spacy_sapbert.fileio import write_json

    write_json(args.output, result)
    update_readme(README, render(result), block=BLOCK)
    return result


if __name__ == "__main__":
    main()
