"""The linker's NIL threshold chosen on dev mentions (``spacy_sapbert/calibration.py``), for the
HPO default and for MEDIC, with precision and abstention against the threshold.

    python benchmarks/calibration.py [--gsc ../shared/data/gscplus-dev/GSCplus_dev_gold.tsv] [--threads 2]

1. HPO default (the cached default KB with MiniLM): GSC+ dev gold mentions through the shipped
   linker in ``nlp.pipe`` (``build_pipeline(kb, "gold", label="PHENOTYPE")``, ``doc.ents`` at the
   gold offsets). The result is written to ``spacy_sapbert/data/hpo_calibration.json``, which the
   default KB takes into its meta, and into the cached default KB folder now.
2. MEDIC (the ``ontology`` dictionary of NCBI-disease: MEDIC alone, no training mentions):
   NCBI-disease dev mentions, with its spell-check list. Reported only: the KB is the evaluation's
   cache, whose end-to-end figures must not change behind its back.
Writes ``benchmarks/results/calibration.json`` and ``benchmarks/results/calibration.png``. Only dev
data is used.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, Sequence

import torch

from spacy_sapbert.calibration import SHIPPED_HPO, calibrate_kb_folder
from spacy_sapbert.encoder import SapEncoder, resolve_encoder_path
from spacy_sapbert.fileio import atomic_open, write_json

GSC_DEV = Path("../shared/data/gscplus-dev/GSCplus_dev_gold.tsv")
OUT = Path("benchmarks/results/calibration.json")
PNG = Path("benchmarks/results/calibration.png")
CACHE = Path("corpus/cache")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def hpo_default(gsc: Path) -> Dict[str, Any]:
    from spacy_sapbert.defaults import default_kb_path
    from spacy_sapbert.evaluation.datasets import read_gscplus

    encoder = SapEncoder.load(resolve_encoder_path(None))
    kb = default_kb_path(encoder)
    dev = read_gscplus(gsc)
    record = calibrate_kb_folder(kb, dev, f"GSC+ dev ({gsc.name}: {len(dev)} abstracts)", label="PHENOTYPE")
    shipped = {k: v for k, v in record.items() if k != "curve"}
    shipped["encoder_fingerprint"] = encoder.fingerprint
    shipped["kb"] = kb.name
    write_json(SHIPPED_HPO, shipped)
    return {"kb": str(kb), **record}


def medic() -> Dict[str, Any]:
    from spacy_sapbert.evaluation import datasets
    from spacy_sapbert.evaluation.runner import build_dictionary, dictionary_kb_folder, load_spelling

    encoder = SapEncoder.load(resolve_encoder_path(None), precision="fp32")
    folder, _ = dictionary_kb_folder(build_dictionary("ncbi-disease", "ontology", []), encoder, CACHE, progress=True)
    dev = datasets.load_split("ncbi-disease", "dev")
    record = calibrate_kb_folder(
        folder, dev, f"NCBI-disease dev ({len(dev)} abstracts)", label="Disease", encoder=encoder.source,
        spelling=load_spelling("ncbi-disease"), store=False, linker_config={"precision": "fp32"},
    )
    return {"kb": str(folder), **record}


def plot(results: Dict[str, Dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 3.8), squeeze=False)
    for ax, (name, r) in zip(axes[0], results.items()):
        xs = [row["threshold"] for row in r["curve"]]
        ax.plot(xs, [row["precision"] for row in r["curve"]], label="precision (in-KB answers)")
        ax.plot(xs, [row["abstention"] for row in r["curve"]], label="abstention (in-KB mentions)")
        ax.plot(xs, [row["nil_abstention"] for row in r["curve"]], ls="--", label="abstention (leave-gold-out NIL)")
        ax.axvline(r["threshold"], color="grey", lw=1, ls=":")
        ax.set_title(f"{name}: threshold {r['threshold']}")
        ax.set_xlabel("threshold (top candidate score)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="lower left")
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight")


def main(argv: Sequence[str] = ()) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--gsc", type=Path, default=GSC_DEV)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--plot", type=Path, default=PNG)
    args = parser.parse_args(list(argv) or None)
    torch.set_num_threads(args.threads)
    results = {"HPO default": hpo_default(args.gsc), "MEDIC": medic()}
    summary = {name: {k: v for k, v in r.items() if k != "curve"} for name, r in results.items()}
    print(json.dumps(summary, indent=1))
    out = {
        "command": "python benchmarks/calibration.py " + " ".join(argv or sys.argv[1:]),
        "cpu": cpu_model(),
        "threads": args.threads,
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.output, out)
    plot(results, args.plot)
    return out


if __name__ == "__main__":
    main()
