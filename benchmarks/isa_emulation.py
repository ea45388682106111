"""Whether the AVX2 emulation (``spacy_sapbert.machine.ISA_ENVIRONMENTS``) takes effect, variable by variable.

    python benchmarks/isa_emulation.py [--repeats 3]

The speed targets of issue 47 hold on AVX2-only CPUs (AMD Zen 2/3, Intel consumer chips), while the
machines the figures come from have AVX-512 (some AMX). The benchmarks' ``--isa avx2`` starts their
processes again with each numeric library capped at AVX2. This script runs, in a fresh process for
each setting (native; each variable alone; all of ``avx2``; MKL capped at SSE4.2 as a probe of whether
MKL reads its variable at all on this CPU) and alternating the settings over ``--repeats`` rounds:

* what the libraries report: torch's kernel capability, whether oneDNN computes bf16 natively, the
  ISA line of ``ONEDNN_VERBOSE`` and the header of ``MKL_VERBOSE`` (which names the ISA on Intel CPUs
  only: on others MKL prints "Intel(R) Architecture processors" whatever it runs);
* GFLOP/s on one torch thread, timed in CPU seconds (``time.process_time``: a loaded machine shifts
  them less than wall time): a square fp32 matmul (MKL's SGEMM), the encoder's feed-forward ``Linear``
  in fp32 (MKL), bf16 (oneDNN) and torch's dynamic int8 (fbgemm), and an elementwise GELU (ATen's own
  vectorised kernels, the part ``ATEN_CPU_CAPABILITY`` decides).

Writes ``benchmarks/results/isa_emulation.json`` (machine, load average, every round).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "isa_emulation.json"


def settings() -> Dict[str, Dict[str, str]]:
    """Each setting's variables: native, each of the AVX2 emulation's torch-side variables alone, all."""
    from spacy_sapbert.machine import ISA_ENVIRONMENTS, ISA_VARIABLE

    avx2 = ISA_ENVIRONMENTS["avx2"]
    out: Dict[str, Dict[str, str]] = {"native": {}}
    for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "FBGEMM_ENABLE_INSTRUCTIONS"):
        out[f"{name} alone"] = {name: avx2[name]}
    out["MKL_ENABLE_INSTRUCTIONS=SSE4_2 (probe)"] = {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
    out["avx2 (all)"] = {**avx2, ISA_VARIABLE: "avx2"}
    return out


# ---------------------------------------------------------------------------- the probe (a fresh process per setting)
def _rate(fn, flop: float, seconds: float = 0.6) -> float:
    """GFLOP/s of ``fn`` over at least ``seconds`` of this process's CPU time, after a warm-up call."""
    fn()
    calls, start = 0, time.process_time()
    while True:
        fn()
        calls += 1
        spent = time.process_time() - start
        if spent >= seconds:
            return flop * calls / spent / 1e9


def probe() -> Dict[str, Any]:
    """What this process's libraries report, and their GFLOP/s on one thread."""
    import torch

    from spacy_sapbert.machine import effective_isa

    torch.set_num_threads(1)
    out: Dict[str, Any] = {"isa": effective_isa(), "gflops": {}}
    g = out["gflops"]
    with torch.inference_mode():
        a = torch.randn(1024, 1024)
        g["matmul fp32 1024 (MKL)"] = _rate(lambda: a @ a, 2 * 1024**3)
        x = torch.randn(256 * 12, 384)  # a batch of 256 names of 12 tokens, MiniLM's feed-forward
        layer = torch.nn.Linear(384, 1536).eval()
        flop = 2 * x.shape[0] * 384 * 1536
        g["linear fp32 (MKL)"] = _rate(lambda: layer(x), flop)
        layer16, x16 = torch.nn.Linear(384, 1536).to(torch.bfloat16).eval(), x.to(torch.bfloat16)
        g["linear bf16 (oneDNN)"] = _rate(lambda: layer16(x16), flop, seconds=0.3)
        from torch.ao.quantization import quantize_dynamic

        q = quantize_dynamic(torch.nn.Sequential(layer), {torch.nn.Linear}, dtype=torch.qint8)
        g["linear int8 dynamic (fbgemm)"] = _rate(lambda: q(x), flop)
        h = torch.randn(256 * 12, 1536)
        g["gelu (ATen, GFLOP = elements)"] = _rate(lambda: torch.nn.functional.gelu(h), h.numel())
    return out


def verbose_lines(env: Dict[str, str]) -> Dict[str, Optional[str]]:
    """The ISA line of ONEDNN_VERBOSE and the header of MKL_VERBOSE, from a small run under ``env``."""
    code = ("import torch; torch.set_num_threads(1); a = torch.randn(64, 64); a @ a; "
            "torch.nn.Linear(64, 64).to(torch.bfloat16)(a.to(torch.bfloat16)); "
            "a.to_mkldnn()")  # a oneDNN reorder: oneDNN prints its ISA line even where it has no bf16
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **env, "MKL_VERBOSE": "1", "ONEDNN_VERBOSE": "1"})
    lines = (run.stdout + run.stderr).splitlines()
    onednn = next((line.split("isa:", 1)[1] for line in lines if "isa:" in line), None)
    mkl = next((line for line in lines if line.startswith("MKL_VERBOSE oneMKL") or line.startswith("MKL_VERBOSE Intel")), None)
    kernel = next((line.split(",")[6] for line in lines if ",primitive,exec,cpu,matmul," in line or ",exec,cpu,inner_product," in line), None)
    return {"onednn_isa": onednn, "onednn_bf16_kernel": kernel, "mkl_header": mkl}


def run_probe(env: Dict[str, str]) -> Dict[str, Any]:
    clean = {k: v for k, v in os.environ.items() if k not in env_names()}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--probe"], check=True, capture_output=True,
                         text=True, env={**clean, **env, "OMP_NUM_THREADS": "1"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def env_names() -> Sequence[str]:
    from spacy_sapbert.machine import ISA_VARIABLE, ISA_VARIABLES

    return (*ISA_VARIABLES, ISA_VARIABLE)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds over all the settings (alternating)")
    parser.add_argument("--output", type=Path, default=OUT)
    args = parser.parse_args(argv)
    from spacy_sapbert.fileio import write_json
    from spacy_sapbert.machine import machine_description

    named = settings()
    result: Dict[str, Any] = {
        "command": "python benchmarks/isa_emulation.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": machine_description(), "load_average": {"before": [round(x, 2) for x in os.getloadavg()]},
        "settings": {name: {"variables": env, **verbose_lines(env)} for name, env in named.items()},
    }
    rounds: List[Dict[str, Any]] = []
    for _ in range(args.repeats):
        rounds.append({name: run_probe(env) for name, env in named.items()})
        print(json.dumps({name: r["gflops"] for name, r in rounds[-1].items()}), flush=True)
    for name in named:
        result["settings"][name]["isa"] = rounds[0][name]["isa"]
        kernels = rounds[0][name]["gflops"]
        result["settings"][name]["gflops_median"] = {
            k: round(statistics.median(r[name]["gflops"][k] for r in rounds), 2) for k in kernels
        }
    result["rounds"] = rounds
    result["load_average"]["after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.output, result)
    print(json.dumps({name: {k: v for k, v in s.items() if k != "isa"} for name, s in result["settings"].items()}, indent=1))
    return result


if __name__ == "__main__":
    if sys.argv[1:] == ["--probe"]:
        print(json.dumps(probe()))
    else:
        main()
