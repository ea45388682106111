"""Ready pipelines: a mention detector, abbreviations, assertion (ConText) and the linker, assembled in one place.

Every entry point (the default HPO pipeline, ``link --kb``, the evaluations) builds its pipeline here,
so what is measured is what users run.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from spacy.language import Language

from .detectors import (
    LINKER,
    NESTED_SPANS_KEY,
    SHIPPED_NER,
    SHIPPED_NER_TRF,
    SHIPPED_NERS,
    DetectorContext,
    DetectorSpec,
    PathLike,
    add_ruler,
    check_detectors,
    kb_names,
    load_ner,
    start_pipeline,
)

# LINKER, NESTED_SPANS_KEY, the shipped NERs and the ruler's helpers live with the detectors
# (``detectors.py``); they are named here too, where the evaluation, benchmarks and tests import them.
__all__ = [
    "LINKER", "NESTED_SPANS_KEY", "SHIPPED_NER", "SHIPPED_NER_TRF", "SHIPPED_NERS", "add_ruler", "build_pipeline",
    "kb_names", "load_ner",
]


def build_pipeline(
    kb: Union[PathLike, Mapping[str, PathLike], None] = None,
    detector: DetectorSpec = "span_finder",
    *,
    encoder: Optional[PathLike] = None,
    labels: Sequence[str] = (),
    label: Optional[str] = None,
    abbreviations: bool = True,
    assertion: bool = True,
    negation: Optional[bool] = None,
    assertion_config: Optional[Dict[str, object]] = None,
    linker_config: Optional[Dict[str, object]] = None,
    span_finder_config: Optional[Dict[str, object]] = None,
    ner_model: Optional[PathLike] = None,
    nested: Optional[str] = None,
    detector_configs: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> Language:
    """A pipeline that finds mentions with ``detector`` and links them against the KB folder ``kb``.

    ``detector``: a name registered in ``registries.detectors`` (``detectors.py``), or a list of them
    run in order (names joined by ``+`` too). Built in: ``gold`` (none: the caller sets
    ``doc.ents``), ``ruler`` (exact KB names), ``span_finder`` (encoder-scored KB-vocabulary
    n-grams), ``ner`` (the CNN NER shipped in the package, or ``ner_model``), ``ner-trf`` (the
    shipped transformer tagger, or ``ner_model``); ``["ner", "span_finder"]`` (``"ner+span_finder"``):
    the span finder adds what the NER missed. ``detector_configs``: settings by detector name
    (``span_finder_config``: the span finder's, over any there).
    ``labels``: entity labels to link (empty: all); the ruler and span finder label their spans
    ``label`` (default: the first of ``labels``, else ``CONCEPT``). ``kb`` None: the embedded HPO KB.
    ``kb`` may also map entity labels to KB folders (``{"Disease": medic, "Chemical": mesh}``): one
    linker per label, named ``sapbert_linker_<label>``, for a detector that labels its spans (``ner``, ``ner-trf``).
    ``nested`` (``all``, ``coordinations`` or ``heads``, a span-finder detector only): the span finder also keeps
    nested mentions ("colitis" in "ulcerative colitis") in ``doc.spans["sapbert_nested"]``, which
    the linkers link too; ``doc.ents`` keeps the longest of overlapping ones.
    ``assertion``: ``sapbert_context`` (``assertion.py``) sets ``span._.negated``, ``historical``,
    ``hypothetical``, ``uncertain``, ``experiencer``, ``section`` and ``assertion`` on the entities
    and the nested mentions (``assertion_config``: its settings). ``negation``: the switch's older
    name (it added negspacy's NegEx, which ``sapbert_context`` replaces; ``span._.negex`` still
    reads ``span._.negated``): when given, it decides ``assertion``.
    """
    kbs: Dict[str, Any] = {}
    per_label = isinstance(kb, Mapping)
    if per_label:
        if labels:
            raise ValueError("a KB per label needs a labelling detector ('ner', 'ner-trf' or 'gold') and no 'labels'")
        kbs = {f"{LINKER}_{lab.lower()}": (str(path), [lab]) for lab, path in kb.items()}
    configs = {name: dict(config) for name, config in (detector_configs or {}).items()}
    configs["span_finder"] = {**configs.get("span_finder", {}), **(span_finder_config or {})}
    context = DetectorContext(
        kb=None if per_label else kb,  # type: ignore[arg-type]
        label=None if per_label else label or (labels[0] if labels else "CONCEPT"),  # None: each detector's own labels
        nested=nested, ner_model=ner_model, configs=configs, linker=LINKER, nested_key=NESTED_SPANS_KEY,
    )
    check_detectors(detector, context)  # an unknown detector or a missing model fails before anything loads
    if kb is None:
        from .hpo_kb import default_kb_path

        kb = default_kb_path(encoder)  # resolved here, so the linker's config names the folder
        context = replace(context, kb=kb)
    nlp = start_pipeline(detector, context)
    configs_of = [nlp.get_pipe_config(name) for name in nlp.pipe_names]
    if nested is not None and not any(c.get("spans_key") == NESTED_SPANS_KEY for c in configs_of):
        raise ValueError(f"nested mentions come from the span finder; detector {detector!r} has none")
    # a component that searches through the linker (the span finder scores its proposals there)
    searches_linker = any(c.get("linker") == LINKER for c in configs_of)
    if abbreviations:
        nlp.add_pipe("sapbert_abbreviations")
    if negation is not None:
        assertion = negation
    if assertion:
        from . import assertion as _assertion  # noqa: F401  (registers the sapbert_context factory)

        # it reads the entities and the nested mentions' span group, after the abbreviations add theirs
        nlp.add_pipe("sapbert_context", config={"spans_keys": [NESTED_SPANS_KEY], **(assertion_config or {})})
    for name, (kb_path, linked_labels) in (kbs or {LINKER: (str(kb), list(labels))}).items():
        config = {"kb": kb_path, "encoder": None if encoder is None else str(encoder), "labels": linked_labels}
        if searches_linker:
            config["overlap"] = False  # it and the linker would take turns on the linker's cache
        if nested is not None:
            config["spans_key"] = NESTED_SPANS_KEY
        config.update(linker_config or {})
        nlp.add_pipe("sapbert_linker", name=name, config=config)
    return nlp
