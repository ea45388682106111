"""Ontology-mined word variants (``spacy_sapbert/word_variants.py``) in the default HPO pipeline,
on GSC+ dev: the default KB against KBs with generated variant names, per setting.

    python benchmarks/word_variants.py [--gsc ../shared/data/gscplus-dev/GSCplus_dev_gold.tsv] [--threads 1]
    python benchmarks/word_variants.py --medic [--splits dev test]

Each setting builds a KB from HPO's phenotypic abnormalities plus the names the shipped table
(``spacy_sapbert/data/word_variants.json``, mined from the ontologies alone) generates, into
``corpus/cache/word-variant-kbs/`` (kept: a rerun reuses it; see ``variant_kb``), stamps the shipped NIL threshold as the
default KB has it, and scores the default pipeline (``hpo_default.pipeline`` with the shipped
span-finder settings) end to end with nested spans counted (``hpo_default.document_counts``), each
row with its link F1 lead over the default and that lead's interval over bootstrap resamples of the
dev abstracts (``evaluation.bootstrap.paired_difference``). Only GSC+ dev is read. Writes
``benchmarks/results/word_variants.json`` with the load average of the run.

``--medic``: the span finder end to end on NCBI-disease and BC5CDR-disease with the ontology
dictionary (MEDIC alone) against the same with the variant names (``ontology+variants``: the
table's ``DEFAULT_OPTIONS``), each run ``evaluate_end_to_end`` in a fresh process; its misses and
wrong spans by kind. Writes ``benchmarks/results/word_variants_medic.json``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from hpo_default import GSC_DEV, document_counts, miss_kinds, pipeline, shipped_settings  # beside this script
from readme_tables import update_readme  # beside this script

from spacy_sapbert.encoder import SapEncoder, resolve_encoder_path
from spacy_sapbert.evaluation.bootstrap import paired_difference
from spacy_sapbert.evaluation.datasets import read_gscplus
from spacy_sapbert.evaluation.end_to_end import Counts, f1_of, summarize_counts
from spacy_sapbert.fileio import atomic_open, read_json, write_json
from spacy_sapbert.hpo_kb import apply_shipped_calibration, default_kb_path, hpo_records
from spacy_sapbert.index import VectorIndex
from spacy_sapbert.kb import ConceptKB
from spacy_sapbert.search import LinkingKB
from spacy_sapbert.word_variants import SHIPPED_TABLE, load_table, with_variant_names, write_variant_files

OUT = Path("benchmarks/results/word_variants.json")
MEDIC_OUT = Path("benchmarks/results/word_variants_medic.json")
SAMPLE = Path("benchmarks/results/word_variants_sample.tsv")
README = Path("benchmarks/README.md")
BLOCK = "WORD-VARIANTS"
CACHE = Path("corpus/cache/word-variant-kbs")
# (max_variants per real name, min votes of a substitution); derivations and word orders always at
# the table's threshold.
# The span finder's variant proposals (``word_variants``), kept at ``min_variant_score``.
PROPOSAL_SETTINGS: List[Dict[str, object]] = [{"word_variants": "shipped", "min_variant_score": t} for t in (0.9, 0.95, 0.97)]
SETTINGS: List[Dict[str, int]] = [
    {"max_variants": 3, "min_substitution_votes": 10},
    {"max_variants": 1, "min_substitution_votes": 10},
    {"max_variants": 2, "min_substitution_votes": 10},
    {"max_variants": 3, "min_substitution_votes": 30},
]


def cached_vectors(names: Sequence[str], encoder: SapEncoder, seed_kb: Path) -> np.ndarray:
    """The encoder's vectors of ``names``: the default KB's own for its names, the others encoded
    once and kept in ``CACHE`` (so that each setting encodes only the names no earlier one had)."""
    store = CACHE / f"vectors-{encoder.fingerprint[:12]}"
    known: Dict[str, np.ndarray] = {}
    if (store / "names.json").is_file():
        known = dict(zip(read_json(store / "names.json"), np.load(store / "vectors.npy")))
    linking = LinkingKB.from_disk(seed_kb)
    seed_rows = {n: i for i, n in enumerate(linking.kb.names)}
    seeded = [n for n in names if n in seed_rows and n not in known]
    if seeded:
        known.update(zip(seeded, linking.index.stored_vectors([seed_rows[n] for n in seeded])))
    todo = [n for n in dict.fromkeys(names) if n not in known]
    if todo:
        t0 = time.perf_counter()
        known.update(zip(todo, encoder.encode(todo, batch_size=256)))
        print(f"encoded {len(todo)} names in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
        store.mkdir(parents=True, exist_ok=True)
        with atomic_open(store / "vectors.npy", "wb") as f:
            np.save(f, np.stack(list(known.values())).astype(np.float32), allow_pickle=False)
        write_json(store / "names.json", list(known))
    return np.stack([known[n] for n in names]).astype(np.float32)


def variant_kb(options: Dict[str, int], encoder: SapEncoder) -> Path:
    """The HPO KB with generated names for ``options``, built on first use. Its vectors are the
    default KB's for the real names and cached ones for the generated names (``cached_vectors``):
    the same KB ``build_kb_folder(..., word_variants=...)`` writes, without encoding every name of
    every setting again on a shared CPU."""
    tag = "-".join(f"{k}{v}" for k, v in sorted(options.items()))
    table = load_table(SHIPPED_TABLE)
    digest = hashlib.sha256(SHIPPED_TABLE.read_bytes()).hexdigest()[:8]
    path = CACHE / f"hpo-variants-{tag}-t{digest}-{encoder.fingerprint[:12]}"
    if not (path / "meta.json").is_file():
        records, generated = with_variant_names(hpo_records(), table, options)
        kb = ConceptKB.from_records(records)
        vectors = cached_vectors(list(kb.names), encoder, default_kb_path(encoder))
        LinkingKB.assemble(kb, VectorIndex.build([vectors], kind="auto"), encoder).to_disk(path)
        write_variant_files(path, table, generated, options)
    apply_shipped_calibration(path, encoder.fingerprint)
    return path


def medic_row(dataset: str, dictionary: str, split: str, span_finder: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    """One end-to-end run, with what it missed and got wrong sorted by kind."""
    from spacy_sapbert.evaluation.end_to_end import evaluate_end_to_end

    r = evaluate_end_to_end(dataset, "span_finder", dictionary, split=split, progress=False, span_finder_config=span_finder,
                            with_documents=True)
    c = r["counts"]
    keep = ("mention_p", "mention_r", "mention_f1", "link_p", "link_r", "link_f1", "dictionary_size", "threshold_source")
    return {
        "dataset": dataset, "dictionary": dictionary, "split": split, "span_finder": span_finder or {}, **{k: r.get(k) for k in keep},
        "missed": {"not found at its offsets": c["gold_mentions"] - c["exact_matches"], "found, another concept": c["exact_matches"] - c["link_right"]},
        "wrong": {k: c[k] for k in ("wrong_inside_gold", "wrong_containing_gold", "wrong_crossing_gold", "wrong_apart_from_gold")},
        "counts": c, "per_document": r["per_document"],
    }


MEDIC_CONFIGS = (("ontology", None), ("ontology+variants", None), ("ontology", {"word_variants": "shipped"}))


def medic(splits: Sequence[str], output: Path, configs: Sequence[int] = (0, 1, 2), datasets: Sequence[str] = ("ncbi-disease", "bc5cdr-disease"),
          ) -> Dict[str, object]:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    rows: List[Dict[str, object]] = []
    result: Dict[str, object] = {"command": "python benchmarks/word_variants.py " + " ".join(sys.argv[1:]), "rows": rows}
    for split in splits:
        for dataset in datasets:
            baseline: Optional[List[Counts]] = None  # the first config's documents (MEDIC alone): each other row is paired with it
            for dictionary, span_finder in (MEDIC_CONFIGS[i] for i in configs):
                with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
                    row = pool.submit(medic_row, dataset, dictionary, split, span_finder).result()
                per_doc = [Counts(**{k: v for k, v in d.items() if k != "doc"}) for d in row.pop("per_document")]  # type: ignore[union-attr]
                if baseline is None:
                    baseline = per_doc
                else:  # its link F1 less the first config's, document by document
                    row["vs_first"] = paired_difference(per_doc, baseline, f1_of("link"))
                rows.append(row)
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "counts"}), flush=True)
                result["load_average"] = [round(x, 2) for x in os.getloadavg()]
                write_json(output, result)
    return result


def sample_precision(path: Path = SAMPLE) -> Dict[str, Dict[str, int]]:
    """The hand-checked sample's counts: per kind, pairs judged and pairs judged correct."""
    rows = [line.split("\t") for line in path.read_text(encoding="utf8").splitlines() if line and not line.startswith(("#", "n\t"))]
    out: Dict[str, Dict[str, int]] = {}
    for row in rows:
        for kind in (row[1], "all") + (("substitution seen in 10+ contexts",) if row[1] == "substitution" and int(row[4]) >= 10 else ()):
            c = out.setdefault(kind, {"judged": 0, "correct": 0})
            c["judged"] += 1
            c["correct"] += row[6] == "correct"
    return out


