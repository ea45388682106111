"""The pieces of ``annotate`` (``annotate.py``) that a local run, its worker processes and a cluster
worker share: which pipeline to load (``ShardWorker`` holds it), documents through it with
per-document failures (and time limits: ``time_limit.py``), a shard's bytes in each output format.
The output folder that commits shards in order and resumes where a run stopped: ``output_folder.py``;
the mention caches a worker keeps: ``mention_cache.MentionCaches``.
"""
from __future__ import annotations

import gc
import hashlib
import json
import queue
import re
import threading
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from itertools import chain, islice
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from spacy.language import Language
from spacy.tokens import Doc, Span

from .assertion import negspacy_negated
from .documents import InputDocument, visible_span
from .fileio import PathLike
from .query_encoder import identity
from .time_limit import DocumentTimeout, TimeLimit

OUTPUT_FORMATS = {"jsonl": ".jsonl", "pubtator": ".pubtator", "spacy": ".spacy"}
DEFAULT_MAX_CHARS = 1_000_000  # spaCy's own nlp.max_length
# Fixed pass sizes for annotate (``prepare_pipeline``), so that output does not depend on how documents are
# batched (benchmarks/batch_invariance.py): names per encoder pass (16 pads annotate's small calls less than 32);
# windows per tagger pass (4: one window a pass left the bc5cdr-trf pipeline clearly slower, and 2, 8 and 16
# were no faster than 4 on the benchmark abstracts); queries per exact-search product (64: a 543k-name KB is
# read a few times more often than in its usual blocks of ~90, a small KB's small calls pad little)
ENCODER_PASS_ROWS = 16
TAGGER_PASS_WINDOWS = 4
SEARCH_PASS_QUERIES = 64
# A worker keeps the words of the first documents it annotates (at most this many) in its vocabulary; later
# shards drop theirs (``annotate_shard``)
KEPT_WORDS_DOCS = 1000
CACHE_FOLDER = "mention-cache"  # a local run's mention caches, inside OUTPUT unless given elsewhere


# ---------------------------------------------------------------------------- the pipeline
@dataclass(frozen=True)
class PipelineSpec:
    """Which pipeline to run, as the command line names it: a saved pipeline folder, a KB folder with a
    mention detector, or neither (the embedded HPO default). Plain data, so that a cluster worker loads
    the same pipeline."""

    pipeline: Optional[str] = None
    kb: Optional[str] = None
    encoder: Optional[str] = None
    top_k: int = 5
    detector: str = "span_finder"
    query_encoder: Optional[str] = None  # the linker's (``LinkerSettings.query_encoder``), with ``kb`` or the default

    def load(self) -> Language:
        import spacy

        from .defaults import default_pipeline
        from .pipelines import build_pipeline

        if self.pipeline is not None:
            if self.query_encoder is not None:
                raise ValueError("--query-encoder applies to --kb or the default pipeline: a saved pipeline keeps its linkers' own")
            return spacy.load(self.pipeline)
        if self.kb is not None:
            queries = {"query_encoder": self.query_encoder} if self.query_encoder else {}
            return build_pipeline(self.kb, self.detector, encoder=self.encoder, linker_config={"top_k": self.top_k, **queries})
        return default_pipeline(self.encoder, detector=self.detector, query_encoder=self.query_encoder)


def linkers_of(nlp: Language) -> List[Any]:
    """The pipeline's ``sapbert_linker`` components, in pipeline order (an error if it has none)."""
    from .linker import SapBertLinker

    found = [proc for _, proc in nlp.pipeline if isinstance(proc, SapBertLinker)]
    if not found:
        raise ValueError("the pipeline has no sapbert_linker component")
    return found


def shown_score(score: float, digits: int = 4) -> float:
    """``score`` rounded to ``digits`` for output, except that a score below 1.0 never shows as 1.0:
    only a KB name as written scores 1.0 ("haematuria", *Hematuria* spelt another way, scores just below)."""
    rounded = round(score, digits)
    return min(rounded, 1.0 - 10.0 ** -digits) if score < 1.0 else rounded


