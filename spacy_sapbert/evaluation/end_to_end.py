"""End-to-end evaluation: raw test abstracts in, linked mentions out, through ``build_pipeline``.

``python -m spacy_sapbert evaluate --end-to-end --dataset D --detector X`` runs the pipeline users
run (a detector, abbreviations, ``sapbert_linker``) with ``nlp.pipe`` over the test documents of
NCBI-disease or BC5CDR (its PubTator file, filtered to the dataset's entity type) and scores:

* mentions, exact boundaries: a predicted span is right when a gold span has its character
  offsets; *overlap*: when it shares a character with one (precision over predictions, recall
  over gold spans, each counted once);
* span + concept: a prediction is right when its span is exactly a gold span and its concepts
  (the top concept, or each part's for a split composite mention) are gold ids, an alternative
  id (MEDIC's ``114500|D015179``) counting as its concept, as in the gold-span metrics;
* per document, the set of concepts found against the set annotated (micro-averaged).

Unlinkable gold mentions (``-1``) count for the mention scores; for linking they are left out on
both sides: they are not in the recall's denominator, and a prediction on exactly such a span
is neither right nor wrong. A span the linker left without a concept is no linking prediction.

Dictionaries: ``ontology`` (MEDIC, or the MeSH-2024 chemicals) and ``paper``, the ontology plus
the train and dev mentions as written with their gold ids (TaggerOne's lexicon: dictionary plus
training annotations). Gold ids follow the gold-span harness (``select_gold_ids``).
"""
from __future__ import annotations

import copy
import json
import multiprocessing
import shlex
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..kb import ConceptKB
from . import datasets
from .bootstrap import score_interval
from .datasets import Document
from .metrics import concept_matches
from .preprocess import Query, select_gold_ids

PathLike = Union[str, Path]
DETECTORS = ("ruler", "span_finder", "ner", "ner+span_finder", "ner-trf", "ner-trf+span_finder")
WARMUP_DOCS = 8  # train documents run through the pipeline before the clock starts
# The NIL thresholds ``evaluate --end-to-end --sweep-threshold`` scores a run at (on dev, to choose one)
THRESHOLD_GRID = (0.0, 0.8, 0.85, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0)


@dataclass(frozen=True)
class EndToEndSpec:
    """The entity type(s) a benchmark annotates and the label the pipeline gives its spans."""

    types: Tuple[str, ...]  # gold annotation types kept (empty: all)
    label: str


SPECS: Dict[str, EndToEndSpec] = {
    "ncbi-disease": EndToEndSpec((), "Disease"),  # its four mention types are all diseases
    "bc5cdr-disease": EndToEndSpec(("Disease",), "Disease"),
    "bc5cdr-chemical": EndToEndSpec(("Chemical",), "Chemical"),
}


# ---------------------------------------------------------------------------- gold and predictions
@dataclass(frozen=True)
class GoldSpan:
    start: int
    end: int
    ids: Tuple[str, ...]  # empty: unlinkable (-1)


@dataclass(frozen=True)
class PredictedSpan:
    start: int
    end: int
    concepts: Tuple[str, ...]  # empty: the linker gave no concept


def load_documents(dataset: str, split: str = "test", data_dir: PathLike = datasets.DEFAULT_DATA_DIR) -> List[Document]:
    """The split's full documents (the PubTator file), keeping the dataset's entity type only."""
    if dataset not in SPECS:
        raise ValueError(f"unknown benchmark {dataset!r}; choose one of {sorted(SPECS)}")
    spec = datasets.get_benchmark(dataset)
    rel = spec.text_files.get(split) or spec.mention_files[split]
    path = Path(data_dir) / rel
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; copy the benchmark data into {data_dir} (see assets/benchmarks.md)")
    docs = datasets.read_pubtator(path)
    types = SPECS[dataset].types
    if types:
        for d in docs:
            d.mentions = [m for m in d.mentions if m.entity_type in types]
    return docs


