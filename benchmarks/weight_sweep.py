"""What the weight-sweep benchmarks share (``fusion.py``, ``context_rerank.py``, ``consistency.py``): a
linker setting chosen on dev per dataset and dictionary, then measured on test. Their command line, the
record of a run, and for the gold-span sweeps the choice, the test scores and their table."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import machine_description


def sweep_parser(doc: Optional[str], weights: Sequence[float], datasets: Sequence[str], dictionaries: Sequence[str],
                 output: Path) -> argparse.ArgumentParser:
    """``--weights``, ``--datasets``, ``--dictionaries``, ``--output`` and ``--render-only``; a script adds its own."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--weights", type=float, nargs="+", default=list(weights))
    parser.add_argument("--datasets", nargs="+", default=list(datasets), choices=datasets)
    parser.add_argument("--dictionaries", nargs="+", default=list(dictionaries), choices=dictionaries)
    parser.add_argument("--output", type=Path, default=output)
    parser.add_argument("--render-only", action="store_true")
    return parser


def run_sweep(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Optional[Sequence[str]], script: str,
              measure: Callable[[str, str, Sequence[float]], Dict[str, Any]], baseline: str) -> Dict[str, Any]:
    """``measure`` each dataset and dictionary at ``args.weights`` (which must include 0, ``baseline``),
    recorded with the command, the machine and the load before, and written to ``args.output``."""
    if 0.0 not in args.weights:
        parser.error(f"--weights must include 0 ({baseline}), the baseline")
    load = [round(x, 2) for x in os.getloadavg()]
    rows = [measure(d, x, args.weights) for d in args.datasets for x in args.dictionaries]
    result = {"command": command(script, argv), "machine": machine_description(), "load_average_before": load,
              "weights": args.weights, "rows": rows}
    write_json(args.output, result)
    return result


def command(script: str, argv: Optional[Sequence[str]]) -> str:
    """The command line that ran ``script`` (``argv`` None: this process's own arguments), quoted for a shell."""
    return shlex.join(["python", script, *(sys.argv[1:] if argv is None else argv)])


GOLD_KEYS = ("lenient_acc@1", "strict_acc@1", "lenient_acc@5", "n_queries", "mentions_per_s")


def choose_by_strict(dev: Sequence[Dict[str, Any]]) -> float:
    """The weight with the best dev strict Acc@1 (the concept ``_.cui`` gets); ties go to the smaller weight."""
    return min(dev, key=lambda r: (-r["strict_acc@1"], r["weight"]))["weight"]


def gold_scores(result: Dict[str, Any]) -> Dict[str, Any]:
    """An ``evaluate`` result's Acc@1/@5 and speed, overall and on queries whose string is a dictionary
    name of several concepts (*ambiguous*) and on the rest."""
    breakdown = result["breakdown"]
    return {**{k: result[k] for k in GOLD_KEYS},
            "ambiguous": {k: breakdown["name_ambiguous"][k] for k in ("lenient_acc@1", "strict_acc@1", "n_queries")},
            "unambiguous": {k: breakdown["name_unambiguous"][k] for k in ("lenient_acc@1", "strict_acc@1", "n_queries")}}


def gold_sweep(dataset: str, dictionary: str, weights: Sequence[float], evaluate_at: Callable[[str, float], Dict[str, Any]],
               flags: Callable[[float], str], extra: Callable[[Dict[str, Any]], Dict[str, Any]] = lambda r: {}) -> Dict[str, Any]:
    """Gold spans: ``evaluate_at(split, w)`` on dev at each weight, the weight chosen by strict Acc@1,
    then test at 0 and at it (``flags(w)``: the ``evaluate`` options that set w, for the recorded
    command; ``extra(result)``: what else a test result records)."""
    dev = []
    for w in weights:
        r = evaluate_at("dev", w)
        dev.append({"weight": w, "lenient_acc@1": r["lenient_acc@1"], "strict_acc@1": r["strict_acc@1"]})
        print(f"{dataset} {dictionary} dev w={w}: lenient@1 {r['lenient_acc@1']} strict@1 {r['strict_acc@1']}", file=sys.stderr, flush=True)
    chosen = choose_by_strict(dev)
    test: Dict[str, Any] = {}
    for w in dict.fromkeys((0.0, chosen)):
        r = evaluate_at("test", w)
        test[str(w)] = {**gold_scores(r), **extra(r),
                        "command": f"python -m spacy_sapbert evaluate --dataset {dataset} --dictionary {dictionary}" + (flags(w) if w else "")}
        print(f"{dataset} {dictionary} test w={w}: lenient@1 {r['lenient_acc@1']} strict@1 {r['strict_acc@1']}", file=sys.stderr, flush=True)
    return {"dataset": dataset, "dictionary": dictionary, "dev": dev, "chosen_weight": chosen, "test": test}


