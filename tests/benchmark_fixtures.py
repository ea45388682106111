"""Small benchmark fixtures shared by the evaluation tests: a MEDIC excerpt and PubTator blocks."""
from __future__ import annotations

from typing import List, Tuple

MEDIC = """D001943||Breast Neoplasms|Breast Cancer
D010051||Ovarian Neoplasms|Ovarian Cancer
D009103||Multiple Sclerosis|MS
D008946||Mitral Valve Stenosis|MS
114500|D015179||Colorectal Neoplasms|Colorectal Cancer
"""


def pubtator_doc(pmid: str, title: str, abstract: str, mentions: List[Tuple[str, str]]) -> str:
    """A PubTator block; each (mention, ids) is located at its first occurrence after the previous one."""
    text = f"{title} {abstract}"
    lines, at = [f"{pmid}|t|{title}", f"{pmid}|a|{abstract}"], 0
    for mention, ids in mentions:
        start = text.index(mention, at)
        at = start + len(mention)
        lines.append(f"{pmid}\t{start}\t{at}\t{mention}\tSpecificDisease\t{ids}")
    return "\n".join(lines) + "\n\n"
