"""Start-up cost as a user meets it: loading the saved default pipeline, and linking one sentence
from the command line, each in a fresh process.

    python benchmarks/load_time.py [--repeats 5] [--threads 0 1] [--output benchmarks/results/load_time.json]

1. Saves the default pipeline (HPO KB, MiniLM, span finder, abbreviations, negation) once, to
   ``corpus/cache/load_time/default_pipeline`` (the default KB is built first if not cached).
2. Times ``repeats`` fresh processes of each of: ``python -c pass`` (the interpreter alone),
   ``import spacy`` (thinc imports torch whenever it is installed: no pipeline loads faster),
   ``spacy.load`` of the saved pipeline (also with the encoder loaded by transformers, as before
   ``spacy_sapbert/bert.py``), ``spacy.load`` plus one sentence, ``python -m
   spacy_sapbert link SENTENCE`` (the embedded default) and ``link --pipeline SAVED SENTENCE``:
   wall seconds and the child's CPU seconds (user + system), medians and minima.
3. One more process reports where its time goes (imports, ``spacy.load``, first sentence) and which
   heavy modules it imported.
Writes ``benchmarks/results/load_time.json`` and the LOAD-TIME block of ``benchmarks/README.md``
(``--readme-only``: the block alone, from the JSON).
The issue's targets: the saved default pipeline loads in at most 3 s, a one-sentence ``link`` takes at
most 5 s. The machine's load average is recorded before and after: on a shared machine wall time
includes waiting for a core, CPU seconds do not. Each figure is taken with torch on all cores (the
default) and on one thread: on a busy machine a second thread mostly waits for a core.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

from readme_tables import update_readme  # benchmarks/readme_tables.py, beside this script

from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import machine_description

SENTENCE = "The boy had seizures, microcephaly and short stature but no fever."
SAVED = Path("corpus/cache/load_time/default_pipeline")
OUT = Path("benchmarks/results/load_time.json")
README = Path("benchmarks/README.md")
README_BLOCK = "LOAD-TIME"
TARGETS = {"load_saved_pipeline": 3.0, "link_default_cli": 5.0}
# ``SapEncoder.load`` falls back to transformers' AutoModel when ``load_bert`` declines a folder
TRANSFORMERS_PATH = "import spacy_sapbert.bert as b; b.load_bert = lambda folder: None"
HEAVY = ("transformers", "sympy", "torch._dynamo", "torch.distributed.tensor", "scipy.optimize", "spacy_sapbert.evaluation", "training")

PHASES = """
import json, sys, time
t0 = time.perf_counter()
import spacy
t1 = time.perf_counter()
nlp = spacy.load(sys.argv[1])
t2 = time.perf_counter()
doc = nlp(sys.argv[2])
t3 = time.perf_counter()
heavy = sorted({m.split('.')[0] if m.startswith(('transformers', 'sympy', 'training')) else m
                for m in sys.modules if m.startswith(tuple(sys.argv[3].split(',')))})
print(json.dumps({"import_spacy_s": round(t1 - t0, 3), "spacy_load_s": round(t2 - t1, 3), "first_sentence_s": round(t3 - t2, 3),
                  "entities": [(e.text, e.kb_id_) for e in doc.ents], "heavy_modules_imported": heavy}))
