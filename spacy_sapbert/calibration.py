"""Moved to ``spacy_sapbert.evaluation.calibration`` (choosing the NIL threshold runs the evaluation's
gold-span pipeline, so it lives with the evaluation). This old path, which the README once showed,
still gives its names, with a ``DeprecationWarning``."""
from __future__ import annotations

import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    from .evaluation import calibration

    value = getattr(calibration, name)
    warnings.warn(f"spacy_sapbert.calibration moved to spacy_sapbert.evaluation.calibration: import {name} from there",
                  DeprecationWarning, stacklevel=2)
    return value
