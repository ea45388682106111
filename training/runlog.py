"""Metrics as JSON lines: one object per logged step, easy to plot, grep and diff."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Union

from spacy_sapbert.fileio import atomic_open


def read_log(path: Union[str, Path]) -> List[Dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    with open(path, encoding="utf8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut short by a kill
                    break
    return records


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (in dicts and lists too) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


class MetricsLog:
    """Append-only JSONL log that, on resume, forgets what came after the checkpoint."""

    def __init__(self, path: Union[str, Path], resume_step: int = 0):
        self.path = Path(path)
        kept = [r for r in read_log(self.path) if r.get("step", 0) <= resume_step] if resume_step else []
        with atomic_open(self.path, "w") as f:
            for r in kept:
                f.write(json.dumps(r, sort_keys=True) + "\n")
        self._file = open(self.path, "a", encoding="utf8")

    def write(self, record: Dict[str, Any]) -> None:
        """One JSON line; a NaN or infinite number is written as null (bare NaN is not JSON)."""
        self._file.write(json.dumps(finite(record), sort_keys=True, allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
