"""Where the shipped pipelines spend their time, before and after a change, beside FastHPOCR.

    python benchmarks/pipeline_profile.py --before-code ../before --fasthpocr-python /tmp/hpocrvenv/bin/python
    python benchmarks/pipeline_profile.py --limit 200 --pipelines hpo      # a quick look while developing

Texts: the distinct NCBI-disease + BC5CDR abstracts (title and text, all splits: 2,292), or the
first ``--limit`` of them. Pipelines, each in a fresh process with torch and FAISS on ``--threads``:

* ``hpo``: the embedded default (``default_pipeline()``: the span finder over the HPO KB);
* ``hpo-int8``: the same at ``precision="int8"`` (opt-in; with ``--before-code``, that checkout's int8);
* ``hpo-l3``: the same with the linker's ``query_encoder="minilm-l3"`` (opt-in: the queries encoded by
  3 distilled layers, ``spacy_sapbert/query_encoder.py``; not in a checkout from before it);
* ``ner``: ``build_pipeline({"Disease": MEDIC, "Chemical": MeSH-2024}, "ner", negation=True)``;
* ``ner-alone``: the shipped NER by itself (``spacy.load`` of the folder the ``ner`` detector loads,
  with the pipelines' tokenizer, ``spacy_sapbert.tokenizer``);
* ``ner-trf``, ``ner-trf-alone``: the same with the transformer NER (checkouts without it skip them).

For each: seconds per component (the tokenizer, then each pipe over all the docs, its caches empty:
wall and CPU), and inside them the encoder, the vector search and the span finder's proposals;
and what ``nlp.pipe(n_process=N)`` adds per doc (each worker sends a doc back as ``Doc.to_bytes``,
the driver reads it with ``Doc.from_bytes``: both timed over the same docs, with the bytes per doc);
then abstracts/s of ``nlp.pipe(texts)`` as a user runs it (default batch size, the linkers' caches
emptied; the tokenizer keeps the chunks it cached in the earlier repeats, as in any long-running process), with
1 process and with ``--processes`` (``n_process``, torch on 1 thread each). ``--before-code DIR``
measures a checkout of the code before the change (``git worktree add DIR a235551``) the same way
in the same run, each checkout with its own entry points. ``--fasthpocr-python`` times FastHPOCR on
the same texts (``benchmarks/fasthpocr_worker.py``, its own environment). The encoder section
counts FLOPs per name from the model's shapes and the token lengths of the names the ``hpo`` and
``ner`` runs encoded, and sets names/s against the peak matmul FLOP/s measured here with torch
(fp32 and bf16, 1 and 2 threads). ``--isa avx2`` runs every process (FastHPOCR's too) as an
AVX2-only CPU would (``spacy_sapbert.machine.ISA_ENVIRONMENTS``; the JSON's ``machine.isa`` says
what took effect). Writes ``benchmarks/results/pipeline_profile.json`` and the README's
``PIPELINE-PROFILE`` block.

The issue-47 check (HPO default against FastHPOCR, one torch thread, caches empty, one run)::

    python benchmarks/pipeline_profile.py --isa avx2 --pipelines hpo hpo-int8 --threads 1 --processes 1 \
        --fasthpocr-python /tmp/hpocrvenv/bin/python --no-encoder-flops     # pipeline_profile_avx2.json
"""
from __future__ import annotations

