"""The instruction-set emulation the benchmarks' ``--isa`` applies, and what records say about it."""
import json
import os
import subprocess
import sys

import pytest

from spacy_sapbert import machine
from spacy_sapbert.machine import ISA_ENVIRONMENTS, ISA_VARIABLE, effective_isa, machine_description, run_as_isa


def test_a_description_names_the_vendor_and_the_emulated_isa(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("vendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    monkeypatch.delenv(ISA_VARIABLE, raising=False)
    native = machine_description(str(cpuinfo))
    assert native["cpu_vendor"] == "AuthenticAMD" and native["isa"]["emulated"] == "native"  # type: ignore[index]
    assert native["cpu"] == "AMD EPYC (AVX512-BF16, AVX-512, AVX2, no AMX)"
    for name, value in ISA_ENVIRONMENTS["avx2"].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(ISA_VARIABLE, "avx2")
    emulated = machine_description(str(cpuinfo))
    assert emulated["cpu"] == "AMD EPYC (AVX512-BF16, AVX-512, AVX2, no AMX), run as AVX2"
    assert emulated["isa"]["variables"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"  # type: ignore[index]


def test_run_as_isa_starts_the_script_again_with_the_variables_only_when_needed(monkeypatch):
    started = []
    monkeypatch.setattr(os, "execve", lambda exe, args, env: started.append((args, env)))
    monkeypatch.delenv(ISA_VARIABLE, raising=False)
    monkeypatch.setenv("FAISS_SIMD_LEVEL", "AVX512")  # set by hand: the emulation replaces it
    run_as_isa("native", ["script.py"])
    assert started == []
    run_as_isa("avx2", ["script.py", "--isa", "avx2"])
    (args, env), = started
    assert args[1:] == ["script.py", "--isa", "avx2"]
    assert env[ISA_VARIABLE] == "avx2" and all(env[k] == v for k, v in ISA_ENVIRONMENTS["avx2"].items())
    monkeypatch.setenv(ISA_VARIABLE, "avx2")  # the restarted process goes on
    run_as_isa("avx2", ["script.py"])
    assert len(started) == 1
    with pytest.raises(ValueError, match="isa must be one of"):
        run_as_isa("sse2")


def test_onednn_cap_below_amx_is_seen(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert machine.onednn_allows_amx()
    for cap, allowed in (("AVX512_CORE_AMX", True), ("AVX512_CORE_BF16", False), ("AVX2", False)):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        assert machine.onednn_allows_amx() is allowed


def test_the_avx2_variables_take_effect_in_torch_and_onednn():
    """A process started with the AVX2 variables runs ATen's AVX2 kernels and no native bf16, as an
    AVX2-only CPU would (benchmarks/isa_emulation.py times the kernels too)."""
    env = {k: v for k, v in os.environ.items() if k not in machine.ISA_VARIABLES}
    env.update(ISA_ENVIRONMENTS["avx2"], **{ISA_VARIABLE: "avx2"})
    code = "import json; from spacy_sapbert.machine import effective_isa; print(json.dumps(effective_isa()))"
    found = json.loads(subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout)
    assert found["emulated"] == "avx2"
    assert found["torch_cpu_capability"] in ("AVX2", "DEFAULT", "NO AVX")  # never above AVX2
    assert found["onednn_bf16"] is False and found["amx"] is False
    assert effective_isa()["emulated"] in ISA_ENVIRONMENTS
