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

With ``--annotated-prototypes`` the same sweep runs on the *ontology* dictionary with the annotated
prototypes too (what ``build-context KB TEXTS --annotated TRAIN`` builds: KRISSBERT's supervised
setting, the dictionary left without the train mentions), into its own JSON and README block.

One torch thread, as ``evaluate`` runs by default; building the prototypes is setup, not query time.
Writes ``benchmarks/results/context_rerank.json`` and the README's ``CONTEXT-RERANK`` block.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from readme_tables import publish  # benchmarks/readme_tables.py, beside this script
from weight_sweep import end_to_end_at, gold_sweep, gold_sweep_main, render_gold_sweep

from spacy_sapbert.evaluation.end_to_end import evaluate_end_to_end
from spacy_sapbert.evaluation.runner import DICTIONARIES, evaluate

OUT = Path("benchmarks/results/context_rerank.json")
README = Path("benchmarks/README.md")
BLOCK = "CONTEXT-RERANK"
DATASETS = ("ncbi-disease", "bc5cdr-disease", "bc5cdr-chemical")
WEIGHTS = (0.0, 0.05, 0.1, 0.2)
EXAMPLES = {"ontology": "self", "paper": "self+train"}
DETECTOR = "ner-trf"


ANNOTATED_OUT = Path("benchmarks/results/context_rerank_annotated.json")
ANNOTATED_BLOCK = "CONTEXT-RERANK-ANNOTATED"
ANNOTATED_FLAG = "--annotated-prototypes"


def measure(dataset: str, dictionary: str, weights: Sequence[float], examples: Optional[str] = None) -> Dict[str, Any]:
    examples = examples or EXAMPLES[dictionary]
    row = gold_sweep(dataset, dictionary, weights,
                     lambda split, w: evaluate(dataset, dictionary=dictionary, split=split, context_weight=w, context_examples=examples),
                     lambda w: f" --context-weight {w} --context-examples {examples}",
                     lambda r: {"prototypes": r.get("context_prototypes")})
    return {**row, "examples": examples}


def end_to_end(row: Dict[str, Any]) -> Dict[str, Any]:
    """Link P/R/F1 (fractions) and abstracts/s end to end with ``ner-trf``, at 0 and the row's chosen weight."""
    return end_to_end_at(row, lambda w: evaluate_end_to_end(
        row["dataset"], DETECTOR, row["dictionary"], linker_config={"context_weight": w} if w else None,
        context_examples=row["examples"], progress=False))


AMBIGUOUS = ("*Ambiguous*: the query string is a dictionary name of several concepts, where only the context can decide (strict "
             "counts such an answer only when the linker commits to the gold concept). ")


def render(result: Dict[str, Any]) -> str:
    return render_gold_sweep(
        result, "the weight w", "w",
        AMBIGUOUS + "Prototypes: *ontology* rows use self-supervision only, *paper* rows add the annotated mentions of the seen splits.",
        DETECTOR, same="dictionaries and prototypes")


def render_annotated(result: Dict[str, Any]) -> str:
    return render_gold_sweep(
        result, "the weight w", "w",
        AMBIGUOUS + "Prototypes: self-supervision and the annotated mentions of the seen splits (train for dev, train + dev "
        "for test), with the *ontology* dictionary: the train mentions teach only the prototypes, not the dictionary.",
        DETECTOR, same="dictionaries and prototypes")


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    if ANNOTATED_FLAG in argv:  # the ontology dictionary with annotated prototypes: its own JSON and block
        argv.remove(ANNOTATED_FLAG)
        return gold_sweep_main(argv, __doc__, f"benchmarks/context_rerank.py {ANNOTATED_FLAG}", "reranking off", WEIGHTS, DATASETS,
                               ("ontology",), ANNOTATED_OUT, lambda d, x, w: measure(d, x, w, "self+train"), end_to_end,
                               lambda result: publish(README, ANNOTATED_BLOCK, render_annotated(result)))
    return gold_sweep_main(argv, __doc__, "benchmarks/context_rerank.py", "reranking off", WEIGHTS, DATASETS, DICTIONARIES, OUT, measure, end_to_end,
                           lambda result: publish(README, BLOCK, render(result)))


if __name__ == "__main__":
    main()
