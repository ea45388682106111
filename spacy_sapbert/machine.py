"""What machine a figure was measured on, and how much memory the measuring process took.

Every benchmark, evaluation and training record takes these from here, so "peak RSS" means one
thing everywhere.
"""
from __future__ import annotations

import functools
import os
import platform
import re
import resource
import sys
from typing import Dict, Optional, Sequence, Set, Tuple

# CPU flags that decide which precision its matrix kernels run fastest in (bf16 is fast with AMX, slow
# with AVX512-BF16 alone on Intel: ``encoder.fast_bf16``), in the order a description lists them. CPUs of one
# model name ("Intel(R) Xeon(R) Processor") differ in these, so every record names them.
MATRIX_FLAGS = {"amx_tile": "AMX", "avx512_bf16": "AVX512-BF16", "avx512_vnni": "AVX512-VNNI", "avx512f": "AVX-512", "avx2": "AVX2"}

# Each numeric library's own cap on the instructions it dispatches to, so that an AVX-512 or AMX CPU runs
# them as a lesser CPU would (``benchmarks/isa_emulation.py`` checks that each takes effect). They are
# read when the library loads, so a process applies them by starting again (``run_as_isa``). torch's
# CPU wheel does its fp32 GEMMs in MKL, its bf16 ones in oneDNN and dynamic int8 in fbgemm; FAISS, numpy
# and OpenBLAS (numpy's BLAS) dispatch on their own. The numpy names cover numpy 1 and 2 (each ignores
# the other's). ONNX Runtime has no such cap. On AMD CPUs MKL ignores its variable and runs its AVX2
# kernels even where the CPU has AVX-512 (``benchmarks/isa_emulation.py``).
ISA_VARIABLE = "SPACY_SAPBERT_ISA"  # the emulated ISA, for the children of a re-executed process
ISA_ENVIRONMENTS: Dict[str, Dict[str, str]] = {
    "native": {},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2", "FAISS_SIMD_LEVEL": "AVX2", "OPENBLAS_CORETYPE": "Haswell",
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR",
    },
}
ISA_VARIABLES = tuple(dict.fromkeys(k for env in ISA_ENVIRONMENTS.values() for k in env))


def read_cpuinfo(cpuinfo: str = "/proc/cpuinfo") -> Tuple[Optional[str], Optional[Set[str]], Optional[str]]:
    """The first CPU's model name, flags and vendor id in ``cpuinfo`` (None where it cannot be read)."""
    model, flags, vendor = None, None, None
    try:
        with open(cpuinfo, encoding="utf8") as f:
            for line in f:
                if line.startswith("model name") and model is None:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and flags is None:
                    flags = set(line.split(":", 1)[1].split())
                elif line.startswith("vendor_id") and vendor is None:
                    vendor = line.split(":", 1)[1].strip()
                if model and flags and vendor:
                    break
    except OSError:
        pass
    return model, flags, vendor


@functools.lru_cache(maxsize=None)
def cpu_vendor() -> Optional[str]:
    """The CPU's vendor id ("GenuineIntel", "AuthenticAMD"; None where /proc/cpuinfo is absent). The
    precision rule asks it at every search (``encoder.fast_bf16``), and it cannot change while a process runs."""
    return read_cpuinfo()[2]


def machine_description(cpuinfo: str = "/proc/cpuinfo") -> Dict[str, object]:
    """CPU vendor, model (with its ``MATRIX_FLAGS``) and core count, read from the machine the numbers
    were measured on, and the instruction set its numeric libraries were let use (``effective_isa``):
    ``cpu`` ends in "run as AVX2" under an emulation."""
    model, flags, vendor = read_cpuinfo(cpuinfo)
    model = model or platform.processor() or platform.machine()
    features = [name for flag, name in MATRIX_FLAGS.items() if flag in (flags or ())]
    shown = features + ["no AMX"] if features and "AMX" not in features else features
    cpu = f"{model} ({', '.join(shown)})" if shown else model
    isa = effective_isa()
    if isa["emulated"] != "native":
        cpu = f"{cpu}, run as {str(isa['emulated']).upper()}"
    return {"cpu": cpu, "cpu_model": model, "cpu_vendor": vendor or platform.machine(), "cpu_features": features,
            "nproc": os.cpu_count(), "platform": platform.platform(), "isa": isa}


