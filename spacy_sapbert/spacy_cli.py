"""Attach our commands to spaCy's CLI as ``spacy sapbert …``.

spaCy imports this module through the ``spacy_cli`` entry point when its CLI starts;
nothing else imports it, so the registration happens only there.
"""
from spacy.cli import app as spacy_app

from .cli import app

spacy_app.add_typer(app, name="sapbert")
