"""``python -m training.umls_concepts META OUTPUT [--sabs MSH,SNOMEDCT_US]``: UMLS → concept table.

The first half of the paper's pre-training corpus (SapBERT §3.1 uses UMLS 2020AA, English
names, every source vocabulary): one record per CUI from ``MRCONSO.RRF`` (English rows,
obsolete and suppressible atoms left out, tradenames from ``MRREL.RRF`` added, TUIs from
``MRSTY.RRF``), written as JSON lines (the KB source, original casing). The pairs come from it
with ``python -m training.pairs pretrain OUTPUT PAIRS --format jsonl``, which lower-cases,
de-duplicates and keeps at most 50 pairs per CUI. ``spacy project run preprocess-umls`` runs both.

UMLS is licensed: nothing fetches it. Without a META folder this says so in one line and exits 1.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer

from spacy_sapbert.ontologies.tables import write_jsonl
from spacy_sapbert.ontologies.umls import read_umls

ALL = "all"


def parse_sabs(sabs: str) -> Optional[List[str]]:
    """``"all"`` → None (every vocabulary), else the comma-separated source abbreviations."""
    if sabs.strip().lower() == ALL:
        return None
    found = [s.strip() for s in sabs.split(",") if s.strip()]
    if not found:
        raise typer.BadParameter(f"--sabs must be '{ALL}' or comma-separated UMLS source abbreviations, got {sabs!r}")
    return found


def missing_release(meta: Path) -> Optional[str]:
    """Why ``meta`` is not a usable Metathesaurus folder, in one line; None when it is."""
    if not meta.is_dir():
        return (
            f"{meta}: no UMLS here. UMLS is licensed and never downloaded: get a Metathesaurus release "
            f"from the NLM (https://www.nlm.nih.gov/research/umls/) and put its META folder at {meta}"
        )
    if not any((meta / n).is_file() for n in ("MRCONSO.RRF", "MRCONSO.RRF.gz")):
        return f"{meta}: no MRCONSO.RRF in this folder; point at the META folder of a UMLS release"
    return None


def write_umls_concepts(meta: Path, output: Path, sabs: Optional[List[str]] = None, progress: bool = True) -> int:
    """Stream the English concepts of ``meta`` (only vocabularies ``sabs``; None: all) into ``output``
    (atomically); returns how many."""
    return write_jsonl(read_umls(meta, languages=("ENG",), sabs=sabs, progress=progress), output)


def main(
    meta: Path = typer.Argument(..., help="The META folder of a UMLS release (MRCONSO.RRF, MRSTY.RRF, MRREL.RRF)"),
    output: Path = typer.Argument(..., help="Concept table to write (JSON lines)"),
    sabs: str = typer.Option(ALL, help="Source vocabularies to keep, comma-separated (MSH,SNOMEDCT_US,...), or 'all'"),
    progress: bool = typer.Option(True, help="Show progress"),
) -> None:
    """UMLS Metathesaurus → English concept table (one JSON record per CUI)."""
    problem = missing_release(meta)
    if problem is not None:
        typer.echo(problem, err=True)
        raise typer.Exit(1)
    started = time.perf_counter()
    n = write_umls_concepts(meta, output, parse_sabs(sabs), progress)
    if n == 0:
        output.unlink()
        typer.echo(f"{meta}: no English concepts from the vocabularies {sabs!r}; nothing written", err=True)
        raise typer.Exit(1)
    typer.echo(f"{output}: {n:,} concepts (vocabularies: {sabs}) in {time.perf_counter() - started:.1f}s", err=True)


if __name__ == "__main__":
    typer.run(main)