import argparse
import configparser
import functools
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from fasthpocr_worker import run_fasthpocr  # benchmarks/fasthpocr_worker.py, beside this script
from readme_tables import update_readme  # benchmarks/readme_tables.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "pipeline_profile.json"
README = ROOT / "benchmarks" / "README.md"
BLOCK = "PIPELINE-PROFILE"
CORPUS_FILES = (
    "ncbi-disease/NCBItrainset_corpus.txt", "ncbi-disease/NCBIdevelopset_corpus.txt", "ncbi-disease/NCBItestset_corpus.txt",
    "bc5cdr/CDR_TrainingSet.PubTator.txt", "bc5cdr/CDR_DevelopmentSet.PubTator.txt", "bc5cdr/CDR_TestSet.PubTator.txt",
)
PIPELINES = ("hpo", "hpo-int8", "hpo-l3", "ner", "ner-alone", "ner-trf", "ner-trf-alone")
HPO_OPTIONS = {"hpo": {}, "hpo-int8": {"precision": "int8"}, "hpo-l3": {"query_encoder": "minilm-l3"}}  # default_pipeline's
# What is timed inside the components, where the code has it: (label, module, class, method, whether
# to count the items of the first argument (names encoded, queries searched) rather than the calls).
INNER = (
    ("encoder", "spacy_sapbert.encoder", "SapEncoder", "encode", True),
    ("vector search", "spacy_sapbert.index", "VectorIndex", "search", True),
    ("candidates (search included)", "spacy_sapbert.search", "LinkingKB", "candidates", True),
    ("span-finder proposals", "spacy_sapbert.span_finder", "SpanFinder", "proposals", False),
)


def corpus_texts(data_dir: Path, limit: Optional[int]) -> List[str]:
    """The distinct abstracts (title + text) of NCBI-disease and BC5CDR, all splits, in file order."""
    from spacy_sapbert.evaluation.datasets import read_pubtator

    texts = list(dict.fromkeys(d.text for name in CORPUS_FILES for d in read_pubtator(data_dir / name)))
    return texts[:limit] if limit else texts


