"""Linking speed and memory on this machine: the figures the README quotes.

    python benchmarks/speed.py --quick        # < 5 minutes once the MEDIC KB is cached
    python benchmarks/speed.py --umls-names 1000000   # adds the UMLS-scale part (benchmarks/umls_scale.py)
    python benchmarks/speed.py --render-only --umls-result A/result.json --umls-result B/result.json   # adopt umls_scale.py runs
    python benchmarks/speed.py --quick --threads 2 --isa avx2 --scispacy-python /tmp/scivenv/bin/python   # as on an AVX2-only CPU

Measures, with the default encoder (offline MiniLM, default precision) and the MEDIC 2012 KB:
* ``names_per_s``: dictionary encoding with the default precision, and per precision (fp32 / bf16 /
  int8, and ONNX Runtime int8 where ``onnxruntime`` and ``onnx`` are installed: ``onnx_int8.py``);
* for each precision, lenient Acc@1 of raw NCBI-disease test mentions against MEDIC (a speed-side
  sanity check, not the paper's protocol: see ``benchmarks/evaluate_all.py``) and top-5 overlap with fp32;
* ``mentions_per_s``: ``nlp.pipe`` over the NCBI-disease test abstracts with gold spans;
* ``query_encoder_linker``: the same two rates with the linker's opt-in ``query_encoder="minilm-l3"``
  (``precision`` also holds its encoding rate and raw NCBI-disease test Acc@1 against the same KB);
* ``distinct_mentions_per_s``: ``nlp.pipe`` over distinct mention strings (no cache help);
* ``search_paths``: both rates with the index's own search path (``int8`` on an AVX2-only CPU, ``bf16``
  on AMX or AMD's AVX512-BF16, else ``fp32``: ``FlatIndex.search_path``) and with fp32 search forced,
  run in turn (``search_path_rates``);
* ``pass_threads``: both rates with the encoder's passes shared among threads of one torch thread each
  (the default: ``SapEncoder.pass_threads``) and with every pass on the linking thread, run in turn
  (``pass_thread_rates``);
* the untuned path side by side (fp32, padding to max_length, no cache);
* ``peak_rss_mb``;
* without ``--quick``: ``umls_scale`` (names, load_s, rss_mb, recall_at_5, per index kind).
The default linker's rates are taken first, before any other encoder has run in the process. Every figure
is the median over ``--repeats`` runs. Writes ``benchmarks/results/speed.json`` and
the README's ``SPEED`` block (with ``--isa`` or another ``--output``, the JSON alone).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import faiss
import spacy
import torch
import typer
from readme_tables import update_readme  # benchmarks/readme_tables.py, beside this script
from spacy.tokens import Doc
from umls_scale import KINDS, measure, mention_docs, render  # benchmarks/umls_scale.py, beside this script

from spacy_sapbert.encoder import SapEncoder, resolve_precision
from spacy_sapbert.evaluation.baselines import run_scispacy_worker, scispacy_entities
from spacy_sapbert.evaluation.datasets import dictionary_records, load_split
from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import ISA_ENVIRONMENTS, machine_description, peak_rss_mb, run_as_isa
from spacy_sapbert.normalize import normalize_name
from spacy_sapbert.search import LinkingKB

ROOT = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16", "int8")
QUERY_ENCODER = "minilm-l3"  # the linker's query_encoder measured beside the precisions (shipped)


def median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def medic_kb_path(encoder: SapEncoder, cache: Path) -> Path:
    """The MEDIC KB folder for this encoder, built once and cached (building is not what we time here)."""
    path = cache / f"kb-medic-n-{encoder.fingerprint[:12]}"  # "n": built since indexes keep a neighbour table
    if not (path / "meta.json").is_file():
        LinkingKB.build(dictionary_records("ncbi-disease"), encoder, progress=True, work_dir=cache / "kb-medic.partial").to_disk(path)
    return path


# Run in a fresh interpreter: what a user waits for between ``spacy.load`` and a linked span.
LOAD_PROBE = """
import json, sys, time
t0 = time.perf_counter()
import spacy
from spacy_sapbert.machine import peak_rss_mb
from spacy.tokens import Span
nlp = spacy.load(sys.argv[1])
loaded = time.perf_counter() - t0
doc = nlp.make_doc("Familial adenomatous polyposis")
doc.ents = [Span(doc, 0, len(doc), label="Disease")]
doc = nlp.get_pipe("sapbert_linker")(doc)
print(json.dumps({"load_s": round(loaded, 2), "first_link_s": round(time.perf_counter() - t0 - loaded, 3),
                  "cui": doc.ents[0].kb_id_, "rss_mb": peak_rss_mb()}))
