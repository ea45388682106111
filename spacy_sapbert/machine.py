"""What machine a figure was measured on, and how much memory the measuring process took.

Every benchmark, evaluation and training record takes these from here, so "peak RSS" means one
thing everywhere.
"""
from __future__ import annotations

import os
import platform
import re
import resource
import sys
from typing import Dict, Optional

# CPU flags that decide which precision its matrix kernels run fastest in (bf16 is fast with AMX, slow
# with AVX512-BF16 alone: ``encoder.fast_bf16``), in the order a description lists them. CPUs of one
# model name ("Intel(R) Xeon(R) Processor") differ in these, so every record names them.
MATRIX_FLAGS = {"amx_tile": "AMX", "avx512_bf16": "AVX512-BF16", "avx512_vnni": "AVX512-VNNI", "avx512f": "AVX-512", "avx2": "AVX2"}


def machine_description(cpuinfo: str = "/proc/cpuinfo") -> Dict[str, object]:
    """CPU model (with its ``MATRIX_FLAGS``) and core count, read from the machine the numbers were measured on."""
    model, flags = None, None
    try:
        with open(cpuinfo, encoding="utf8") as f:
            for line in f:
                if line.startswith("model name") and model is None:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and flags is None:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    features = [name for flag, name in MATRIX_FLAGS.items() if flag in (flags or ())]
    shown = features + ["no AMX"] if features and "AMX" not in features else features
    cpu = f"{model} ({', '.join(shown)})" if shown else model
    return {"cpu": cpu, "cpu_model": model, "cpu_features": features, "nproc": os.cpu_count(), "platform": platform.platform()}


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