def span_records(doc: Doc, linkers: Sequence[Any]) -> List[Dict[str, Any]]:
    """One JSON-ready dict per span that ``linkers`` link in ``doc``, by position (a KB is read only
    when there is a span)."""
    ents = {(e.start, e.end) for e in doc.ents}
    text = doc.text  # spaCy joins it anew at each call: once per document, not once per span
    out = []
    for linker in linkers:
        spans = linker.spans_to_link(doc)
        kb = linker.linking_kb.kb if spans else None
        for span in spans:
            cui = span._.get(linker.cui_attr)
            cands = span._.get(linker.candidates_attr) or []
            top = cands[0] if cands else None
            # a composite mention ("breast and ovarian cancer") names a concept per part
            parts = [{"query": query, "cui": best.concept_id if best else None,
                      "name": kb.concept_names[kb.row_of_concept(best.concept_id)] if best else None,
                      "score": shown_score(best.score) if best else None}
                     for query, best in (linker.decided_parts(span) if cui else [])]
            out.append(
                {
                    **visible_span(text, span.start_char, span.end_char),  # text, start_char, end_char
                    "label": span.label_,
                    "nested": (span.start, span.end) not in ents,  # a span-group mention overlapping an entity
                    "cui": cui,
                    "name": kb.concept_names[kb.row_of_concept(cui)] if cui else None,
                    "matched_name": top[1] if top and cui else None,
                    "score": shown_score(top[2]) if top else None,
                    "ambiguous": bool(top[3]) if top else False,
                    **assertion_record(span),
                    "candidates": [  # by score: "cui" is the linker's choice, which a hierarchy may make a broader concept
                        {"cui": c[0], "name": c[1], "score": shown_score(c[2]), "ambiguous": bool(c[3])}
                        for c in sorted(cands, key=lambda c: -c[2])
                    ],
                    **({"parts": parts} if parts else {}),
                }
            )
    return sorted(out, key=lambda r: (r["start_char"], r["end_char"]))


ASSERTION_FIELDS = ("negated", "uncertain", "hypothetical", "historical", "experiencer", "section", "assertion")


def assertion_record(span: Span) -> Dict[str, Any]:
    """A span's ``sapbert_context`` attributes (``None`` each where no such component ran); from a
    pipeline saved with negspacy's NegEx (before ``sapbert_context``), ``negated`` is its ``span._.negex``."""
    if Span.has_extension("assertion"):
        ext = span._  # one extension accessor for the seven fields (spaCy makes a new one at each ``span._``)
        if ext.assertion is not None:
            return {name: ext.get(name) for name in ASSERTION_FIELDS}
    return {**dict.fromkeys(ASSERTION_FIELDS), "negated": negspacy_negated(span)}


def pipeline_fingerprint(nlp: Language) -> str:
    """A hash of what decides the pipeline's output: its config, the weights of its trained components,
    and each linker's KB, index, encoder, precision, query encoder, threshold, fusion weight and context prototypes. A resumed run (or a cluster
    worker) must have the same."""
    h = hashlib.sha256(nlp.config.to_str().encode())
    for name, proc in nlp.pipeline:
        h.update(name.encode())
        if hasattr(proc, "model") and hasattr(proc, "to_bytes"):
            h.update(hashlib.sha256(proc.to_bytes(exclude=["vocab"])).digest())
    for linker in linkers_of(nlp):
        lkb = linker.linking_kb
        described = [lkb.meta["kb_fingerprint"], lkb.index.meta, linker.encoder.fingerprint, linker.encoder.precision, linker.effective_threshold]
        if linker.effective_fusion_weight:
            described.append(linker.effective_fusion_weight)
        if linker.query_encoder is not None:
            described.append(identity(linker.query_encoder))
        if linker.effective_context_weight:
            described += [linker.effective_context_weight, lkb.context.fingerprint]
        h.update(json.dumps(described, sort_keys=True).encode())
    return h.hexdigest()[:32]


