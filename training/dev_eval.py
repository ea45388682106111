"""Accuracy of trained encoders against minutes of training.

By default each model is scored with the project's benchmark (``spacy_sapbert.evaluation``:
NCBI-disease / BC5CDR-disease test, lenient Acc@1, the ontology-only MEDIC dictionary).
``--quick`` uses a cruder *development* metric instead, kept here because it needs nothing
but an encoder: no abbreviation expansion, no spelling fixes, composite mentions whole; every
MEDIC name is encoded, each lower-cased mention takes its nearest name, and a hit is a name
whose concept ids (alternative ids included) meet the gold ids. Comparable only with itself.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import typer

from spacy_sapbert.evaluation.datasets import DEFAULT_DATA_DIR, Mention, dictionary_records, load_split
from spacy_sapbert.normalize import normalize_name
from spacy_sapbert.records import ConceptRecord

from .runlog import read_log


def load_mentions(dataset: str, data_dir: Path = DEFAULT_DATA_DIR) -> List[Mention]:
    """The raw linkable test mentions of a benchmark (no preprocessing: the quick metric)."""
    return [m for d in load_split(dataset, "test", data_dir) for m in d.mentions if m.ids]


def name_table(records: Iterable[ConceptRecord]) -> Tuple[List[str], List[FrozenSet[str]]]:
    """Normalised names, each with the ids (main and alternative) of every concept that has it."""
    table: Dict[str, set] = {}
    for r in records:
        ids = {r.id, *r.xrefs}
        for n in r.all_names:
            table.setdefault(normalize_name(n), set()).update(ids)
    names = sorted(table)
    return names, [frozenset(table[n]) for n in names]


def accuracy_at_1(
    encoder, names: Sequence[str], name_ids: Sequence[FrozenSet[str]], mentions: Sequence[Mention],
    name_vectors: Optional[np.ndarray] = None, batch_size: int = 256,
) -> Dict[str, float]:
    """Lenient Acc@1 (percent) of nearest-name linking; name vectors may be passed in to reuse them."""
    import faiss

    if name_vectors is None:
        name_vectors = encoder.encode(list(names), batch_size=batch_size)
    index = faiss.IndexFlatIP(name_vectors.shape[1])
    index.add(np.ascontiguousarray(name_vectors, dtype=np.float32))
    queries = encoder.encode([normalize_name(m.text) for m in mentions], batch_size=batch_size)
    _, rows = index.search(np.ascontiguousarray(queries, dtype=np.float32), 1)
    hits = [not name_ids[r].isdisjoint(m.ids) for r, m in zip(rows[:, 0], mentions)]
    return {"lenient_acc@1": 100 * float(np.mean(hits)) if hits else 0.0, "n": len(hits)}


def snapshot_minutes(run_dir: Path) -> List[Tuple[Path, float]]:
    """A training run's snapshots with their minutes of training (from its metrics log)."""
    seen = {}
    for r in read_log(run_dir / "metrics.jsonl"):
        if r.get("event") == "snapshot" and Path(r["path"]).is_dir():
            seen[r["path"]] = r["elapsed_s"] / 60
    return [(Path(p), m) for p, m in sorted(seen.items(), key=lambda x: x[1])]


def minutes_of(model: str) -> Optional[float]:
    """0 for the base encoder; a snapshot's minutes of training; None for anything else."""
    if model == "minilm":
        return 0.0
    path = Path(model)
    if path.parent.name == "snapshots":
        return dict((str(p), m) for p, m in snapshot_minutes(path.parent.parent)).get(str(path))
    return None


def quick_scores(model: str, datasets: Sequence[str], data_dir: Path, precision: str) -> Iterator[Dict[str, object]]:
    from spacy_sapbert.encoder import SapEncoder

    names, name_ids = name_table(dictionary_records("ncbi-disease", data_dir))
    encoder = SapEncoder.load(None if model == "minilm" else model, device="cpu", precision=precision)
    vectors = encoder.encode(names, batch_size=256)
    for d in datasets:
        yield {"dataset": d, "metric": "quick", **accuracy_at_1(encoder, names, name_ids, load_mentions(d, data_dir), vectors)}


def benchmark_scores(model: str, datasets: Sequence[str], data_dir: Path, precision: str, cache_dir: Optional[Path]) -> Iterator[Dict[str, object]]:
    from spacy_sapbert.evaluation.runner import evaluate

    for d in datasets:
        r = evaluate(d, None if model == "minilm" else model, dictionary="ontology", precision=precision,
                     data_dir=data_dir, cache_dir=str(cache_dir) if cache_dir else None)
        yield {"dataset": d, "metric": "benchmark", **{k: v for k, v in r.items() if k.startswith(("lenient", "strict"))}}


def main(
    models: List[str] = typer.Argument(None, help="encoder folders ('minilm' = the base encoder, at minute 0)"),
    run: Optional[Path] = typer.Option(None, help="a training output folder: evaluate its snapshots"),
    dataset: List[str] = typer.Option(["ncbi-disease", "bc5cdr-disease"], help="benchmarks"),
    out: Optional[Path] = typer.Option(None, help="append one JSON line per model and dataset here"),
    quick: bool = typer.Option(False, help="the quick development metric instead of the benchmark"),
    data_dir: Path = typer.Option(DEFAULT_DATA_DIR, help="folder holding the benchmark data (the project's assets)"),
    precision: str = typer.Option("bf16", help="inference precision: fp32 or bf16 (about 2x faster on the CPU)"),
    cache_dir: Optional[Path] = typer.Option(Path("corpus/cache"), help="the benchmark's dictionary-vector cache"),
    threads: int = typer.Option(1),
) -> None:
    """Acc@1 of encoders, and of a run's snapshots against minutes of training (for training.plot).

    With ``--out``, models and datasets already in that file are skipped, so an interrupted
    evaluation resumes."""
    import torch

    torch.set_num_threads(threads)
    targets: List[Tuple[str, Optional[float]]] = [(m, minutes_of(m)) for m in models or []]
    if run is not None:
        targets += [(str(p), m) for p, m in snapshot_minutes(run)]
    metric = "quick" if quick else "benchmark"
    done = {(r.get("model"), r.get("dataset"), r.get("metric")) for r in read_log(out)} if out is not None else set()
    for model, minutes in targets:
        todo = [d for d in dataset if (model, d, metric) not in done]  # a re-run only adds what is missing
        if not todo:
            continue
        t0 = time.perf_counter()
        scores = quick_scores(model, todo, data_dir, precision) if quick else benchmark_scores(model, todo, data_dir, precision, cache_dir)
        for result in scores:
            result = {"model": model, **result, "eval_seconds": round(time.perf_counter() - t0, 1)}
            if minutes is not None:
                result["minutes"] = round(minutes, 2)
            typer.echo(json.dumps(result))
            if out is not None:
                out.parent.mkdir(parents=True, exist_ok=True)
                with open(out, "a", encoding="utf8") as f:
                    f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    typer.run(main)
