"""The README's results summary: a few headline figures, each read from a results JSON that a
benchmark script wrote (the method and the full tables are in ``benchmarks/README.md``).

    python benchmarks/summary.py [--results benchmarks/results] [--readme README.md]

Rewrites only the RESULTS-SUMMARY block of the README; a results file that is missing leaves its
rows out.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from readme_tables import update_readme  # benchmarks/readme_tables.py, beside this script

from spacy_sapbert.evaluation.datasets import BENCHMARKS
from spacy_sapbert.fileio import read_json

RESULTS = Path("benchmarks/results")
README = Path("README.md")
README_BLOCK = "RESULTS-SUMMARY"


def _scispacy_same_run(speed: Dict[str, Any]) -> str:
    """scispacy's linker in the speed run, where it was measured beside ours."""
    sci = speed.get("scispacy")
    if not sci:
        return ""
    return f"; scispacy's linker in the same run: {sci['mentions_per_s']:.1f} and {sci['distinct_mentions_per_s']:.1f}"


def _read(path: Path) -> Optional[Dict[str, object]]:
    return read_json(path) if path.is_file() else None


def linking_rows(evaluation: Dict[str, object]) -> List[str]:
    """Gold-span lenient Acc@1 with the paper's dictionary: our best encoder row against the paper's figure."""
    rows = []
    results = [r for r in evaluation["results"] if not r.get("skipped") and r.get("system") == "encoder"]  # type: ignore[union-attr]
    for dataset, spec in BENCHMARKS.items():
        mine = [r for r in results if r["dataset"] == dataset and r["dictionary"] == "paper"]
        if not mine:
            continue
        best = max(mine, key=lambda r: r["lenient_acc@1"])
        rows.append(
            f"| gold-span linking, {dataset} (ontology + train/dev names) | lenient Acc@1 {best['lenient_acc@1']:.1f} "
            f"({best['label']}); the SapBERT paper: {spec.paper_acc[0]} | Evaluation |"
        )
    return rows


def end_to_end_rows(end_to_end: Dict[str, object]) -> List[str]:
    rows = []
    results = [r for r in end_to_end["results"] if not r.get("skipped") and r.get("link_f1") is not None]  # type: ignore[union-attr]
    labels = {"ontology": "ontology only", "paper": "ontology + train/dev names"}
    for dataset in BENCHMARKS:
        cells = []
        for dictionary, label in labels.items():
            # what `evaluate --end-to-end` gives at its default settings: no threshold given, no saved pipeline
            mine = [r for r in results if r["dataset"] == dataset and r["dictionary"] == dictionary
                    and "threshold_chosen_on_dev" not in r and not r.get("pipeline_name")]
            if mine:
                best = max(mine, key=lambda r: r["link_f1"])
                chosen = f", NIL threshold {best['threshold']:.4g} chosen on dev gold mentions" if best.get("dev_calibration") else ""
                cells.append(f"{best['link_f1']} ({best['detector']}{chosen}, {label})")
        if cells:
            rows.append(f"| raw text to concepts, {dataset} | link F1 " + "; ".join(cells) + " | End-to-end |")
    return rows


def assertion_row(context: Dict[str, Any]) -> str:
    """The ConText component's F on the NegEx/ConText test set's held-out half, beside GenConText's on the
    same half (where its output file was scored) and GenNegEx's published figure."""
    def f_scores(table: Dict[str, Any]) -> str:
        test = next(v for k, v in table.items() if k.startswith("test"))
        return ", ".join(f"{attr} F {test[attr]['f']:.3f}" for attr in ("negated", "historical", "hypothetical"))

    peer = f"; GenConText (its authors' output): {f_scores(context['gencontext'])}" if context.get("gencontext") else ""
    published = context["gennegex_published"]
    return (f"| assertion (`sapbert_context`, lexicon {context['rules_version']}) on the NegEx/ConText test set, lines "
            f"1,201-2,376 (tuned on 1-1,200) | {f_scores(context['sapbert_context'])}{peer}; {published['name']}: "
            f"negated F {published['f']:.3f} | (README) Clinical context |")