def prepare_pipeline(nlp: Language, max_chars: int, cache_size: Optional[int] = None) -> List[Any]:
    """Ready ``nlp`` for ``link_documents`` and return its linkers: every component loads its data now
    (so that a broken pipeline fails before the first shard), texts up to ``max_chars`` are allowed,
    the linkers' caches hold ``cache_size`` strings (None: their setting). Encoders and transformer taggers run
    passes of a fixed size, so that the output does not depend on how documents were batched or
    shared out (processes, resume, cluster)."""
    nlp.max_length = max(nlp.max_length, max_chars)
    nlp("")
    linkers = linkers_of(nlp)
    for linker in linkers:
        linker.cache_size = cache_size or linker.cache_size
        for encoder in (linker.encoder, linker.query_encoder):
            if encoder is not None:
                encoder.pass_rows = ENCODER_PASS_ROWS
        if linker.linking_kb is not None:
            linker.linking_kb.index.pass_queries = SEARCH_PASS_QUERIES
    from .tagger import TransformerTagger

    for _, pipe in nlp.pipeline:
        if isinstance(pipe, TransformerTagger):
            pipe.pass_windows = TAGGER_PASS_WINDOWS
    return linkers


def freeze_loaded(nlp: Language) -> None:
    """For a process that runs one pipeline until it ends (``annotate``'s workers, ``link --input``):
    every component loads its data (``nlp("")``), then every object alive (the KB tables, vocab and
    rules, and torch's and spaCy's own) goes to the garbage collector's permanent generation, so the
    full collections that the documents' objects trigger no longer walk them. Measured on the HPO
    default over the 2,292 abstracts: ``nlp.pipe`` 6.15 s, 4.64 s with them frozen."""
    nlp("")
    gc.collect()
    gc.freeze()


class ShardWorker:
    """One process's share of an ``annotate`` run: the pipeline loaded once and made ready
    (``prepare_pipeline``), its fingerprint, and its mention caches, read when the first shard
    starts (by then the output folder, where the default cache lives, is known to be this run's)
    and saved after each shard. A local run, each process of ``--n-process`` and each Dask worker
    hold one."""

    def __init__(self, spec: PipelineSpec, max_chars: int, cache_dir: Optional[PathLike], cache_size: Optional[int],
                 max_seconds: Optional[float] = None):
        self.nlp = spec.load()
        self.max_chars, self.max_seconds = max_chars, max_seconds
        self.linkers = prepare_pipeline(self.nlp, max_chars, cache_size)
        from .mention_cache import MentionCaches

        self.caches = MentionCaches(cache_dir) if cache_dir is not None else None
        self._caches_loaded = False
        self.fingerprint = pipeline_fingerprint(self.nlp)
        self.components = list(self.nlp.pipe_names)
        self._kept_words = False
        freeze_loaded(self.nlp)

    def run(self, index: int, docs: Sequence[InputDocument], output_format: str, batch_size: Optional[int] = None,
            progress: Any = None) -> Shard:
        """Shard ``index`` of ``docs``, ``batch_size`` docs per ``nlp.pipe`` batch (None: the pipeline's
        ``batch_size``); the caches are saved before it is returned (and so before it is committed: a run
        killed in between resumes with the caches the uninterrupted run had). The worker's first shard
        keeps the words of its first ``KEPT_WORDS_DOCS`` documents."""
        if self.caches is not None and not self._caches_loaded:
            self.caches.load(self.linkers)
            self._caches_loaded = True
        keep = 0 if self._kept_words else KEPT_WORDS_DOCS
        self._kept_words = True
        shard = annotate_shard(self.nlp, self.linkers, index, docs, output_format, batch_size=batch_size,
                               max_chars=self.max_chars, progress=progress, keep_words=keep, max_seconds=self.max_seconds)
        if self.caches is not None:
            self.caches.save(self.linkers)
        return shard


# ---------------------------------------------------------------------------- documents through the pipeline
class DocumentError(Exception):
    """A document that fails when it runs through the pipeline alone: ``str`` says where and why."""


