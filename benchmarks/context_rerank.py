"""Context reranking (KRISSBERT-style prototypes): the weight chosen on dev, then what it changes on test.

    python benchmarks/context_rerank.py [--weights 0 0.05 0.1 0.2] [--datasets ...] [--dictionaries ...]

For each dataset and dictionary, gold spans through ``sapbert_linker`` in ``nlp.pipe``:

- *ontology* (no annotated data): prototypes from self-supervision only, the KB's names of one
  concept found verbatim in the NCBI-disease and BC5CDR train abstracts (their annotations unread);
- *paper*: those plus the annotated mentions of the seen splits (train for dev, train + dev for test).

1. Dev split: ``evaluate --dataset D --dictionary X --split dev --context-weight w`` at each weight;
   the weight with the best strict Acc@1 is chosen (ties: the smaller; 0 means it stays off): strict
   counts the concept ``_.cui`` gets, what ``calibrate --context-weight`` maximises too. Lenient
   counts an ambiguous name as right when any of its concepts is gold, so it rewards not deciding.
2. Test split at 0 and at the chosen weight: lenient/strict Acc@1 and @5, the same on the queries whose
   string is a dictionary name of several concepts (*ambiguous*) and on the rest, and mentions/s.
3. With ``--end-to-end`` (after 1-2, or on the saved JSON): the same two weights end to end, raw test
   abstracts through the shipped ``ner-trf`` and the linker (``evaluate --end-to-end --detector ner-trf
   --context-weight w``): link P/R/F1 and abstracts/s.

One torch thread, as ``evaluate`` runs by default; building the prototypes is setup, not query time.
Writes ``benchmarks/results/context_rerank.json`` and the README's ``CONTEXT-RERANK`` block.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from readme_tables import publish  # benchmarks/readme_tables.py, beside this script
from weight_sweep import command, run_sweep, sweep_parser

from spacy_sapbert.evaluation.end_to_end import evaluate_end_to_end
from spacy_sapbert.evaluation.runner import DICTIONARIES, evaluate
from spacy_sapbert.fileio import read_json, write_json

OUT = Path("benchmarks/results/context_rerank.json")
README = Path("benchmarks/README.md")
BLOCK = "CONTEXT-RERANK"
DATASETS = ("ncbi-disease", "bc5cdr-disease", "bc5cdr-chemical")
WEIGHTS = (0.0, 0.05, 0.1, 0.2)
EXAMPLES = {"ontology": "self", "paper": "self+train"}
DETECTOR = "ner-trf"
KEYS = ("lenient_acc@1", "strict_acc@1", "lenient_acc@5", "n_queries", "mentions_per_s")


def choose(dev: Sequence[Dict[str, Any]]) -> float:
    """The weight with the best dev strict Acc@1; ties go to the smaller weight."""
    return min(dev, key=lambda r: (-r["strict_acc@1"], r["weight"]))["weight"]


def test_scores(result: Dict[str, Any]) -> Dict[str, Any]:
    breakdown = result["breakdown"]
    return {**{k: result[k] for k in KEYS},
            "ambiguous": {k: breakdown["name_ambiguous"][k] for k in ("lenient_acc@1", "strict_acc@1", "n_queries")},
            "unambiguous": {k: breakdown["name_unambiguous"][k] for k in ("lenient_acc@1", "strict_acc@1", "n_queries")},
            "prototypes": result.get("context_prototypes")}


def measure(dataset: str, dictionary: str, weights: Sequence[float]) -> Dict[str, Any]:
    examples = EXAMPLES[dictionary]
    dev = []
    for w in weights:
        r = evaluate(dataset, dictionary=dictionary, split="dev", context_weight=w, context_examples=examples)
        dev.append({"weight": w, "lenient_acc@1": r["lenient_acc@1"], "strict_acc@1": r["strict_acc@1"]})
        print(f"{dataset} {dictionary} dev w={w}: lenient@1 {r['lenient_acc@1']} strict@1 {r['strict_acc@1']}", file=sys.stderr, flush=True)
    chosen = choose(dev)
    test: Dict[str, Any] = {}
    for w in dict.fromkeys((0.0, chosen)):
        r = evaluate(dataset, dictionary=dictionary, context_weight=w, context_examples=examples)
        test[str(w)] = {**test_scores(r), "command": f"python -m spacy_sapbert evaluate --dataset {dataset} --dictionary {dictionary}"
                        + (f" --context-weight {w} --context-examples {examples}" if w else "")}
        print(f"{dataset} {dictionary} test w={w}: lenient@1 {r['lenient_acc@1']} strict@1 {r['strict_acc@1']}", file=sys.stderr, flush=True)
    return {"dataset": dataset, "dictionary": dictionary, "examples": examples, "dev": dev, "chosen_weight": chosen, "test": test}


def end_to_end(row: Dict[str, Any]) -> Dict[str, Any]:
    """Link P/R/F1 (fractions) and abstracts/s end to end with ``ner-trf``, at 0 and the row's chosen weight."""
    out = {}
    for w in dict.fromkeys((0.0, row["chosen_weight"])):
        r = evaluate_end_to_end(row["dataset"], DETECTOR, row["dictionary"], linker_config={"context_weight": w} if w else None,
                                context_examples=row["examples"], progress=False)
        out[str(w)] = {**{k: r[k] for k in ("link_p", "link_r", "link_f1", "abstracts_per_s")}, "command": r["command"]}
        print(f"{row['dataset']} {row['dictionary']} end to end w={w}: link F1 {r['link_f1']}", file=sys.stderr, flush=True)
    return out


