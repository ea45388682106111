"""What the shipped pipelines give, written down so that two versions of the code can be compared.

A restructuring must not change a link: ``snapshot`` runs every shipped pipeline (the HPO default, and
the ``gold``, ``ner``, ``ner-trf``, ``span_finder`` and ``ner+span_finder`` detectors over a MEDIC KB)
through ``nlp.pipe`` on the benchmark test splits, and ``annotate`` over a corpus, and writes each
span's offsets, label, concept, candidates with scores (exact floats), parts and negation, one JSON
line per document; ``compare`` says, case by case, whether two snapshots are identical, and shows the
first differences. Run it with the old code on ``PYTHONPATH`` (a checkout of the old commit), then
with the new::

    PYTHONPATH=/tmp/before python benchmarks/behaviour_snapshot.py snapshot /tmp/snap-before --save-pipeline /tmp/saved-before
    python benchmarks/behaviour_snapshot.py snapshot /tmp/snap-after --load-pipeline /tmp/saved-before
    python benchmarks/behaviour_snapshot.py compare /tmp/snap-before /tmp/snap-after

``--load-pipeline`` also links with the pipeline the old code saved (case ``saved-default``), which
shows that pipelines saved before the change still load and give the same links. The MEDIC KB is
built once with ``build-kb`` into ``--work`` and shared by both runs, so a KB folder written by one
version is read by the other. Both runs must use the same torch thread count (a matmul split over
another number of threads rounds differently) and the same ``--only`` cases (``span._.negex`` exists
in a process only once a pipeline with negation ran): ``snapshot.json`` records both, and ``compare``
refuses two snapshots that differ there.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Sequence, Tuple

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
MEDIC = DATA / "medic" / "medic_06Jul2012.txt"
NESTED = "sapbert_nested"


def _span_record(span: Any) -> List[Any]:
    ext = span._
    record: List[Any] = [span.start_char, span.end_char, span.label_, span.kb_id_]
    for name in ("cui", "cui_candidates", "cui_parts", "negex"):
        record.append(getattr(ext, name) if span.has_extension(name) else None)
    return record


def doc_record(doc_id: str, doc: Any) -> str:
    """One line: the entities and the nested span group, every value the linker sets."""
    nested = [_span_record(s) for s in doc.spans[NESTED]] if NESTED in doc.spans else []
    return json.dumps({"id": doc_id, "ents": [_span_record(e) for e in doc.ents], "nested": nested},
                      ensure_ascii=False, default=list)


def _documents(name: str) -> List[Tuple[str, str, List[Tuple[int, int, str]]]]:
    """(id, text, gold spans) of a test split, or of GSC+ dev (the only phenotype split here)."""
    from spacy_sapbert.evaluation import datasets, end_to_end

    if name == "gscplus-dev":
        docs = datasets.read_gscplus(DATA / "gscplus-dev" / "GSCplus_dev_gold.tsv")
    else:
        docs = end_to_end.load_documents(name, "test", DATA)
    return [(d.doc_id, d.text, [(m.start, m.end, m.entity_type or "CONCEPT") for m in d.mentions]) for d in docs]


def _gold_docs(nlp: Any, documents: Sequence[Tuple[str, str, List[Tuple[int, int, str]]]], label: str) -> Iterator[Any]:
    from spacy.util import filter_spans

    for _, text, spans in documents:
        doc = nlp.make_doc(text)
        found = [doc.char_span(s, e, label=label, alignment_mode="expand") for s, e, _ in spans]
        doc.ents = filter_spans([s for s in found if s is not None])
        yield doc


def _write(path: Path, ids: Iterable[str], docs: Iterable[Any]) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for doc_id, doc in zip(ids, docs):
            f.write(doc_record(doc_id, doc) + "\n")
            n += 1
    return n


def medic_kb(work: Path) -> Path:
    """The MEDIC KB, built by ``build-kb`` (what a user runs) once; both versions read this folder."""
    folder = work / "medic-kb"
    if not (folder / "meta.json").is_file():
        subprocess.run([sys.executable, "-m", "spacy_sapbert", "build-kb", str(MEDIC), str(folder)], check=True)
    return folder


def cases(work: Path) -> Dict[str, Callable[[Path], int]]:
    """Each case writes its JSONL file and returns the documents written."""
    from spacy_sapbert import build_pipeline, default_pipeline
    from spacy_sapbert.hpo_kb import default_kb_path

    def end_to_end(make: Callable[[], Any], dataset: str) -> Callable[[Path], int]:
        def run(out: Path) -> int:
            docs = _documents(dataset)
            nlp = make()
            return _write(out, (d[0] for d in docs), nlp.pipe(d[1] for d in docs))
        return run

    def gold(make: Callable[[], Any], dataset: str, label: str) -> Callable[[Path], int]:
        def run(out: Path) -> int:
            docs = _documents(dataset)
            nlp = make()
            return _write(out, (d[0] for d in docs), nlp.pipe(_gold_docs(nlp, docs, label)))
        return run

    def medic(detector: str, **kw: Any) -> Callable[[], Any]:
        return lambda: build_pipeline(medic_kb(work), detector, labels=["Disease"], **kw)

    found: Dict[str, Callable[[Path], int]] = {}
    for dataset in ("gscplus-dev", "ncbi-disease"):
        found[f"hpo-default-{dataset}"] = end_to_end(default_pipeline, dataset)
    found["hpo-gold-gscplus-dev"] = gold(lambda: build_pipeline(default_kb_path(), "gold"), "gscplus-dev", "CONCEPT")
    for dataset in ("ncbi-disease", "bc5cdr-disease"):
        found[f"medic-gold-{dataset}"] = gold(medic("gold"), dataset, "Disease")
        found[f"medic-ner-{dataset}"] = end_to_end(medic("ner"), dataset)
        found[f"medic-ner-trf-{dataset}"] = end_to_end(medic("ner-trf"), dataset)
    found["medic-span_finder-ncbi-disease"] = end_to_end(lambda: build_pipeline(medic_kb(work), "span_finder", label="Disease"), "ncbi-disease")
    found["medic-ner+span_finder-ncbi-disease"] = end_to_end(medic("ner+span_finder"), "ncbi-disease")
    return found


def annotate_case(work: Path, out: Path) -> int:
    """``annotate`` over the NCBI-disease test split (the HPO default, two shards): each output file's sha256."""
    target = work / f"annotate-{out.parent.name}"
    source = DATA / "ncbi-disease" / "NCBItestset_corpus.txt"
    subprocess.run([sys.executable, "-m", "spacy_sapbert", "annotate", str(source), str(target), "--shard-size", "60",
                    "--overwrite"], check=True)
    files = sorted(p for p in target.rglob("*") if p.is_file() and p.name != "manifest.json")
    with out.open("w", encoding="utf-8") as f:
        for p in files:
            f.write(json.dumps({"id": str(p.relative_to(target)), "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}) + "\n")
    return len(files)


def conditions(args: argparse.Namespace) -> Dict[str, Any]:
    """What the figures depend on besides the code: the torch thread count and the cases run."""
    import torch

    return {"torch_threads": torch.get_num_threads(), "only": sorted(args.only or [])}


def snapshot(args: argparse.Namespace) -> None:
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "snapshot.json").write_text(json.dumps(conditions(args)), encoding="utf-8")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    todo = cases(work)
    for name, run in todo.items():
        if args.only and not any(o in name for o in args.only):
            continue
        n = run(out / f"{name}.jsonl")
        print(f"{name}: {n} documents", flush=True)
    if not args.only or "annotate" in args.only:
        print(f"annotate: {annotate_case(work, out / 'annotate.jsonl')} files", flush=True)
    if args.save_pipeline:
        from spacy_sapbert import default_pipeline

        default_pipeline().to_disk(args.save_pipeline)
        print(f"saved the default pipeline to {args.save_pipeline}")
    if args.load_pipeline:
        import spacy

        docs = _documents("gscplus-dev")
        nlp = spacy.load(args.load_pipeline)
        n = _write(out / "hpo-default-gscplus-dev.saved.jsonl", (d[0] for d in docs), nlp.pipe(d[1] for d in docs))
        print(f"saved-default (loaded from {args.load_pipeline}): {n} documents")


def what_differs(before: Sequence[str], after: Sequence[str]) -> str:
    """Where two snapshots of one case differ, by kind: the spans with their concepts (offsets, label,
    ``kb_id_``, ``_.cui``), the order of each kept span's candidate concepts, and the largest change of a
    top candidate's score. A change in float rounding alone moves scores, and at most candidates that
    tie or nearly tie; a change of behaviour moves spans or concepts."""
    def spans(lines: Sequence[str]) -> Dict[Tuple[Any, ...], List[Any]]:
        found = {}
        for line in lines:
            doc = json.loads(line)
            for group in ("ents", "nested"):
                for record in doc.get(group, []):
                    found[(doc["id"], group, *record[:4], record[4])] = record
        return found

    a, b = spans(before), spans(after)
    shared = a.keys() & b.keys()
    reordered = sum([c[0] for c in a[k][5] or []] != [c[0] for c in b[k][5] or []] for k in shared)
    moved = max((abs(a[k][5][0][2] - b[k][5][0][2]) for k in shared if a[k][5] and b[k][5]), default=0.0)
    return (f"spans with their concepts: {len(a.keys() - b.keys())} only before, {len(b.keys() - a.keys())} only after, "
            f"{len(shared)} in both; candidate concepts in another order: {reordered} of {len(shared)}; "
            f"largest change of a top score: {moved:.2e}")


def compare(args: argparse.Namespace) -> int:
    """Every case in ``before`` against ``after`` (and a loaded saved pipeline against the default's case)."""
    before, after = Path(args.before), Path(args.after)
    taken = [json.loads((p / "snapshot.json").read_text(encoding="utf-8")) for p in (before, after)]
    if taken[0] != taken[1]:
        print(f"not comparable: {before} was taken with {taken[0]}, {after} with {taken[1]}")
        return 2
    pairs = [(p, after / p.name) for p in sorted(before.glob("*.jsonl"))]
    pairs += [(before / p.name.replace(".saved", ""), p) for p in sorted(after.glob("*.saved.jsonl"))]
    failed = 0
    for old, new in pairs:
        if not new.is_file():
            print(f"{new.name}: MISSING in {after}")
            failed += 1
            continue
        a, b = old.read_text(encoding="utf-8").splitlines(), new.read_text(encoding="utf-8").splitlines()
        differing = [(x, y) for x, y in zip(a, b) if x != y]
        spans = sum(len(json.loads(x).get("ents", [])) + len(json.loads(x).get("nested", [])) for x in a)
        if len(a) != len(b) or differing:
            failed += 1
            print(f"{new.name}: DIFFERENT ({len(differing)} of {len(a)} documents; {len(a)} vs {len(b)} lines)")
            print(f"  {what_differs(a, b)}")
            for x, y in differing[:3]:
                print(f"  before: {x[:400]}\n  after:  {y[:400]}")
        else:
            print(f"{new.name}: identical ({len(a)} documents, {spans} spans)")
    print(f"{len(pairs) - failed} of {len(pairs)} cases identical")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot", help="run every case, write OUTPUT/<case>.jsonl")
    snap.add_argument("output")
    snap.add_argument("--work", default="/tmp/behaviour-work", help="where the MEDIC KB and annotate outputs go (shared by both runs)")
    snap.add_argument("--only", nargs="*", help="run the cases whose names contain one of these")
    snap.add_argument("--save-pipeline", help="also save the default pipeline here (run with the old code)")
    snap.add_argument("--load-pipeline", help="also link GSC+ dev with a pipeline saved by the old code")
    comp = sub.add_parser("compare", help="compare two snapshot folders")
    comp.add_argument("before")
    comp.add_argument("after")
    args = parser.parse_args()
    if args.command == "snapshot":
        snapshot(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
