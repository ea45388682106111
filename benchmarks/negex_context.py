"""Assertion on the NegEx/ConText test set: negated, historical, hypothetical, other experiencer on gold spans.

The test set (``assets/negex/README.md``: source, licence, checksum, how to fetch it) has 2,376
sentences from de-identified clinical reports, one condition each, annotated by physicians with its
negation status (Negated / Affirmed), temporality (Recent / Historical / "Not particular", i.e.
hypothetical) and experiencer (Patient / Other / Family member). Each line is tab-separated:
``id, a blank column, condition, sentence, negation, temporality, experiencer`` (checked on reading).

Each sentence becomes one ``Doc`` through the shipped tokenizer; the condition, found in the sentence
case-insensitively and whitespace-tolerantly (the test set writes it in capitals there), is the gold
span in ``doc.ents`` (where the sentence was cut short and holds only part of the condition, 11
lines, the longest run of its words that it holds); the ``sapbert_context`` component runs as the default pipeline runs it and each
attribute is scored against the annotation: P, R, F, accuracy and the confusion table, for lines
1-1,200 (dev: the only lines the lexicon was tuned on), lines 1,201-2,376 (test) and the whole set.
negspacy's NegEx (``spacy_sapbert.negation.add_negation``, the package's negation before
``sapbert_context``) runs on the same spans for the negation baseline; GenNegEx v1.2's published
whole-set figure (its README: F 0.946, accuracy 97.7%) is quoted beside them. Where the GenConText
output file is there (``assets/negex/README.md``: ``ContextFeatureCheckResults.txt``, the Java ConText's
answers for every line, committed by its authors beside the test set), it is scored on the same
lines for every attribute: the reference implementation of the algorithm ``sapbert_context`` follows.

    python benchmarks/negex_context.py [--data assets/negex/rsAnnotations-1-120-random.txt]

It also prints (and records) a sha256 of every sentence's predicted attributes: run it with another
checkout's package first on the path (``PYTHONPATH=/tmp/before python benchmarks/negex_context.py
--output -``) to see whether a lexicon change moved any prediction at all, on any line.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import spacy
from spacy.language import Language
from spacy.tokens import Doc, Span

from spacy_sapbert.evaluation.end_to_end import prf

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT / "assets" / "negex" / "rsAnnotations-1-120-random.txt"
DEFAULT_GENCONTEXT = ROOT / "assets" / "negex" / "ContextFeatureCheckResults.txt"
GENCONTEXT = "GenConText (its authors' output file)"
OUTPUT = ROOT / "benchmarks" / "results" / "negex_context.json"
DEV_LINES = 1200  # lines 1..1200: dev (tuning); 1201..: test

NEGATION = ("Negated", "Affirmed")
TEMPORALITY = ("Recent", "Historical", "Not particular")
EXPERIENCER = ("Patient", "Other", "Family member")

# GenNegEx v1.2's README (GeneralNegEx.Java.v.1.2.05092009/README in the same repository), whole set
GENNEGEX = {"name": "GenNegEx v1.2 (published, whole set)", "tp": 471, "fp": 33, "fn": 20, "tn": 1852,
            "precision": 0.9345, "recall": 0.9593, "f": 0.9467, "accuracy": 0.9777,
            "note": "10 sentences it called 'possible' are counted neither negated nor affirmed there"}


@dataclass(frozen=True)
class Row:
    line: int
    condition: str
    sentence: str
    negation: str
    temporality: str
    experiencer: str

    @property
    def gold(self) -> Dict[str, bool]:
        return {"negated": self.negation == "Negated", "historical": self.temporality == "Historical",
                "hypothetical": self.temporality == "Not particular", "other": self.experiencer != "Patient"}


def read_rows(path: Path) -> List[Row]:
    """The test set's lines, the column layout checked (7 tab-separated columns, known values)."""
    rows = []
    with open(path, encoding="utf8", newline="") as f:
        for n, line in enumerate(f, 1):
            cols = line.rstrip("\r\n").split("\t")
            if len(cols) != 7:
                raise ValueError(f"{path}:{n}: expected 7 tab-separated columns (id, blank, condition, sentence, "
                                 f"negation, temporality, experiencer), got {len(cols)}")
            ident, _blank, condition, sentence, negation, temporality, experiencer = cols
            if int(ident) != n:
                raise ValueError(f"{path}:{n}: the id column says {ident}")
            if negation not in NEGATION or temporality not in TEMPORALITY or experiencer not in EXPERIENCER:
                raise ValueError(f"{path}:{n}: unknown value in {negation!r}, {temporality!r}, {experiencer!r}")
            rows.append(Row(n, condition, sentence, negation, temporality, experiencer))
    return rows


