"""What the weight-sweep benchmarks share (``fusion.py``, ``context_rerank.py``): a linker weight chosen
on dev per dataset and dictionary, then measured on test. Their command line and the record of a run."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence

from spacy_sapbert.fileio import write_json
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
    """The command line that ran ``script`` (``argv`` None: this process's own arguments)."""
    return f"python {script} " + " ".join(sys.argv[1:] if argv is None else argv)