"""


def timed(cmd: Sequence[str], repeats: int) -> Dict[str, object]:
    """Wall and CPU seconds of ``repeats`` fresh processes running ``cmd``."""
    walls: List[float] = []
    cpus: List[float] = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return {
        "wall_s_median": round(statistics.median(walls), 2),
        "wall_s_min": round(min(walls), 2),
        "cpu_s_median": round(statistics.median(cpus), 2),
        "cpu_s_min": round(min(cpus), 2),
        "wall_s": [round(w, 2) for w in walls],
    }


def save_default(path: Path) -> None:
    from spacy_sapbert.defaults import default_pipeline

    nlp = default_pipeline()
    nlp(SENTENCE)  # loads the KB and encoder, so to_disk saves them inside the pipeline folder
    path.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(path)


def measure(py: str, saved: str, repeats: int, threads: int) -> Dict[str, object]:
    """Every timed command, then the one-process breakdown, with ``threads`` torch threads (0: all cores)."""
    env_threads = os.environ.pop("OMP_NUM_THREADS", None)
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)  # inherited by the timed processes
    try:
        runs = {
            "python_alone": timed([py, "-c", "pass"], repeats),
            "import_spacy": timed([py, "-c", "import spacy"], repeats),
            "load_saved_pipeline": timed([py, "-c", f"import spacy; spacy.load({saved!r})"], repeats),
            "load_saved_pipeline_transformers": timed([py, "-c", f"{TRANSFORMERS_PATH}; import spacy; spacy.load({saved!r})"], repeats),
            "load_saved_and_link_sentence": timed([py, "-c", f"import spacy; spacy.load({saved!r})({SENTENCE!r})"], repeats),
            "link_default_cli": timed([py, "-m", "spacy_sapbert", "link", SENTENCE], repeats),
            "link_saved_pipeline_cli": timed([py, "-m", "spacy_sapbert", "link", "--pipeline", saved, SENTENCE], repeats),
        }
        out = subprocess.run([py, "-c", PHASES, saved, SENTENCE, ",".join(HEAVY)], check=True, capture_output=True, text=True).stdout
    finally:
        os.environ.pop("OMP_NUM_THREADS", None)
        if env_threads is not None:
            os.environ["OMP_NUM_THREADS"] = env_threads
    return {
        "runs": runs,
        "phases_one_process": json.loads(out),
        "meets_targets_wall_median": {k: runs[k]["wall_s_median"] <= v for k, v in TARGETS.items()},  # type: ignore[operator]
    }


LABELS = {
    "python_alone": "`python -c pass` (the interpreter alone)",
    "import_spacy": "`import spacy` (thinc imports torch with it: the floor)",
    "load_saved_pipeline": "`spacy.load` of the saved default pipeline",
    "load_saved_pipeline_transformers": "the same, the encoder loaded by transformers (as before `spacy_sapbert/bert.py`)",
    "load_saved_and_link_sentence": "`spacy.load` + one sentence",
    "link_default_cli": "`python -m spacy_sapbert link SENTENCE` (embedded default)",
    "link_saved_pipeline_cli": "`link --pipeline SAVED SENTENCE`",
}


def render(result: Dict[str, object]) -> str:
    """The LOAD-TIME block of benchmarks/README.md, from the results JSON."""
    by_threads: Dict[str, Dict[str, object]] = result["by_torch_threads"]  # type: ignore[assignment]
    machine: Dict[str, object] = result["machine"]  # type: ignore[assignment]
    settings = list(by_threads)
    lines = [
        f"Generated by `{str(result['command']).strip()}` (JSON: `benchmarks/results/load_time.json`) on "
        f"{machine['cpu']}, {machine['nproc']} cores, shared: load average {result['load_average_1_5_15_before'][0]} before, "  # type: ignore[index]
        f"{result['load_average_1_5_15_after'][0]} after (1 min). Fresh processes, median of the repeats; wall seconds "  # type: ignore[index]
        "include waiting for a core, CPU seconds (user + system) do not. Sentence: " + repr(result["sentence"]) + ".",
        "",
        "| command | " + " | ".join(f"wall s ({t}) | CPU s ({t})" for t in settings) + " |",
        "|---|" + "--:|--:|" * len(settings),
    ]
    for key, label in LABELS.items():
        cells = []
        for t in settings:
            run = by_threads[t]["runs"][key]  # type: ignore[index]
            cells += [str(run["wall_s_median"]), str(run["cpu_s_median"])]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for t in settings:
        phases = by_threads[t]["phases_one_process"]  # type: ignore[index]
        met = by_threads[t]["meets_targets_wall_median"]  # type: ignore[index]
        lines += [
            "",
            f"{t}: one process spent {phases['import_spacy_s']} s importing spaCy (torch with it), {phases['spacy_load_s']} s in "
            f"`spacy.load` and {phases['first_sentence_s']} s on the first sentence (the span finder's name index, "
            f"encoding); heavy modules imported: {', '.join(phases['heavy_modules_imported']) or 'none'} "
            f"(of {', '.join(HEAVY)}). Targets met by the wall medians (load ≤ {TARGETS['load_saved_pipeline']} s, "
            f"link ≤ {TARGETS['link_default_cli']} s): load {'yes' if met['load_saved_pipeline'] else 'no'}, "
            f"link {'yes' if met['link_default_cli'] else 'no'}.",
        ]
    return "\n".join(lines)


def main(argv: Sequence[str] = ()) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--saved", type=Path, default=SAVED)
    parser.add_argument("--output", type=Path, default=OUT)
    parser.add_argument("--threads", type=int, nargs="+", default=[0, 1],
                        help="torch threads of the timed processes, one measurement each (0: torch's default, all cores)")
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--readme-only", action="store_true", help="rewrite the README block from --output; measure nothing")
    args = parser.parse_args(list(argv) or None)
    if args.readme_only:
        result = read_json(args.output)
        update_readme(args.readme, render(result), block=README_BLOCK)
        return result
    if not (args.saved / "config.cfg").is_file():
        save_default(args.saved)
    load_before = os.getloadavg()
    by_threads = {("all cores" if t == 0 else f"{t} thread(s)"): measure(sys.executable, str(args.saved), args.repeats, t) for t in args.threads}
    load_after = os.getloadavg()
    result: Dict[str, object] = {
        "command": "python benchmarks/load_time.py " + " ".join(argv or sys.argv[1:]),
        "machine": machine_description(),
        "load_average_1_5_15_before": [round(x, 2) for x in load_before],
        "load_average_1_5_15_after": [round(x, 2) for x in load_after],
        "sentence": SENTENCE,
        "saved_pipeline": str(args.saved),
        "targets_s": TARGETS,
        "by_torch_threads": by_threads,
    }
    print(json.dumps(result, indent=1))
    write_json(args.output, result)
    update_readme(args.readme, render(result), block=README_BLOCK)
    return result


if __name__ == "__main__":
    main()