def read_gencontext(path: Path, rows: Sequence[Row]) -> List[Dict[str, bool]]:
    """GenConText's answers per line from its output file: the test set's 7 columns (checked equal to
    ``rows``), then its negation, temporality and experiencer in lower case."""
    answers = []
    with open(path, encoding="utf8", newline="") as f:
        lines = [line.rstrip("\r\n").split("\t") for line in f]
    if len(lines) != len(rows):
        raise ValueError(f"{path}: {len(lines)} lines, the test set has {len(rows)}")
    for n, (cols, row) in enumerate(zip(lines, rows), 1):
        if len(cols) != 10:
            raise ValueError(f"{path}:{n}: expected 10 tab-separated columns (the test set's 7, then negation, "
                             f"temporality, experiencer), got {len(cols)}")
        if cols[2:7] != [row.condition, row.sentence, row.negation, row.temporality, row.experiencer]:
            raise ValueError(f"{path}:{n}: its first 7 columns are not the test set's line {row.line}")
        negation, temporality, experiencer = cols[7:]
        if negation not in ("affirmed", "negated") or temporality not in ("recent", "historical", "not particular") \
                or experiencer not in ("patient", "other"):
            raise ValueError(f"{path}:{n}: unknown answer in {negation!r}, {temporality!r}, {experiencer!r}")
        answers.append({"negated": negation == "negated", "historical": temporality == "historical",
                        "hypothetical": temporality == "not particular", "other": experiencer == "other"})
    return answers


def _find(words: Sequence[str], sentence: str) -> Optional[Tuple[int, int]]:
    pattern = re.compile(r"\s+".join(re.escape(w) for w in words), re.IGNORECASE)
    found = list(pattern.finditer(sentence))
    if not found:
        return None
    marked = [m for m in found if m.group(0) == m.group(0).upper() and m.group(0) != m.group(0).lower()]
    m = marked[0] if marked and len(marked) < len(found) else found[0]
    return m.start(), m.end()


def locate(condition: str, sentence: str, partly: bool = False) -> Optional[Tuple[int, int]]:
    """Character offsets of the condition in the sentence: case-insensitive, any run of whitespace
    for a space; where it occurs more than once, the occurrence written in capitals (the test set's
    mark), else the first. With ``partly``, where the whole condition is not in the sentence (11
    lines: the sentence was cut short), the longest run of its words that is."""
    words = condition.split()
    if not words:
        return None
    where = _find(words, sentence)
    if where is not None or not partly:
        return where
    for size in range(len(words) - 1, 0, -1):
        for start in range(len(words) - size, -1, -1):  # later words first: the finding ends the condition
            run = words[start:start + size]
            if any(c.isalpha() for w in run for c in w):
                where = _find(run, sentence)
                if where is not None:
                    return where
    return None


def gold_doc(nlp: Language, row: Row) -> Optional[Doc]:
    """The sentence as a Doc with the condition as its one entity (None where it is not found)."""
    where = locate(row.condition, row.sentence, partly=True)
    if where is None:
        return None
    doc = nlp.make_doc(row.sentence)
    span = doc.char_span(where[0], where[1], label="CONDITION", alignment_mode="expand")
    if span is None:
        return None
    doc.ents = [span]
    return doc