def end_to_end_at(row: Dict[str, Any], run: Callable[[float], Dict[str, Any]]) -> Dict[str, Any]:
    """Link P/R/F1 (fractions) and abstracts/s end to end (``run(w)``), at 0 and the row's chosen weight."""
    out = {}
    for w in dict.fromkeys((0.0, row["chosen_weight"])):
        r = run(w)
        out[str(w)] = {**{k: r[k] for k in ("link_p", "link_r", "link_f1", "abstracts_per_s")}, "command": r["command"]}
        print(f"{row['dataset']} {row['dictionary']} end to end w={w}: link F1 {r['link_f1']}", file=sys.stderr, flush=True)
    return out


def _change(off: float, on: float) -> str:
    return f"{off:.1f}" if off == on else f"{off:.1f} → {on:.1f} ({on - off:+.1f})"


def render_gold_sweep(result: Dict[str, Any], setting: str, symbol: str, notes: str, detector: str, same: str = "dictionaries") -> str:
    """The block of a gold-span sweep: how ``setting`` (written ``symbol``) was chosen and ``notes``, then
    per dataset and dictionary the dev choice and the test scores at 0 → the chosen value, then the
    end-to-end rows with ``detector`` (and the ``same`` resources) where there are any."""
    lines: List[str] = [
        f"Generated by `{result['command']}` on {result['machine']['cpu']} (1 torch thread). Gold spans through the "
        f"component; {setting} is chosen on dev by strict Acc@1 (the concept `_.cui` gets) among "
        f"{', '.join(str(w) for w in result['weights'])}; test at {symbol} = 0 → the chosen {symbol}. {notes}",
        "",
        "| dataset | dictionary | dev strict @1 per w | w | lenient @1 | strict @1 | lenient @5 | ambiguous: strict @1 (n) "
        "| unambiguous: lenient @1 | mentions/s |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in result["rows"]:
        dev = ", ".join(f"{r['weight']}: {r['strict_acc@1']:.1f}" for r in row["dev"])
        off, on = row["test"]["0.0"], row["test"][str(row["chosen_weight"])]
        cells = [_change(off[k], on[k]) for k in ("lenient_acc@1", "strict_acc@1", "lenient_acc@5")]
        cells.append(f"{_change(off['ambiguous']['strict_acc@1'], on['ambiguous']['strict_acc@1'])} ({off['ambiguous']['n_queries']:,})")
        cells.append(_change(off["unambiguous"]["lenient_acc@1"], on["unambiguous"]["lenient_acc@1"]))
        speeds = dict.fromkeys((f"{off['mentions_per_s']:,.0f}", f"{on['mentions_per_s']:,.0f}"))
        cells.append(" → ".join(speeds))
        lines.append(f"| {row['dataset']} | {row['dictionary']} | {dev} | {row['chosen_weight']} | " + " | ".join(cells) + " |")
    e2e = [row for row in result["rows"] if "end_to_end" in row]
    if e2e:
        lines += ["", f"End to end, generated by `{result['end_to_end_command']}`: test abstracts through the shipped `{detector}`, the same "
                  f"{same} (link P/R/F1 in %, "
                  "the NIL threshold chosen on dev gold mentions at each weight):", "",
                  "| dataset | dictionary | w | link P | link R | link F1 | abstracts/s |", "|---|---|--:|--:|--:|--:|--:|"]
        for row in e2e:
            off, on = row["end_to_end"]["0.0"], row["end_to_end"][str(row["chosen_weight"])]
            cells = [_change(100 * off[k], 100 * on[k]) for k in ("link_p", "link_r", "link_f1")]
            cells.append(" → ".join(dict.fromkeys((f"{off['abstracts_per_s']:,.1f}", f"{on['abstracts_per_s']:,.1f}"))))
            lines.append(f"| {row['dataset']} | {row['dictionary']} | {row['chosen_weight']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gold_sweep_main(argv: Optional[Sequence[str]], doc: Optional[str], script: str, baseline: str, weights: Sequence[float],
                    datasets: Sequence[str], dictionaries: Sequence[str], output: Path,
                    measure: Callable[[str, str, Sequence[float]], Dict[str, Any]],
                    end_to_end: Callable[[Dict[str, Any]], Dict[str, Any]],
                    publish_block: Callable[[Dict[str, Any]], None]) -> Dict[str, Any]:
    """The command line of a gold-span sweep (``sweep_parser`` and ``--end-to-end``, ``--from-saved``):
    sweep (or read the saved JSON), add the end-to-end rows where a weight was chosen, publish."""
    parser = sweep_parser(doc, weights, datasets, dictionaries, output)
    parser.add_argument("--end-to-end", action="store_true", help="also (or, with --from-saved, only) the end-to-end rows")
    parser.add_argument("--from-saved", action="store_true", help="take the chosen weights from the saved JSON")
    args = parser.parse_args(argv)
    if args.render_only or args.from_saved:
        result = read_json(args.output)
    else:
        result = run_sweep(parser, args, argv, script, measure, baseline)
    if args.end_to_end:
        for row in result["rows"]:
            if row["dataset"] in args.datasets and row["dictionary"] in args.dictionaries and row["chosen_weight"]:
                row["end_to_end"] = end_to_end(row)
        result["end_to_end_command"] = command(script, argv)
        write_json(args.output, result)
    publish_block(result)
    return result
