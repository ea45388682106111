"""Does a name's vector depend on the names encoded beside it? MiniLM as shipped, and with fixed-size calls.

    python benchmarks/batch_invariance.py [--threads 2] [--precision bf16] [--chunks 0 16 32]

``SapEncoder.encode`` pads each name to its own token count (rounded up to 4) and encodes names of
one width together, which makes vectors batch-independent for the small test models. With MiniLM the
CPU's matrix kernels are chosen by the size of the whole product, so a name's vector can still move
in its last bits with the number of names beside it: annotate runs with ``--n-process 2`` or on Dask
then differ from one process in the last digits of some scores. This script measures that, and one
fix: every forward pass gets exactly ``C`` names (``--chunks C``; a short last chunk is padded with
copies of its last name), so that a width always meets the same kernel. For each setting: how many
of the first 60 names get a vector that is not bit for bit the one from a single call over all the
phrases (3,000 drawn, the distinct ones kept) when encoded in calls of 1, 3, 7 and 50 names, and the
names/s of that single call. Writes
``benchmarks/results/batch_invariance_{precision}.json``.
"""
from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch

from spacy_sapbert.encoder import SapEncoder
from spacy_sapbert.fileio import write_json
from spacy_sapbert.machine import machine_description

OUT = "benchmarks/results/batch_invariance_{precision}.json"
WORDS = ("neurodegenerative disease ovarian tumour circulating IgG level abnormal increased seizure short stature "
         "cleft palate hypoplasia of the left ventricle").split()


def fixed_size_forward(chunk: int):
    """``SapEncoder.forward`` that runs every call as passes of exactly ``chunk`` rows."""
    plain = SapEncoder.forward

    def forward(self, batch, model=None):
        n = batch["input_ids"].shape[0]
        out = []
        for start in range(0, n, chunk):
            part = {k: v[start : start + chunk] for k, v in batch.items()}
            m = part["input_ids"].shape[0]
            if m < chunk:
                part = {k: torch.cat([v, v[-1:].expand(chunk - m, *v.shape[1:])]) for k, v in part.items()}
            out.append(plain(self, part, model)[:m])
        return torch.cat(out)

    return forward


def measure(encoder: SapEncoder, texts: List[str]) -> Dict[str, float]:
    start = time.perf_counter()
    full = encoder.encode(texts, batch_size=128)
    seconds = time.perf_counter() - start
    differing = 0
    for size in (1, 3, 7, 50):
        for i in range(0, 60, size):
            part = encoder.encode(texts[i : i + size])
            differing += int((part != full[i : i + size]).any(axis=1).sum())
    return {"rows_differing": differing, "names_per_s": round(len(texts) / seconds, 1)}


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    parser.add_argument("--chunks", type=int, nargs="+", default=[0, 16, 32], help="0: encode as shipped")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    texts = list(dict.fromkeys(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) for _ in range(3000)))
    plain = SapEncoder.forward
    rows = []
    for chunk in args.chunks:
        SapEncoder.forward = fixed_size_forward(chunk) if chunk else plain
        try:
            encoder = SapEncoder.load(None, precision=args.precision)
            rows.append({"chunk": chunk or "as shipped", **measure(encoder, texts)})
        finally:
            SapEncoder.forward = plain
        print(rows[-1], flush=True)
    result = {"command": "python benchmarks/batch_invariance.py " + " ".join(argv if argv is not None else []),
              "machine": machine_description(), "threads": args.threads, "precision": args.precision,
              "names": len(texts), "rows": rows}
    write_json(Path(OUT.format(precision=args.precision)), result)
    return result


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