def gold_spans(document: Document) -> List[GoldSpan]:
    """One gold span per distinct offsets (blanks at the edges trimmed), ids as the harness keeps them."""
    from .gold_spans import trimmed

    by_offsets: Dict[Tuple[int, int], List[str]] = {}
    for m in document.mentions:
        ids = by_offsets.setdefault(trimmed(document.text, m.start, m.end), [])
        ids.extend(select_gold_ids(m.ids))
    return [GoldSpan(s, e, tuple(dict.fromkeys(ids))) for (s, e), ids in sorted(by_offsets.items())]


def raw_mention_names(dataset: str, data_dir: PathLike = datasets.DEFAULT_DATA_DIR, evaluated: str = "test") -> List[Query]:
    """The train and dev mentions as written, with their gold ids: the lexicon's extra names
    (never those of the ``evaluated`` split: a dev run's lexicon is the train mentions)."""
    from .runner import seen_splits

    out = []
    for split in seen_splits(evaluated):
        for d in datasets.load_split(dataset, split, data_dir):
            for m in d.mentions:
                if not m.is_nil and m.text.strip():
                    out.append(Query(m.doc_id, m.start, m.end, m.text, (m.text,), select_gold_ids(m.ids)))
    return out


# ---------------------------------------------------------------------------- metrics
def prf(right_predictions: int, n_predictions: int, found_gold: int, n_gold: int) -> Tuple[float, float, float]:
    """Precision, recall and F1 (0 where undefined)."""
    p = right_predictions / n_predictions if n_predictions else 0.0
    r = found_gold / n_gold if n_gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


@dataclass
class Counts:
    """Sums over documents of what the P/R/F figures divide."""

    gold: int = 0
    predicted: int = 0
    exact: int = 0
    overlap_predicted: int = 0
    overlap_gold: int = 0
    link_gold: int = 0
    link_predicted: int = 0
    link_right: int = 0
    doc_gold: int = 0
    doc_predicted: int = 0
    doc_predicted_right: int = 0
    doc_gold_found: int = 0
    # predictions that are no gold span, by how they meet the gold spans
    wrong_inside_gold: int = 0  # "breast cancer" in gold "hereditary breast cancer"
    wrong_containing_gold: int = 0  # "severe neutropenia" around gold "neutropenia"
    wrong_crossing_gold: int = 0
    wrong_apart_from_gold: int = 0  # overlapping no gold span ("VHL" the gene)

    def add(self, other: "Counts") -> None:
        for key, value in vars(other).items():
            setattr(self, key, getattr(self, key) + value)

    @classmethod
    def total(cls, per_doc: Iterable["Counts"]) -> "Counts":
        """The sums over documents' counts."""
        out = cls()
        for c in per_doc:
            out.add(c)
        return out


