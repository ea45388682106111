"""The embedded default: the HPO KB (``hpo_kb.py``) with the offline MiniLM encoder, and a ready
pipeline that finds phenotype mentions with the span finder.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from spacy.language import Language

from .detectors import DetectorSpec, detector_names
from .encoder import SapEncoder, resolve_encoder_path
from .hpo_kb import default_kb_path

HPO_BROWSER_URL = "https://hpo.jax.org/browse/term/{}"
DEMO_NOTE = Path(__file__).parent / "data" / "demo_note.txt"
DEFAULT_DETECTOR = "span_finder"
# Chosen on GSC+ dev (phenotypes) by ``python benchmarks/hpo_default.py`` (benchmarks/results/hpo_default.json),
# which also compares the span finder with the exact-name ruler; the other settings are the factory's
# defaults, chosen on NCBI-disease dev with MEDIC. ``quality_synonyms`` changes nothing on GSC+ dev; on the
# 2,292 abstracts it adds 45 spans, 35 right, 3 arguable, 7 wrong by hand (precision 0.81 with the arguable
# as half; benchmarks/results/link_changes_quality-synonyms_added.tsv), and lengthens 4 to a right span.
HPO_SPAN_FINDER = {"min_exact_score": 0.95, "min_partial_score": 0.96, "quality_synonyms": True}
# Nested phenotype mentions kept in a span group the linker links (``build_pipeline(nested=...)``),
# chosen on GSC+ dev by the same benchmark: those inside a coordination ("plantar pits" in "palmar
# and plantar pits") and the HPO names that end a longer mention ("colitis" in "ulcerative colitis"),
# though not every such head is annotated there ("carcinoma" in "basal cell carcinoma" is not).
HPO_NESTED = "heads"


def default_pipeline(
    encoder: Union[str, os.PathLike, None] = None, progress: bool = True, detector: DetectorSpec = DEFAULT_DETECTOR,
    precision: str = "auto", query_encoder: Optional[str] = None,
) -> Language:
    """The embedded default: HPO KB + MiniLM, mentions found by the span finder (its defaults tuned
    on phenotype dev data), nested mentions in ``doc.spans["sapbert_nested"]`` (linked too),
    abbreviations expanded, each mention's assertion set by ConText (``span._.negated``,
    ``historical``, ``hypothetical``, ``uncertain``, ``experiencer``, ``section``, ``assertion``).
    ``precision``: the encoder's (``encoder.resolve_precision``), for the KB built on first use too.
    ``query_encoder``: the linker's (``LinkerSettings.query_encoder``): ``"minilm-l3"`` encodes the queries
    with 3 distilled layers, faster on an AVX2-only CPU at a small cost in detected mentions (opt-in, as
    ``precision="int8"`` is: README, Limits)."""
    from .pipelines import LINKER, build_pipeline
    from .search import LinkingKB

    enc = SapEncoder.load(resolve_encoder_path(encoder), precision=precision)
    kb = default_kb_path(enc, progress=progress)
    nlp = build_pipeline(
        kb,
        detector,
        encoder=encoder,
        label="PHENOTYPE",
        span_finder_config=dict(HPO_SPAN_FINDER),
        nested=HPO_NESTED if "span_finder" in detector_names(detector) else None,  # the span finder finds them
        linker_config={k: v for k, v in (("precision", precision), ("query_encoder", query_encoder)) if v not in ("auto", None)} or None,
    )
    nlp.get_pipe(LINKER).set_kb(LinkingKB.from_disk(kb), enc)  # the encoder default_kb_path needed: loaded once
    return nlp