"""


def pipeline_load(kb_path: Path, folder: Path, threads: int) -> Dict[str, object]:
    """Save a blank pipeline with the linker over ``kb_path`` once, then time ``spacy.load`` of it."""
    if not (folder / "config.cfg").is_file():
        nlp = spacy.blank("en")
        nlp.add_pipe("sapbert_linker", config={"kb": str(kb_path)})
        nlp.initialize()
        nlp.to_disk(folder)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, "-c", LOAD_PROBE, str(folder)], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def gold_docs(nlp, documents) -> List[Doc]:
    """The NCBI test abstracts as Docs whose ents are the gold mentions (the linker's input)."""
    docs = []
    for d in documents:
        doc = nlp.make_doc(d.text)
        spans = [doc.char_span(m.start, m.end, label="Disease", alignment_mode="expand") for m in d.mentions]
        doc.ents = spacy.util.filter_spans([s for s in spans if s is not None])
        docs.append(doc)
    return docs


def linker_pipeline(lkb: LinkingKB, encoder: SapEncoder, **settings: object) -> spacy.Language:
    """A blank pipeline whose one component is a ``sapbert_linker`` (``settings``: its config) on the
    loaded KB and encoder: what ``nlp.pipe`` runs over docs whose entities are set."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config=settings).set_kb(lkb, encoder)
    return nlp


def linking_run(nlp: spacy.Language, docs: List[Doc], batch_size: int = 128) -> Callable[[], None]:
    """One timed run as a user's: ``nlp.pipe`` over ``docs``, its linker's mention cache emptied first."""
    linker = nlp.get_pipe("sapbert_linker")

    def run() -> None:
        linker._cache.clear()
        for _ in nlp.pipe(docs, batch_size=batch_size):
            pass

    return run


def pipe_rate(nlp: spacy.Language, docs: List[Doc], repeats: int, batch_size: int = 128) -> float:
    """Linked spans per second of ``linking_run`` (median of ``repeats``)."""
    n = sum(len(nlp.get_pipe("sapbert_linker").spans_to_link(d)) for d in docs)
    return n / median_time(linking_run(nlp, docs, batch_size), repeats)


def rates_in_turn(nlp: spacy.Language, docs: List[Doc], strings: List[Doc], repeats: int,
                  switch: Callable[[bool], None], labels: Tuple[str, str]) -> Dict[str, float]:
    """Both linking rates (gold spans ``docs``, distinct ``strings``) with ``switch(False)`` and with
    ``switch(True)`` (keys ``labels[0]_…`` and ``labels[1]_…``), run in turn, which one first alternating,
    in a first round (which makes any copy a setting uses: not counted) and then an even number of
    rounds, at least ``repeats``, each order as often: what a setting gains, in one run, on the same
    machine state. ``switch(False)`` is left in place."""
    linker = nlp.get_pipe("sapbert_linker")
    counts = {"gold": sum(len(linker.spans_to_link(d)) for d in docs), "distinct": sum(len(linker.spans_to_link(d)) for d in strings)}
    seconds: Dict[Tuple[str, str], List[float]] = {}
    try:
        for round_ in range(1 + 2 * -(-repeats // 2)):
            for on in ((False, True) if round_ % 2 == 0 else (True, False)):
                switch(on)
                for name, batch in (("gold", docs), ("distinct", strings)):
                    seconds.setdefault((name, labels[on]), []).append(median_time(linking_run(nlp, batch), 1))
    finally:
        switch(False)
    return {f"{label}_{name}_per_s": round(counts[name] / statistics.median(times[1:]), 1) for (name, label), times in seconds.items()}


def search_path_rates(nlp: spacy.Language, docs: List[Doc], strings: List[Doc], repeats: int) -> Dict[str, object]:
    """Both linking rates with the KB index's own search path (``FlatIndex.search_path``) and with fp32
    search forced (``rates_in_turn``)."""
    index = nlp.get_pipe("sapbert_linker").linking_kb.index
    path = index.search_path(20) if hasattr(index, "search_path") else None

    def force_fp32(on: bool) -> None:
        if on:
            index.search_path = lambda k: "fp32"  # (shadows the method on this one index)
        else:
            index.__dict__.pop("search_path", None)

    return {"path": path, **rates_in_turn(nlp, docs, strings, repeats, force_fp32, ("own", "fp32"))}


def pass_thread_rates(nlp: spacy.Language, docs: List[Doc], strings: List[Doc], repeats: int) -> Dict[str, object]:
    """Both linking rates with the encoder's passes shared among threads of one torch thread each
    (``SapEncoder.pass_threads``, the default) and with every pass on the linking thread with torch's
    thread count (``rates_in_turn``)."""
    encoder = nlp.get_pipe("sapbert_linker").encoder

    def one_thread(on: bool) -> None:
        encoder.threaded_passes = not on

    return {"threads": encoder.pass_threads(), **rates_in_turn(nlp, docs, strings, repeats, one_thread, ("shared", "one_thread"))}


def scispacy_rates(python: Path, lkb: LinkingKB, docs: List[Doc], strings: List[Doc], threads: int, repeats: int, cache: Path) -> Dict[str, object]:
    """scispacy's EntityLinker over the same KB, gold spans and strings, in its own environment
    (``benchmarks/scispacy_worker.py``); its HNSW index is built once and cached."""
    answer = run_scispacy_worker(python, {
        "mode": "link",
        "entities": scispacy_entities(lkb.kb),
        "docs": [{"text": d.text, "spans": [[e.start_char, e.end_char] for e in d.ents]} for d in docs],
        "strings": [d.text for d in strings],
        "threads": threads,
        "repeats": repeats,
        "index_cache": str((cache / "scispacy-index").resolve()),
    })
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in answer.items()}


def shown_path(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix() if path.resolve().is_relative_to(ROOT) else str(path)


def _n(x: object) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:,.1f}" if isinstance(x, float) else str(x)


def stored_umls_runs(r: Dict[str, object]) -> List[Dict[str, object]]:
    """The UMLS-scale runs a speed.json holds, newest first, each with the command that made it."""
    runs = [u for u in [r.get("umls_scale"), *r.get("umls_scale_earlier", [])] if u]  # type: ignore[misc]
    for u in runs:
        u.setdefault("command", r["command"])  # (runs stored before runs carried their own command)
    return runs  # type: ignore[return-value]


def set_umls_runs(results: Dict[str, object], newest: Dict[str, object], others: Sequence[Dict[str, object]]) -> None:
    """``newest`` becomes the UMLS-scale part; runs at other KB sizes stay beside it (e.g. the
    all-kinds comparison at 958k names)."""
    results["umls_scale"] = newest
    results["umls_scale_earlier"] = [u for u in others if u["names"] != newest["names"]]


def render_umls_scale(u: Dict[str, object]) -> List[str]:
    """One UMLS-scale run's paragraph and candidates' table (``umls_scale.render``: one format for both)."""
    return [
        "",
        f"UMLS-scale part (`{u.get('command', 'benchmarks/speed.py')}`; real MiniLM vectors in {u['encoder']['precision']}; "  # type: ignore[index]
        "each index built, tuned on train/dev mentions to recall@5 "
        f"{u.get('tune_target', 0.99)}, then loaded and searched in a fresh process with its files out of the page cache; "
        "kept under `corpus/cache/umls-scale`, `measured.json` per index: delete it to measure again, `built.json` to rebuild):",
        "",
        render(u),
    ]


def render_index_studies(results: Path) -> List[str]:
    """The tables of ``pq_rerank.py`` and ``hnsw_ef.py``, when their JSON is in ``results``."""
    lines: List[str] = []
    if (results / "pq_rerank.json").is_file():
        pq = read_json(results / "pq_rerank.json")
        cands = sorted(int(k.rsplit("_", 1)[1]) for k in pq["rows"][0] if k.startswith("recall_at_5_rescored_"))
        lines += [
            "",
            f"`ivf-pq` settings (`{pq['command']}`, {_n(pq['names'])} names, {_n(pq['queries'])} test mentions, 1 thread): "
            "recall@5 of the PQ scores alone and after re-scoring the best candidates with the fp16 vectors.",
            "",
            "| PQ bytes | nprobe | ms/query (PQ) | PQ only | " + " | ".join(f"re-scored {c}" for c in cands) + " |",
            "|--:|--:|--:|--:|" + "--:|" * len(cands),
        ]
        for row in pq["rows"]:
            lines.append(
                f"| {row['pq_bytes']} | {row['nprobe']} of {_n(row['nlist'])} | {row['pq_ms_per_query']:.2f} | {row['recall_at_5_pq_only']:.4f} | "
                + " | ".join(f"{row[f'recall_at_5_rescored_{c}']:.4f}" for c in cands) + " |"
            )
    if (results / "hnsw_ef.json").is_file():
        hnsw = read_json(results / "hnsw_ef.json")
        curve = ", ".join(f"{row['ef_search']}: {row['recall_at_5']:.4f} ({row['ms_per_query']:.2f} ms)" for row in hnsw["rows"])
        lines += ["", f"`hnsw` (HNSW32,SQ8) recall@5 by efSearch (`{hnsw['command']}`, {_n(hnsw['names'])} names): {curve}."]
    return lines


def linker_rows(r: Dict[str, object]) -> List[Tuple[str, Optional[str], Dict[str, object]]]:
    """Our linkers measured in ``r``: (name, the opt-in setting or None for the default, its rates)."""
    rows = [("default", None, r), ("int8 (opt-in)", 'precision="int8"', r.get("int8_linker")),
            (f"query_encoder {QUERY_ENCODER} (opt-in)", f'query_encoder="{QUERY_ENCODER}"', r.get("query_encoder_linker"))]
    return [row for row in rows if row[2]]  # type: ignore[misc]


def scispacy_ratios(r: Dict[str, object]) -> Dict[str, str]:
    """Each of our linkers' rates over scispacy's in the same run (gold spans, distinct strings), as text."""
    sci = r.get("scispacy")
    if not sci:
        return {}
    return {f"{name} / scispacy, {what}": f"{row[key] / sci[key]:.2f}"  # type: ignore[index]
            for name, _, row in linker_rows(r) for what, key in (("gold spans", "mentions_per_s"),
                                                                  ("distinct strings", "distinct_mentions_per_s"))}


def render_speed(r: Dict[str, object], output: Path) -> str:
    """The README's SPEED block: every number from ``r`` (this run's JSON)."""
    m = r["machine"]
    untuned = r["untuned"]
    sci = r.get("scispacy")
    lines = [
        f"Generated by `{r['command']}` (JSON: `{shown_path(output)}`) on {m['cpu']}, "
        f"{m['nproc']} cores visible, torch/FAISS on {m['threads']} thread(s), median of {r['repeats']} runs. "
        f"KB: {r['kb']['name']}, {_n(r['kb']['names'])} names, `{r['kb']['index']}` index; default precision "
        f"here: `{r['default_precision']}`.",
        "",
        "| `nlp.pipe`, gold spans | default path | untuned (fp32, max-length padding, no cache) |"
        + (f" scispacy {sci['scispacy']} `EntityLinker`, same KB |" if sci else ""),
        "|---|--:|--:|" + ("--:|" if sci else ""),
        f"| NCBI-disease test abstracts ({_n(r['n_mentions'])} mentions), mentions/s | {_n(r['mentions_per_s'])} | {_n(untuned['mentions_per_s'])} |"
        + (f" {_n(sci['mentions_per_s'])} |" if sci else ""),
        f"| distinct mention strings ({_n(r['n_distinct_mentions'])}), mentions/s | {_n(r['distinct_mentions_per_s'])} | {_n(untuned['distinct_mentions_per_s'])} |"
        + (f" {_n(sci['distinct_mentions_per_s'])} |" if sci else ""),
        "",
    ]
    ratios = scispacy_ratios(r)
    for name, setting, row in linker_rows(r)[1:]:  # the opt-in ones
        lines += [f"With `{setting}` (opt-in): {_n(row['mentions_per_s'])} mentions/s on the gold spans, "
                  f"{_n(row['distinct_mentions_per_s'])} on the distinct strings"
                  + (f" ({ratios[f'{name} / scispacy, gold spans']}× and "
                     f"{ratios[f'{name} / scispacy, distinct strings']}× scispacy's linker)" if sci else "") + ".", ""]
    lines += [
        "| precision | names/s (dictionary encoding) | NCBI test raw Acc@1 | top-5 overlap with fp32 |",
        "|---|--:|--:|--:|",
    ]
    measured = r["precision"]
    for name in [x for x in PRECISIONS if x in measured] + sorted(set(measured) - set(PRECISIONS)):  # type: ignore[arg-type]
        p = measured[name]  # type: ignore[index]
        lines.append(f"| {name} | {_n(p['names_per_s'])} | {p['ncbi_test_raw_acc@1']:.2f} | {p['top5_overlap_with_fp32']:.4f} |")
    if "names_per_s_by_batch_size" in r:
        sizes = sorted(r["names_per_s_by_batch_size"].items(), key=lambda kv: int(kv[0]))  # type: ignore[union-attr]
        by_batch = ", ".join(f"{b}: {_n(v)}" for b, v in sizes)
        lines += ["", f"Default precision, names/s by encoder batch size: {by_batch}."]
    load = r["pipeline_load"]
    lines += [
        "",
        f"Peak RSS of the benchmark process: {_n(r['peak_rss_mb'])} MB. A saved pipeline with this KB "
        f"(`spacy.load` in a fresh process, imports included): loaded in {load['load_s']:.2f} s, first span "
        f"linked {load['first_link_s']:.3f} s later, peak RSS {_n(load['rss_mb'])} MB.",
    ]
    if sci:
        lines += [
            "",
            f"scispacy (`--scispacy-python`; its own environment, `benchmarks/scispacy_worker.py`): "
            f"its TF-IDF + HNSW index over the same {_n(sci['indexed_aliases'])} names (scispacy's settings, M=100, "
            f"efConstruction=2000) took {_n(sci['index_build_seconds'])} s to build on {sci['index_build_threads']} thread(s)"
            + (" (when first built: recorded with the cached index, not re-timed by this run); loading it" if sci["index_cached"] else "; building it")
            + f" and fitting the vectorizer took {sci['index_seconds']:.2f} s in this run; the worker's peak RSS was "
            f"{_n(sci['peak_rss_mb'])} MB; {100 * sci['linked_fraction']:.1f}% of the gold mentions got a concept above its 0.7 threshold.",
            "",
            f"Ours against scispacy's linker in this run (default path / scispacy, mentions/s): "
            f"{ratios['default / scispacy, gold spans']}× on the gold spans, "
            f"{ratios['default / scispacy, distinct strings']}× on the distinct strings.",
        ]
    runs = [r.get("umls_scale")] + list(r.get("umls_scale_earlier", []))  # type: ignore[operator]
    for u in runs:
        if isinstance(u, dict):
            lines += render_umls_scale(u)
    lines += render_index_studies(output.parent)
    return "\n".join(lines)


def main(
    quick: bool = typer.Option(False, help="Only the linking figures (skip the UMLS-scale part)"),
    umls_names: int = typer.Option(7_500_000, help="KB size of the UMLS-scale part"),
    umls_kinds: List[str] = typer.Option(
        list(KINDS), "--umls-kind", help="index kinds the UMLS-scale part builds"
    ),
    readme: Path = typer.Option(ROOT / "benchmarks" / "README.md", help="README whose SPEED block is rewritten"),
    render_only: bool = typer.Option(False, help="Only rewrite the README block from the existing --output JSON (another JSON: "
                                     "only add its ratios to scispacy's, printed)"),
    umls_result: List[Path] = typer.Option(
        [], help="With --render-only: these result.json files of benchmarks/umls_scale.py (repeatable, the first shown "
        "first) become the UMLS-scale part, replacing the runs stored before"
    ),
    scispacy_python: Optional[Path] = typer.Option(
        None, help="python of an environment with scispacy: adds its linker on the same KB (benchmarks/scispacy_worker.py)"
    ),
    repeats: int = typer.Option(3, help="Runs per figure; the median is reported"),
    threads: int = typer.Option(2, help="torch and FAISS threads"),
    n_names: int = typer.Option(3000, help="Dictionary names encoded for names_per_s"),
    output: Optional[Path] = typer.Option(None, help="default benchmarks/results/speed.json (speed_ISA.json with --isa)"),
    cache: Path = typer.Option(ROOT / "corpus" / "cache"),
    isa: str = typer.Option("native", help=f"run as a CPU with only this instruction set would: {', '.join(ISA_ENVIRONMENTS)} "
                            "(spacy_sapbert.machine.ISA_ENVIRONMENTS); the README's SPEED block keeps the native figures"),
) -> None:
    if isa not in ISA_ENVIRONMENTS:
        raise typer.BadParameter(f"--isa must be one of {', '.join(ISA_ENVIRONMENTS)}, got {isa!r}")
    results_dir = ROOT / "benchmarks" / "results"
    output = output or (results_dir / "speed.json" if isa == "native" else results_dir / f"speed_{isa}.json")
    if render_only:
        results = read_json(output)
        if umls_result:  # runs made by umls_scale.py itself (each records its command)
            adopted = [read_json(f) for f in umls_result]
            set_umls_runs(results, adopted[0], adopted[1:])
        if umls_result or results.get("ratios_to_scispacy") != scispacy_ratios(results):
            results["ratios_to_scispacy"] = scispacy_ratios(results)
            write_json(output, results)
        typer.echo(json.dumps(results.get("ratios_to_scispacy"), indent=2))
        if output.resolve() == (results_dir / "speed.json").resolve():
            update_readme(readme, render_speed(results, output), block="SPEED")
        return
    run_as_isa(isa)  # starts this script again with the variables set (torch is loaded already), unless they are
    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    command = "python benchmarks/speed.py " + " ".join(sys.argv[1:])
    results: Dict[str, object] = {
        "command": command.strip(),
        "machine": {**machine_description(), "threads": threads, "torch": torch.__version__},
        "load_average": {"before": [round(x, 2) for x in os.getloadavg()]},
        "repeats": repeats,
        "default_precision": resolve_precision("auto", torch.device("cpu")),
    }
    encoder = SapEncoder.load(None, device="cpu")
    kb_path = medic_kb_path(encoder, cache)
    lkb = LinkingKB.from_disk(kb_path)
    results["kb"] = {"name": "MEDIC 06-Jul-2012", **lkb.kb.stats(), "index": lkb.index.meta["kind"],
                     "search_path": lkb.index.search_path(5) if hasattr(lkb.index, "search_path") else None}  # the linker's top_k

    # linking through nlp.pipe, first: a process that has run another encoder (the precisions below) linked
    # slower with the bf16 shortlist afterwards, and a user's process runs one
    nlp = linker_pipeline(lkb, encoder)
    test_docs = load_split("ncbi-disease", "test")
    docs = gold_docs(nlp, test_docs)
    results["mentions_per_s"] = round(pipe_rate(nlp, docs, repeats), 1)
    distinct = sorted({normalize_name(m.text) for s in ("train", "dev", "test") for d in load_split("ncbi-disease", s) for m in d.mentions})
    distinct_docs = mention_docs(nlp, distinct[:2000])
    results["distinct_mentions_per_s"] = round(pipe_rate(nlp, distinct_docs, repeats), 1)
    results["n_mentions"] = sum(len(d.ents) for d in docs)
    results["n_distinct_mentions"] = len(distinct_docs)
    results["search_paths"] = search_path_rates(nlp, docs, distinct_docs, repeats)
    typer.echo(f"search paths: {results['search_paths']}", err=True)
    results["pass_threads"] = pass_thread_rates(nlp, docs, distinct_docs, repeats)
    typer.echo(f"pass threads: {results['pass_threads']}", err=True)

    # dictionary encoding speed and query-side accuracy per precision
    names = lkb.kb.names[:: max(1, lkb.kb.n_names // n_names)][:n_names]
    mentions = [m for d in test_docs for m in d.mentions if m.ids]
    queries = [normalize_name(m.text) for m in mentions]
    aliases = [set([cid, *xrefs]) for cid, xrefs in zip(lkb.kb.concept_ids, lkb.kb.concept_xrefs)]
    by_precision: Dict[str, Dict[str, float]] = {}
    reference: List[List[str]] = []

    def measure_encoding(label: str, encode: Callable[..., object]) -> None:
        encode(names[:64])  # warm-up (and int8 quantisation)
        rate = len(names) / median_time(lambda: encode(names, batch_size=256), repeats)
        cands = lkb.candidates(encode(queries), top_k=5)
        top5 = [[c.concept_id for c in cs] for cs in cands]
        hits = [bool(cs) and bool(aliases[lkb.kb.row_of_concept(cs[0])] & set(m.ids)) for cs, m in zip(top5, mentions)]
        reference[:] = reference or top5  # fp32 comes first
        overlap = statistics.mean(len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(top5, reference))
        by_precision[label] = {
            "names_per_s": round(rate, 1),
            "ncbi_test_raw_acc@1": round(100 * sum(hits) / len(hits), 2),
            "top5_overlap_with_fp32": round(overlap, 4),
        }
        typer.echo(f"{label}: {by_precision[label]}", err=True)

    for precision in PRECISIONS:
        measure_encoding(precision, SapEncoder.load(None, device="cpu", precision=precision).encode)
    try:  # ONNX Runtime int8: measured where onnxruntime and onnx are installed, never a default
        from onnx_int8 import OnnxInt8Encoder

        onnx = OnnxInt8Encoder(SapEncoder.load(None, device="cpu", precision="fp32"), cache / "onnx-int8", threads)
    except ImportError as e:
        typer.echo(f"onnxruntime-int8 skipped: {e}", err=True)
    else:
        measure_encoding("onnxruntime-int8", onnx.encode)
    results["precision"] = by_precision
    default_encoder = SapEncoder.load(None, device="cpu")
    results["names_per_s_by_batch_size"] = {
        str(b): round(len(names) / median_time(lambda b=b: default_encoder.encode(names, batch_size=b), repeats), 1)
        for b in (64, 128, 256, 512)
    }
    results["names_per_s"] = by_precision[str(results["default_precision"])]["names_per_s"]

    if results["default_precision"] != "int8":  # the opt-in int8 encoder (never auto: it costs some dev accuracy)
        int8_nlp = linker_pipeline(lkb, SapEncoder.load(None, device="cpu", precision="int8"))
        int8_nlp.get_pipe("sapbert_linker").link_strings(["warm-up: calibrates the int8 copy"])
        results["int8_linker"] = {"mentions_per_s": round(pipe_rate(int8_nlp, docs, repeats), 1),
                                  "distinct_mentions_per_s": round(pipe_rate(int8_nlp, distinct_docs, repeats), 1)}
    # the opt-in query encoder (never a default: it moves some scores), the KB keeping the encoder's vectors
    query_nlp = linker_pipeline(lkb, encoder, query_encoder=QUERY_ENCODER)
    measure_encoding(f"query_encoder {QUERY_ENCODER}", query_nlp.get_pipe("sapbert_linker").query_encoder.encode)
    results["query_encoder_linker"] = {"query_encoder": QUERY_ENCODER, "mentions_per_s": round(pipe_rate(query_nlp, docs, repeats), 1),
                                       "distinct_mentions_per_s": round(pipe_rate(query_nlp, distinct_docs, repeats), 1)}

    # the untuned path: fp32, pad to max_length, no cache
    slow_encoder = SapEncoder.load(None, device="cpu", precision="fp32")
    slow_encoder.pad_to_max_length = True
    untuned = linker_pipeline(lkb, slow_encoder, cache_size=0)
    results["untuned"] = {
        "mentions_per_s": round(pipe_rate(untuned, docs, repeats), 1),
        "distinct_mentions_per_s": round(pipe_rate(untuned, distinct_docs, repeats), 1),
    }
    if scispacy_python is not None:
        results["scispacy"] = scispacy_rates(scispacy_python, lkb, docs, distinct_docs, threads, repeats, cache)
        typer.echo(f"scispacy: {results['scispacy']}", err=True)
    results["peak_rss_mb"] = peak_rss_mb()
    results["pipeline_load"] = pipeline_load(kb_path, cache / f"pipeline-medic-n-{encoder.fingerprint[:12]}", threads)
    runs = stored_umls_runs(read_json(output)) if output.is_file() else []
    if not quick:
        newest = {"command": results["command"], **measure(umls_names, cache / "umls-scale", umls_kinds, None, threads)}
        set_umls_runs(results, newest, runs)
    elif runs:
        set_umls_runs(results, runs[0], runs[1:])  # kept from the last full run
    results["load_average"]["after"] = [round(x, 2) for x in os.getloadavg()]  # type: ignore[index]
    results["ratios_to_scispacy"] = scispacy_ratios(results)
    write_json(output, results)
    if output.resolve() == (results_dir / "speed.json").resolve():  # the block is that file's (another --output: the JSON alone)
        update_readme(readme, render_speed(results, output), block="SPEED")
    typer.echo(json.dumps(results, indent=2))


if __name__ == "__main__":
    typer.run(main)