def score_document(
    gold: Sequence[GoldSpan], predicted: Sequence[PredictedSpan], aliases: Optional[Mapping[str, Collection[str]]] = None
) -> Counts:
    """The counts of one document (see the module docstring for what is right)."""
    c = Counts()
    gold_by_span = {(g.start, g.end): g for g in gold}
    pred_by_span = {(p.start, p.end): p for p in predicted}
    c.gold, c.predicted = len(gold_by_span), len(pred_by_span)
    c.exact = len(gold_by_span.keys() & pred_by_span.keys())
    c.overlap_predicted = sum(any(p[0] < g[1] and g[0] < p[1] for g in gold_by_span) for p in pred_by_span)
    c.overlap_gold = sum(any(p[0] < g[1] and g[0] < p[1] for p in pred_by_span) for g in gold_by_span)

    for p in pred_by_span.keys() - gold_by_span.keys():
        met = [g for g in gold_by_span if p[0] < g[1] and g[0] < p[1]]
        if not met:
            c.wrong_apart_from_gold += 1
        elif any(g[0] <= p[0] and p[1] <= g[1] for g in met):
            c.wrong_inside_gold += 1
        elif any(p[0] <= g[0] and g[1] <= p[1] for g in met):
            c.wrong_containing_gold += 1
        else:
            c.wrong_crossing_gold += 1

    c.link_gold = sum(bool(g.ids) for g in gold_by_span.values())
    for span, p in pred_by_span.items():
        g = gold_by_span.get(span)
        if not p.concepts or (g is not None and not g.ids):
            continue  # no concept given, or the gold span is unlinkable
        c.link_predicted += 1
        if g is not None and all(concept_matches(x, set(g.ids), aliases) for x in p.concepts):
            c.link_right += 1

    gold_ids = {i for g in gold_by_span.values() for i in g.ids}
    found = {x for p in pred_by_span.values() for x in p.concepts}
    c.doc_gold, c.doc_predicted = len(gold_ids), len(found)
    c.doc_predicted_right = sum(concept_matches(x, gold_ids, aliases) for x in found)
    c.doc_gold_found = sum(any(concept_matches(x, {g}, aliases) for x in found) for g in gold_ids)
    return c


# What each reported rate divides: (right predictions, predictions, gold found, gold), for ``prf``
RATES: Dict[str, Callable[[Counts], Tuple[int, int, int, int]]] = {
    "mention": lambda c: (c.exact, c.predicted, c.exact, c.gold),
    "overlap": lambda c: (c.overlap_predicted, c.predicted, c.overlap_gold, c.gold),
    "link": lambda c: (c.link_right, c.link_predicted, c.link_right, c.link_gold),
    "doc": lambda c: (c.doc_predicted_right, c.doc_predicted, c.doc_gold_found, c.doc_gold),
}


def summarize_counts(c: Counts) -> Dict[str, float]:
    """The reported rates (fractions, 4 decimals)."""
    return {f"{k}_{m}": round(v, 4) for k, counts in RATES.items()
            for m, v in zip(("p", "r", "f1"), prf(*counts(c)))}


def f1_of(rate: str) -> Callable[[Counts], float]:
    """One rate's F1 as a function of the counts (``summarize_counts``' ``<rate>_f1``, unrounded)."""
    counts = RATES[rate]
    return lambda c: prf(*counts(c))[2]


def intervals(per_doc: Sequence[Counts]) -> Dict[str, Dict[str, object]]:
    """Mention and link F1 with their 95% intervals over resamples of the documents (``bootstrap``):
    how far the figures could move on another sample of such documents."""
    return {f"{rate}_f1": score_interval(per_doc, f1_of(rate)) for rate in ("mention", "link")}


def predicted_spans(doc, linker, nested: bool = True) -> List[PredictedSpan]:
    """The spans ``linker`` linked in ``doc`` with the concepts it decided: ``span._.cui`` or, for a
    split composite mention, each part's best candidate that the linker's own rule (``best``:
    threshold, ambiguous names) accepts, by ``linker``'s settings (given ``_deciding_at``'s copy at a
    higher threshold than the run's, a span below it is left without a concept). ``nested``: also the spans of its span group
    (nested mentions), else ``doc.ents`` only. Each character span counts once either way."""
    from ..search import Candidate

    out = []
    ents = {(e.start, e.end) for e in doc.ents}
    for span in linker.spans_to_link(doc):
        if not nested and (span.start, span.end) not in ents:
            continue
        cui = span._.get(linker.cui_attr)
        if cui is not None and linker.best([Candidate(*c) for c in span._.get(linker.candidates_attr)[:1]]) is None:
            cui = None  # below the deciding threshold (a threshold sweep decides above the run's)
        concepts: Tuple[str, ...] = ()
        if cui is not None:
            decided = linker.decided_parts(span) if hasattr(linker, "decided_parts") else []
            concepts = tuple(dict.fromkeys(b.concept_id for _, b in decided if b is not None)) or (cui,)
        out.append(PredictedSpan(span.start_char, span.end_char, concepts))
    return out