# ---------------------------------------------------------------------------- the worker (one pipeline, one checkout)
class Timers:
    """Wall and CPU seconds spent in the INNER methods (outermost call only), and what went through them."""

    def __init__(self) -> None:
        self.seconds: Dict[str, List[float]] = {}
        self.items: Dict[str, int] = {}
        self.encoded: List[str] = []

    def install(self) -> None:
        import importlib

        for label, module, cls_name, method, count_items in INNER:
            cls = getattr(importlib.import_module(module), cls_name, None)
            if cls is not None and hasattr(cls, method):
                setattr(cls, method, self._wrap(label, getattr(cls, method), count_items))

    def _wrap(self, label: str, fn: Callable, count_items: bool) -> Callable:
        active = [0]

        @functools.wraps(fn)
        def timed(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if active[0]:
                return fn(obj, *args, **kwargs)
            active[0] += 1
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(obj, *args, **kwargs)
            finally:
                active[0] -= 1
                spent = self.seconds.setdefault(label, [0.0, 0.0])
                spent[0] += time.perf_counter() - wall
                spent[1] += time.process_time() - cpu
                self.items[label] = self.items.get(label, 0) + (len(args[0]) if count_items else 1)
                if label == "encoder":
                    self.encoded.extend(args[0])

        return timed

    def reset(self) -> None:
        self.seconds.clear()
        self.items.clear()
        self.encoded.clear()


def clear_caches(nlp) -> None:
    for _, proc in nlp.pipeline:
        if hasattr(proc, "_cache"):
            proc._cache.clear()


def build(request: Dict[str, Any]):
    """The pipeline the request names, as a user builds it."""
    import spacy

    if request["pipeline"] in HPO_OPTIONS:
        from spacy_sapbert.defaults import default_pipeline

        return default_pipeline(progress=False, **HPO_OPTIONS[request["pipeline"]])
    from spacy_sapbert import pipelines

    detector = request["pipeline"].replace("-alone", "")
    if request["pipeline"].endswith("-alone"):
        try:  # the tokenizer the full pipeline has (a checkout from before it existed: spaCy's own)
            from spacy_sapbert.tokenizer import TOKENIZER_CONFIG

            config = {"nlp": {"tokenizer": TOKENIZER_CONFIG}}
        except ImportError:
            config = {}
        return spacy.load(pipelines.SHIPPED_NERS[detector] if hasattr(pipelines, "SHIPPED_NERS") else pipelines.SHIPPED_NER, config=config)
    return pipelines.build_pipeline({"Disease": request["medic"], "Chemical": request["mesh"]}, detector, negation=True)


SENT, RECEIVED = "Doc.to_bytes (n_process > 1: in the worker)", "Doc.from_bytes (n_process > 1: in the driver)"


def stage_times(nlp, texts: Sequence[str], timers: Timers) -> Dict[str, Any]:
    """Each component over all the docs in turn (the tokenizer first; batches of ``nlp.batch_size``,
    as ``nlp.pipe`` gives them), wall and CPU seconds."""
    stages: Dict[str, Dict[str, float]] = {}
    clear_caches(nlp)
    timers.reset()

    def timed(name: str, run: Callable[[], Any]) -> Any:
        """``run()``, its wall and CPU seconds added to ``stages[name]``."""
        wall, cpu = time.perf_counter(), time.process_time()
        out = run()
        spent = stages.setdefault(name, {"wall": 0.0, "cpu": 0.0})
        spent["wall"] += time.perf_counter() - wall
        spent["cpu"] += time.process_time() - cpu
        return out

    docs = timed("tokenizer", lambda: [nlp.make_doc(t) for t in texts])
    for name, proc in nlp.pipeline:
        docs = timed(name, lambda proc=proc, docs=docs: list(proc.pipe(docs, batch_size=nlp.batch_size))
                     if hasattr(proc, "pipe") else [proc(d) for d in docs])
    inner = {label: {"wall": w, "cpu": c, "items": timers.items.get(label, 0)} for label, (w, c) in timers.seconds.items()}
    # what nlp.pipe(n_process=N) adds per doc: each worker sends it back as Doc.to_bytes, the driver reads it
    # (one doc at a time, so that the copies do not raise the peak RSS reported for the pipeline)
    from spacy.tokens import Doc

    sent_bytes = 0
    for doc in docs:
        data = timed(SENT, doc.to_bytes)
        timed(RECEIVED, lambda data=data: Doc(nlp.vocab).from_bytes(data))
        sent_bytes += len(data)
    return {"stages": stages, "inner": inner, "mentions": sum(len(d.ents) for d in docs), "encoded": list(timers.encoded),
            "bytes_per_doc": sent_bytes / max(1, len(docs))}


def pipe_rate(nlp, texts: Sequence[str], n_process: int, repeats: int) -> Dict[str, Any]:
    """abstracts/s of ``nlp.pipe(texts)`` (default batch size), caches emptied before each run; median.
    With one process also per CPU second of this process (on a shared machine, wall time counts the
    other processes' turns too)."""
    seconds, cpu_seconds = [], []
    mentions = 0
    for _ in range(repeats):
        clear_caches(nlp)
        start, cpu = time.perf_counter(), time.process_time()
        mentions = sum(len(d.ents) for d in nlp.pipe(texts, n_process=n_process))
        seconds.append(time.perf_counter() - start)
        cpu_seconds.append(time.process_time() - cpu)
    out = {"n_process": n_process, "seconds": seconds, "abstracts_per_s": len(texts) / statistics.median(seconds), "mentions": mentions}
    if n_process == 1:
        out.update(cpu_seconds=cpu_seconds, abstracts_per_cpu_s=len(texts) / statistics.median(cpu_seconds))
    return out


def worker(request: Dict[str, Any]) -> Dict[str, Any]:
    import faiss
    import torch

    from spacy_sapbert.machine import peak_rss_mb

    torch.set_num_threads(request["threads"])
    faiss.omp_set_num_threads(request["threads"])
    timers = Timers()
    timers.install()
    texts = request["texts"]
    start = time.perf_counter()
    nlp = build(request)
    nlp("Warm-up: seizures, microcephaly and aspirin-induced asthma.")  # loads KBs and encoders; not timed
    for _, pipe in nlp.pipeline:  # each linker's reduced-precision encoder copy is made (int8: calibrated) untimed too
        if getattr(pipe, "encoder", None) is not None:
            pipe.encoder.encode(["warm-up"])
    out: Dict[str, Any] = {"load_seconds": time.perf_counter() - start, "pipe_names": list(nlp.pipe_names)}
    out.update(stage_times(nlp, texts, timers))
    out["pipe"] = [pipe_rate(nlp, texts, 1, request["repeats"])]
    for n in request["processes"]:
        if n > 1:
            torch.set_num_threads(1)  # one thread per process: the cores are the processes'
            out["pipe"].append(pipe_rate(nlp, texts, n, request["repeats"]))
            torch.set_num_threads(request["threads"])
    out["peak_rss_mb"] = peak_rss_mb()
    return out


# ---------------------------------------------------------------------------- the encoder against the hardware
def flops_per_name(tokens: Sequence[int], layers: int, hidden: int, intermediate: int) -> float:
    """Mean FLOPs (multiply-adds x 2) per name of ``tokens`` tokens: per token and layer the Q, K, V
    and output products and the two feed-forward ones; per layer the attention scores and weighted
    sums (tokens x tokens per head, all heads together as wide as ``hidden``). Embeddings,
    LayerNorm, GELU and softmax are left out (a few percent)."""
    import numpy as np

    t = np.asarray(tokens, dtype=np.float64)
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * intermediate)
    return float(np.mean(layers * (t * per_token + 2 * 2 * t * t * hidden)))


