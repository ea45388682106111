"""Which linked spans a change to detection moved on research abstracts, and how good they were.

GSC+ dev, the phenotype dev set, has 22 abstracts: a change to what the HPO default proposes moves a
handful of its spans. This script writes down every span the default pipeline links on the 2,292
NCBI-disease + BC5CDR abstracts and compares two versions of the code::

    PYTHONPATH=/tmp/before python benchmarks/link_changes.py snapshot /tmp/links-before.json
    python benchmarks/link_changes.py snapshot /tmp/links-after.json
    python benchmarks/link_changes.py compare /tmp/links-before.json /tmp/links-after.json --name NAME

``compare`` counts the spans removed, added and linked to another concept, the texts removed and
added most often, and writes them all to ``benchmarks/results/link_changes_NAME.json``. ``sample``
draws removed (or added) spans from that file (``random.Random(seed)``) into a TSV to judge by hand (a
``judgement`` column: ``correct`` when the span is a mention of the concept it was linked to, ``wrong``,
or ``arguable``); ``score`` prints the judged precision (``abstract_spans.py``, as for ``assertion_abstracts.py``).
"""
from __future__ import annotations

import collections
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


def snapshot(output: Path, limit: Optional[int]) -> None:
    """Every linked entity and nested mention: offsets, text, concept, its name and the sentence, per abstract."""
    _, record, spans = default_spans(limit)
    docs = [[[a, b, s.text, s._.cui, s._.cui_candidates[0][1], sentence_of(text, a, b)] for a, b, s in found if s._.cui]
            for text, found in spans]
    output.write_text(json.dumps({**record, "docs": docs}) + "\n", encoding="utf8")
    print(f"{output}: {sum(len(d) for d in docs):,} linked spans in {record['abstracts']:,} abstracts")


def compare(before_path: Path, after_path: Path, name: str, output: Optional[Path] = None, command: str = "") -> Dict[str, Any]:
    """The spans only one snapshot links (by abstract and offsets), and those linked to another concept."""
    before, after = read_json(before_path), read_json(after_path)
    same_abstracts(before, after)
    removed: List[List[Any]] = []
    added: List[List[Any]] = []
    relinked: List[List[Any]] = []
    for d, (old, new) in enumerate(zip(before["docs"], after["docs"])):
        old_by, new_by = {(s[0], s[1]): s for s in old}, {(s[0], s[1]): s for s in new}
        removed += [[d, *s] for k, s in old_by.items() if k not in new_by]
        added += [[d, *s] for k, s in new_by.items() if k not in old_by]
        relinked += [[d, *s, new_by[k][3], new_by[k][4]] for k, s in old_by.items() if k in new_by and new_by[k][3] != s[3]]
    result = {
        "name": name, "command": command, "abstracts": before["abstracts"],
        "spans": {"before": sum(map(len, before["docs"])), "after": sum(map(len, after["docs"])),
                  "removed": len(removed), "added": len(added), "relinked": len(relinked)},
        "removed_most_often": collections.Counter(s[3].lower() for s in removed).most_common(40),
        "added_most_often": collections.Counter(s[3].lower() for s in added).most_common(40),
        "removed": removed, "added": added, "relinked": relinked,
    }
    print(json.dumps(result["spans"]))
    print("removed most often:", ", ".join(f"{t} ({n})" for t, n in result["removed_most_often"][:20]))
    print("added most often:", ", ".join(f"{t} ({n})" for t, n in result["added_most_often"][:20]))
    output = output or RESULTS / f"link_changes_{name}.json"
    output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf8")
    print(output)
    return result


def sample(changes_path: Path, which: str, n: int, seed: int, output: Path) -> None:
    """``n`` random spans of ``which`` (``removed`` or ``added``) with their concepts and sentences, as a TSV to judge."""
    spans = read_json(changes_path)[which]
    drawn = random.Random(seed).sample(spans, min(n, len(spans)))
    write_sample(output, f"{len(drawn)} of the {len(spans):,} spans {which} in {changes_path.name}, drawn with random.Random({seed}).sample; "
                 "judgement: correct (a mention of the concept it was linked to), wrong, or arguable",
                 ["abstract", "span", "concept", "concept name", "sentence"], [[s[0], s[3], s[4], s[5], s[6]] for s in drawn])


def main(argv: Sequence[str] = ()) -> None:
    parser, commands = subcommands(__doc__, snapshot)
    command = "python benchmarks/link_changes.py " + " ".join(argv or sys.argv[1:])
    commands["compare"].add_argument("--name", required=True, help="the change's name: results/link_changes_NAME.json")
    commands["compare"].set_defaults(run=lambda args: compare(args.before, args.after, args.name, command=command))
    commands["sample"].add_argument("changes", type=Path, help="a link_changes_NAME.json")
    commands["sample"].add_argument("output", type=Path)
    commands["sample"].add_argument("--which", choices=("removed", "added"), default="removed")
    commands["sample"].set_defaults(run=lambda args: sample(args.changes, args.which, args.n, args.seed, args.output))
    args = parser.parse_args(list(argv) or None)
    args.run(args)


if __name__ == "__main__":
    main()
