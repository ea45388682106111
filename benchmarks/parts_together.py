"""#21's linking parts together: every part on at once, and each taken out in turn (gold spans, test).

    python benchmarks/parts_together.py [--encoder NAME=FOLDER] [--datasets ...] [--dictionaries ...]

Each part has its own sweep, which chose its setting on dev with the others off: sparse + dense fusion
(``fusion.py``), context reranking (``context_rerank.py``) and in-document consistency
(``consistency.py``). This script reads those choices from their JSON (``benchmarks/results``) and
asks what they do together: for each dataset and dictionary, ``evaluate --dataset D --dictionary X``
on test with

- every part off (the shipped defaults),
- each part alone (what it adds by itself, measured in the same run),
- every part on at its chosen setting (*all*), and
- *all* but one part, for each part on there (what that part adds beside the others).

A part whose sweep chose 0 for a dataset and dictionary is off in all of its rows. ``--encoder`` adds a
self-aligned encoder as a fourth part (``encoder_choice.py`` compares encoders on dev). Context
prototypes are built as ``context_rerank.py`` builds them: self-supervision for *ontology*, plus the
annotated mentions of the seen splits for *paper*. Speed per part is in each part's own block; this
one reports accuracy only. Writes ``benchmarks/results/parts_together.json`` and the README's
``PARTS-TOGETHER`` block.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from readme_tables import publish  # benchmarks/readme_tables.py, beside this script
from weight_sweep import command, gold_scores

from spacy_sapbert.evaluation.runner import evaluate
from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import machine_description

OUT = Path("benchmarks/results/parts_together.json")
README = Path("benchmarks/README.md")
BLOCK = "PARTS-TOGETHER"
RESULTS = Path("benchmarks/results")
DATASETS = ("ncbi-disease", "bc5cdr-disease", "bc5cdr-chemical")
DICTIONARIES = ("ontology", "paper")
# part → (the sweep whose choice it takes, the evaluate keyword it sets, the evaluate CLI option)
PARTS = {
    "fusion": ("fusion", "fusion_weight", "--fusion-weight"),
    "context": ("context_rerank", "context_weight", "--context-weight"),
    "consistency": ("consistency", "consistency", "--consistency"),
}
EXAMPLES = {"ontology": "self", "paper": "self+train"}  # context_rerank.py's prototypes per dictionary


def chosen_settings(results: Path, dataset: str, dictionary: str) -> Dict[str, float]:
    """Each part's setting as its sweep chose it on dev for ``dataset`` and ``dictionary``."""
    chosen = {}
    for part, (sweep, _, _) in PARTS.items():
        path = results / f"{sweep}.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no {part} choice; run python benchmarks/{sweep}.py first")
        rows = [r for r in read_json(path)["rows"] if r["dataset"] == dataset and r["dictionary"] == dictionary]
        if not rows:
            raise ValueError(f"{path}: no row for {dataset} / {dictionary}; run python benchmarks/{sweep}.py with them")
        chosen[part] = float(rows[0]["chosen_weight"])
    return chosen


def variants(settings: Dict[str, float], encoder: Optional[str]) -> List[Dict[str, Any]]:
    """The rows to measure: every part off, each part alone, *all*, and *all* but each part; a row whose
    parts an earlier row already has is left out (with two parts, *all but one* is the other alone)."""
    on = [p for p, w in settings.items() if w] + (["encoder"] if encoder else [])
    named = ([("all off (defaults)", [])] + [(f"{p} alone", [p]) for p in on] + [("all", on)]
             + [(f"all but {p}", [q for q in on if q != p]) for p in on])
    rows: List[Dict[str, Any]] = []
    for name, parts in named:
        if all(set(r["parts"]) != set(parts) for r in rows):
            rows.append({"name": name, "parts": parts})
    return rows