# ---------------------------------------------------------------------------- the run
def dictionary_for(dataset: str, dictionary: str, data_dir: PathLike, resources_dir: PathLike, split: str = "test") -> ConceptKB:
    """The ontology, or the ontology + the raw train/dev mentions (``paper``) not of ``split``."""
    from .runner import build_dictionary

    names = raw_mention_names(dataset, data_dir, split) if dictionary == "paper" else []
    return build_dictionary(dataset, dictionary, names, data_dir, resources_dir)


def prepare_kb(
    dataset: str,
    dictionary: str,
    encoder_path: Optional[PathLike],
    cache_dir: PathLike,
    data_dir: PathLike = datasets.DEFAULT_DATA_DIR,
    resources_dir: PathLike = datasets.DEFAULT_RESOURCES_DIR,
    precision: str = "fp32",
    batch_size: int = 128,
    progress: bool = True,
    split: str = "test",
) -> Tuple[str, Dict[str, object]]:
    """The dictionary's KB folder (built and cached on first use); run in a child process so
    the evaluating process's peak memory is the pipeline's, not the dictionary build's."""
    from ..encoder import SapEncoder, resolve_encoder_path
    from .runner import dictionary_kb_folder

    kb = dictionary_for(dataset, dictionary, data_dir, resources_dir, split)
    encoder = SapEncoder.load(resolve_encoder_path(encoder_path), device="cpu", precision=precision)
    folder, info = dictionary_kb_folder(kb, encoder, cache_dir, batch_size, progress)
    info.update(dictionary_size=kb.n_names, dictionary_concepts=len(kb))
    return str(folder), info


def dev_calibration(
    dev_kb: str,
    dataset: str,
    dictionary: str,
    encoder_path: Optional[PathLike],
    cache_dir: PathLike,
    data_dir: PathLike = datasets.DEFAULT_DATA_DIR,
    linker_config: Optional[Mapping[str, object]] = None,
    context_examples: str = "self",
) -> Dict[str, object]:
    """The NIL threshold for a dictionary built here (``dev_kb``: its KB folder as a dev run has it,
    ``prepare_kb(..., split="dev")``), chosen as a KB's calibration is
    (``calibration.calibrate``, what ``calibrate`` stores in a KB) on the dataset's dev gold
    mentions, against the dictionary as a dev run has it (the *paper* lexicon: train mentions
    only). Chosen again on every run (seconds): it depends on the linker's code, not only on data."""
    from .calibration import calibrate_kb_folder

    settings = dict(linker_config or {})
    if settings.get("context_weight"):  # the dev run's prototypes, as the gold-span evaluation of dev builds them
        _store_prototypes(dev_kb, dataset, encoder_path, cache_dir, data_dir, str(settings.get("precision", "fp32")), "dev",
                          context_examples)
    documents = load_documents(dataset, "dev", data_dir)
    record = calibrate_kb_folder(dev_kb, documents, f"{dataset} dev gold mentions ({len(documents)} documents), {dictionary} dictionary "
                                 "as a dev run has it", label=SPECS[dataset].label, encoder=encoder_path, store=False,
                                 linker_config=settings)
    record.pop("curve", None)
    return record


