"""Exact search: the faiss-cpu wheel's IndexFlatIP.search versus our torch matmul + top-k path, and
on real KBs our fp32 path versus the bf16 shortlist (``VectorIndex.shortlist_search``), the int8
first pass (``int8_search``, where int8 products are exact) and itself selecting with ``torch.topk``
over every column instead of ``_top_k``.

    python benchmarks/flat_search.py      # random vectors (75,000 x 384), then kbs/mesh-chemical and kbs/medic
    python benchmarks/flat_search.py --kb kbs/mesh-chemical --threads 1 --threads 2
    python benchmarks/flat_search.py --isa avx2 --kb MEDIC --kb HPO --threads 1 --threads 2 --k 20 --batch 8 --batch 0 --output benchmarks/results/flat_search_avx2.json

Real-KB part: the distinct BC5CDR dev mention strings (chemicals and diseases), encoded with the
default encoder, searched for their top ``--k`` (20) in one call (or ``--batch`` at a time, as a
span finder searches), median of 3, by each path of the same index in the same run; "same top k"
compares the sets of names, and the scores' largest difference. A KB too small to keep a shortlist
(``SHORTLIST_MIN_NAMES``) is measured with one made in memory. ``--isa avx2`` runs as an AVX2-only
CPU would (``spacy_sapbert.machine.ISA_ENVIRONMENTS``). Writes ``benchmarks/results/flat_search.json``.
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
from spacy_sapbert.evaluation.datasets import DEFAULT_DATA_DIR, read_pubtator
from spacy_sapbert.fileio import write_json
from spacy_sapbert.index import VectorIndex
from spacy_sapbert.index_kinds.int8_copy import Int8Copy, int8_products_exact
from spacy_sapbert.machine import ISA_ENVIRONMENTS, machine_description, run_as_isa

OUT = Path("benchmarks/results/flat_search.json")
CDR_DEV = DEFAULT_DATA_DIR / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt"  # (runs before 2026-11-29: the test set's)


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


def real_kb(kb: Path, queries: np.ndarray, threads: int, k: int = 20, batch: int = 0) -> Dict[str, object]:
    """The fp32 path, the bf16 shortlist and the int8 first pass of one KB's index, timed in turn on the
    same queries, ``batch`` a search (0: all in one)."""
    torch.set_num_threads(threads)
    index = VectorIndex.from_disk(kb)
    stored = index.meta.get("shortlist") == "bf16"
    if not stored:  # a KB under SHORTLIST_MIN_NAMES: the bf16 copy made in memory, to show why it has none
        vectors = index.stored_vectors(np.arange(len(index)))
        index.meta.update(shortlist="bf16", max_norm=float(np.linalg.norm(vectors, axis=1).max()))
    with_shortlist = dict(index.meta)
    without = {key: v for key, v in with_shortlist.items() if key != "shortlist"}
    index.meta = without
    path = index.search_path(k)

    def batched(search):
        step = batch or len(queries)
        parts = [search(queries[at : at + step], k) for at in range(0, len(queries), step)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def ms(search) -> float:
        return round(1000 * median_time(lambda: batched(search), 3) / len(queries), 3)

    def compared(name: str, search) -> Dict[str, object]:
        found = batched(search)  # (and a bf16 or int8 copy made, outside the timing)
        took = ms(search)
        return {f"{name}_ms_per_query": took, f"{name}_speedup": round(row["fp32_ms_per_query"] / took, 2),
                f"{name}_same_top_k": float(np.mean([set(a) == set(b) for a, b in zip(fp32[1], found[1])])),
                f"{name}_max_score_difference": float(np.abs(fp32[0] - found[0]).max())}

    fp32 = batched(index.fp32_search)
    row: Dict[str, object] = {"kb": str(kb), "names": len(index), "shortlist_on_disk": stored, "queries": len(queries),
                              "batch": batch or len(queries), "threads": threads, "k": k, "search_path": path,
                              "fp32_ms_per_query": ms(index.fp32_search)}
    chunked, index_module._top_k = index_module._top_k, lambda sims, n: torch.topk(sims, n, dim=1)
    try:  # the same fp32 path selecting with torch.topk over every column, as it did before _top_k
        full = batched(index.fp32_search)
        row["fp32_topk_over_every_column_ms_per_query"] = ms(index.fp32_search)
        row["same_scores_as_topk_over_every_column"] = bool(np.array_equal(fp32[0], full[0]))
    finally:
        index_module._top_k = chunked
    index.meta = with_shortlist  # the shortlist path itself, whether or not ``fast_bf16`` would choose it here
    row.update(compared("shortlist", index.shortlist_search))
    if int8_products_exact():  # the int8 first pass, whether or not ``search_path`` would choose it here
        row["int8_copy_s"] = round(median_time(lambda: Int8Copy(index._flat_vectors()), 3), 3)  # made at the first search
        row.update(compared("int8", index.int8_search))
    print(json.dumps(row))
    return row


def mention_strings(path: Path = CDR_DEV) -> List[str]:
    return sorted({m.text for d in read_pubtator(path) for m in d.mentions})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kb", action="append", type=Path, help="KB folders (default: kbs/mesh-chemical, kbs/medic)")
    parser.add_argument("--threads", action="append", type=int, help="torch threads (default: 1 and 2)")
    parser.add_argument("--k", type=int, default=20, help="names per query (the linker's top_k is 5)")
    parser.add_argument("--batch", action="append", type=int, help="queries per search (repeatable; default: all in one)")
    parser.add_argument("--isa", default="native", choices=list(ISA_ENVIRONMENTS), help="run as a CPU with only this instruction set would")
    parser.add_argument("--output", type=Path, default=OUT, help=f"the JSON written (default {OUT.name})")
    args = parser.parse_args()
    run_as_isa(args.isa)
    result: Dict[str, object] = {"command": "python benchmarks/flat_search.py " + " ".join(sys.argv[1:]), "machine": machine_description(),
                                 "native_bf16": native_bf16(torch.device("cpu")), "fast_bf16": fast_bf16(torch.device("cpu")),
                                 "random": random_vectors()}
    strings = mention_strings()
    encoder = SapEncoder.load(resolve_encoder_path(None))
    queries = np.ascontiguousarray(encoder.encode(strings), dtype=np.float32)
    result["kbs"] = [real_kb(kb, queries, t, args.k, batch) for kb in args.kb or [Path("kbs/mesh-chemical"), Path("kbs/medic")]
                     for t in args.threads or [1, 2] for batch in args.batch or [0]]
    write_json(args.output, result)


if __name__ == "__main__":
    main()