def _change(off: float, on: float) -> str:
    return f"{off:.1f}" if off == on else f"{off:.1f} → {on:.1f} ({on - off:+.1f})"


def render(result: Dict[str, Any]) -> str:
    lines = [
        f"Generated by `{result['command']}` on {result['machine']['cpu']} (1 torch thread). Gold spans through the "
        "component; the weight w is chosen on dev by strict Acc@1 (the concept `_.cui` gets) among "
        f"{', '.join(str(w) for w in result['weights'])}; test at w = 0 → the chosen w. *Ambiguous*: the query string is a "
        "dictionary name of several concepts, where only the context can decide (strict counts such an answer only when "
        "the linker commits to the gold concept). Prototypes: *ontology* rows use self-supervision only, *paper* rows "
        "add the annotated mentions of the seen splits.",
        "",
        "| dataset | dictionary | dev strict @1 per w | w | lenient @1 | strict @1 | lenient @5 | ambiguous: strict @1 (n) "
        "| unambiguous: lenient @1 | mentions/s |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in result["rows"]:
        dev = ", ".join(f"{r['weight']}: {r['strict_acc@1']:.1f}" for r in row["dev"])
        off, on = row["test"]["0.0"], row["test"][str(row["chosen_weight"])]
        cells = [_change(off[k], on[k]) for k in ("lenient_acc@1", "strict_acc@1", "lenient_acc@5")]
        cells.append(f"{_change(off['ambiguous']['strict_acc@1'], on['ambiguous']['strict_acc@1'])} ({off['ambiguous']['n_queries']:,})")
        cells.append(_change(off["unambiguous"]["lenient_acc@1"], on["unambiguous"]["lenient_acc@1"]))
        speeds = dict.fromkeys((f"{off['mentions_per_s']:,.0f}", f"{on['mentions_per_s']:,.0f}"))
        cells.append(" → ".join(speeds))
        lines.append(f"| {row['dataset']} | {row['dictionary']} | {dev} | {row['chosen_weight']} | " + " | ".join(cells) + " |")
    e2e = [row for row in result["rows"] if "end_to_end" in row]
    if e2e:
        lines += ["", f"End to end, generated by `{result['end_to_end_command']}`: test abstracts through the shipped `{DETECTOR}`, the same "
                  "dictionaries and prototypes (link P/R/F1 in %, "
                  "the NIL threshold chosen on dev gold mentions at each weight):", "",
                  "| dataset | dictionary | w | link P | link R | link F1 | abstracts/s |", "|---|---|--:|--:|--:|--:|--:|"]
        for row in e2e:
            off, on = row["end_to_end"]["0.0"], row["end_to_end"][str(row["chosen_weight"])]
            cells = [_change(100 * off[k], 100 * on[k]) for k in ("link_p", "link_r", "link_f1")]
            cells.append(" → ".join(dict.fromkeys((f"{off['abstracts_per_s']:,.1f}", f"{on['abstracts_per_s']:,.1f}"))))
            lines.append(f"| {row['dataset']} | {row['dictionary']} | {row['chosen_weight']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = sweep_parser(__doc__, WEIGHTS, DATASETS, DICTIONARIES, OUT)
    parser.add_argument("--end-to-end", action="store_true", help="also (or, with --from-saved, only) the end-to-end rows")
    parser.add_argument("--from-saved", action="store_true", help="take the chosen weights from the saved JSON")
    args = parser.parse_args(argv)
    if args.render_only or args.from_saved:
        result = read_json(args.output)
    else:
        result = run_sweep(parser, args, argv, "benchmarks/context_rerank.py", measure, "reranking off")
    if args.end_to_end:
        for row in result["rows"]:
            if row["dataset"] in args.datasets and row["dictionary"] in args.dictionaries and row["chosen_weight"]:
                row["end_to_end"] = end_to_end(row)
        result["end_to_end_command"] = command("benchmarks/context_rerank.py", argv)
        write_json(args.output, result)
    publish(README, BLOCK, render(result))
    return result


if __name__ == "__main__":
    main()