class _BatchFailures:
    """The pipeline's error handler during ``link_documents``: a failing batch is dropped (its documents
    are then run one at a time); while one runs alone, its error is raised with the component's name."""

    def __init__(self) -> None:
        self.raising = False

    def __call__(self, name: str, proc: Any, docs: Any, e: Exception) -> None:
        if isinstance(e, DocumentTimeout):  # out of nlp.pipe: the batch's documents run again alone
            raise DocumentError(f"{name}: {e}") if self.raising else e
        if self.raising and isinstance(e, DocumentError):
            raise e
        if self.raising:
            raise DocumentError(f"{name}: {type(e).__name__}: {e}") from e


def _set_error_handler(nlp: Language, handler: _BatchFailures) -> None:
    """``nlp.set_error_handler`` for the components that can hold a handler. spaCy 3.8's compiled
    NER and parser cannot (``Language.set_error_handler`` raises AttributeError on them); their
    errors escape ``nlp.pipe`` and are caught there, with the same outcome."""
    nlp.default_error_handler = handler
    for _, pipe in nlp.pipeline:
        try:
            pipe.set_error_handler(handler)
        except AttributeError:
            pass


def link_documents(
    nlp: Language, docs: Iterable[InputDocument], *, batch_size: Optional[int] = None, max_chars: int = DEFAULT_MAX_CHARS,
    max_seconds: Optional[float] = None,
) -> Iterator[Tuple[InputDocument, Optional[Doc], Optional[str]]]:
    """Each document with its annotated ``Doc``, or with None and why it failed, in input order.

    Documents stream through ``nlp.pipe``, ``batch_size`` at a time (None: the pipeline's). A document
    the reader could not read, or longer than ``max_chars``, never enters it. A batch that fails in a component
    (spaCy's ``set_error_handler``), or an error that escapes the pipeline, drops only the documents
    in flight: each runs again alone, and only one that fails alone is reported. ``max_seconds``: each
    step of ``nlp.pipe`` (a batch through the components), then each document run alone, may take that
    long (``time_limit.py``); None: no limit.
    """
    handler = _BatchFailures()
    _set_error_handler(nlp, handler)
    stream = iter(docs)
    with TimeLimit(max_seconds) as limit:
        while True:
            pending: Deque[Tuple[Optional[int], InputDocument, Optional[str]]] = deque()
            try:
                annotated = nlp.pipe(_feed(stream, pending, max_chars), as_tuples=True, batch_size=batch_size)
                while True:
                    with limit.running():
                        found = next(annotated, None)
                    if found is None:
                        break
                    doc, n = found
                    while pending[0][0] != n:
                        yield _alone(nlp, handler, limit, *pending.popleft())
                    yield pending.popleft()[1], doc, None
                finished = True
            except Exception:
                if not pending:  # nothing in flight: the pipeline itself is broken, not a document
                    raise
                finished = False
            while pending:
                yield _alone(nlp, handler, limit, *pending.popleft())
            if finished:
                return


def _feed(stream: Iterator[InputDocument], pending: Deque, max_chars: int) -> Iterator[Tuple[str, int]]:
    """``(text, n)`` of the readable documents of ``stream``; every document, readable or not, is
    queued in ``pending`` first, with its number ``n`` or the reason it is not fed."""
    for n, doc in enumerate(stream):
        reason = _unreadable(doc, max_chars)
        pending.append((None if reason else n, doc, reason))
        if reason is None:
            yield doc.text, n  # type: ignore[misc]


def _unreadable(doc: InputDocument, max_chars: int) -> Optional[str]:
    if doc.error is not None:
        return doc.error.problem
    if len(doc.text) > max_chars:  # type: ignore[arg-type]
        return f"{len(doc.text):,} characters, more than the limit of {max_chars:,} (--max-chars)"  # type: ignore[arg-type]
    return None


def _alone(nlp: Language, handler: _BatchFailures, limit: TimeLimit, _n: Optional[int], doc: InputDocument, reason: Optional[str]):
    """A document of ``pending`` settled: its reason, if it was never fed, else its run alone (within ``limit``)."""
    if reason is not None:
        return doc, None, reason
    handler.raising = True
    try:
        with limit.running():
            return doc, nlp(doc.text), None
    except Exception as e:
        return doc, None, str(e) if isinstance(e, (DocumentError, DocumentTimeout)) else f"{type(e).__name__}: {e}"
    finally:
        handler.raising = False


