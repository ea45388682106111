"""Where the CPU time goes, by kind of work, in the HPO default and the gold-span linker (cProfile).

    python benchmarks/cpu_profile.py --isa avx2 [--limit 500] [--threads 1]

Two runs, each in this process after ``--isa`` took effect (``spacy_sapbert.machine.run_as_isa``):

* ``hpo``: ``nlp.pipe`` of the embedded default (``default_pipeline()``) over the distinct
  NCBI-disease + BC5CDR abstracts (``pipeline_profile.corpus_texts``; the first ``--limit``), its caches
  emptied first, as the issue-47 check runs it;
* ``gold-spans``: the MEDIC linker (``speed.py``'s KB, cached under ``corpus/cache``) over the
  NCBI-disease test abstracts with their gold spans, its cache emptied first, as ``speed.py`` times it.

Each is timed without the profiler (wall and CPU seconds), then profiled; the profile's own time is
shared out by where each function lives (``BUCKETS``: the encoder's matrix products and other torch
ops, the Hugging Face tokenizer, FAISS, the span finder's proposals, spaCy, the rest of
spacy_sapbert, other Python), as shares: the proportions hold on a loaded machine better than
seconds do. It also counts what the encoder was asked (``SapEncoder.encode`` calls and names, per
abstract) and how the span finder's proposals were settled (``SapBertLinker.top_scores``: by an exact
KB name, from the mention cache, or by the encoder). Writes ``benchmarks/results/cpu_profile_ISA.json``.
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from pipeline_profile import clear_caches, corpus_texts  # benchmarks/pipeline_profile.py, beside this script

from spacy_sapbert.machine import ISA_ENVIRONMENTS

ROOT = Path(__file__).resolve().parents[1]
# (bucket, substrings of a profiled function's file or builtin name), first match wins
BUCKETS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("encoder: torch linear/matmul", ("torch._C._nn.linear", "method 'matmul'", "torch.matmul", "torch.bmm", "torch.baddbmm",
                                       "scaled_dot_product_attention", "torch._C._nn.scaled_dot")),
    ("encoder: other torch ops", ("torch", "spacy_sapbert/bert.py")),
    ("HF tokenizer", ("tokenizers", "transformers")),
    ("FAISS search", ("faiss",)),
    ("span-finder proposals", ("spacy_sapbert/span_proposals.py",)),
    ("spaCy (tokenizer, Doc, Span)", ("spacy/", "thinc/", "spacy.tokens", "spacy.tokenizer", "spacy.vocab", "spacy.strings")),
    ("numpy", ("numpy",)),
    ("spacy_sapbert (other)", ("spacy_sapbert/",)),
)


def bucket_of(key: Tuple[str, int, str]) -> str:
    filename, _, name = key
    where = f"{filename} {name}"
    for bucket, marks in BUCKETS:
        if any(m in where for m in marks):
            return bucket
    return "other Python"


def profile_shares(run: Callable[[], Any]) -> Dict[str, Any]:
    """``run()`` under cProfile (CPU time): its total, the share of each bucket and the 15 costliest
    functions (own time). The profiler's own cost per Python call inflates the Python shares; the
    ``inner`` seconds (``Counter``) are measured without it."""
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    run()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    own: Dict[str, float] = {}
    total = 0.0
    for key, (_, _, tottime, _, _) in stats.items():
        own[bucket_of(key)] = own.get(bucket_of(key), 0.0) + tottime
        total += tottime
    top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:15]
    return {
        "profiled_seconds": round(total, 3),
        "shares": {b: round(s / total, 4) for b, s in sorted(own.items(), key=lambda kv: -kv[1])},
        "top_functions": [{"function": f"{k[0]}:{k[1]}({k[2]})", "own_seconds": round(v[2], 3), "calls": v[1]} for k, v in top],
    }


# Methods whose CPU seconds ``Counter`` adds up (outermost call only): (label, module, class, method)
INNER = (
    ("encoder forward (transformer)", "spacy_sapbert.encoder", "SapEncoder", "forward"),
    ("encoder tokenize (HF tokenizer)", "spacy_sapbert.encoder", "SapEncoder", "tokenize"),
    ("encode (all of it)", "spacy_sapbert.encoder", "SapEncoder", "encode"),
    ("vector search (FAISS)", "spacy_sapbert.index_kinds.base", "VectorIndex", "search"),
    ("span-finder proposals", "spacy_sapbert.span_finder", "SpanFinder", "proposals"),
    ("span-finder predict (proposals and their scores)", "spacy_sapbert.span_finder", "SpanFinder", "predict"),
)


class Counter:
    """Counts ``SapEncoder.encode`` (calls, names) and how ``top_scores`` settled its strings, and adds
    up the CPU seconds spent in the ``INNER`` methods."""

    def __init__(self) -> None:
        self.counts: Dict[str, int] = {}
        self.seconds: Dict[str, float] = {}

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def clear(self) -> None:
        self.counts.clear()
        self.seconds.clear()

    def _timed(self, label: str, fn: Callable) -> Callable:
        active = [0]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if active[0]:
                return fn(*args, **kwargs)
            active[0] += 1
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                active[0] -= 1
                self.seconds[label] = self.seconds.get(label, 0.0) + time.process_time() - start

        return wrapper

    def install(self) -> None:
        import importlib

        from spacy_sapbert.encoder import SapEncoder
        from spacy_sapbert.linker import SapBertLinker

        for label, module, cls_name, method in INNER:
            cls = getattr(importlib.import_module(module), cls_name)
            setattr(cls, method, self._timed(label, getattr(cls, method)))

        encode = SapEncoder.encode

        @functools.wraps(encode)
        def counted_encode(obj: Any, texts: Sequence[str], *args: Any, **kwargs: Any) -> Any:
            self.add("encode_calls")
            self.add("names_encoded", len(texts))
            return encode(obj, texts, *args, **kwargs)

        top_scores = SapBertLinker.top_scores

        @functools.wraps(top_scores)
        def counted_top_scores(obj: Any, mentions: Sequence[str]) -> Any:
            keys = {obj.normalize(m) for m in mentions}
            kb = obj.linking_kb.kb
            named = {k for k in keys if obj.exact_names and k and kb.row_of_name(k) is not None}
            cached = sum(1 for k in keys - named if k in obj._cache)
            self.add("proposal_strings", len(keys))
            self.add("proposal_strings_exact_name", len(named))
            self.add("proposal_strings_cached", cached)
            self.add("proposal_strings_searched", len(keys) - len(named) - cached)
            return top_scores(obj, mentions)

        SapEncoder.encode = counted_encode  # type: ignore[method-assign]
        SapBertLinker.top_scores = counted_top_scores  # type: ignore[method-assign]


def timed(run: Callable[[], Any]) -> Dict[str, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return {"wall_s": round(time.perf_counter() - wall, 3), "cpu_s": round(time.process_time() - cpu, 3)}


def hpo_run(texts: Sequence[str], counter: Counter) -> Dict[str, Any]:
    from spacy_sapbert.defaults import default_pipeline

    nlp = default_pipeline(progress=False)
    nlp("Warm-up: seizures, microcephaly and aspirin-induced asthma.")

    def run() -> None:
        clear_caches(nlp)
        for _ in nlp.pipe(texts):
            pass

    linkers = [proc for _, proc in nlp.pipeline if hasattr(proc, "overlap")]
    out: Dict[str, Any] = {"pipe_names": nlp.pipe_names, "abstracts": len(texts), **measured(run, counter, linkers)}
    out["abstracts_per_s"] = round(len(texts) / out["unprofiled"]["wall_s"], 1)
    out["abstracts_per_cpu_s"] = round(len(texts) / out["unprofiled"]["cpu_s"], 1)
    out["per_abstract"] = {k: round(v / len(texts), 3) for k, v in out["counts"].items()}
    return out


def measured(run: Callable[[], Any], counter: Counter, linkers: Sequence[Any]) -> Dict[str, Any]:
    """``run()`` timed, its counts and inner CPU seconds (shares of its CPU time), then profiled with
    the ``linkers``' ``overlap`` thread off (cProfile sees the calling thread only)."""
    counter.clear()
    out: Dict[str, Any] = {"unprofiled": timed(run), "counts": dict(counter.counts)}
    cpu = out["unprofiled"]["cpu_s"]
    out["inner_cpu_s"] = {k: {"seconds": round(v, 3), "share": round(v / cpu, 4)} for k, v in counter.seconds.items()}
    overlaps = [linker.overlap for linker in linkers]
    for linker in linkers:
        linker.overlap = False
    try:
        out.update(profile_shares(run))
    finally:
        for linker, overlap in zip(linkers, overlaps):
            linker.overlap = overlap
    return out


