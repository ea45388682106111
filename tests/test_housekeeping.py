"""One behaviour, one place: the helpers the code base shares exist once, the runtime package holds
no benchmark code, and CI lints. (Source checks: each names the files that broke the rule.)"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for d in ("spacy_sapbert", "training", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]
# run under scispacy's and FastHPOCR's own environments, where spacy_sapbert is not installed: keep their own copies
STANDALONE = {"benchmarks/scispacy_worker.py", "benchmarks/fasthpocr_worker.py"}


def _files_matching(pattern: str) -> set:
    found = set()
    for path in SOURCES:
        if re.search(pattern, path.read_text(encoding="utf8")):
            found.add(path.relative_to(ROOT).as_posix())
    return found - STANDALONE


def test_one_atomic_write_helper():
    # fileio: atomic_path/atomic_open/atomic_dir/replace_dir; the checkpoint only renames a damaged folder aside
    assert _files_matching(r"mkstemp|mkdtemp") == {"spacy_sapbert/fileio.py"}
    assert _files_matching(r"os\.replace\(") <= {"spacy_sapbert/fileio.py", "training/checkpoint.py"}
    checkpoint = (ROOT / "training" / "checkpoint.py").read_text(encoding="utf8")
    assert checkpoint.count("os.replace(") == 1 and "replace_dir(staging" in checkpoint


def test_one_peak_memory_helper():
    assert _files_matching(r"ru_maxrss|VmHWM|/proc/self/statm") == {"spacy_sapbert/machine.py"}


def test_one_resolve_precision():
    assert _files_matching(r"def resolve_precision\(") == {"spacy_sapbert/encoder.py"}


def test_readme_rendering_and_the_scispacy_worker_live_with_the_benchmarks():
    package = ROOT / "spacy_sapbert"
    assert not (package / "evaluation" / "report.py").exists() and not (package / "evaluation" / "scispacy_worker.py").exists()
    assert (ROOT / "benchmarks" / "readme_tables.py").is_file() and (ROOT / "benchmarks" / "scispacy_worker.py").is_file()
    assert not [p for p in package.rglob("*.py") if re.search(r"update_readme|render_table", p.read_text(encoding="utf8"))]


def test_the_training_registry_has_its_own_module():
    code = (
        "import sys, json; import training.data, training.adapter; from training.registry import registry; "
        "print(json.dumps(['pytorch_metric_learning' in sys.modules, hasattr(registry, 'batchers')]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, True]  # batchers and adapters need no loss library


def test_ci_lints_with_ruff():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf8").splitlines()
    assert any(line.split("#")[0].strip().endswith("ruff check .") for line in ci)
    assert "[tool.ruff.lint]" in (ROOT / "pyproject.toml").read_text(encoding="utf8")


def test_one_cpu_description_naming_its_matrix_features(tmp_path):
    """Records tell CPUs of one model name apart by the flags that decide bf16's speed (AMX or not)."""
    from spacy_sapbert.machine import machine_description

    assert _files_matching(r'startswith\("model name"\)') == {"spacy_sapbert/machine.py"}
    amx, plain = tmp_path / "amx", tmp_path / "plain"
    amx.write_text("model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512f amx_tile avx512_bf16\n"
                   "model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu\n")
    plain.write_text("model name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n")
    assert machine_description(str(amx))["cpu"] == "Intel(R) Xeon(R) Processor (AMX, AVX512-BF16, AVX-512, AVX2)"
    described = machine_description(str(plain))
    assert described["cpu"] == "AMD EPYC (AVX512-BF16, AVX512-VNNI, AVX-512, AVX2, no AMX)"
    assert described["cpu_model"] == "AMD EPYC" and "AMX" not in described["cpu_features"]  # type: ignore[operator]
