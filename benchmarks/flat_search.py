"""Exact search: the faiss-cpu wheel's IndexFlatIP.search versus our torch matmul + top-k path, and
on real KBs our fp32 path versus the bf16 shortlist (``VectorIndex.shortlist_search``) and versus
itself selecting with ``torch.topk`` over every column instead of ``_top_k``.

    python benchmarks/flat_search.py      # random vectors (75,000 x 384), then kbs/mesh-chemical and kbs/medic
    python benchmarks/flat_search.py --kb kbs/mesh-chemical --threads 1 --threads 2

Real-KB part: the distinct BC5CDR test mention strings (chemicals and diseases), encoded with the
default encoder, searched for their top 20 in one call, median of 3, by each path of the same
index in the same run; "same top 20" compares the sets of names, and the scores' largest difference.
A KB too small to keep a shortlist (``SHORTLIST_MIN_NAMES``) is measured with one made in memory.
Writes ``benchmarks/results/flat_search.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

import faiss
import numpy as np
import torch
from speed import median_time  # benchmarks/ is the script's folder, so its sibling imports

import spacy_sapbert.index_kinds.flat as index_module  # exact search reads _top_k from here
from spacy_sapbert.encoder import SapEncoder, fast_bf16, native_bf16, resolve_encoder_path
from spacy_sapbert.evaluation.datasets import read_pubtator
from spacy_sapbert.fileio import write_json
from spacy_sapbert.index import VectorIndex
from spacy_sapbert.machine import machine_description

OUT = Path("benchmarks/results/flat_search.json")
CDR_TEST = Path("assets/benchmarks/bc5cdr/CDR_TestSet.PubTator.txt")


def random_vectors(n: int = 75_000, dim: int = 384, n_queries: int = 256, k: int = 20) -> Dict[str, float]:
    torch.set_num_threads(1)
    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[:n_queries] + 0.05 * rng.normal(size=(n_queries, dim)).astype(np.float32)
    index = VectorIndex.build(vectors, kind="flat", neighbours=False)  # search is what is timed
    index.meta.pop("shortlist", None)  # the fp32 path, as FAISS computes it
    ours = median_time(lambda: index.search(queries, k), 3)
    theirs = median_time(lambda: index.index.search(queries, k), 3)
    same = float((index.search(queries, k)[1] == index.index.search(queries, k)[1]).mean())
    print(f"{n_queries} queries, {n} x {dim}, k={k}, 1 thread: faiss {theirs:.3f} s, torch {ours:.3f} s, same rows {same:.4f}")
    return {"names": n, "queries": n_queries, "faiss_s": round(theirs, 3), "torch_s": round(ours, 3), "same_rows": same}


def real_kb(kb: Path, queries: np.ndarray, threads: int, k: int = 20) -> Dict[str, object]:
    """The fp32 path and the shortlist of one KB's index, timed in turn on the same queries."""
    torch.set_num_threads(threads)
    index = VectorIndex.from_disk(kb)
    stored = index.meta.get("shortlist") == "bf16"
    if not stored:  # a KB under SHORTLIST_MIN_NAMES: the bf16 copy made in memory, to show why it has none
        vectors = index.stored_vectors(np.arange(len(index)))
        index.meta.update(shortlist="bf16", max_norm=float(np.linalg.norm(vectors, axis=1).max()))
    with_shortlist = dict(index.meta)
    without = {key: v for key, v in with_shortlist.items() if key != "shortlist"}
    index.meta = without
    fp32 = index.fp32_search(queries, k)
    fp32_s = median_time(lambda: index.fp32_search(queries, k), 3)
    chunked, index_module._top_k = index_module._top_k, lambda sims, n: torch.topk(sims, n, dim=1)
    try:  # the same fp32 path selecting with torch.topk over every column, as it did before _top_k
        full = index.fp32_search(queries, k)
        full_s = median_time(lambda: index.fp32_search(queries, k), 3)
    finally:
        index_module._top_k = chunked
    index.meta = with_shortlist  # the shortlist path itself, whether or not ``fast_bf16`` would choose it here
    short = index.shortlist_search(queries, k)
    short_s = median_time(lambda: index.shortlist_search(queries, k), 3)
    same = float(np.mean([set(a) == set(b) for a, b in zip(fp32[1], short[1])]))
    row = {
        "kb": str(kb), "names": len(index), "shortlist_on_disk": stored, "queries": len(queries), "threads": threads, "k": k,
        "fp32_ms_per_query": round(1000 * fp32_s / len(queries), 3),
        "fp32_topk_over_every_column_ms_per_query": round(1000 * full_s / len(queries), 3),
        "same_scores_as_topk_over_every_column": bool(np.array_equal(fp32[0], full[0])),
        "shortlist_ms_per_query": round(1000 * short_s / len(queries), 3),
        "speedup": round(fp32_s / short_s, 2),
        "same_top_k": same,
        "max_score_difference": float(np.abs(fp32[0] - short[0]).max()),
    }
    print(json.dumps(row))
    return row


def mention_strings(path: Path = CDR_TEST) -> List[str]:
    return sorted({m.text for d in read_pubtator(path) for m in d.mentions})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kb", action="append", type=Path, help="KB folders (default: kbs/mesh-chemical, kbs/medic)")
    parser.add_argument("--threads", action="append", type=int, help="torch threads (default: 1 and 2)")
    parser.add_argument("--output", type=Path, default=OUT, help=f"the JSON written (default {OUT.name})")
    args = parser.parse_args()
    result: Dict[str, object] = {"command": "python benchmarks/flat_search.py " + " ".join(sys.argv[1:]), "machine": machine_description(),
                                 "native_bf16": native_bf16(torch.device("cpu")), "fast_bf16": fast_bf16(torch.device("cpu")),
                                 "random": random_vectors()}
    strings = mention_strings()
    encoder = SapEncoder.load(resolve_encoder_path(None))
    queries = np.ascontiguousarray(encoder.encode(strings), dtype=np.float32)
    result["kbs"] = [real_kb(kb, queries, t) for kb in args.kb or [Path("kbs/mesh-chemical"), Path("kbs/medic")]
                     for t in args.threads or [1, 2]]
    write_json(args.output, result)


if __name__ == "__main__":
    main()
