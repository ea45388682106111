"""Linking speed and memory on this machine: the figures the README quotes.

    python benchmarks/speed.py --quick        # < 5 minutes once the MEDIC KB is cached

Measures, with the default encoder (offline MiniLM) and the MEDIC 2012 KB:
* ``names_per_s``: dictionary encoding, per precision (fp32 / bf16 / int8);
* for each precision, lenient Acc@1 of raw NCBI-disease test mentions against MEDIC (a speed-side
  sanity check, not the paper's protocol: see ``benchmarks/evaluate_all.py``) and top-5 overlap with fp32;
* ``mentions_per_s``: ``nlp.pipe`` over the NCBI-disease test abstracts with gold spans;
* ``distinct_mentions_per_s``: ``nlp.pipe`` over distinct mention strings (no cache help);
* the untuned path side by side (fp32, padding to max_length, no cache);
* ``peak_rss_mb``.
Every figure is the median over ``--repeats`` runs. Writes ``benchmarks/results/speed.json``.
"""
from __future__ import annotations

import json
import platform
import resource
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import faiss
import spacy
import torch
import typer
from spacy.tokens import Doc, Span

from spacy_sapbert.encoder import SapEncoder
from spacy_sapbert.evaluation.datasets import dictionary_records, load_split
from spacy_sapbert.fileio import write_json
from spacy_sapbert.linker import SapBertLinker
from spacy_sapbert.normalize import normalize_name
from spacy_sapbert.search import LinkingKB

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16", "int8")


def median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def medic_kb(encoder: SapEncoder, cache: Path) -> LinkingKB:
    """The MEDIC KB for this encoder, built once and cached (building is not what we time here)."""
    path = cache / f"kb-medic-{encoder.fingerprint[:12]}"
    if not (path / "meta.json").is_file():
        LinkingKB.build(dictionary_records("ncbi-disease"), encoder, progress=True, work_dir=cache / "kb-medic.partial").to_disk(path)
    return LinkingKB.from_disk(path)


def gold_docs(nlp, documents) -> List[Doc]:
    """The NCBI test abstracts as Docs whose ents are the gold mentions (the linker's input)."""
    docs = []
    for d in documents:
        doc = nlp.make_doc(d.text)
        spans = [doc.char_span(m.start, m.end, label="Disease", alignment_mode="expand") for m in d.mentions]
        doc.ents = spacy.util.filter_spans([s for s in spans if s is not None])
        docs.append(doc)
    return docs


def single_span_docs(nlp, texts: Sequence[str]) -> List[Doc]:
    docs = []
    for t in texts:
        doc = nlp.make_doc(t)
        doc.ents = [Span(doc, 0, len(doc), label="Disease")]
        docs.append(doc)
    return docs


def pipe_rate(linker: SapBertLinker, docs: List[Doc], repeats: int, batch_size: int = 128) -> float:
    n = sum(len(linker.spans_to_link(d)) for d in docs)

    def run():
        linker._cache.clear()
        for _ in linker.pipe(iter(docs), batch_size=batch_size):
            pass

    return n / median_time(run, repeats)


def main(
    quick: bool = typer.Option(False, help="Only the linking figures (skip the UMLS-scale part)"),
    repeats: int = typer.Option(3, help="Runs per figure; the median is reported"),
    threads: int = typer.Option(2, help="torch and FAISS threads"),
    n_names: int = typer.Option(3000, help="Dictionary names encoded for names_per_s"),
    output: Path = typer.Option(ROOT / "benchmarks" / "results" / "speed.json"),
    cache: Path = typer.Option(ROOT / "corpus" / "cache"),
) -> None:
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    results: Dict[str, object] = {
        "command": "python benchmarks/speed.py" + (" --quick" if quick else ""),
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": threads, "torch": torch.__version__},
        "repeats": repeats,
    }
    encoder = SapEncoder.load(None, device="cpu")
    lkb = medic_kb(encoder, cache)
    results["kb"] = {"name": "MEDIC 06-Jul-2012", **lkb.kb.stats(), "index": lkb.index.meta["kind"]}

    # dictionary encoding speed and query-side accuracy per precision
    names = lkb.kb.names[:: max(1, lkb.kb.n_names // n_names)][:n_names]
    test_docs = load_split("ncbi-disease", "test")
    mentions = [m for d in test_docs for m in d.mentions if m.ids]
    queries = [normalize_name(m.text) for m in mentions]
    aliases = [set([cid, *xrefs]) for cid, xrefs in zip(lkb.kb.concept_ids, lkb.kb.concept_xrefs)]
    by_precision: Dict[str, Dict[str, float]] = {}
    reference = None
    for precision in PRECISIONS:
        enc = SapEncoder.load(None, device="cpu", precision=precision)
        enc.encode(names[:64])  # warm-up (and int8 quantisation)
        rate = len(names) / median_time(lambda: enc.encode(names, batch_size=256), repeats)
        cands = lkb.candidates(enc.encode(queries), top_k=5)
        top5 = [[c.concept_id for c in cs] for cs in cands]
        hits = [bool(cs) and bool(aliases[lkb.kb.row_of_concept(cs[0])] & set(m.ids)) for cs, m in zip(top5, mentions)]
        reference = reference or top5
        overlap = statistics.mean(len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(top5, reference))
        by_precision[precision] = {
            "names_per_s": round(rate, 1),
            "ncbi_test_raw_acc@1": round(100 * sum(hits) / len(hits), 2),
            "top5_overlap_with_fp32": round(overlap, 4),
        }
        typer.echo(f"{precision}: {by_precision[precision]}", err=True)
    results["precision"] = by_precision
    results["names_per_s"] = by_precision["fp32"]["names_per_s"]

    # linking through nlp.pipe
    nlp = spacy.blank("en")
    linker = SapBertLinker(nlp.vocab)
    linker.set_kb(lkb, encoder)
    docs = gold_docs(nlp, test_docs)
    results["mentions_per_s"] = round(pipe_rate(linker, docs, repeats), 1)
    distinct = sorted({normalize_name(m.text) for s in ("train", "dev", "test") for d in load_split("ncbi-disease", s) for m in d.mentions})
    distinct_docs = single_span_docs(nlp, distinct[:2000])
    results["distinct_mentions_per_s"] = round(pipe_rate(linker, distinct_docs, repeats), 1)
    results["n_mentions"] = sum(len(d.ents) for d in docs)
    results["n_distinct_mentions"] = len(distinct_docs)

    # the untuned path: fp32, pad to max_length, no cache
    untuned = SapBertLinker(nlp.vocab, cache_size=0)
    slow_encoder = SapEncoder.load(None, device="cpu")
    slow_encoder.pad_to_max_length = True
    untuned.set_kb(lkb, slow_encoder)
    results["untuned"] = {
        "mentions_per_s": round(pipe_rate(untuned, docs, repeats), 1),
        "distinct_mentions_per_s": round(pipe_rate(untuned, distinct_docs, repeats), 1),
    }
    if not quick:
        results["umls_scale"] = "not implemented yet (issue 6)"
    results["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    write_json(output, results)
    typer.echo(json.dumps(results, indent=2))


if __name__ == "__main__":
    typer.run(main)