def render(results: Path) -> str:
    rows: List[str] = []
    evaluation, end_to_end = _read(results / "evaluation.json"), _read(results / "end_to_end.json")
    speed, calibration, load = _read(results / "speed.json"), _read(results / "calibration.json"), _read(results / "load_time.json")
    if evaluation:
        rows += linking_rows(evaluation)
    if end_to_end:
        rows += end_to_end_rows(end_to_end)
    ner = _read(results / "ner_detectors.json")
    if ner:
        for name, row in ner["detectors"].items():  # type: ignore[union-attr]
            t = row["test"]
            speeds = ", ".join(f"{v['abstracts_per_s']} abstracts/s on {k} thread(s)" for k, v in row["speed"].items())
            rows.append(f"| NER `{name}`, test F (NCBI Disease / BC5CDR Chemical / BC5CDR Disease) | {t['ncbi']['Disease']['f']} / "
                        f"{t['cdr']['Chemical']['f']} / {t['cdr']['Disease']['f']}; {speeds} ({ner['machine']['cpu']}) | The two NERs |")  # type: ignore[index]
    hpo = _read(results / "hpo_default.json")
    if hpo and hpo.get("shipped_on_dev"):
        shipped = hpo["shipped_on_dev"]
        peers = "".join(f"; {r['detector']} (peer): link F1 {r['link_f1']:.3f}, mention F1 {r['mention_f1']:.3f}"
                        for r in hpo.get("fasthpocr", []))  # type: ignore[union-attr]
        rows.append(f"| HPO default on GSC+ dev (nested mentions counted) | link F1 {shipped['link_f1']:.3f}, mention F1 "  # type: ignore[index]
                    f"{shipped['mention_f1']:.3f}; entities only: link F1 {shipped['ents_only']['link_f1']:.3f}{peers} | "  # type: ignore[index]
                    "The default HPO pipeline's detector |")
    context = _read(results / "negex_context.json")
    if context:
        rows.append(assertion_row(context))
    if speed:
        rows.append(
            f"| linking speed, gold spans in `nlp.pipe` (MEDIC KB, {speed['machine']['cpu']}) | {speed['mentions_per_s']} "  # type: ignore[index]
            f"mentions/s; {speed['distinct_mentions_per_s']} distinct mentions/s{_scispacy_same_run(speed)} | Speed |"
        )
    if calibration:
        for name, r in calibration["results"].items():  # type: ignore[union-attr]
            rows.append(
                f"| NIL threshold, {name} (chosen on {r['dev']}) | {r['threshold']}: precision {r['at_zero']['precision']} → "
                f"{r['at_threshold']['precision']}, {r['at_threshold']['abstention']} of in-KB mentions left unlinked | NIL threshold |"
            )
    if load:
        by_threads: Dict[str, Dict[str, Dict[str, Dict[str, float]]]] = load["by_torch_threads"]  # type: ignore[assignment]
        threads = "all cores" if "all cores" in by_threads else next(iter(by_threads))
        runs = by_threads[threads]["runs"]
        rows.append(
            f"| start-up, fresh process ({load['machine']['cpu']}, {threads}, load average "  # type: ignore[index]
            f"{load['load_average_1_5_15_before'][0]}) | `spacy.load` of the saved default {runs['load_saved_pipeline']['wall_s_median']} s "  # type: ignore[index]
            f"({runs['load_saved_pipeline']['cpu_s_median']} s CPU, of which `import spacy` with torch "
            f"{runs['import_spacy']['cpu_s_median']} s); one-sentence `link` {runs['link_default_cli']['wall_s_median']} s "
            f"({runs['link_default_cli']['cpu_s_median']} s CPU); medians | Start-up time |"
        )
    lines = [
        "Generated by `python benchmarks/summary.py` from `benchmarks/results/*.json`, each written by the script named "
        "in [benchmarks/README.md](benchmarks/README.md), which has the method and the full tables.",
        "",
        "| what | figure | section of benchmarks/README.md |",
        "|---|---|---|",
        *rows,
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(list(argv) or None)
    update_readme(args.readme, render(args.results), block=README_BLOCK)


if __name__ == "__main__":
    main()
