"""Seconds per 100k characters as documents grow: is each component's cost per character flat?

    python benchmarks/long_documents.py                       # 10k, 100k and 1M characters, both pipelines
    python benchmarks/long_documents.py --lengths 10000 40000 --total 80000 --pipelines hpo --no-readme
    python benchmarks/long_documents.py --profile hpo:repeated:40000   # cProfile of one run, top functions

Documents are generated, deterministically (``random.Random(seed)``), in three kinds:

* ``clinical``: a note of varied ordinary sentences with phenotype and disease terms, negations
  ("No evidence of …"), hypotheticals, family history, numbered lists, section titles in capitals
  and abbreviations defined once and used later ("attention deficit hyperactivity disorder (ADHD)");
* ``repeated``: one word ("seizures") over and over, the span finder's worst case (every n-gram is
  a KB name's words);
* ``unpunctuated``: the clinical text without sentence punctuation or line breaks (one sentence).

At each length the same number of characters (``--total``, 1M by default) is run: 100 documents of
10k, 10 of 100k, one of 1M, so every length does the same work if the cost per character is flat.
Pipelines: ``hpo``, the embedded default (``default_pipeline()``), and ``ner``, ``build_pipeline(MEDIC,
"ner")`` (the MEDIC KB is built by ``build-kb`` under ``--work`` once, as ``behaviour_snapshot.py``
does). Torch on one thread. Each component is timed in turn over all the documents (the tokenizer,
then each pipe's ``pipe`` over the docs, as ``nlp.pipe`` runs them batch by batch), the linkers'
caches emptied before each length. Writes ``benchmarks/results/long_documents.json`` and the
README's ``LONG-DOCUMENTS`` block (benchmarks/README.md, Speed).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

from behaviour_snapshot import medic_kb  # benchmarks/behaviour_snapshot.py, beside this script
from pipeline_profile import clear_caches  # benchmarks/pipeline_profile.py, beside this script
from readme_tables import update_readme  # benchmarks/readme_tables.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "long_documents.json"
README = ROOT / "benchmarks" / "README.md"
BLOCK = "LONG-DOCUMENTS"
LENGTHS = (10_000, 100_000, 1_000_000)
PIPELINES = ("hpo", "ner")
# The must-hold of issue 43: a 1M-character clinical document in at most this many seconds on one
# core, and its seconds per 100k characters within this factor of a 10k-character document's.
MAX_SECONDS_1M = 60.0
MAX_GROWTH = 2.0

TERMS = (
    "seizures", "hypertension", "ataxia", "intellectual disability", "microcephaly", "short stature", "scoliosis",
    "sensorineural hearing loss", "cataract", "muscle weakness", "fever", "headache", "abdominal pain", "chest pain",
    "dyspnea", "type 2 diabetes mellitus", "renal insufficiency", "hepatomegaly", "splenomegaly", "anemia",
    "thrombocytopenia", "atrial fibrillation", "congestive heart failure", "chronic kidney disease", "asthma",
    "pneumonia", "breast and ovarian cancer", "palmar and plantar pits", "developmental delay", "hypotonia",
    "nystagmus", "optic atrophy", "peripheral neuropathy", "obesity", "hypothyroidism", "osteoporosis",
    "depression", "anxiety", "migraine", "epistaxis", "hematuria", "proteinuria", "jaundice", "pruritus", "rash",
    "tonic-clonic seizures", "ventricular septal defect", "cleft palate", "polydactyly", "ulcerative colitis",
)
ABBREVIATIONS = (
    ("attention deficit hyperactivity disorder", "ADHD"), ("chronic obstructive pulmonary disease", "COPD"),
    ("gastroesophageal reflux disease", "GERD"), ("congestive heart failure", "CHF"), ("urinary tract infection", "UTI"),
)
SECTIONS = (
    "HISTORY OF PRESENT ILLNESS:", "PAST MEDICAL HISTORY:", "FAMILY HISTORY:", "REVIEW OF SYSTEMS:",
    "PHYSICAL EXAMINATION:", "ASSESSMENT AND PLAN:", "DISCHARGE DIAGNOSES:", "SOCIAL HISTORY:",
)
SENTENCES = (
    "The patient is a {age}-year-old {sex} who presented with {t} and {t}.",
    "She reports {t} for the past {n} days, worse in the evening.",
    "No evidence of {t} or {t} on examination.",
    "He denies {t}, {t} and {t}.",
    "There is no history of {t}.",
    "Mother had {t}; father was diagnosed with {t} at age {age}.",
    "Return to clinic if {t} develops.",
    "Possible {t}, to be ruled out by imaging.",
    "Laboratory results were within normal limits apart from mild {t}.",
    "The child was noted to have {t}, {t}, and {t} at {n} months.",
    "History of {long} ({short}), treated since {year}.",
    "Her {short} remains well controlled on current medication.",
    "Follow-up in {n} weeks; blood pressure {n}/{n} mmHg, heart rate {n}.",
    "Examination showed {t} without {t}.",
    "{T} was first noticed {n} years ago and has progressed slowly.",
)


def clinical_text(n_chars: int, seed: int = 0) -> str:
    """A clinical-style note of about ``n_chars`` characters (cut at a word), the same for a seed."""
    rng = random.Random(seed)
    parts: List[str] = []
    size = 0
    while size < n_chars:
        if rng.random() < 0.08:
            piece = "\n\n" + rng.choice(SECTIONS) + "\n"
        elif rng.random() < 0.05:
            items = [f"{i}. {rng.choice(TERMS)}" for i in range(1, rng.randint(3, 7))]
            piece = "\nProblem list:\n" + "\n".join(items) + "\n"
        else:
            long, short = rng.choice(ABBREVIATIONS)
            template = rng.choice(SENTENCES)
            term = rng.choice(TERMS)
            piece = template.format_map(_Fill(rng, long=long, short=short, T=term[0].upper() + term[1:])) + " "
        parts.append(piece)
        size += len(piece)
    text = "".join(parts)[:n_chars]
    return text[: text.rfind(" ")] if " " in text[-30:] else text


class _Fill(dict):
    """Format fields: ``{t}`` a fresh term at each use, numbers at random, the rest as given."""

    def __init__(self, rng: random.Random, **fixed: str):
        super().__init__(fixed)
        self.rng = rng

    def __missing__(self, key: str) -> str:
        rng = self.rng
        return {
            "t": lambda: rng.choice(TERMS), "age": lambda: str(rng.randint(2, 90)), "n": lambda: str(rng.randint(1, 120)),
            "sex": lambda: rng.choice(("man", "woman", "boy", "girl")), "year": lambda: str(rng.randint(1990, 2024)),
        }[key]()


def repeated_text(n_chars: int, seed: int = 0) -> str:
    """One word, "seizures", repeated to ``n_chars`` characters."""
    return " ".join(["seizures"] * max(1, (n_chars + 1) // 9))


def unpunctuated_text(n_chars: int, seed: int = 0) -> str:
    """The clinical text without sentence punctuation or line breaks: one sentence of ``n_chars``."""
    text = clinical_text(n_chars + n_chars // 10, seed)
    text = " ".join(text.translate({ord(c): " " for c in ".!?;:\n"}).split())
    return text[:n_chars].rstrip()


KINDS: Dict[str, Callable[[int, int], str]] = {
    "clinical": clinical_text, "repeated": repeated_text, "unpunctuated": unpunctuated_text,
}


# ---------------------------------------------------------------------------- measuring
def build(pipeline: str, work: Path):
    """The pipeline as a user builds it (``hpo``: the embedded default; ``ner``: the NER over MEDIC)."""
    from spacy_sapbert import build_pipeline, default_pipeline

    if pipeline == "hpo":
        return default_pipeline(progress=False)
    return build_pipeline(medic_kb(work), "ner")


def stage_seconds(nlp, texts: Sequence[str]) -> Dict[str, float]:
    """Wall seconds of the tokenizer and of each component in turn over all of ``texts``."""
    seconds: Dict[str, float] = {}
    start = time.perf_counter()
    docs = [nlp.make_doc(t) for t in texts]
    seconds["tokenizer"] = time.perf_counter() - start
    for name, proc in nlp.pipeline:
        start = time.perf_counter()
        docs = list(proc.pipe(docs, batch_size=nlp.batch_size)) if hasattr(proc, "pipe") else [proc(d) for d in docs]
        seconds[name] = time.perf_counter() - start
    seconds["entities"] = sum(len(d.ents) for d in docs)
    return seconds


def measure(nlp, kind: str, length: int, total: int) -> Dict[str, Any]:
    """Seconds per 100k characters of each component, over ``total // length`` documents of ``length``."""
    texts = [KINDS[kind](length, seed) for seed in range(max(1, total // length))]
    chars = sum(len(t) for t in texts)
    clear_caches(nlp)
    seconds = stage_seconds(nlp, texts)
    entities = int(seconds.pop("entities"))
    total_s = sum(seconds.values())
    return {
        "kind": kind, "length": length, "documents": len(texts), "characters": chars, "entities": entities,
        "seconds": round(total_s, 3), "per_100k": round(total_s * 100_000 / chars, 3),
        "components_per_100k": {name: round(s * 100_000 / chars, 3) for name, s in seconds.items()},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def profile(nlp, kind: str, length: int, top: int = 25) -> str:
    """cProfile of the pipeline over one document: the ``top`` functions by their own time."""
    text = KINDS[kind](length, 0)
    clear_caches(nlp)
    profiler = cProfile.Profile()
    profiler.enable()
    stage_seconds(nlp, [text])
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


# ---------------------------------------------------------------------------- the README block
def render(r: Dict[str, Any]) -> str:
    lengths = r["lengths"]
    lines = [
        f"Generated by `{r['command']}` (JSON: `benchmarks/results/long_documents.json`) on {r['machine']['cpu']}, "
        f"torch on 1 thread; load average {r['load_average']['before']} before, {r['load_average']['after']} after "
        f"(1/5/15 min; the machine is shared, so single figures are noisy). At each length {r['total']:,} characters "
        "are run (100 documents of 10k, 10 of 100k, one of 1M), each component in turn over all of them, caches emptied.",
        "",
        "| pipeline | document | " + " | ".join(f"s / 100k chars at {n:,}" for n in lengths) + " | growth | components at the longest (s / 100k chars) |",
        "|---|---|" + "--:|" * (len(lengths) + 1) + "---|",
    ]
    for run in r["runs"]:
        rows = {m["length"]: m for m in run["results"]}
        cells = [f"{rows[n]['per_100k']:.2f}" if n in rows else "–" for n in lengths]
        first, last = rows.get(lengths[0]), rows.get(lengths[-1])
        growth = f"{last['per_100k'] / first['per_100k']:.2f}×" if first and last and first["per_100k"] else "–"
        parts = ", ".join(f"{k} {v:.2f}" for k, v in last["components_per_100k"].items()) if last else "–"
        lines.append(f"| {run['pipeline']} | {run['kind']} | " + " | ".join(cells) + f" | {growth} | {parts} |")
    checks = r.get("checks") or {}
    if checks:
        lines += ["", "Issue 43's bar, `hpo` on the clinical document: " + "; ".join(f"{k}: {v}" for k, v in checks.items()) + "."]
    names = {p: " → ".join(r["pipe_names"][p]) if p in r["pipe_names"] else "–" for p in PIPELINES}
    lines += ["", f"Pipelines: `hpo` {names['hpo']}; `ner` {names['ner']}. "
              "Growth: seconds per 100k characters at the longest length over those at the shortest (1.00×: linear)."]
    return "\n".join(lines)


def checks(runs: Sequence[Dict[str, Any]]) -> Dict[str, str]:
    """Issue 43's must-hold on the HPO default's clinical document, where both lengths were run."""
    run = next((r for r in runs if r["pipeline"] == "hpo" and r["kind"] == "clinical"), None)
    rows = {m["length"]: m for m in run["results"]} if run else {}
    out: Dict[str, str] = {}
    if 1_000_000 in rows:
        s = rows[1_000_000]["seconds"] / rows[1_000_000]["documents"]
        out["1M characters"] = f"{s:.1f} s ({'within' if s <= MAX_SECONDS_1M else 'OVER'} {MAX_SECONDS_1M:.0f} s)"
    if 1_000_000 in rows and 10_000 in rows:
        g = rows[1_000_000]["per_100k"] / rows[10_000]["per_100k"]
        out["s / 100k chars, 1M over 10k"] = f"{g:.2f}× ({'within' if g <= MAX_GROWTH else 'OVER'} {MAX_GROWTH:.0f}×)"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--total", type=int, default=1_000_000, help="characters run at each length")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=list(PIPELINES))
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "spacy-sapbert" / "benchmarks",
                        help="where the MEDIC KB is built once (medic-kb)")
    parser.add_argument("--profile", metavar="PIPELINE:KIND:LENGTH", help="print a cProfile of one document and stop")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--no-readme", action="store_true", help="write the JSON only")
    args = parser.parse_args(argv)

    import torch

    from spacy_sapbert.machine import machine_description

    torch.set_num_threads(1)
    if args.profile:
        pipeline, kind, length = args.profile.split(":")
        nlp = build(pipeline, args.work)
        nlp("Warm-up: seizures and microcephaly.")
        print(profile(nlp, kind, int(length)))
        return 0
    load_before = [round(x, 2) for x in os.getloadavg()]
    runs: List[Dict[str, Any]] = []
    pipe_names: Dict[str, List[str]] = {}
    for pipeline in args.pipelines:
        nlp = build(pipeline, args.work)
        nlp("Warm-up: seizures, microcephaly and aspirin-induced asthma.")  # loads the KB and the encoder; not timed
        pipe_names[pipeline] = list(nlp.pipe_names)
        for kind in args.kinds:
            stage_seconds(nlp, [KINDS[kind](2_000, 1_000_000)])  # first-use costs (rules compiled, buffers grown): not timed
            results = []
            for length in sorted(args.lengths):
                results.append(measure(nlp, kind, length, args.total))
                m = results[-1]
                print(f"{pipeline} {kind} {length:>9,}: {m['seconds']:7.2f} s, {m['per_100k']:.3f} s / 100k chars "
                      f"{m['components_per_100k']} load {m['load_average']}", file=sys.stderr, flush=True)
            runs.append({"pipeline": pipeline, "kind": kind, "results": results})
    argv_shown = list(sys.argv[1:] if argv is None else argv)
    record = {
        "command": shlex.join(["python", "benchmarks/long_documents.py", *argv_shown]),
        "machine": machine_description(), "threads": 1, "total": args.total, "lengths": sorted(args.lengths),
        "load_average": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]},
        "pipe_names": pipe_names, "runs": runs, "checks": checks(runs),
    }
    from spacy_sapbert.fileio import write_json

    write_json(args.out, record)
    print(json.dumps(record["checks"]), file=sys.stderr)
    if not args.no_readme:
        update_readme(README, render(record), BLOCK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
