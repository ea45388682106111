"""What the assertion component says on research abstracts, and what a lexicon change moved there.

The NegEx/ConText test set (``negex_context.py``) is clinical sentences; the HPO default mostly reads
research abstracts, whose negations are of effects, differences and associations more often than of
conditions. No annotated set of those is at hand, so this script writes down what the default
pipeline gives on the 2,292 NCBI-disease + BC5CDR abstracts and compares two versions::

    PYTHONPATH=/tmp/before python benchmarks/assertion_abstracts.py snapshot /tmp/assert-before.json
    python benchmarks/assertion_abstracts.py snapshot /tmp/assert-after.json
    python benchmarks/assertion_abstracts.py compare /tmp/assert-before.json /tmp/assert-after.json

``compare`` counts, per attribute, the spans it is set on before and after and those it was turned
on and off for, prints each changed span with its sentence, and writes both to
``benchmarks/results/assertion_abstracts_<before>-<after>.json`` (the lexicon versions). ``sample``
draws spans flagged with an attribute (``random.Random(seed)``) into a TSV to judge by hand (a
``judgement`` column: ``correct``, ``wrong`` or ``arguable``); ``score`` reads judged TSVs and prints
each one's precision and its standard error.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ATTRS = ("negated", "historical", "hypothetical", "uncertain", "other")
FIRST_ATTR = 4  # a span in a snapshot: start, end, text, its sentence, then ATTRS
JUDGEMENTS = ("correct", "wrong", "arguable")


def sentence_of(text: str, start: int, end: int) -> str:
    """The sentence around characters ``start``..``end`` (from after the last ". " before to the next
    ". "), the span in double brackets."""
    before = text.rfind(". ", 0, start)
    first = before + 2 if before >= 0 else 0
    last = text.find(". ", end)
    last = len(text) if last < 0 else last + 1
    return " ".join(f"{text[first:start]}[[{text[start:end]}]]{text[end:last]}".split())


def snapshot(output: Path, limit: Optional[int]) -> None:
    """Every entity's and nested mention's assertion attributes, one list per abstract."""
    import torch
    from pipeline_profile import corpus_texts  # benchmarks/pipeline_profile.py, beside this script

    from spacy_sapbert.defaults import default_pipeline

    torch.set_num_threads(1)
    texts = corpus_texts(ROOT / "assets" / "benchmarks", limit)
    nlp = default_pipeline(progress=False)
    docs = []
    for text, doc in zip(texts, nlp.pipe(texts)):
        spans = {(s.start_char, s.end_char): s for s in list(doc.ents) + list(doc.spans.get("sapbert_nested", []))}
        docs.append([[a, b, s.text, sentence_of(text, a, b)] + [bool(getattr(s._, attr)) for attr in ATTRS[:4]]
                     + [s._.experiencer == "other"] for (a, b), s in sorted(spans.items())])
    record = {"lexicon": nlp.get_pipe("sapbert_context").version, "abstracts": len(texts), "attributes": list(ATTRS),
              "texts_sha256": hashlib.sha256("\n".join(texts).encode()).hexdigest(), "docs": docs}
    output.write_text(json.dumps(record) + "\n", encoding="utf8")
    print(f"{output}: {sum(len(d) for d in docs):,} spans in {len(texts):,} abstracts, lexicon {record['lexicon']}")


def _read(path: Path) -> Dict[str, Any]:
    return json.loads(path.read_text(encoding="utf8"))


def compare(before_path: Path, after_path: Path, output: Optional[Path], show: int, command: str = "") -> Dict[str, Any]:
    """Per attribute, how many spans carry it before and after, and how many changed each way."""
    before, after = _read(before_path), _read(after_path)
    if before["texts_sha256"] != after["texts_sha256"]:
        sys.exit("the two snapshots are of different abstracts")
    counts: Dict[str, Dict[str, int]] = {a: {"before": 0, "after": 0, "turned_on": 0, "turned_off": 0} for a in ATTRS}
    changed: List[str] = []
    spans_compared = 0
    for old, new in zip(before["docs"], after["docs"]):
        new_by = {(s[0], s[1]): s for s in new}
        for s in old:
            t = new_by.get((s[0], s[1]))
            if t is None:
                continue
            spans_compared += 1
            for k, attr in enumerate(ATTRS, start=FIRST_ATTR):
                counts[attr]["before"] += s[k]
                counts[attr]["after"] += t[k]
                if s[k] != t[k]:
                    counts[attr]["turned_on" if t[k] else "turned_off"] += 1
                    changed.append(f"{attr} {s[k]} -> {t[k]} | {s[2]} | {s[3]}")
    result = {"lexicons": [before["lexicon"], after["lexicon"]], "abstracts": before["abstracts"], "command": command,
              "spans_compared": spans_compared, "counts": counts, "changed": changed}
    for line in changed[:show]:
        print(line)
    for attr, c in counts.items():
        print(f"{attr}: {c['before']:,} spans before, {c['after']:,} after ({c['turned_on']:,} turned on, {c['turned_off']:,} off)")
    output = output or RESULTS / f"assertion_abstracts_{before['lexicon']}-{after['lexicon']}.json"
    output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf8")
    print(output)
    return result


def sample(snapshot_path: Path, attr: str, n: int, seed: int, output: Path) -> None:
    """``n`` random spans flagged with ``attr``, with their sentences, as a TSV to judge."""
    snap = _read(snapshot_path)
    k = FIRST_ATTR + ATTRS.index(attr)
    flagged = [(d, s) for d, spans in enumerate(snap["docs"]) for s in spans if s[k]]
    with output.open("w", encoding="utf8", newline="") as f:
        f.write(f"# {n} of the {len(flagged):,} spans with {attr} set (lexicon {snap['lexicon']}), drawn with "
                f"random.Random({seed}).sample; judgement: correct (the text says so of the condition), wrong, or arguable\n")
        out = csv.writer(f, delimiter="\t", lineterminator="\n")
        out.writerow(["n", "abstract", "span", "sentence", "judgement"])
        for i, (d, s) in enumerate(random.Random(seed).sample(flagged, n)):
            out.writerow([i, d, s[2], s[3], ""])
    print(f"{output}: {n} of {len(flagged):,} spans")


def score(judged: Sequence[Path]) -> None:
    """The share of judged spans that are correct (an arguable one counts half)."""
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


def main(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot")
    snap.add_argument("output", type=Path)
    snap.add_argument("--limit", type=int, default=None)
    comp = sub.add_parser("compare")
    comp.add_argument("before", type=Path)
    comp.add_argument("after", type=Path)
    comp.add_argument("--output", type=Path, default=None)
    comp.add_argument("--show", type=int, default=1000, help="changed spans printed")
    samp = sub.add_parser("sample")
    samp.add_argument("snapshot", type=Path)
    samp.add_argument("output", type=Path)
    samp.add_argument("--attr", choices=ATTRS, default="negated")
    samp.add_argument("--n", type=int, default=40)
    samp.add_argument("--seed", type=int, default=0)
    sc = sub.add_parser("score")
    sc.add_argument("judged", type=Path, nargs="+")
    args = parser.parse_args(list(argv) or None)
    if args.command == "snapshot":
        snapshot(args.output, args.limit)
    elif args.command == "compare":
        compare(args.before, args.after, args.output, args.show, "python benchmarks/assertion_abstracts.py " + " ".join(argv or sys.argv[1:]))
    elif args.command == "sample":
        sample(args.snapshot, args.attr, args.n, args.seed, args.output)
    else:
        score(args.judged)


if __name__ == "__main__":
    main()