def render(hpo: Dict[str, object], medic_result: Optional[Dict[str, object]]) -> str:
    """The WORD-VARIANTS block: the table, its sampled precision, GSC+ dev per setting, MEDIC rows."""
    table = hpo["table"]
    pairs = load_table(SHIPPED_TABLE)["pairs"]
    kinds = {k: sum(1 for p in pairs if p["kind"] == k) for k in ("substitution", "derivation")}  # type: ignore[union-attr]
    sample = sample_precision()
    lines = [
        f"Generated by `{hpo['command'].strip()}`" + (f" and `{medic_result['command'].strip()}`" if medic_result else "")
        + " (JSON: `benchmarks/results/word_variants.json`, `word_variants_medic.json`). "
        f"Table `spacy_sapbert/data/word_variants.json` (`python -m training.mine_word_variants`): {len(pairs)} word pairs "  # type: ignore[arg-type]
        f"({kinds['substitution']} substitutions, {kinds['derivation']} derivations) kept of "
        f"{sum(table['candidates'].values())} candidates, and the word orders of {', '.join(repr(p) for p in table['word_order'])}; "  # type: ignore[index,union-attr]
        f"thresholds {table['thresholds']}; sources (concepts): "  # type: ignore[index]
        + ", ".join(f"{k} {v['concepts']}" for k, v in table["sources"].items()) + ". "  # type: ignore[index,union-attr]
        "Hand-checked precision of 100 random pairs (`benchmarks/results/word_variants_sample.tsv`): "
        + ", ".join(f"{k} {c['correct']}/{c['judged']}" for k, c in sample.items()) + ".",
        "",
        "| GSC+ dev, default pipeline | generated names | mention_p | mention_r | mention_f1 | link_p | link_r | link_f1 | link_f1 - default, 95% interval |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in hpo["rows"]:  # type: ignore[union-attr]
        name = r["kb"] if r["kb"] != "variants" else f"variant names: max_variants {r['max_variants']}, min_substitution_votes {r['min_substitution_votes']}"
        if r.get("span_finder"):
            name += "; span finder " + ", ".join(f"{k} {v}" for k, v in r["span_finder"].items())
        lead = r.get("vs_default")
        lines.append(f"| {name} | {r.get('generated_names', 0)} | " + " | ".join(f"{r[k]:.3f}" for k in
                     ("mention_p", "mention_r", "mention_f1", "link_p", "link_r", "link_f1"))
                     + (f" | {lead['difference']:+.3f} [{lead['low']:+.3f}, {lead['high']:+.3f}] |" if lead else " | – |"))
    lead = next((r["vs_default"] for r in hpo["rows"] if r.get("vs_default")), None)  # type: ignore[union-attr]
    if lead:
        lines.append(f"\nThe last column: each row's link F1 less the default's, and its {100 * lead['level']:.0f}% interval over "
                     f"{lead['resamples']:,} bootstrap resamples of the {lead['documents']} dev abstracts, both scored on the same "
                     "resamples (`spacy_sapbert/evaluation/bootstrap.py`).")
    lines.append(f"\nLoad average during the run: {hpo['load_average']}.")
    misses = dict(hpo.get("misses_of_best") or {})  # type: ignore[call-overload]
    if misses:
        setting = misses.pop("setting", None)
        lines += ["", "What the best row" + (f" ({', '.join(f'{k} {v}' for k, v in setting.items())})" if setting else "")
                  + " still misses on dev (first reason that applies, with examples):", ""]
        lines += [f"- {kind}: {found['count']} (" + "; ".join(f'"{x}"' for x in found["examples"][:5]) + ")" for kind, found in misses.items()]
    if medic_result:
        lines += ["", "| span finder + MEDIC | split | dictionary | span finder | mention_f1 | link_p | link_r | link_f1 | "
                  "link_f1 less its dataset and split's first row (paired, 95%) | gold missed: not found / another concept | wrong: inside / containing / crossing / apart |",
                  "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|"]
        for r in medic_result["rows"]:  # type: ignore[union-attr]
            m, w = r["missed"], r["wrong"]
            finder = ", ".join(f"{k} {v}" for k, v in (r.get("span_finder") or {}).items()) or "–"
            vs = r.get("vs_first")
            lead = f"{vs['difference']:+.3f} [{vs['low']:+.3f}, {vs['high']:+.3f}]" if vs else "–"
            lines.append(f"| {r['dataset']} | {r['split']} | {r['dictionary']} | {finder} | {r['mention_f1']:.3f} | "
                         f"{r['link_p']:.3f} | {r['link_r']:.3f} | {r['link_f1']:.3f} | {lead} | "
                         f"{m['not found at its offsets']} / {m['found, another concept']} | "
                         + " / ".join(str(w[f"wrong_{k}_gold"]) for k in ("inside", "containing", "crossing", "apart_from")) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gsc", type=Path, default=GSC_DEV)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--only", type=int, nargs="*", help="indexes into SETTINGS to run (default: all)")
    parser.add_argument("--misses", action="store_true", help="also list the misses of the best setting by kind")
    parser.add_argument("--medic", action="store_true", help="the span finder with MEDIC on NCBI-disease and BC5CDR-disease instead")
    parser.add_argument("--splits", nargs="+", default=["dev"], choices=["dev", "test"])
    parser.add_argument("--configs", type=int, nargs="+", default=[0, 1, 2], help="indexes into MEDIC_CONFIGS")
    parser.add_argument("--datasets", nargs="+", default=["ncbi-disease", "bc5cdr-disease"])
    parser.add_argument("--render-only", action="store_true", help="re-render the README block from the two JSON files")
    args = parser.parse_args(list(argv) or None)
    if args.render_only:
        hpo = read_json(OUT)
        update_readme(README, render(hpo, read_json(MEDIC_OUT) if MEDIC_OUT.is_file() else None), block=BLOCK)
        return hpo
    if args.medic:
        return medic(args.splits, args.output if args.output != OUT else MEDIC_OUT, args.configs, args.datasets)
    torch.set_num_threads(args.threads)
    encoder = SapEncoder.load(resolve_encoder_path(None))
    dev = read_gscplus(args.gsc)
    settings = shipped_settings()
    default = document_counts(pipeline(default_kb_path(encoder), "span_finder", settings), dev)[0]
    rows: List[Dict[str, object]] = []

    def add(row: Dict[str, object], per_doc: Sequence[Counts]) -> None:
        """The row's scores, and its link F1 lead over the default on the same resamples of the dev abstracts."""
        rows.append({**row, **summarize_counts(Counts.total(per_doc)), "vs_default": paired_difference(per_doc, default, f1_of("link"))})
        print(json.dumps(rows[-1]), flush=True)

    add({"kb": "default (no variants)"}, default)
    for proposal in PROPOSAL_SETTINGS:  # the span finder's own variant proposals, over the default KB
        add({"kb": "default (no variants)", "span_finder": proposal},
            document_counts(pipeline(default_kb_path(encoder), "span_finder", {**settings, **proposal}), dev)[0])
    for i, options in enumerate(SETTINGS):
        if args.only is not None and i not in args.only:
            continue
        kb = variant_kb(options, encoder)
        n_generated = len(json.loads((kb / "generated_names.json").read_text())["names"])
        add({"kb": "variants", **options, "generated_names": n_generated}, document_counts(pipeline(kb, "span_finder", settings), dev)[0])
    result: Dict[str, object] = {
        "command": "python benchmarks/word_variants.py " + " ".join(argv or sys.argv[1:]),
        "dev": str(args.gsc),
        "span_finder": settings,
        "table": {k: v for k, v in load_table(SHIPPED_TABLE).items() if k not in ("pairs", "format", "version")},
        "rows": rows,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    if args.misses:
        best = max(rows[1:] or rows, key=lambda r: r["link_f1"])
        kb = default_kb_path(encoder) if best["kb"] != "variants" else variant_kb({k: best[k] for k in SETTINGS[0]}, encoder)
        misses = miss_kinds(pipeline(kb, "span_finder", {**settings, **(best.get("span_finder") or {})}), dev)
        result["misses_of_best"] = {k: {"count": len(v), "examples": v[:10]} for k, v in sorted(misses.items(), key=lambda kv: -len(kv[1]))}
    write_json(args.output, result)
    return result


if __name__ == "__main__":
    main()