def measure(dataset: str, dictionary: str, settings: Dict[str, float], encoder: Optional[str]) -> Dict[str, Any]:
    rows = []
    for variant in variants(settings, encoder):
        kwargs: Dict[str, Any] = {PARTS[p][1]: settings[p] for p in variant["parts"] if p in PARTS}
        flags = "".join(f" {PARTS[p][2]} {settings[p]}" for p in variant["parts"] if p in PARTS)
        if "context" in variant["parts"]:
            kwargs["context_examples"] = EXAMPLES[dictionary]
            flags += f" --context-examples {EXAMPLES[dictionary]}"
        folder = encoder if "encoder" in variant["parts"] else None
        if folder:
            flags += f" --encoder {folder}"
        r = evaluate(dataset, folder, dictionary, split="test", **kwargs)
        rows.append({**variant, **gold_scores(r), "linker": r.get("pipeline_options"),
                     "command": f"python -m spacy_sapbert evaluate --dataset {dataset} --dictionary {dictionary}{flags}"})
        print(f"{dataset} {dictionary} {variant['name']}: lenient@1 {r['lenient_acc@1']} strict@1 {r['strict_acc@1']}",
              file=sys.stderr, flush=True)
    return {"dataset": dataset, "dictionary": dictionary, "settings": settings, "variants": rows}


def _parts_on(row: Dict[str, Any], variant: Dict[str, Any]) -> str:
    return ", ".join(f"{p} {row['settings'][p]}" if p in PARTS else p for p in variant["parts"]) or "–"


def render(result: Dict[str, Any]) -> str:
    encoder = result.get("encoder")
    lines = [
        f"Generated by `{result['command']}` on {result['machine']['cpu']} (1 torch thread). Gold spans through the component, "
        "test splits, accuracies in percent. Each part's setting is the one its own sweep chose on dev with the other parts "
        "off (fusion: `fusion.py`, context: `context_rerank.py`, consistency: `consistency.py`); a part whose sweep chose 0 "
        "is off in every row of its dataset and dictionary. *Ambiguous*: the query string is a dictionary name of several concepts."
        + (f" *encoder*: {encoder['name']} (`{encoder['folder']}`) in place of the untrained MiniLM." if encoder else ""),
        "",
        "| dataset | dictionary | row | parts on | lenient @1 | strict @1 | lenient @5 | ambiguous: strict @1 (n) |",
        "|---|---|---|---|--:|--:|--:|--:|",
    ]
    for row in result["rows"]:
        for v in row["variants"]:
            amb = v["ambiguous"]
            lines.append(f"| {row['dataset']} | {row['dictionary']} | {v['name']} | {_parts_on(row, v)} | {v['lenient_acc@1']:.1f} "
                         f"| {v['strict_acc@1']:.1f} | {v['lenient_acc@5']:.1f} | {amb['strict_acc@1']:.1f} ({amb['n_queries']:,}) |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--encoder", metavar="NAME=FOLDER", help="a self-aligned encoder, as a fourth part")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--dictionaries", nargs="+", default=list(DICTIONARIES), choices=DICTIONARIES)
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the parts' sweeps wrote their JSON")
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--render-only", action="store_true")
    args = parser.parse_args(argv)
    if args.render_only:
        result = read_json(args.output)
    else:
        encoder = None
        if args.encoder:
            name, sep, folder = args.encoder.partition("=")
            if not sep or not Path(folder).is_dir():
                parser.error(f"--encoder {args.encoder}: expected NAME=FOLDER with an existing folder")
            encoder = {"name": name, "folder": folder}
        settings = {(d, x): chosen_settings(args.results, d, x) for d in args.datasets for x in args.dictionaries}
        rows = [measure(d, x, settings[d, x], encoder and encoder["folder"]) for d, x in settings]
        result = {"command": command("benchmarks/parts_together.py", argv), "machine": machine_description(),
                  "encoder": encoder, "rows": rows}
        write_json(args.output, result)
    publish(args.readme, BLOCK, render(result))
    return result


if __name__ == "__main__":
    main()