def _prepare(dataset: str, dictionary: str, encoder_path: Optional[PathLike], cache_dir: PathLike, data_dir: PathLike,
             resources_dir: PathLike, settings: Mapping[str, object], progress: bool, split: str, context_examples: str = "self",
             ) -> Tuple[str, Dict[str, object], Optional[Dict[str, object]]]:
    """The split's dictionary KB folder (``prepare_kb``), with context prototypes (``runner.context_prototypes``
    of ``context_examples``) stored in it when the settings rerank by context, and, for a test run with no
    threshold given whose KB has no calibration, the ``dev_calibration`` record; in one (child) process."""
    from ..fileio import read_json
    from ..search import CALIBRATION_KEY, META_FILE

    precision = str(settings.get("precision", "fp32"))
    folder, info = prepare_kb(dataset, dictionary, encoder_path, cache_dir, data_dir, resources_dir, precision, 128, progress, split)
    if settings.get("context_weight"):
        info["context_prototypes"] = _store_prototypes(folder, dataset, encoder_path, cache_dir, data_dir, precision, split, context_examples)
    calibration = None
    if split == "test" and settings.get("threshold") is None and read_json(Path(folder) / META_FILE).get(CALIBRATION_KEY) is None:
        dev_kb, _ = prepare_kb(dataset, dictionary, encoder_path, cache_dir, data_dir, resources_dir, precision, 128, progress, "dev")
        calibration = dev_calibration(dev_kb, dataset, dictionary, encoder_path, cache_dir, data_dir, settings, context_examples)
    return folder, info, calibration


def _store_prototypes(folder: str, dataset: str, encoder_path: Optional[PathLike], cache_dir: PathLike, data_dir: PathLike,
                      precision: str, split: str, examples: str) -> Dict[str, object]:
    """Put the prototypes a gold-span run of ``split`` uses into the dictionary's KB folder (replacing others)."""
    from ..encoder import SapEncoder, resolve_encoder_path
    from ..search import LinkingKB, store_context
    from .runner import context_prototypes

    encoder = SapEncoder.load(resolve_encoder_path(encoder_path), device="cpu", precision=precision)
    prototypes = context_prototypes(dataset, LinkingKB.from_disk(folder).kb, encoder, split, examples, data_dir, cache_dir=cache_dir)
    store_context(folder, prototypes)
    return {"examples": examples, "concepts": len(prototypes), **prototypes.meta["sources"]}  # type: ignore[dict-item]


def _pick_linker(linkers: Sequence[Tuple[str, Collection[str]]], label: str) -> str:
    """Of a pipeline's linkers (name, labels, in pipeline order): the one that links ``label`` (a
    linker of every label if none names it)."""
    found = [name for name, labels in linkers if label in labels] or [name for name, labels in linkers if not labels]
    if not found:
        raise ValueError(f"the pipeline has no sapbert_linker for {label!r} entities (linkers: {[name for name, _ in linkers]})")
    return found[0]


def linker_for_label(nlp, label: str):
    """The saved pipeline's linker that links ``label`` (a linker of every label if none names it)."""
    from ..linker import SapBertLinker

    linkers = [(name, proc) for name, proc in nlp.pipeline if isinstance(proc, SapBertLinker)]
    return nlp.get_pipe(_pick_linker([(name, lk.labels) for name, lk in linkers], label))


def _linker_name_in_config(config: Mapping[str, object], label: str) -> str:
    """``linker_for_label``'s choice read from a saved pipeline's config, before it is loaded."""
    disabled = set(config["nlp"].get("disabled") or ())  # type: ignore[index]
    components = config["components"].items()  # type: ignore[index]
    return _pick_linker([(name, c.get("labels") or ()) for name, c in components
                         if c.get("factory") == "sapbert_linker" and name not in disabled], label)


def _deciding_at(linker, threshold: Optional[float]):
    """A shallow copy of ``linker`` that decides (``best``) at the NIL ``threshold`` (None: the KB's
    calibrated one): a threshold sweep scores one run at several thresholds with it, and the component
    that ran keeps the threshold its config gave it."""
    judge = copy.copy(linker)
    judge.threshold = threshold
    return judge


def _in_child(fn, *args):
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def command_line(dataset: str, detector: str, dictionary: str, **options: object) -> str:
    """The CLI command that reproduces a run (options left at their defaults are omitted)."""
    args = ["python", "-m", "spacy_sapbert", "evaluate", "--end-to-end", "--dataset", dataset, "--detector", detector,
            "--dictionary", dictionary]
    for key, value in options.items():
        if value is not None:
            args += [f"--{key.replace('_', '-')}"] + ([str(value)] if value != "" else [])
    return shlex.join(args)


