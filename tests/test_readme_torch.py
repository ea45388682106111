"""The README's install advice about torch: PyPI's Linux wheels are CUDA builds, so CPU-only users
are told how to get the CPU wheel, pinned to the same version as the install commands."""
from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf8")
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def test_readme_tells_cpu_users_how_to_get_the_cpu_wheel_of_the_pinned_torch():
    pins = set(re.findall(r"pip install torch==([0-9.]+)", README))
    assert len(pins) == 1, f"the README pins torch to several versions: {pins}"
    assert f"pip install torch=={pins.pop()} {CPU_INDEX}" in README
    assert "keeps pip from pulling" not in README  # the old, false promise
