"""What each encoder precision costs in dev accuracy and buys in speed, on this CPU (or as AVX2 would run it).

    python benchmarks/encoder_precision.py --isa avx2 [--precisions fp32 int8] [--limit 500]

For each precision the encoder can run at (``SapEncoder``'s ``fp32``, ``int8`` (SmoothQuant-calibrated
dynamic quantisation, ``spacy_sapbert/int8.py``, fbgemm) and ``bf16`` where oneDNN computes it natively), in this process after ``--isa``
took effect (``spacy_sapbert.machine.run_as_isa``), the KB vectors being the fp32 ones every time:

* the HPO default (``default_pipeline()``) on GSC+ dev, end to end, scored as ``hpo_default.py``
  scores it (every linked span, nested ones included), and how many of its linked spans differ from
  the first precision's (offsets or concepts);
* its speed: abstracts per CPU second of ``nlp.pipe`` over the first ``--limit`` distinct NCBI-disease
  + BC5CDR abstracts (``pipeline_profile.corpus_texts``), caches emptied, after one untimed pass;
  per CPU second because the machine these ran on was shared (wall seconds are recorded too);
* NCBI-disease dev on gold spans (``python -m spacy_sapbert evaluate --split dev --precision P``,
  a child process under the same variables): lenient Acc@1 and Acc@5.

With ``--fresh-kb`` each precision gets a pipeline of its own whose HPO KB is built anew in a
temporary cache at that precision (``default_pipeline(precision=P)``), as a fresh install on this CPU
builds it; NCBI-disease dev's MEDIC KB is encoded at the row's precision either way.

Writes ``benchmarks/results/encoder_precision_ISA.json``. Nothing here changes a default: the
encoder's ``auto`` rule (``spacy_sapbert.encoder.resolve_precision``) quotes these figures.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from pipeline_profile import clear_caches, corpus_texts  # benchmarks/pipeline_profile.py, beside this script

from spacy_sapbert.machine import ISA_ENVIRONMENTS

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "int8", "bf16")
GSC_DEV = ROOT.parent / "shared" / "data" / "gscplus-dev" / "GSCplus_dev_gold.tsv"


def pipeline_with_kb_in(cache: Path, **options: Any):
    """``default_pipeline(**options)`` with its HPO KB built in (or read from) ``cache``: a fresh
    install's KB for that encoder and precision, the user's cache left as it was."""
    from spacy_sapbert.defaults import default_pipeline
    from spacy_sapbert.fileio import ENV_CACHE

    before = os.environ.get(ENV_CACHE)
    os.environ[ENV_CACHE] = str(cache)
    try:
        return default_pipeline(progress=False, **options)
    finally:
        if before is None:
            del os.environ[ENV_CACHE]
        else:
            os.environ[ENV_CACHE] = before


def with_precision(nlp, precision: str) -> None:
    """Run the pipeline's linker encoder at ``precision`` (the KB's vectors stay as they are)."""
    encoder = nlp.get_pipe("sapbert_linker").encoder
    encoder.precision = precision
    encoder.invalidate()


def gsc_dev(nlp, docs) -> Dict[str, Any]:
    """End-to-end scores on GSC+ dev (``hpo_default.score``'s counting) and every linked span."""
    from hpo_default import score  # benchmarks/hpo_default.py, beside this script

    from spacy_sapbert.evaluation.end_to_end import predicted_spans

    clear_caches(nlp)
    scores = score(nlp, docs)
    clear_caches(nlp)
    linker = nlp.get_pipe("sapbert_linker")
    spans = [sorted((p.start, p.end, list(p.concepts)) for p in predicted_spans(doc, linker)) for doc in nlp.pipe([d.text for d in docs])]
    return {"scores": {k: v for k, v in scores.items() if k != "ents_only"}, "spans": spans}


def speed(nlp, texts: Sequence[str]) -> Dict[str, float]:
    clear_caches(nlp)
    for _ in nlp.pipe(texts):  # the tokenizer's cache and the vocabulary warm, as in a long-running process
        pass
    clear_caches(nlp)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in nlp.pipe(texts):
        pass
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"abstracts": len(texts), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "abstracts_per_s": round(len(texts) / wall, 1), "abstracts_per_cpu_s": round(len(texts) / cpu, 1)}