def make_tokenizer_nlp() -> Language:
    """A blank English pipeline with the shipped pipelines' tokenizer."""
    from spacy_sapbert.tokenizer import TOKENIZER_CONFIG

    return spacy.blank("en", config={"nlp": {"tokenizer": TOKENIZER_CONFIG}})


def context_pipeline(config: Optional[Dict[str, object]] = None) -> Language:
    """The tokenizer and ``sapbert_context`` with the settings the default pipeline gives it, but for ``drop_titles``."""
    import spacy_sapbert.assertion  # noqa: F401  (registers the factory)

    nlp = make_tokenizer_nlp()
    # a gold condition is a finding by definition: the set locates one in a section title ("ALLERGIES: ...
    # ALLERGIES"), where the shipped component would drop a detected span as no finding
    nlp.add_pipe("sapbert_context", config={"drop_titles": False, **(config or {})})
    return nlp


def negspacy_pipeline() -> Language:
    from spacy_sapbert.negation import add_negation

    nlp = make_tokenizer_nlp()
    add_negation(nlp)
    return nlp


@dataclass
class Outcome:
    """Lines' outcomes for one attribute, summed (one line: one of the four is 1): what ``score`` counts."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0


def outcome(gold: bool, predicted: bool) -> Outcome:
    return Outcome(tp=int(gold and predicted), fp=int(predicted and not gold), fn=int(gold and not predicted),
                   tn=int(not gold and not predicted))


def rates(o: Outcome) -> Tuple[float, float, float]:
    """Precision, recall and F of summed outcomes (``end_to_end.prf``), unrounded."""
    return prf(o.tp, o.tp + o.fp, o.tp, o.tp + o.fn)


def f_of(o: Outcome) -> float:
    """F of summed outcomes (``score``'s ``f``, unrounded)."""
    return rates(o)[2]


def score(gold: Sequence[bool], predicted: Sequence[bool]) -> Dict[str, float]:
    lines = [outcome(g, p) for g, p in zip(gold, predicted)]
    o = Outcome(*(sum(getattr(x, k) for x in lines) for k in ("tp", "fp", "fn", "tn")))
    precision, recall, f = rates(o)
    n = len(lines)
    return {"n": n, "tp": o.tp, "fp": o.fp, "fn": o.fn, "tn": o.tn, "precision": round(precision, 4),
            "recall": round(recall, 4), "f": round(f, 4), "accuracy": round((o.tp + o.tn) / n, 4) if n else 0.0}


ATTRS = ("negated", "historical", "hypothetical", "other")


def predictions(nlp: Language, rows: Sequence[Row], read: Callable[[Span], Dict[str, bool]]) -> Tuple[List[Optional[Dict[str, bool]]], float]:
    """Each row's predicted attributes (None where its condition was not found), and the seconds taken."""
    docs = [gold_doc(nlp, row) for row in rows]
    todo = [d for d in docs if d is not None]
    t0 = time.perf_counter()
    done = iter(list(nlp.pipe(todo, batch_size=256)))
    seconds = time.perf_counter() - t0
    out: List[Optional[Dict[str, bool]]] = []
    for d in docs:
        out.append(None if d is None else read(next(done).ents[0]))
    return out, seconds


def context_reading(span: Span) -> Dict[str, bool]:
    return {"negated": bool(span._.negated), "historical": bool(span._.historical),
            "hypothetical": bool(span._.hypothetical), "other": span._.experiencer == "other",
            "uncertain": bool(span._.uncertain)}


def negex_reading(span: Span) -> Dict[str, bool]:
    return {"negated": bool(span._.negex)}


SPLITS = {"dev (lines 1-1200)": (0, DEV_LINES), "test (lines 1201-2376)": (DEV_LINES, None), "whole set": (0, None)}


def evaluate(rows: Sequence[Row], predicted: Sequence[Optional[Dict[str, bool]]], attrs: Iterable[str]) -> Dict[str, Dict[str, Dict[str, float]]]:
    """Per split, per attribute: the scores (a row whose condition was not found counts as predicted False)."""
    table: Dict[str, Dict[str, Dict[str, float]]] = {}
    for split, (a, b) in SPLITS.items():
        part = list(zip(rows, predicted))[a:b]
        table[split] = {}
        for attr in attrs:
            gold = [r.gold[attr] for r, _ in part]
            pred = [bool(p and p.get(attr)) for _, p in part]
            table[split][attr] = score(gold, pred)
    return table


def markdown(result: Dict[str, object]) -> str:
    lines = ["| split | attribute | system | P | R | F | accuracy | TP | FP | FN | TN |",
             "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]

    def row(split: str, attr: str, system: str, s: Dict[str, float]) -> None:
        lines.append(f"| {split} | {attr} | {system} | {s['precision']:.3f} | {s['recall']:.3f} | {s['f']:.3f} | "
                     f"{s['accuracy']:.3f} | {s['tp']} | {s['fp']} | {s['fn']} | {s['tn']} |")

    for split in SPLITS:
        for attr in ATTRS:
            row(split, attr, "sapbert_context", result["sapbert_context"][split][attr])
            if result.get("gencontext"):
                row(split, attr, GENCONTEXT, result["gencontext"][split][attr])
            if attr == "negated":
                row(split, attr, "negspacy negex (baseline)", result["negspacy"][split]["negated"])
                if split == "whole set":
                    row(split, attr, GENNEGEX["name"], GENNEGEX)
    return "\n".join(lines)


def paired_on_test(rows: Sequence[Row], ours: Sequence[Optional[Dict[str, bool]]],
                   theirs: Sequence[Optional[Dict[str, bool]]]) -> Dict[str, Dict[str, object]]:
    """Per attribute, our F less the other system's on the test half, with its 95% interval over
    resamples of the test lines, both scored on the same resamples (``bootstrap.paired_difference``).
    The set names no report per line, so lines are the unit: lines of one report move apart, which
    makes the interval narrower than a resample of reports would."""
    from spacy_sapbert.evaluation.bootstrap import paired_difference

    a, b = SPLITS["test (lines 1201-2376)"]
    part = list(zip(rows, ours, theirs))[a:b]

    def outcomes(attr: str, which: int) -> List[Outcome]:
        return [outcome(row.gold[attr], bool(answers[which] and answers[which].get(attr))) for row, *answers in part]

    return {attr: paired_difference(outcomes(attr, 0), outcomes(attr, 1), f_of) for attr in ("negated", "historical", "hypothetical")}


def errors(rows: Sequence[Row], predicted: Sequence[Optional[Dict[str, bool]]], attr: str, split: Tuple[int, Optional[int]]) -> List[str]:
    out = []
    for row, p in list(zip(rows, predicted))[split[0]:split[1]]:
        pred = bool(p and p.get(attr))
        if pred != row.gold[attr]:
            out.append(f"{row.line}\t{'FP' if pred else 'FN'}\t{row.condition}\t{row.sentence[-300:]}")
    return out


def condition_alone(row: Row) -> bool:
    """Whether the sentence is the condition and nothing else ("HYPERTENSION."): a list item whose
    context (a section title) was in an earlier sentence, which the test set does not hold."""
    def words(text: str) -> str:
        return " ".join(re.findall(r"[^\W_]+", text.lower()))
    return words(row.sentence) == words(row.condition)


def misses_alone(rows: Sequence[Row], predicted: Sequence[Optional[Dict[str, bool]]], attr: str) -> Dict[str, Dict[str, int]]:
    """Per split: the attribute's false negatives, and how many of them are sentences that are the condition alone."""
    out = {}
    for split, (a, b) in SPLITS.items():
        missed = [r for r, p in list(zip(rows, predicted))[a:b] if r.gold[attr] and not (p and p.get(attr))]
        out[split] = {"fn": len(missed), "condition_alone": sum(condition_alone(r) for r in missed)}
    return out


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the test set (assets/negex/README.md)")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="where the JSON record goes ('-': nowhere)")
    parser.add_argument("--gencontext", type=Path, default=DEFAULT_GENCONTEXT,
                        help="GenConText's output file for the peer rows (assets/negex/README.md); skipped where missing")
    parser.add_argument("--errors", choices=ATTRS, default=None, help="print the dev half's errors for one attribute")
    args = parser.parse_args(argv)
    if not args.data.exists():
        sys.exit(f"{args.data} is missing: fetch it as assets/negex/README.md says")

    from spacy_sapbert.assertion import describe_rules, read_rules
    from spacy_sapbert.machine import machine_description

    rows = read_rows(args.data)
    context_nlp = context_pipeline()
    component = context_nlp.get_pipe("sapbert_context")
    ours, ours_s = predictions(context_nlp, rows, context_reading)
    base, base_s = predictions(negspacy_pipeline(), rows, negex_reading)
    gencontext = read_gencontext(args.gencontext, rows) if args.gencontext.exists() else None
    if gencontext is None:
        print(f"{args.gencontext} is missing: no GenConText rows (assets/negex/README.md says how to fetch it)")
    import negspacy

    result: Dict[str, object] = {
        "command": "python benchmarks/negex_context.py" + ("" if argv is None and len(sys.argv) < 2 else " " + " ".join(argv if argv is not None else sys.argv[1:])),
        "data": {"path": str(args.data.relative_to(ROOT) if args.data.is_absolute() and ROOT in args.data.parents else args.data),
                 "rows": len(rows), "located": sum(p is not None for p in ours),
                 "located_partly": [r.line for r in rows if locate(r.condition, r.sentence) is None],
                 "dev_lines": f"1-{DEV_LINES}", "test_lines": f"{DEV_LINES + 1}-{len(rows)}"},
        "rules": describe_rules(read_rules()), "rules_version": component.version,
        "component_config": {k: v for k, v in component.cfg.items() if k not in ("extra_rules", "extra_sections")},
        "machine": machine_description()["cpu"], "nproc": machine_description()["nproc"],
        "versions": {"python": sys.version.split()[0], "spacy": spacy.__version__, "negspacy": getattr(negspacy, "__version__", "1.1")},
        "seconds": {"sapbert_context": round(ours_s, 3), "negspacy": round(base_s, 3)},
        "uncertain_flagged": {split: sum(bool(p and p.get("uncertain")) for p in ours[a:b]) for split, (a, b) in SPLITS.items()},
        "sapbert_context": evaluate(rows, ours, ATTRS),
        "predictions_sha256": hashlib.sha256(json.dumps(ours, sort_keys=True).encode()).hexdigest(),
        "historical_misses": misses_alone(rows, ours, "historical"),
        "negspacy": evaluate(rows, base, ("negated",)),
        "gennegex_published": GENNEGEX,
        "gencontext": evaluate(rows, gencontext, ATTRS) if gencontext is not None else None,
        "paired_vs_gencontext_test": paired_on_test(rows, ours, gencontext) if gencontext is not None else None,
    }
    table = markdown(result)
    result["table"] = table
    print(table)
    print("historical misses that are the condition alone: " + ", ".join(
        f"{split} {m['condition_alone']} of {m['fn']}" for split, m in result["historical_misses"].items()))
    print(f"predictions sha256 (every line, every attribute): {result['predictions_sha256']}")
    for attr, d in (result["paired_vs_gencontext_test"] or {}).items():  # type: ignore[union-attr]
        print(f"test half, {attr} F, sapbert_context minus GenConText: {d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}], "
              f"ours higher in {100 * d['first_higher']:.1f}% of {d['resamples']:,} resamples of the lines")
    if args.errors:
        print("\n".join(errors(rows, ours, args.errors, SPLITS["dev (lines 1-1200)"])))
    if str(args.output) != "-":
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf8")
    return result


if __name__ == "__main__":
    main()
