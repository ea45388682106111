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


def machine_description() -> Dict[str, object]:
    """CPU model and core count, read from the machine the numbers were measured on."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": model, "nproc": os.cpu_count(), "platform": platform.platform()}


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