# ---------------------------------------------------------------------------- shards
@dataclass
class Shard:
    """One finished shard: its file's bytes and what the manifest records of it."""

    index: int
    data: bytes
    docs: int
    annotated: int
    mentions: int
    errors: List[Dict[str, Any]]
    ids_sha256: str


def add_document_id(h: Any, doc: InputDocument) -> None:
    """Feed a document's id (its ``key``) to the hash of a shard's ids (``Shard.ids_sha256``)."""
    h.update(json.dumps(doc.key, ensure_ascii=False).encode() + b"\n")


def _one_line(text: str) -> str:
    """Line breaks as spaces: a PubTator line holds the whole text, and its offsets stay valid."""
    return re.sub(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029\t]", " ", text)


def error_place(item: InputDocument) -> Dict[str, Any]:
    """Where a failed document is in the input, for its ``errors.jsonl`` record: its ``file`` (a folder's
    documents are files), else its ``line`` (line formats, PubTator), else nothing (a BioC document)."""
    if item.file is not None:
        return {"file": item.file}
    return {"line": item.line} if item.line is not None else {}


def make_shard(
    index: int, results: Iterable[Tuple[InputDocument, Optional[Doc], Optional[str]]], output_format: str,
    linkers: Sequence[Any], progress: Any = None,
) -> Shard:
    """The shard of ``results`` (from ``link_documents``) in ``output_format``: JSONL records in
    ``link --input``'s schema (``id``, the input's other fields, ``spans``), PubTator, or a spaCy
    ``DocBin`` (``doc.user_data["id"]``, and ``["fields"]`` where there are any)."""
    from spacy.tokens import DocBin

    parts: List[bytes] = []
    bin_ = DocBin(store_user_data=True) if output_format == "spacy" else None
    errors: List[Dict[str, Any]] = []
    ids = hashlib.sha256()
    docs = mentions = 0
    for item, doc, reason in results:
        docs += 1
        add_document_id(ids, item)
        records = span_records(doc, linkers) if doc is not None else []
        mentions += len(records)
        if progress is not None:
            progress.add(1, len(records))
        if doc is None:
            errors.append({"id": item.id, **error_place(item), "reason": reason})
        elif bin_ is not None:
            doc.user_data["id"] = item.key
            if item.fields:
                doc.user_data["fields"] = item.fields
            bin_.add(doc)
        elif output_format == "jsonl":
            parts.append((json.dumps({"id": item.key, **item.fields, "spans": records}, ensure_ascii=False) + "\n").encode())
        else:
            parts.append(_pubtator(item, records).encode())
    data = bin_.to_bytes() if bin_ is not None else b"".join(parts)
    return Shard(index, data, docs, docs - len(errors), mentions, errors, ids.hexdigest())


def _pubtator(item: InputDocument, records: List[Dict[str, Any]]) -> str:
    text, cut = _one_line(item.text), item.title_end  # type: ignore[arg-type]
    title, abstract = (text[:cut], text[cut + 1 :]) if cut is not None and text[cut : cut + 1] == " " else (text, "")
    lines = [f"{item.key}|t|{title}", f"{item.key}|a|{abstract}"]
    lines += [
        f"{item.key}\t{r['start_char']}\t{r['end_char']}\t{_one_line(r['text'])}\t{r['label']}\t{_pubtator_ids(r)}{_assertion_column(r)}"
        for r in records
    ]
    return "\n".join(lines) + "\n\n"


def _pubtator_ids(record: Dict[str, Any]) -> str:
    """The concept column: ``-1`` for none, and a composite mention's parts' concepts joined by ``|``,
    as PubTator writes a composite mention ("breast and ovarian cancer": ``D001943|D010051``)."""
    parts = list(dict.fromkeys(p["cui"] for p in record.get("parts", []) if p["cui"]))
    return "|".join(parts) if parts else record["cui"] or "-1"