def effective_isa() -> Dict[str, object]:
    """What the numeric libraries of this process were let use: the emulated ISA (``ISA_ENVIRONMENTS``),
    the variables set, torch's kernel capability and whether oneDNN computes bf16 natively (both read
    from torch, so after the variables took effect), and FAISS's SIMD level where FAISS is loaded."""
    out: Dict[str, object] = {
        "emulated": os.environ.get(ISA_VARIABLE, "native"),
        "variables": {k: os.environ[k] for k in ISA_VARIABLES if k in os.environ},
    }
    try:
        import torch

        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        out["onednn_bf16"] = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        has_amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
        out["amx"] = bool(has_amx is not None and has_amx()) and onednn_allows_amx()
    except (ImportError, AttributeError, RuntimeError):  # pragma: no cover - torch without these
        pass
    faiss = sys.modules.get("faiss")  # only when loaded: importing it here would pin its SIMD level
    config = getattr(faiss, "SIMDConfig", None)
    if config is not None and hasattr(config, "get_level_name"):
        out["faiss_simd"] = config.get_level_name()
    return out


def onednn_allows_amx() -> bool:
    """Whether ``ONEDNN_MAX_CPU_ISA`` (unset: no cap) lets oneDNN use AMX tiles (torch's AMX check reads
    the CPU, not this cap)."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    return not cap or "AMX" in cap or cap in ("ALL", "DEFAULT")


def run_as_isa(isa: str, argv: Optional[Sequence[str]] = None) -> None:
    """Start this script again with ``ISA_ENVIRONMENTS[isa]`` set (the libraries read them as they
    load), unless they already are; ``native`` runs on as it is. Its worker processes inherit them."""
    if isa not in ISA_ENVIRONMENTS:
        raise ValueError(f"isa must be one of {tuple(ISA_ENVIRONMENTS)}, got {isa!r}")
    if os.environ.get(ISA_VARIABLE, "native") == isa:
        return
    env = {k: v for k, v in os.environ.items() if k not in ISA_VARIABLES}
    env.update(ISA_ENVIRONMENTS[isa], **{ISA_VARIABLE: isa})
    args = list(sys.argv if argv is None else argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *args], env)


def peak_rss_mb(pid: Optional[int] = None) -> float:
    """The peak resident memory in MB of this process (or of process ``pid``, Linux only: 0.0 when it is gone).

    Linux's ``VmHWM`` where there is one: ``ru_maxrss`` of a child started by a big process starts
    at the parent's peak. Elsewhere ``ru_maxrss`` (bytes on macOS, KB on Linux and BSD)."""
    try:
        with open(f"/proc/{pid or 'self'}/status", encoding="utf8") as f:
            found = re.search(r"VmHWM:\s+(\d+)\s+kB", f.read())
        if found:
            return round(int(found[1]) / 1024, 1)
    except OSError:
        pass
    if pid is not None:
        return 0.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / 2**20 if sys.platform == "darwin" else peak / 1024, 1)


def rss_mb() -> float:
    """Resident memory now (not the peak), in MB (Linux: from ``/proc``; elsewhere the peak)."""
    try:
        with open("/proc/self/statm", encoding="utf8") as f:
            return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except OSError:
        return peak_rss_mb()


@functools.lru_cache(maxsize=None)
def one_torch_thread_after_fork() -> None:
    """Make every process forked from this one run torch on one thread (registered once a process).

    GNU OpenMP's thread pool does not survive a fork: a worker of ``nlp.pipe(n_process=...)`` hung in its
    first parallel torch operation (a LayerNorm, a bf16 copy) whenever the parent had run one before, e.g.
    linked a text first. On one thread torch runs no parallel region, and each worker is one of several
    processes anyway (``annotate``'s workers run one thread each too)."""

    def one_thread() -> None:
        import torch

        torch.set_num_threads(1)

    os.register_at_fork(after_in_child=one_thread)
