"""How much of each activation channel's range the int8 encoder moves into the weights (SmoothQuant's alpha).

    python benchmarks/int8_alpha.py [--isa avx2]

For each alpha, the distinct NCBI-disease + BC5CDR-disease *dev* mentions are encoded by the default
encoder at int8 (``spacy_sapbert/int8.py``, calibrated on its shipped calibration names) and searched
in the MEDIC KB (fp32 vectors, ``speed.py``'s cached KB); reported: how many find the same top concept
as fp32 queries do, and the mean cosine between the int8 and fp32 vectors. ``int8.ALPHA`` is the
alpha with the most agreement. Torch's plain dynamic quantisation (one scale per weight and per
activation tensor: the int8 this package had before) is the first row. Dev data only. Writes
``benchmarks/results/int8_alpha.json`` (``int8_alpha_ISA.json`` with ``--isa``).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from speed import medic_kb_path  # benchmarks/speed.py, beside this script

from spacy_sapbert import int8
from spacy_sapbert.encoder import SapEncoder
from spacy_sapbert.evaluation.datasets import load_split
from spacy_sapbert.fileio import write_json
from spacy_sapbert.machine import ISA_ENVIRONMENTS, machine_description, run_as_isa
from spacy_sapbert.search import LinkingKB

ROOT = Path(__file__).resolve().parents[1]
ALPHAS = (0.5, 0.65, 0.75, 0.8, 0.85, 0.9, 0.95)


def agreement(model: torch.nn.Module, encoder: SapEncoder, lkb: LinkingKB, mentions: List[str],
              reference: np.ndarray, top: List[tuple]) -> Dict[str, float]:
    """Top-concept agreement with fp32 and the mean cosine, for ``model`` run in ``encoder``'s place."""
    encoder._model_for_inference = lambda: model  # type: ignore[method-assign]
    vectors = encoder.encode(mentions)
    _, rows = lkb.index.search(vectors, 1)
    same = sum(tuple(lkb.kb.concepts_of_name(int(r))) == t for r, t in zip(rows[:, 0], top))
    cosine = (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1)
    return {"same_top_concept": int(same), "share": round(same / len(mentions), 4), "mean_cosine": round(float(cosine.mean()), 5)}


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default="native", choices=list(ISA_ENVIRONMENTS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=ROOT / "corpus" / "cache")
    args = parser.parse_args(argv)
    run_as_isa(args.isa)
    torch.set_num_threads(args.threads)
    fp32 = SapEncoder.load(None, device="cpu", precision="fp32")
    lkb = LinkingKB.from_disk(medic_kb_path(fp32, args.cache))
    mentions = sorted({lkb.kb.normalize(m.text) for c in ("ncbi-disease", "bc5cdr-disease") for d in load_split(c, "dev") for m in d.mentions})
    reference = fp32.encode(mentions)
    _, rows = lkb.index.search(reference, 1)
    top = [tuple(lkb.kb.concepts_of_name(int(r))) for r in rows[:, 0]]
    probe = SapEncoder.load(None, device="cpu", precision="fp32")  # its model is swapped per row
    maxima = fp32._calibration_maxima()
    from torch.ao.quantization import quantize_dynamic

    rows_out: Dict[str, Dict[str, float]] = {
        "torch dynamic, per tensor (before)": agreement(quantize_dynamic(fp32.model, {torch.nn.Linear}, dtype=torch.qint8).eval(),
                                                        probe, lkb, mentions, reference, top)}
    for alpha in ALPHAS:
        rows_out[f"smoothed, alpha {alpha}"] = agreement(int8.smoothed_int8(fp32.model, maxima, alpha), probe, lkb, mentions, reference, top)
        print(alpha, rows_out[f"smoothed, alpha {alpha}"], flush=True)
    best = max(ALPHAS, key=lambda a: (rows_out[f"smoothed, alpha {a}"]["same_top_concept"], -abs(a - int8.ALPHA)))
    result = {
        "command": "python benchmarks/int8_alpha.py" + (f" --isa {args.isa}" if args.isa != "native" else ""),
        "machine": machine_description(), "threads": args.threads,
        "mentions": len(mentions), "data": "distinct NCBI-disease + BC5CDR-disease dev mentions, MEDIC KB (fp32 vectors)",
        "calibration_names": len(int8.calibration_texts()), "rows": rows_out, "best_alpha": best, "shipped_alpha": int8.ALPHA,
    }
    out = ROOT / "benchmarks" / "results" / ("int8_alpha.json" if args.isa == "native" else f"int8_alpha_{args.isa}.json")
    write_json(out, result)
    print(f"{out}: best alpha {best} (shipped {int8.ALPHA})")
    return result


if __name__ == "__main__":
    main()