def _assertion_column(record: Dict[str, Any]) -> str:
    """PubTator's optional 7th column (readers that want six ignore it): the span's assertion,
    ``assertion=absent;negated=1;uncertain=0;hypothetical=0;historical=1;experiencer=patient;section=...``
    (only what is known: nothing without ``sapbert_context``, ``negated`` alone from negspacy's NegEx)."""
    parts = []
    for name in ("assertion",) + ASSERTION_FIELDS[:-1]:
        value = record.get(name)
        if value is not None:
            parts.append(f"{name}={int(value) if isinstance(value, bool) else value}")
    return "\t" + ";".join(parts) if parts else ""


def annotate_shard(
    nlp: Language, linkers: Sequence[Any], index: int, docs: Sequence[InputDocument], output_format: str, *,
    batch_size: Optional[int] = None, max_chars: int = DEFAULT_MAX_CHARS, progress: Any = None, keep_words: int = 0,
    max_seconds: Optional[float] = None,
) -> Shard:
    """One shard from its documents (a local run's step, a cluster worker's task), inside a spaCy
    memory zone: the strings its documents add to the vocab are dropped with them, so a long run's
    memory does not grow with the number of distinct words it meets. The first ``keep_words``
    documents run before the zone opens: their words stay, and later shards find the common words
    already made (without them every shard makes its words again, which slowed the HPO default
    measurably). The output is the same either way."""
    limits = {"batch_size": batch_size, "max_chars": max_chars, "max_seconds": max_seconds}
    kept = list(link_documents(nlp, docs[:keep_words], **limits)) if keep_words else []
    with nlp.memory_zone():
        results = chain(kept, link_documents(nlp, docs[len(kept):], **limits))
        return make_shard(index, results, output_format, linkers, progress)


def _waitable(future: Any) -> "Future[Any]":
    """``future`` as a ``concurrent.futures.Future``, which ``wait`` can wait on: a process pool's as it
    is; Dask's (``wait`` cannot wait on it) mirrored by one that finishes when it does."""
    if isinstance(future, Future):
        return future
    mirror: "Future[Any]" = Future()
    future.add_done_callback(lambda _: mirror.set_result(None))
    return mirror


def tasks_in_flight(
    docs: Iterator[InputDocument], shard_size: int, start: int, window: int, submit: Callable[[int, List[InputDocument]], Any]
) -> Iterator[Any]:
    """Each shard of ``docs`` submitted (``submit(index, documents)`` returns a future: a process
    pool's or Dask's), at most ``window`` waiting or running, and the futures yielded as they finish
    (those that finish together in shard order). The input is read by a thread of its own, so a
    finished shard is yielded (and committed) even while the input stalls (a pipe, a slow disk): the
    run waits (``concurrent.futures.wait``) on the shards in flight and, while there is room for
    another, on the next chunk of input, whichever comes first."""
    requests: "queue.Queue[Future[Any]]" = queue.Queue()

    def read() -> None:  # a daemon: a read stalled on a pipe does not keep a stopped run alive
        while True:
            slot = requests.get()  # the future the run waits on for the next chunk
            try:
                chunk = list(islice(docs, shard_size))
            except BaseException as e:  # raised in the run's thread, where it takes the chunk
                slot.set_exception(e)
                return
            slot.set_result(chunk)
            if not chunk:
                return

    def next_chunk() -> "Future[Any]":
        slot: "Future[Any]" = Future()
        requests.put(slot)
        return slot

    threading.Thread(target=read, name="annotate-input", daemon=True).start()
    running: Dict["Future[Any]", Tuple[int, Any]] = {}  # waitable: (shard index, the submitted future)
    index, exhausted, chunk = start, False, next_chunk()  # the next chunk is read while the run works
    while not exhausted or running:
        room = not exhausted and len(running) < window
        done, _ = wait(set(running) | ({chunk} if room else set()), return_when=FIRST_COMPLETED)
        if room and chunk in done:
            documents = chunk.result()  # the input's error, raised here
            if not documents:
                exhausted = True
            else:
                submitted = submit(index, documents)
                running[_waitable(submitted)] = (index, submitted)
                index += 1
                chunk = next_chunk()
                continue
        for finished in sorted(done & running.keys(), key=lambda f: running[f][0]):
            yield running.pop(finished)[1]