def encoder_flops(names: Sequence[str], threads: Sequence[int], repeats: int) -> Dict[str, Any]:
    """FLOPs per name from the encoder's shapes and the names' token lengths, names/s of
    ``SapEncoder.encode`` (default precision and batch size), and peak matmul FLOP/s with torch."""
    import numpy as np
    import torch

    from spacy_sapbert.encoder import SapEncoder

    encoder = SapEncoder.load(None, device="cpu")
    c = encoder.model.config
    h, f, layers = int(c.hidden_size), int(c.intermediate_size), int(c.num_hidden_layers)
    lengths = encoder.tokenize(list(names))["attention_mask"].sum(1).numpy()
    # as ``encode`` runs them: sorted by length, batches of 256 padded to their longest name
    batch = 256
    by_length = np.sort(lengths)
    padded = np.concatenate([np.full(len(b), b.max()) for b in np.array_split(by_length, max(1, -(-len(by_length) // batch)))])

    out: Dict[str, Any] = {
        "model": {"layers": layers, "hidden": h, "intermediate": f, "heads": int(c.num_attention_heads)},
        "precision": encoder.precision, "names": len(names),
        "tokens_per_name": float(lengths.mean()), "padded_tokens_per_name": float(padded.mean()),
        "gflop_per_name": flops_per_name(lengths, layers, h, f) / 1e9,
        "gflop_per_name_padded": flops_per_name(padded, layers, h, f) / 1e9,
        "by_threads": {},
    }
    texts = list(names)
    for n in threads:
        torch.set_num_threads(n)
        encoder.encode(texts[:256])  # warm-up (the bf16 copy of the weights is made here)
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            encoder.encode(texts, batch_size=256)
            seconds.append(time.perf_counter() - start)
        names_per_s = len(texts) / statistics.median(seconds)
        peaks = {dtype: matmul_peak(getattr(torch, dtype), n) for dtype in ("float32", "bfloat16")}
        native = peaks["bfloat16"] if encoder.precision == "bf16" else peaks["float32"]
        out["by_threads"][str(n)] = {
            "names_per_s": names_per_s,
            "achieved_gflops": names_per_s * out["gflop_per_name"],
            "peak_gflops": peaks,
            "names_per_s_at_peak": native / out["gflop_per_name"],
            "share_of_peak": names_per_s * out["gflop_per_name"] / native,
        }
    return out


def matmul_peak(dtype, threads: int, size: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of the best of ``repeats`` square ``size`` matmuls in ``dtype`` on ``threads`` torch threads."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


# ---------------------------------------------------------------------------- running checkouts and workers
def entry_points_shim(code: Path, folder: Path) -> Path:
    """A distribution-info folder declaring ``code``'s own entry points (setup.cfg), to put first on
    PYTHONPATH: spaCy loads every factory entry point of the installed package, which may name
    modules another checkout lacks."""
    config = configparser.ConfigParser()
    config.read(code / "setup.cfg")
    info = folder / "spacy_sapbert-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spacy-sapbert\nVersion: 0.0.0\n", encoding="utf8")
    lines = []
    for group, body in config["options.entry_points"].items():
        lines += [f"[{group}]", *[line.strip() for line in body.strip().splitlines()], ""]
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf8")
    return folder


def run_worker(code: Path, request: Dict[str, Any], mode: str = "--worker") -> Dict[str, Any]:
    """This script's worker in a fresh process, importing spacy_sapbert from the checkout ``code``."""
    with tempfile.TemporaryDirectory(prefix="pipeline-profile-") as tmp:
        shim = entry_points_shim(code, Path(tmp) / "shim")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(code)]), "OMP_NUM_THREADS": str(request["threads"])}
        request_path, reply = Path(tmp) / "in.json", Path(tmp) / "out.json"
        request_path.write_text(json.dumps(request), encoding="utf8")
        subprocess.run([sys.executable, str(Path(__file__).resolve()), mode, str(request_path), str(reply)], check=True, env=env, cwd=code)
        return json.loads(reply.read_text(encoding="utf8"))


# ---------------------------------------------------------------------------- the README block
def _rate(run: Dict[str, Any], n: int) -> Optional[float]:
    return next((p["abstracts_per_s"] for p in run.get("pipe", []) if p["n_process"] == n), None)


def _n(x: Optional[float], digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def render(r: Dict[str, Any]) -> str:
    runs, codes = r["runs"], [c for c in ("before", "after") if c in r["runs"]]
    procs = r["processes"]
    lines = [
        f"Generated by `{r['command']}` (JSON: `benchmarks/results/pipeline_profile.json`) on {r['machine']['cpu']}, "
        f"{r['machine']['nproc']} cores visible, torch/FAISS on {r['threads']} thread(s) in one process; load average "
        f"{r['load_average']['before']} before, {r['load_average']['after']} after (1/5/15 min). Texts: {r['texts']} distinct "
        "NCBI-disease + BC5CDR abstracts (all splits, title + text). "
        + (f"*before*: the code at {r.get('before_commit') or '–'}; *after*: this checkout." if "before" in codes else "*after*: this checkout."),
        "",
        "| pipeline | code | " + " | ".join(f"abstracts/s, {n} process{'es' if n > 1 else ''}" for n in procs)
        + " | mentions | peak RSS MB |",
        "|---|---|" + "--:|" * (len(procs) + 2),
    ]
    for name in PIPELINES:
        for code in codes:
            run = runs[code].get(name)
            if run:
                lines.append(f"| {name} | {code} | " + " | ".join(_n(_rate(run, n)) for n in procs)
                             + f" | {run['mentions']:,} | {_n(run['peak_rss_mb'], 0)} |")
    if r.get("fasthpocr"):
        fh = r["fasthpocr"]
        lines.append(f"| FastHPOCR 0.1.4 | – | {_n(fh['abstracts_per_s'])}" + " | –" * (len(procs) - 1)
                     + f" | {fh['concepts_found']:,} | {_n(fh['peak_rss_mb'], 0)} |")
    lines += ["", "Ratios (same run): " + ("; ".join(f"{k}: {v}" for k, v in r["ratios"].items()) or "– (needs FastHPOCR or the NER alone)") + ".", ""]
    lines += ["Seconds per component over all the texts (each component in turn over all docs, caches empty; wall / CPU):", ""]
    for name in PIPELINES:
        stages = {code: runs[code][name] for code in codes if runs[code].get(name)}
        if not stages:
            continue
        outer = list(dict.fromkeys(p for run in stages.values() for p in run["stages"]))
        inner = list(dict.fromkeys(p for run in stages.values() for p in run["inner"]))
        lines += [f"*{name}*", "", "| part | " + " | ".join(stages) + " |", "|---|" + "--:|" * len(stages)]
        for part in outer + inner:
            cells = []
            for run in stages.values():
                t = run["stages"].get(part) or run["inner"].get(part)
                items = f" ({t['items']:,})" if t and t.get("items") else ""
                cells.append("–" if t is None else f"{t['wall']:.2f} / {t['cpu']:.2f}{items}")
            lines.append(f"| {part if part in outer else '↳ ' + part} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append("↳ rows are inside the components above them (in parentheses: names encoded, queries searched, docs given proposals).")
    sent = [f"{name} ({code}) {runs[code][name]['bytes_per_doc']:,.0f}" for name in PIPELINES for code in codes
            if "bytes_per_doc" in runs[code].get(name, {})]
    if sent:
        lines += ["", "Bytes per doc that `nlp.pipe(n_process > 1)` sends back to the driver: " + ", ".join(sent) + "."]
    e = r.get("encoder")
    if e:
        m = e["model"]
        lines += [
            "",
            f"Encoder against the hardware: {m['layers']} layers, hidden {m['hidden']}, feed-forward {m['intermediate']}; "
            f"the {e['names']:,} distinct names the `hpo` and `ner` runs encoded average {e['tokens_per_name']:.1f} tokens "
            f"({e['padded_tokens_per_name']:.1f} as padded in `encode`'s length-sorted batches of 256): "
            f"{e['gflop_per_name'] * 1000:.0f} MFLOP per name ({e['gflop_per_name_padded'] * 1000:.0f} padded). "
            f"Precision {e['precision']}.",
            "",
            "| threads | names/s | GFLOP/s achieved | peak matmul GFLOP/s fp32 / bf16 | names/s at the peak | share of peak |",
            "|--:|--:|--:|--:|--:|--:|",
        ]
        for n, t in e["by_threads"].items():
            lines.append(f"| {n} | {_n(t['names_per_s'])} | {_n(t['achieved_gflops'])} | {_n(t['peak_gflops']['float32'], 0)} / "
                         f"{_n(t['peak_gflops']['bfloat16'], 0)} | {_n(t['names_per_s_at_peak'], 0)} | {t['share_of_peak']:.1%} |")
        lines += ["", "Peak: the best of five 2048×2048 matmuls with torch in that dtype; names/s at the peak = peak / FLOP per name (unpadded)."]
    return "\n".join(lines)


def ratios(r: Dict[str, Any]) -> Dict[str, str]:
    """The rates' ratios as text; those against FastHPOCR with 3 decimals (a target of 0.3x must not round up to it)."""
    out = {}
    for code in ("before", "after"):
        runs = r["runs"].get(code, {})
        for n, name in itertools.product(r["processes"], HPO_OPTIONS):
            hpo = _rate(runs.get(name, {}), n)
            if hpo and r.get("fasthpocr"):
                out[f"{name} / FastHPOCR (1 process), {code}, {n} process(es)"] = f"{hpo / r['fasthpocr']['abstracts_per_s']:.3f}"
            hpo_cpu = next((p.get("abstracts_per_cpu_s") for p in runs.get(name, {}).get("pipe", []) if p["n_process"] == n), None)
            if hpo_cpu and r.get("fasthpocr", {}).get("abstracts_per_cpu_s"):
                out[f"{name} / FastHPOCR per CPU second, {code}"] = f"{hpo_cpu / r['fasthpocr']['abstracts_per_cpu_s']:.3f}"
                encoder_cpu = runs[name].get("inner", {}).get("encoder", {}).get("cpu")
                if encoder_cpu is not None and r["fasthpocr"].get("abstracts"):
                    # the most that encoding less could give: the pipeline's CPU seconds less all of the encoder's
                    rest = r["fasthpocr"]["abstracts"] / hpo_cpu - encoder_cpu
                    out[f"{name} / FastHPOCR per CPU second with the encoder's seconds removed (ceiling), {code}"] = (
                        f"{r['fasthpocr']['abstracts'] / rest / r['fasthpocr']['abstracts_per_cpu_s']:.3f}")
        for n in r["processes"]:
            for detector in ("ner", "ner-trf"):
                ner, alone = _rate(runs.get(detector, {}), n), _rate(runs.get(f"{detector}-alone", {}), n)
                if ner and alone:
                    out[f"{detector} / its NER alone, {code}, {n} process(es)"] = f"{ner / alone:.2f}"
    return out


def git_commit(code: Path) -> Optional[str]:
    found = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or None


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from spacy_sapbert.machine import ISA_ENVIRONMENTS  # here, not at the top: --worker runs against --before-code's package too

    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=PIPELINES)
    parser.add_argument("--limit", type=int, default=None, help="only the first N abstracts (a quick look)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="n_process values to time nlp.pipe with")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--before-code", type=Path, default=None, help="a checkout of the code before the change")
    parser.add_argument("--fasthpocr-python", default=None, help="python of an environment with FastHPOCR 0.1.4 (and pronto)")
    parser.add_argument("--medic", type=Path, default=ROOT / "kbs" / "medic")
    parser.add_argument("--mesh", type=Path, default=ROOT / "kbs" / "mesh-chemical")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "assets" / "benchmarks")
    parser.add_argument("--cache", type=Path, default=ROOT / "corpus" / "cache")
    parser.add_argument("--no-encoder-flops", action="store_true")
    parser.add_argument("--output", type=Path, default=None, help=f"default {OUT.name}, or pipeline_profile_ISA.json with --isa")
    parser.add_argument("--render-only", action="store_true", help="re-render the README block from the JSON")
    parser.add_argument("--isa", default="native", choices=list(ISA_ENVIRONMENTS),
                        help="run every process as a CPU with only this instruction set would (spacy_sapbert.machine.ISA_ENVIRONMENTS)")
    args = parser.parse_args(argv)
    from spacy_sapbert.fileio import read_json, write_json
    from spacy_sapbert.machine import machine_description, run_as_isa

    if args.output is None:
        args.output = OUT if args.isa == "native" else OUT.with_name(f"pipeline_profile_{args.isa}.json")
    if not args.render_only:
        run_as_isa(args.isa)  # starts this script again with the variables set, unless they are

    if args.render_only:
        result = read_json(args.output)
        update_readme(README, render(result), block=BLOCK)
        return result
    texts = corpus_texts(args.data_dir, args.limit)
    result: Dict[str, Any] = {
        "command": "python benchmarks/pipeline_profile.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine_description(), "threads": args.threads, "processes": args.processes, "texts": len(texts),
        "load_average": {"before": [round(x, 2) for x in os.getloadavg()]}, "runs": {},
    }
    codes = {"after": ROOT}
    if args.before_code:
        codes = {"before": args.before_code.resolve(), **codes}
        result["before_commit"] = git_commit(args.before_code)
    base = {"texts": texts, "threads": args.threads, "processes": args.processes, "repeats": args.repeats,
            "medic": str(args.medic.resolve()), "mesh": str(args.mesh.resolve())}
    encoded: List[str] = []
    for name in args.pipelines:  # each pipeline's checkouts back to back: a machine that drifts shifts both alike
        for code, folder in codes.items():
            if name.startswith("ner-trf") and not (folder / "spacy_sapbert" / "tagger.py").is_file():
                continue  # a checkout from before the transformer NER
            run = run_worker(folder, {**base, "pipeline": name})
            names = run.pop("encoded")
            if code == "after":
                encoded += names
            result["runs"].setdefault(code, {})[name] = run
            print(json.dumps({"code": code, "pipeline": name, "pipe": run["pipe"], "stages": run["stages"]}), flush=True)
    if args.fasthpocr_python:
        timed = run_fasthpocr(args.fasthpocr_python, texts, args.cache / "fasthpocr-index", args.repeats)
        result["fasthpocr"] = {k: v for k, v in timed.items() if k != "annotations"}  # its speed only
        print(json.dumps({"fasthpocr": result["fasthpocr"]}), flush=True)
    if encoded and not args.no_encoder_flops:
        result["encoder"] = run_worker(ROOT, {"names": sorted(set(encoded)), "threads": max(args.threads, 1),
                                              "thread_counts": sorted({1, args.threads}), "repeats": max(args.repeats, 3)},
                                       mode="--encoder-flops")
    result["ratios"] = ratios(result)
    result["load_average"]["after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result["ratios"], indent=1))
    write_json(args.output, result)
    if args.limit is None and args.output.resolve() == OUT.resolve():  # a quick look or another file leaves the README as it is
        update_readme(README, render(result), block=BLOCK)
    return result


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] in ("--worker", "--encoder-flops"):
        request = json.loads(Path(sys.argv[2]).read_text(encoding="utf8"))
        if sys.argv[1] == "--worker":
            answer = worker(request)
        else:
            answer = encoder_flops(request["names"], request["thread_counts"], request["repeats"])
        Path(sys.argv[3]).write_text(json.dumps(answer), encoding="utf8")
    else:
        main()
