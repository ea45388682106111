"""Reading a training config (spaCy/thinc format) with command-line overrides."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Union

from confection import Config

CONFIG_DIR = Path(__file__).parent / "configs"


def parse_overrides(args: List[str]) -> Dict[str, Any]:
    """``--section.key value`` pairs (spaCy's syntax) to a dict of overrides. spaCy's own parser, which
    ``spacy train`` uses (``--x.y=v``, JSON values, the ``SPACY_CONFIG_OVERRIDES`` variable), is not in
    its public API: this is the one place that imports it, so that ours never parses differently."""
    from spacy.cli._util import parse_config_overrides

    return parse_config_overrides(args)


def config_path(name_or_path: Union[str, Path]) -> Path:
    """A path, or the name of a bundled config (``cpu`` → ``training/configs/cpu.cfg``)."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    bundled = CONFIG_DIR / f"{name_or_path}.cfg"
    if bundled.is_file():
        return bundled
    raise FileNotFoundError(f"No config {name_or_path!r} (and no {bundled})")


def load_config(name_or_path: Union[str, Path], overrides: Dict[str, Any] | None = None) -> Config:
    return Config().from_disk(config_path(name_or_path), overrides=overrides or {})
