"""What ``assertion_abstracts.py`` and ``link_changes.py`` share: the default pipeline's spans on the
2,292 NCBI-disease + BC5CDR abstracts, each with its sentence, and the hand-judged samples drawn from
them (a TSV with a ``judgement`` column, scored as a precision)."""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
JUDGEMENTS = ("correct", "wrong", "arguable")


def sentence_of(text: str, start: int, end: int) -> str:
    """The sentence around characters ``start``..``end`` (from after the last ". " before to the next
    ". "), the span in double brackets."""
    before = text.rfind(". ", 0, start)
    first = before + 2 if before >= 0 else 0
    last = text.find(". ", end)
    last = len(text) if last < 0 else last + 1
    return " ".join(f"{text[first:start]}[[{text[start:end]}]]{text[end:last]}".split())


def default_spans(limit: Optional[int]) -> Tuple[Any, Dict[str, Any], Iterator[Tuple[str, List[Tuple[int, int, Any]]]]]:
    """The default pipeline, the abstracts' record (count and sha256) and, per abstract, its text and
    every entity and nested mention that pipeline gives (``nlp.pipe``, torch on 1 thread) as
    ``(start_char, end_char, span)``, in order."""
    import torch
    from pipeline_profile import corpus_texts  # benchmarks/pipeline_profile.py, beside this script

    from spacy_sapbert.defaults import default_pipeline

    torch.set_num_threads(1)
    texts = corpus_texts(ROOT / "assets" / "benchmarks", limit)
    nlp = default_pipeline(progress=False)
    record = {"abstracts": len(texts), "texts_sha256": hashlib.sha256("\n".join(texts).encode()).hexdigest()}

    def spans() -> Iterator[Tuple[str, List[Tuple[int, int, Any]]]]:
        for text, doc in zip(texts, nlp.pipe(texts)):
            found = {(s.start_char, s.end_char): s for s in list(doc.ents) + list(doc.spans.get("sapbert_nested", []))}
            yield text, [(a, b, s) for (a, b), s in sorted(found.items())]

    return nlp, record, spans()


def read_json(path: Path) -> Dict[str, Any]:
    return json.loads(path.read_text(encoding="utf8"))


def same_abstracts(before: Dict[str, Any], after: Dict[str, Any]) -> None:
    if before["texts_sha256"] != after["texts_sha256"]:
        sys.exit("the two snapshots are of different abstracts")


def write_sample(output: Path, comment: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A TSV to judge by hand: ``# comment``, the header with ``n`` first, then each row numbered, an empty judgement last."""
    with output.open("w", encoding="utf8", newline="") as f:
        f.write(f"# {comment}\n")
        out = csv.writer(f, delimiter="\t", lineterminator="\n")
        out.writerow(["n", *header, "judgement"])
        for i, row in enumerate(rows):
            out.writerow([i, *row, ""])
    print(f"{output}: {len(rows)} rows to judge")


def score(judged: Sequence[Path]) -> None:
    """The share of judged rows that are correct (an arguable one counts half), with its standard error."""
    for path in judged:
        rows = list(csv.DictReader((line for line in path.open(encoding="utf8") if not line.startswith("#")), delimiter="\t"))
        bad = [r["n"] for r in rows if r["judgement"] not in JUDGEMENTS]
        if bad:
            sys.exit(f"{path}: rows {', '.join(bad)} have no judgement ({', '.join(JUDGEMENTS)})")
        tally = {j: sum(r["judgement"] == j for r in rows) for j in JUDGEMENTS}
        precision = (tally["correct"] + tally["arguable"] / 2) / len(rows)
        error = (precision * (1 - precision) / len(rows)) ** 0.5
        print(f"{path}: {len(rows)} judged, {tally['correct']} correct, {tally['arguable']} arguable, {tally['wrong']} wrong: "
              f"precision {precision:.3f} (arguable as half), standard error {error:.3f}")


def subcommands(description: str, snapshot: Callable[[Path, Optional[int]], None]) -> Tuple[argparse.ArgumentParser, Dict[str, argparse.ArgumentParser]]:
    """The four commands both scripts have, with their common arguments: ``snapshot OUTPUT [--limit]``
    (runs ``snapshot``), ``compare BEFORE AFTER``, ``sample … [--n] [--seed]`` and ``score JUDGED…`` (runs
    ``score``). Each script adds its own arguments and sets ``run`` (``set_defaults``) for compare and sample;
    ``main`` calls ``args.run(args)``."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {name: sub.add_parser(name) for name in ("snapshot", "compare", "sample", "score")}
    commands["snapshot"].add_argument("output", type=Path)
    commands["snapshot"].add_argument("--limit", type=int, default=None)
    commands["snapshot"].set_defaults(run=lambda args: snapshot(args.output, args.limit))
    commands["compare"].add_argument("before", type=Path)
    commands["compare"].add_argument("after", type=Path)
    commands["sample"].add_argument("--n", type=int, default=40)
    commands["sample"].add_argument("--seed", type=int, default=0)
    commands["score"].add_argument("judged", type=Path, nargs="+")
    commands["score"].set_defaults(run=lambda args: score(args.judged))
    return parser, commands