def gold_span_run(counter: Counter, cache: Path) -> Dict[str, Any]:
    from speed import gold_docs, linker_pipeline, linking_run, medic_kb_path  # benchmarks/speed.py, beside this script

    from spacy_sapbert.encoder import SapEncoder
    from spacy_sapbert.evaluation.datasets import load_split
    from spacy_sapbert.search import LinkingKB

    encoder = SapEncoder.load(None, device="cpu")
    lkb = LinkingKB.from_disk(medic_kb_path(encoder, cache))
    nlp = linker_pipeline(lkb, encoder)
    linker = nlp.get_pipe("sapbert_linker")
    docs = gold_docs(nlp, load_split("ncbi-disease", "test"))
    n = sum(len(linker.spans_to_link(d)) for d in docs)
    run = linking_run(nlp, docs)
    run()  # warm-up
    out: Dict[str, Any] = {"abstracts": len(docs), "mentions": n, **measured(run, counter, [linker])}
    out["mentions_per_s"] = round(n / out["unprofiled"]["wall_s"], 1)
    out["mentions_per_cpu_s"] = round(n / out["unprofiled"]["cpu_s"], 1)
    return out


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default="native", choices=list(ISA_ENVIRONMENTS))
    parser.add_argument("--limit", type=int, default=None, help="only the first N abstracts of the hpo run")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", nargs="+", default=["hpo", "gold-spans"], choices=["hpo", "gold-spans"])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "assets" / "benchmarks")
    parser.add_argument("--cache", type=Path, default=ROOT / "corpus" / "cache")
    parser.add_argument("--output", type=Path, default=None, help="default benchmarks/results/cpu_profile_ISA.json")
    args = parser.parse_args(argv)
    from spacy_sapbert.machine import run_as_isa

    run_as_isa(args.isa)
    import faiss
    import torch

    from spacy_sapbert.fileio import write_json
    from spacy_sapbert.machine import machine_description

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    output = args.output or ROOT / "benchmarks" / "results" / f"cpu_profile_{args.isa}.json"
    result: Dict[str, Any] = {
        "command": "python benchmarks/cpu_profile.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine_description(), "threads": args.threads,
        "load_average": {"before": [round(x, 2) for x in os.getloadavg()]},
    }
    counter = Counter()
    counter.install()
    runs: List[str] = args.runs
    if "hpo" in runs:
        result["hpo"] = hpo_run(corpus_texts(args.data_dir, args.limit), counter)
        print(json.dumps({"hpo": {k: v for k, v in result["hpo"].items() if k != "top_functions"}}), flush=True)
    if "gold-spans" in runs:
        result["gold_spans"] = gold_span_run(counter, args.cache)
        print(json.dumps({"gold_spans": {k: v for k, v in result["gold_spans"].items() if k != "top_functions"}}), flush=True)
    result["machine"] = machine_description()  # FAISS is loaded now: its SIMD level is known
    result["load_average"]["after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(output, result)
    return result


if __name__ == "__main__":
    main()
