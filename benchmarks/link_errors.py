"""What the linker gets wrong on gold spans of a dev split, by kind: writes
benchmarks/results/link_errors_dev.json and the LINK-ERRORS block of benchmarks/README.md.

    python benchmarks/link_errors.py [--datasets bc5cdr-chemical ncbi-disease bc5cdr-disease] [--dictionary ontology]

The dev gold mentions go through the shipped component (``build_pipeline(kb, "gold")``, ``nlp.pipe``)
against the dictionary a dev run has (``ontology``: MEDIC or the MeSH-2024 chemicals alone). Each
wrong top concept gets the first kind that applies:

* *gold id not in the KB*: no concept of the KB carries a gold id. *renamed id* when the top name
  is the mention itself (score 1.0): the annotation's id (2012) was retired, e.g. a supplementary
  record made a descriptor since, so the right concept is found under its new id;
* *another concept of the same name first*: the top name is the mention itself and the gold
  concept has that name too;
* *gold ranked 2-5*: retrieved, ranked below another concept;
* *short form*: at most 6 characters without a lower-case run of three (element symbols, undefined
  abbreviations, codes: "Na", "ADR", "MK-801");
* *code or formula*: digits mixed with letters ("KF17837", "Ro15-1788", "5,7-DHT");
* *salt or ion word* ("dosulepine hydrochloride");
* *other*: mostly a synonym the KB lacks ("adriamycin" for Doxorubicin) or a broader/narrower
  concept.
Only dev data is used.
"""
from __future__ import annotations

import argparse
import re
import shlex
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from readme_tables import update_readme  # benchmarks/readme_tables.py, beside this script

from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import machine_description

OUT = Path("benchmarks/results/link_errors_dev.json")
README = Path("benchmarks/README.md")
README_BLOCK = "LINK-ERRORS"
KINDS = ("gold id not in the KB, renamed id", "gold id not in the KB", "another concept of the same name first",
         "gold ranked 2-5", "short form", "code or formula", "salt or ion word", "other")
SALT = re.compile(r"\b(hydrochloride|hcl|sodium|potassium|calcium|magnesium|disodium|sulfate|sulphate|acetate|chloride|"
                  r"citrate|maleate|phosphate|bromide|hydrobromide|mesylate|tartrate|succinate|fumarate|nitrate)\b", re.I)
EXAMPLES = 5


def error_kind(text: str, gold_in_kb: bool, top: Sequence[Any], gold_rank: Optional[int], gold_has_top_name: bool) -> str:
    """The first kind (``KINDS``) that applies to a wrong top concept ``top`` (id, name, score, ...)."""
    exact = float(top[2]) >= 1.0
    if not gold_in_kb:
        return KINDS[0] if exact else KINDS[1]
    if exact and gold_has_top_name:
        return KINDS[2]
    if gold_rank is not None and gold_rank < 5:
        return KINDS[3]
    if len(text) <= 6 and not re.search(r"[a-z]{3}", text):
        return KINDS[4]
    if re.search(r"\d", text) and re.search(r"[A-Za-z]", text):
        return KINDS[5]
    if SALT.search(text):
        return KINDS[6]
    return KINDS[7]


