"""Small benchmark fixtures shared by the evaluation tests: a MEDIC excerpt and PubTator blocks."""
from __future__ import annotations

from pathlib import Path
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


def write_mini_ncbi(root: Path, test: str, train: str, dev: str) -> Path:
    """A miniature NCBI-disease data folder under ``root``: the MEDIC excerpt, a one-line spell list
    (``carcinom`` → ``cancer``: no spelling the pipeline mends itself) and the three PubTator splits."""
    (root / "medic").mkdir()
    (root / "medic" / "medic_06Jul2012.txt").write_text(MEDIC, encoding="utf8")
    (root / "medic" / "ncbi-spell-check.txt").write_text("carcinom||cancer\n", encoding="utf8")
    corpus = root / "ncbi-disease"
    corpus.mkdir()
    for name, content in (("test", test), ("train", train), ("develop", dev)):
        (corpus / f"NCBI{name}set_corpus.txt").write_text(content, encoding="utf8")
    return root
