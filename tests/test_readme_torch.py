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


def test_the_cpu_line_comes_before_the_commands_to_copy():
    """A CPU-only user reads it before pasting the install commands, not after pip pulled CUDA."""
    cpu_line = README.index(CPU_INDEX)
    first_command = README.index("```bash")
    assert cpu_line < first_command


def test_the_usage_snippet_defines_every_name_it_uses():
    """The first Python block runs as pasted: every name it reads is imported, assigned or built in."""
    import ast
    import builtins

    snippet = re.findall(r"```python\n(.*?)```", README, flags=re.S)[0]
    tree = ast.parse(snippet)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    assert read <= bound, f"the usage snippet reads undefined names: {sorted(read - bound)}"