def analyse(dataset: str, dictionary: str, cache_dir: str = "corpus/cache") -> Dict[str, Any]:
    from spacy_sapbert.evaluation import datasets
    from spacy_sapbert.evaluation.calibration import gold_concepts
    from spacy_sapbert.evaluation.end_to_end import prepare_kb
    from spacy_sapbert.evaluation.gold_spans import GOLD_SPANS_KEY, find_linker, link_gold_mentions
    from spacy_sapbert.evaluation.preprocess import select_gold_ids
    from spacy_sapbert.evaluation.runner import LINKER_TOP_K, load_spelling
    from spacy_sapbert.pipelines import build_pipeline

    folder, _ = prepare_kb(dataset, dictionary, None, cache_dir, split="dev", progress=False)
    nlp = build_pipeline(folder, "gold", linker_config={"precision": "fp32", "top_k": LINKER_TOP_K, "spans_key": GOLD_SPANS_KEY})
    linker = find_linker(nlp)
    linker.initialize()
    kb = linker.linking_kb.kb
    spec = datasets.get_benchmark(dataset)
    docs = datasets.load_split(spec, "dev")
    links = link_gold_mentions(nlp, docs, load_spelling(spec))
    known, aliases = gold_concepts(kb)

    def is_gold(cid: str, gold: set) -> bool:
        return cid in gold or any(a in gold for a in aliases.get(cid, ()))

    total, wrong = 0, defaultdict(list)
    for d in docs:
        for m in d.mentions:
            gold = set(select_gold_ids(m.ids))
            if not gold:
                continue
            total += 1
            parts = links.parts.get((m.doc_id, m.start, m.end)) or [("", [])]
            cands = parts[0][1]
            if len(parts) == 1 and cands and is_gold(cands[0][0], gold):
                continue
            if len(parts) > 1 and all(p[1] and is_gold(p[1][0][0], gold) for p in parts):
                continue
            top = cands[0] if cands else ("", "", -1.0)
            rank = next((i for i, c in enumerate(cands) if is_gold(c[0], gold)), None)
            row = kb.row_of_name(top[1]) if cands else None
            shares = row is not None and any(is_gold(kb.concept_ids[c], gold) for c in kb.concepts_of_name(row).tolist())
            kind = error_kind(m.text, bool(gold & known), top, rank, shares)
            wrong[kind].append({"text": m.text, "gold": sorted(gold), "top": [top[0], top[1], round(float(top[2]), 4)]})
    kinds = {}
    for kind in KINDS:
        found = wrong.get(kind, [])
        counts = Counter(x["text"] for x in found)
        examples = [next(x for x in found if x["text"] == t) | {"times": n} for t, n in counts.most_common(EXAMPLES)]
        kinds[kind] = {"mentions": len(found), "share_of_dev": round(len(found) / total, 4) if total else 0.0, "examples": examples}
    errors = sum(len(v) for v in wrong.values())
    return {"dataset": dataset, "dictionary": dictionary, "split": "dev", "mentions": total, "wrong": errors,
            "acc@1": round(100 * (total - errors) / total, 2) if total else None, "kb_names": kb.n_names, "kinds": kinds}


def render(out: Dict[str, Any]) -> str:
    lines = [
        f"Generated by `{out['command']}` (JSON: `{OUT.as_posix()}`) on {out['machine'].get('cpu')}. Dev gold mentions "
        "through the shipped linker in `nlp.pipe`, fp32. *Acc@1*: the linker's top concept (what `_.cui` names at "
        "threshold 0) is gold, so an ambiguous name counts only if its first concept is (the evaluation table's "
        "lenient and strict @1 count an ambiguous name whichever of its concepts comes first). Each wrong top concept "
        "is counted once, under the first kind that applies (the script's docstring defines them).",
        "",
        "| dataset | dictionary | dev mentions | Acc@1 | " + " | ".join(KINDS) + " |",
        "|---|---|--:|--:|" + "--:|" * len(KINDS),
    ]
    for r in out["results"]:
        cells = [str(r["kinds"][k]["mentions"]) for k in KINDS]
        lines.append(f"| {r['dataset']} | {r['dictionary']} | {r['mentions']:,} | {r['acc@1']} | " + " | ".join(cells) + " |")
    lines.append("")
    for r in out["results"]:
        lines.append(f"Most frequent, {r['dataset']} ({r['dictionary']}):")
        lines.append("")
        for kind in KINDS:
            ex = r["kinds"][kind]["examples"]
            if ex:
                shown = "; ".join(f"\"{x['text']}\" ×{x['times']} → {x['top'][1]} ({x['top'][0]}, gold {'/'.join(x['gold'])})" for x in ex[:3])
                lines.append(f"- {kind}: {shown}")
        lines.append("")
    return "\n".join(lines).rstrip()


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["bc5cdr-chemical", "ncbi-disease", "bc5cdr-disease"])
    p.add_argument("--dictionary", default="ontology", choices=["ontology", "paper"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--readme-only", action="store_true", help="rewrite the README block from the JSON")
    args = p.parse_args(argv)
    if args.readme_only:
        update_readme(README, render(read_json(OUT)), block=README_BLOCK)
        return
    from spacy_sapbert.evaluation.runner import set_threads

    set_threads(args.threads)
    results = []
    for dataset in args.datasets:
        print(f"{dataset} / {args.dictionary}", file=sys.stderr, flush=True)
        results.append(analyse(dataset, args.dictionary))
    out = {"command": shlex.join(["python", "benchmarks/link_errors.py", *(sys.argv[1:] if argv is None else argv)]),
           "machine": machine_description(), "results": results}
    write_json(OUT, out)
    update_readme(README, render(out), block=README_BLOCK)


if __name__ == "__main__":
    main()
