"""What fewer encoder layers would buy in speed and cost in dev accuracy (issue: "fewer layers").

    python benchmarks/encoder_layers.py --isa avx2 [--layers 6 5 4 3] [--limit 500] [--distilled FOLDER ...]
        [--query-encoders minilm-l3 ...]

The default encoder (all-MiniLM-L6-v2, 6 layers) cut to its first L layers, with no training: the
truncated model is written to a temporary folder (config and safetensors, the later layers left out)
and used everywhere, the KB included, since a vector of L layers cannot be searched against names
encoded with 6. Per L, in this process after ``--isa`` took effect:

* the HPO default (``default_pipeline(encoder=...)``, its HPO KB built anew with that encoder in a
  temporary cache) on GSC+ dev, end to end, scored as ``hpo_default.py`` scores it, and how many
  linked spans differ from the first L's;
* its speed over the first ``--limit`` distinct NCBI-disease + BC5CDR abstracts
  (``encoder_precision.speed``: abstracts per CPU second after one untimed pass, caches emptied);
* NCBI-disease and BC5CDR-disease dev on gold spans against MEDIC alone (``evaluation.runner.evaluate``,
  dictionary ``ontology``; its KB encoded with that encoder in a temporary cache): lenient Acc@1 and
  Acc@5 (BC5CDR-disease since the distilled rows were added: the committed cut rows lack it).

``--distilled``: also a student of ``training.distill`` (fewer layers trained to give the teacher's
vectors), measured the same way: its folder as the encoder everywhere, the KB encoded with it.

``--query-encoders``: a student as the linker's ``query_encoder`` (``spacy_sapbert/query_encoder.py``;
``minilm-l3`` is the one shipped): the KB encoded by the 6-layer MiniLM, its teacher, and the
queries alone by the student; measured the same way, with the linker's setting.

Using a cut (untrained) encoder for the span finder's proposals only, with the full model for the
links, would need a second KB index in the truncated model's space (the memory of the first again);
a distilled one needs none, being trained into the teacher's space (``--query-encoders``). Dev splits only. Writes
``benchmarks/results/encoder_layers_ISA.json``; nothing here changes a default.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from encoder_precision import GSC_DEV, differing, gsc_dev, pipeline_with_kb_in, speed  # benchmarks/, beside this script
from pipeline_profile import corpus_texts

from spacy_sapbert.machine import ISA_ENVIRONMENTS

ROOT = Path(__file__).resolve().parents[1]


def truncated(source: Path, layers: int, target: Path) -> Path:
    """A copy of the BERT folder ``source`` keeping its first ``layers`` layers (no weights of later ones)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, target)
    config = json.loads((source / "config.json").read_text(encoding="utf8"))
    if layers > config["num_hidden_layers"]:
        raise ValueError(f"{source} has {config['num_hidden_layers']} layers, not {layers}")
    config["num_hidden_layers"] = layers
    (target / "config.json").write_text(json.dumps(config, indent=2), encoding="utf8")
    weights = load_file(str(source / "model.safetensors"))
    kept = {k: v for k, v in weights.items() if not (".layer." in k and int(k.split(".layer.")[1].split(".")[0]) >= layers)}
    save_file(kept, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default="native", choices=list(ISA_ENVIRONMENTS))
    parser.add_argument("--layers", nargs="*", type=int, default=[6, 5, 4, 3])
    parser.add_argument("--distilled", nargs="*", type=Path, default=[], help="student folders (training.distill)")
    parser.add_argument("--query-encoders", nargs="*", default=[], help="the linker's query_encoder: minilm-l3 or a student folder")
    parser.add_argument("--limit", type=int, default=500, help="abstracts timed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--gsc", type=Path, default=GSC_DEV)
    parser.add_argument("--output", type=Path, default=None, help="default benchmarks/results/encoder_layers_ISA.json")
    args = parser.parse_args(argv)
    from spacy_sapbert.machine import run_as_isa

    run_as_isa(args.isa)
    import torch

    from spacy_sapbert.encoder import resolve_encoder_path, resolve_precision
    from spacy_sapbert.evaluation.datasets import read_gscplus
    from spacy_sapbert.evaluation.runner import evaluate
    from spacy_sapbert.fileio import read_json, write_json
    from spacy_sapbert.machine import machine_description

    torch.set_num_threads(args.threads)
    output = args.output or ROOT / "benchmarks" / "results" / f"encoder_layers_{args.isa}.json"
    result: Dict[str, Any] = {
        "command": "python benchmarks/encoder_layers.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine_description(), "threads": args.threads, "precision": resolve_precision("auto", torch.device("cpu")),
        "load_average": {"before": [round(x, 2) for x in os.getloadavg()]}, "rows": {},
    }
    dev = read_gscplus(args.gsc)
    texts = corpus_texts(ROOT / "assets" / "benchmarks", args.limit)
    reference: Optional[List[List[Any]]] = None
    with tempfile.TemporaryDirectory(prefix="encoder-layers-") as scratch:
        minilm = resolve_encoder_path(None)
        # (label, the encoder folder, whether it is a distilled student, the linker's query encoder)
        cut = [(str(n), truncated(minilm, n, Path(scratch) / f"minilm-{n}"), False, None) for n in args.layers]
        students = [(f"distilled:{p}", p, True, None) for p in args.distilled]
        queries = [(f"query_encoder:{q}", minilm, False, q) for q in args.query_encoders]
        for label, folder, distilled, query_encoder in cut + students + queries:
            cache = Path(scratch) / f"cache-{len(result['rows'])}"
            cache.mkdir()
            nlp = pipeline_with_kb_in(cache, encoder=folder, query_encoder=query_encoder)  # its HPO KB built with this encoder
            row: Dict[str, Any] = {"speed": speed(nlp, texts)}
            found = gsc_dev(nlp, dev)
            reference = reference or found["spans"]
            row["gsc_dev"] = {**found["scores"], "linked_spans_differing_from_first": differing(found["spans"], reference)}
            for dataset in ("ncbi-disease", "bc5cdr-disease"):
                found = evaluate(dataset, str(folder), "ontology", "encoder", split="dev", cache_dir=cache,
                                 precision=result["precision"], threads=args.threads, query_encoder=query_encoder)
                row[f"{dataset.split('-')[0]}_dev_gold_spans_medic_alone"] = {
                    k: found[k] for k in ("lenient_acc@1", "lenient_acc@5", "n_queries") if k in found}
            if distilled:
                row["distillation"] = read_json(folder / "distillation.json")
            if query_encoder is not None:
                row["query_encoder"] = nlp.get_pipe("sapbert_linker").query_encoder.describe()
            result["rows"][label] = row
            print(json.dumps({label: row}), flush=True)
    result["load_average"]["after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(output, result)
    return result


if __name__ == "__main__":
    main()
