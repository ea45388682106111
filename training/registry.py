"""The trainer's config registries: ``@losses``, ``@miners``, ``@batchers`` and ``@adapters`` blocks.

Kept apart from the functions they hold, so a module that registers a batcher or an adapter does not
import the loss library, and ``registry.resolve`` finds every block once the modules that register
them (``losses``, ``data``, ``adapter``; the trainer imports all three) are imported.
"""
from __future__ import annotations

import catalogue
import confection


class registry(confection.registry):
    """Config registries of the trainer (names in the ``spacy_sapbert_training`` namespace)."""

    losses = catalogue.create("spacy_sapbert_training", "losses", entry_points=False)
    miners = catalogue.create("spacy_sapbert_training", "miners", entry_points=False)
    batchers = catalogue.create("spacy_sapbert_training", "batchers", entry_points=False)
    adapters = catalogue.create("spacy_sapbert_training", "adapters", entry_points=False)