def ncbi_dev(precision: str, threads: int) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="encoder-precision-") as tmp:
        out = Path(tmp) / "ncbi.json"
        subprocess.run([sys.executable, "-m", "spacy_sapbert", "evaluate", "--dataset", "ncbi-disease", "--split", "dev",
                        "--precision", precision, "--threads", str(threads), "--output", str(out)],
                       check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        found = json.loads(out.read_text(encoding="utf8"))
    found = found[0] if isinstance(found, list) else found
    return {k: found[k] for k in ("lenient_acc@1", "lenient_acc@5", "strict_acc@1", "n_queries", "mentions_per_s") if k in found}


def differing(spans: List[List[Any]], reference: List[List[Any]]) -> int:
    """Linked spans (offsets and concepts) in one run and not the other, both ways."""
    return sum(len({json.dumps(s) for s in a} ^ {json.dumps(s) for s in b}) for a, b in zip(spans, reference))


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default="native", choices=list(ISA_ENVIRONMENTS))
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--limit", type=int, default=500, help="abstracts timed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--gsc", type=Path, default=GSC_DEV)
    parser.add_argument("--no-ncbi", action="store_true", help="skip NCBI-disease dev (gold spans)")
    parser.add_argument("--fresh-kb", action="store_true", help="build the HPO KB anew at each precision (a fresh install's)")
    parser.add_argument("--output", type=Path, default=None, help="default benchmarks/results/encoder_precision_ISA.json")
    args = parser.parse_args(argv)
    from spacy_sapbert.machine import run_as_isa

    run_as_isa(args.isa)
    import torch

    from spacy_sapbert.defaults import default_pipeline
    from spacy_sapbert.encoder import native_bf16, resolve_precision
    from spacy_sapbert.evaluation.datasets import read_gscplus
    from spacy_sapbert.fileio import write_json
    from spacy_sapbert.machine import machine_description

    torch.set_num_threads(args.threads)
    output = args.output or ROOT / "benchmarks" / "results" / f"encoder_precision_{args.isa}.json"
    precisions = [p for p in args.precisions if p != "bf16" or native_bf16(torch.device("cpu"))]
    result: Dict[str, Any] = {
        "command": "python benchmarks/encoder_precision.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine_description(), "threads": args.threads, "auto_precision": resolve_precision("auto", torch.device("cpu")),
        "load_average": {"before": [round(x, 2) for x in os.getloadavg()]}, "skipped": sorted(set(args.precisions) - set(precisions)),
        "rows": {},
    }
    dev = read_gscplus(args.gsc)
    texts = corpus_texts(ROOT / "assets" / "benchmarks", args.limit)
    nlp = None if args.fresh_kb else default_pipeline(progress=False)
    result["kb_vectors"] = "at each row's precision (a fresh KB)" if args.fresh_kb else "the cached default KB's, whatever precision built them"
    reference: Optional[List[List[Any]]] = None
    scratch = tempfile.TemporaryDirectory(prefix="encoder-precision-kb-")  # the fresh KBs, one folder each
    for precision in precisions:
        if args.fresh_kb:  # the KB is built in a folder of its own, at this precision
            fresh_cache = Path(scratch.name) / precision
            fresh_cache.mkdir()
            nlp = pipeline_with_kb_in(fresh_cache, precision=precision)
        else:
            with_precision(nlp, precision)
        row: Dict[str, Any] = {"speed": speed(nlp, texts)}
        found = gsc_dev(nlp, dev)
        reference = reference or found["spans"]
        row["gsc_dev"] = {**found["scores"], "linked_spans_differing_from_first": differing(found["spans"], reference)}
        if not args.no_ncbi:
            row["ncbi_dev_gold_spans"] = ncbi_dev(precision, args.threads)
        result["rows"][precision] = row
        print(json.dumps({precision: row}), flush=True)
    scratch.cleanup()
    result["load_average"]["after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(output, result)
    return result


if __name__ == "__main__":
    main()
