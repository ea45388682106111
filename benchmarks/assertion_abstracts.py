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

import json
import random
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from abstract_spans import (
    RESULTS,
    default_spans,
    read_json,
    same_abstracts,
    score,  # noqa: F401  (the `score` command; callable as this script's too)
    sentence_of,
    subcommands,
    write_sample,
)

ATTRS = ("negated", "historical", "hypothetical", "uncertain", "other")
FIRST_ATTR = 4  # a span in a snapshot: start, end, text, its sentence, then ATTRS


def snapshot(output: Path, limit: Optional[int]) -> None:
    """Every entity's and nested mention's assertion attributes, one list per abstract."""
    nlp, record, spans = default_spans(limit)
    docs = [[[a, b, s.text, sentence_of(text, a, b)] + [bool(getattr(s._, attr)) for attr in ATTRS[:4]] + [s._.experiencer == "other"]
             for a, b, s in found] for text, found in spans]
    record = {"lexicon": nlp.get_pipe("sapbert_context").version, **record, "attributes": list(ATTRS), "docs": docs}
    output.write_text(json.dumps(record) + "\n", encoding="utf8")
    print(f"{output}: {sum(len(d) for d in docs):,} spans in {record['abstracts']:,} abstracts, lexicon {record['lexicon']}")


def compare(before_path: Path, after_path: Path, output: Optional[Path], show: int, command: str = "") -> Dict[str, Any]:
    """Per attribute, how many spans carry it before and after, and how many changed each way."""
    before, after = read_json(before_path), read_json(after_path)
    same_abstracts(before, after)
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
    snap = read_json(snapshot_path)
    k = FIRST_ATTR + ATTRS.index(attr)
    flagged = [(d, s) for d, spans in enumerate(snap["docs"]) for s in spans if s[k]]
    write_sample(output, f"{n} of the {len(flagged):,} spans with {attr} set (lexicon {snap['lexicon']}), drawn with "
                 f"random.Random({seed}).sample; judgement: correct (the text says so of the condition), wrong, or arguable",
                 ["abstract", "span", "sentence"], [[d, s[2], s[3]] for d, s in random.Random(seed).sample(flagged, n)])


def main(argv: Sequence[str] = ()) -> None:
    parser, commands = subcommands(__doc__, snapshot)
    command = "python benchmarks/assertion_abstracts.py " + " ".join(argv or sys.argv[1:])
    commands["compare"].add_argument("--output", type=Path, default=None)
    commands["compare"].add_argument("--show", type=int, default=1000, help="changed spans printed")
    commands["compare"].set_defaults(run=lambda args: compare(args.before, args.after, args.output, args.show, command))
    commands["sample"].add_argument("snapshot", type=Path)
    commands["sample"].add_argument("output", type=Path)
    commands["sample"].add_argument("--attr", choices=ATTRS, default="negated")
    commands["sample"].set_defaults(run=lambda args: sample(args.snapshot, args.attr, args.n, args.seed, args.output))
    args = parser.parse_args(list(argv) or None)
    args.run(args)


if __name__ == "__main__":
    main()