def evaluate_end_to_end(
    dataset: str,
    detector: str = "span_finder",
    dictionary: str = "ontology",
    encoder_path: Optional[PathLike] = None,
    *,
    split: str = "test",
    ner_model: Optional[PathLike] = None,
    abbreviations: bool = True,
    linker_config: Optional[Dict[str, object]] = None,
    span_finder_config: Optional[Dict[str, object]] = None,
    nested: Optional[str] = None,
    pipeline: Optional[PathLike] = None,
    threshold_sweep: Sequence[float] = (),
    context_examples: str = "self",
    data_dir: PathLike = datasets.DEFAULT_DATA_DIR,
    resources_dir: PathLike = datasets.DEFAULT_RESOURCES_DIR,
    cache_dir: PathLike = "corpus/cache",
    precision: str = "fp32",
    batch_size: int = 64,
    threads: int = 1,
    build_in_child: bool = True,
    progress: bool = True,
    with_documents: bool = False,
) -> Dict[str, object]:
    """Run ``build_pipeline(kb, detector, labels=[the dataset's label])`` over the raw documents of
    ``split`` (``test`` reports; ``dev`` is for tuning, its lexicon then the train mentions only)
    and score mentions, span + concept and per-document concepts (fractions in 0..1).

    ``abstracts_per_s`` times ``nlp.pipe`` over all the split's documents after a warm-up on a few train
    documents, with the linker's cache emptied in between (loading the KB is excluded);
    ``peak_rss_mb`` is this process's peak (the dictionary KB is built in a child process).
    ``linker_config`` overrides ``sapbert_linker`` settings (e.g. ``threshold``, ``ambiguous``),
    ``span_finder_config`` those of ``sapbert_span_finder``. ``nested`` (``all``,
    ``coordinations`` or ``heads``): the span finder keeps nested mentions in a span group that the linker
    links (``build_pipeline(nested=...)``), and they are scored with ``doc.ents``: every distinct
    predicted character span once, a nested gold mention like any other.

    ``pipeline``: a saved pipeline (``build-pipeline``, ``spacy project run build-pipelines``) run as
    it is instead of one assembled here: its linker for the dataset's label is scored, against the
    KB it carries (``detector`` and ``dictionary`` then only name the row). ``threshold_sweep``: the
    linker's NIL threshold values to score the same run at (``threshold_sweep`` in the result; the
    pipeline is built or loaded with threshold 0 in its linker's config, and the main scores are at
    the configured one): run on
    ``split="dev"`` to choose one. A ``context_weight`` in ``linker_config`` reranks by context against
    the prototypes the gold-span evaluation builds (``runner.context_prototypes`` of ``context_examples``).

    ``with_documents`` adds ``per_document``: each document's counts (``Counts``), for a paired
    comparison of two runs on the same documents (``benchmarks/dev_before_after.py``).

    The NIL threshold, unless ``linker_config`` sets one: the KB's calibrated one; for a
    dictionary built here (which has none) on the test split, the one ``dev_calibration`` chooses
    on the dev gold mentions (``threshold_source`` and ``dev_calibration`` in the result); else 0.
    """
    import spacy

    from ..detectors import DetectorContext, check_detectors, detector_names, registered_detectors
    from ..machine import machine_description, peak_rss_mb
    from ..pipelines import build_pipeline
    from .gold_spans import find_linker
    from .runner import KNOWN_DICTIONARIES, set_threads

    if detector_names(detector) == ["gold"]:  # (an unknown name raises there)
        raise ValueError(f"detector must be one of {[d for d in registered_detectors() if d != 'gold']}, got {detector!r}")
    if dictionary not in KNOWN_DICTIONARIES:
        raise ValueError(f"dictionary must be one of {KNOWN_DICTIONARIES}, got {dictionary!r}")
    spec = SPECS.get(dataset)
    if spec is None:
        raise ValueError(f"unknown benchmark {dataset!r}; choose one of {sorted(SPECS)}")
    check_detectors(detector, DetectorContext(ner_model=ner_model))  # a shipped NER not trained yet fails here
    if split not in ("dev", "test"):
        raise ValueError(f"split must be 'dev' or 'test', got {split!r}")
    documents = load_documents(dataset, split, data_dir)
    warmup = [d.text for d in load_documents(dataset, "train", data_dir)[:WARMUP_DOCS]]

    settings: Dict[str, object] = {"precision": precision, "device": "cpu", **(linker_config or {})}
    calibration: Optional[Dict[str, object]] = None
    t0 = time.perf_counter()
    if pipeline is None:
        args = (dataset, dictionary, encoder_path, cache_dir, data_dir, resources_dir, settings, progress, split, context_examples)
        kb_folder, kb_info, calibration = _in_child(_prepare, *args) if build_in_child else _prepare(*args)
        if calibration is not None:
            settings["threshold"] = calibration["threshold"]
    prepare_s = time.perf_counter() - t0

    set_threads(threads)
    t1 = time.perf_counter()
    sweep_run = {"threshold": 0.0} if threshold_sweep else {}  # every span gets its best concept; each swept threshold then decides
    configured = settings.get("threshold")  # with a sweep, the threshold the main scores are at
    if pipeline is None:
        nlp = build_pipeline(
            kb_folder, detector, encoder=encoder_path, labels=[spec.label], ner_model=ner_model,
            abbreviations=abbreviations, linker_config={**settings, **sweep_run}, span_finder_config=span_finder_config, nested=nested,
        )
        linker = find_linker(nlp)
    else:
        overrides: Dict[str, object] = {}
        if threshold_sweep:
            config = spacy.util.load_config(Path(pipeline) / "config.cfg")
            name = _linker_name_in_config(config, spec.label)
            configured = config["components"][name].get("threshold")
            overrides = {f"components.{name}.{key}": value for key, value in sweep_run.items()}
        nlp = spacy.load(pipeline, config=overrides)
        linker = linker_for_label(nlp, spec.label)
    linker.initialize()
    load_s = time.perf_counter() - t1
    if pipeline is not None:
        kb = linker.linking_kb.kb
        kb_info = {"pipeline": str(pipeline), "linker": linker.name, "concepts": len(kb.concept_ids), "names": len(kb.display_names)}
    list(nlp.pipe(warmup, batch_size=batch_size))
    linker.set_kb(linker.linking_kb, linker.encoder)  # empties its cache: the test texts start cold
    t2 = time.perf_counter()
    docs = list(nlp.pipe([d.text for d in documents], batch_size=batch_size))
    pipe_s = time.perf_counter() - t2

    aliases = linker.linking_kb.kb.concept_aliases()

    def counts_with(judge) -> List[Counts]:
        return [score_document(gold_spans(document), predicted_spans(doc, judge), aliases) for document, doc in zip(documents, docs)]

    sweep = [{"threshold": t, **summarize_counts(Counts.total(counts_with(_deciding_at(linker, t))))} for t in threshold_sweep]
    deciding = _deciding_at(linker, configured) if threshold_sweep else linker  # without a sweep it ran at the configured one
    per_doc = counts_with(deciding)
    total = Counts.total(per_doc)
    gold_not_token_aligned = sum(doc.char_span(g.start, g.end) is None for document, doc in zip(documents, docs)
                                 for g in gold_spans(document))

    if (linker_config or {}).get("threshold") is not None:
        threshold_source = "given"
    elif calibration is not None:
        threshold_source = "chosen on the dev gold mentions (dev_calibration)"
    elif linker.linking_kb.calibrated_threshold is not None:
        threshold_source = "the KB's calibration"
    else:
        threshold_source = "none: every span linked (0)"
    options: Dict[str, object] = {"encoder": encoder_path, "ner_model": ner_model, "pipeline": pipeline}
    if split != "test":
        options["split"] = split
    if nested is not None:
        options["nested"] = nested
    for key in ("ambiguous", "threshold", "fusion_weight", "context_weight"):
        if key in (linker_config or {}):
            options[key] = (linker_config or {})[key]
    if (linker_config or {}).get("context_weight"):
        options["context_examples"] = context_examples
    if threshold_sweep:
        options["sweep_threshold"] = ""
    if precision != "fp32":
        options["precision"] = precision
    if threads != 1:
        options["threads"] = threads
    if not abbreviations:
        options["no_abbreviations"] = ""
    return {
        "dataset": dataset,
        "split": split,
        "detector": detector,
        "dictionary": dictionary,
        "dictionary_label": datasets.get_benchmark(dataset).dictionary_label
        + (" + train/dev mentions (TaggerOne-style lexicon)" if dictionary == "paper" else ""),
        "label": spec.label,
        **summarize_counts(total),
        "intervals": intervals(per_doc) if len(per_doc) > 1 else None,
        "abstracts_per_s": round(len(documents) / pipe_s, 2) if pipe_s > 0 else None,
        "pipeline_seconds": round(pipe_s, 2),
        "load_seconds": round(load_s, 2),
        "kb_prepare_seconds": round(prepare_s, 2),
        "peak_rss_mb": peak_rss_mb(),
        "counts": {
            "documents": len(documents),
            "gold_mentions": total.gold,
            "gold_linkable": total.link_gold,
            "gold_unlinkable": total.gold - total.link_gold,
            "gold_not_token_aligned": gold_not_token_aligned,
            "predicted": total.predicted,
            "predicted_linked": total.link_predicted,
            "exact_matches": total.exact,
            "wrong_inside_gold": total.wrong_inside_gold,
            "wrong_containing_gold": total.wrong_containing_gold,
            "wrong_crossing_gold": total.wrong_crossing_gold,
            "wrong_apart_from_gold": total.wrong_apart_from_gold,
            "link_right": total.link_right,
            "doc_gold_concepts": total.doc_gold,
            "doc_predicted_concepts": total.doc_predicted,
        },
        "pipeline": [name for name, _ in nlp.pipeline],
        "linker_config": linker_config or {},
        "span_finder_config": span_finder_config or {},
        "nested": nested,
        "threshold": deciding.effective_threshold,
        "threshold_source": threshold_source,
        "dev_calibration": calibration,
        "fusion_weight": linker.effective_fusion_weight,
        "context_weight": linker.effective_context_weight,
        "threshold_sweep": sweep,
        "kb": kb_info,
        "encoder": linker.encoder.describe(),
        "threads": threads,
        "precision": precision,
        "warmup_documents": len(warmup),
        **{f"machine_{k}": v for k, v in machine_description().items()},
        "command": command_line(dataset, detector, dictionary, **options),
        **({"per_document": [{"doc": d.doc_id, **vars(c)} for d, c in zip(documents, per_doc)]} if with_documents else {}),
    }


def end_to_end_command(
    dataset: str,
    detector: str,
    dictionary: str,
    encoder: Optional[PathLike] = None,
    output: Optional[PathLike] = None,
    **options: object,
) -> Dict[str, object]:
    """CLI body: evaluate end to end, print the JSON, and write it to ``output`` when given."""
    from ..fileio import write_json

    result = evaluate_end_to_end(dataset, detector, dictionary, encoder, **options)  # type: ignore[arg-type]
    print(json.dumps(result, indent=2, ensure_ascii=False))
    if output:
        write_json(output, result)
    return result
