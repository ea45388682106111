"""In-document consistency: the linker's ``consistency`` chosen on dev, then what it changes on test.

    python benchmarks/consistency.py [--weights 0 0.8 0.9 0.95 1] [--datasets ...] [--dictionaries ...] [--end-to-end]

``consistency`` c (``sapbert_linker``): within a document, a mention whose query repeats an earlier
mention's query, or is its last words ("pits" after "preauricular pits"; a short form the text
defines is searched as its long form), takes the earlier mention's concept when that one's top
candidate scored at least c, unless its own best match is an exact KB name; 0 is off.

For each dataset and dictionary, gold spans through ``sapbert_linker`` in ``nlp.pipe``:

1. Dev split: ``evaluate --dataset D --dictionary X --split dev --consistency c`` at each value; the
   one with the best strict Acc@1 is chosen (ties: the smaller; 0 means it stays off).
2. Test split at 0 and at the chosen value: lenient/strict Acc@1 and @5, the same on the queries whose
   string is a dictionary name of several concepts (*ambiguous*) and on the rest, and mentions/s.
3. With ``--end-to-end`` (after 1-2, or on the saved JSON with ``--from-saved``): the same two values
   end to end, raw test abstracts through the shipped ``ner-trf`` and the linker (``evaluate
   --end-to-end --detector ner-trf --consistency c``): link P/R/F1 and abstracts/s.

One torch thread, as ``evaluate`` runs by default. Writes ``benchmarks/results/consistency.json`` and
the README's ``CONSISTENCY`` block.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from readme_tables import publish  # benchmarks/readme_tables.py, beside this script
from weight_sweep import end_to_end_at, gold_sweep, gold_sweep_main, render_gold_sweep

from spacy_sapbert.evaluation.end_to_end import evaluate_end_to_end
from spacy_sapbert.evaluation.runner import DICTIONARIES, evaluate

OUT = Path("benchmarks/results/consistency.json")
README = Path("benchmarks/README.md")
BLOCK = "CONSISTENCY"
DATASETS = ("ncbi-disease", "bc5cdr-disease", "bc5cdr-chemical")
WEIGHTS = (0.0, 0.8, 0.9, 0.95, 1.0)
DETECTOR = "ner-trf"


def measure(dataset: str, dictionary: str, weights: Sequence[float]) -> Dict[str, Any]:
    return gold_sweep(dataset, dictionary, weights,
                      lambda split, c: evaluate(dataset, dictionary=dictionary, split=split, consistency=c),
                      lambda c: f" --consistency {c}")


def end_to_end(row: Dict[str, Any]) -> Dict[str, Any]:
    return end_to_end_at(row, lambda c: evaluate_end_to_end(
        row["dataset"], DETECTOR, row["dictionary"], linker_config={"consistency": c} if c else None, progress=False))


def render(result: Dict[str, Any]) -> str:
    return render_gold_sweep(result, "the linker's `consistency` c (0: off)", "c",
                             "The tables' *w* column is c. *Ambiguous*: the query string is a dictionary name of several concepts.",
                             DETECTOR)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    return gold_sweep_main(argv, __doc__, "benchmarks/consistency.py", "consistency off", WEIGHTS, DATASETS, DICTIONARIES, OUT, measure, end_to_end,
                           lambda result: publish(README, BLOCK, render(result)))


if __name__ == "__main__":
    main()
