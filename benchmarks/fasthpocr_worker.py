"""FastHPOCR (a dictionary tagger for HPO) timed on texts, run by *another* Python that has it.

FastHPOCR 0.1.4 indexes ``hp.obo`` with pronto, which it does not declare, so it lives in its own
environment (``python -m venv /tmp/hpocrvenv && /tmp/hpocrvenv/bin/pip install FastHPOCR==0.1.4
pronto``). Run there, this file imports nothing from spacy_sapbert: ``python fasthpocr_worker.py
IN.json OUT.json`` reads ``{"obo", "index_dir", "texts", "repeats", "longest_match"}``, builds the
index into ``index_dir`` once (kept for later runs, keyed by the OBO file's size and modification
time), and writes the median abstracts/s of ``annotate`` over the texts in this one process (per
wall and per CPU second), the
number of concepts found and, per text, its annotations as ``[start, end, HPO id]`` (FastHPOCR's
own offsets). ``run_fasthpocr`` is the side that our benchmarks call.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, Sequence


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM); ``spacy_sapbert.machine.peak_rss_mb``'s rule,
    repeated because this runs where spacy_sapbert is not installed."""
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read())[1]) / 1024


def linear_cluster_lists() -> None:
    """Make FastHPOCR 0.1.4's index serialization linear, with the same output.

    ``CRIndexKB.compileClusterList(cluster_id, base_clusters)`` scans the whole bundled vocabulary
    (about 280k cluster lines) once per cluster of the index, which did not finish in 10 minutes
    for HPO here; this answers it from one inverted pass over the same dict, in the same
    (insertion) order."""
    from FastHPOCR.cr.CRIndexKB import CRIndexKB

    inverted: dict = {}

    def compile_cluster_list(self, cluster_id, base_clusters):
        if inverted.get("source") is not base_clusters:
            by_id: dict = {}
            for token, cid in base_clusters.items():
                by_id.setdefault(cid, []).append(token)
            inverted.update(source=base_clusters, by_id=by_id)
        return list(inverted["by_id"].get(cluster_id, []))

    CRIndexKB.compileClusterList = compile_cluster_list


def index_file(obo: str, index_dir: str) -> str:
    """The FastHPOCR index of ``obo``, built on first use into a subfolder of ``index_dir``."""
    from FastHPOCR.IndexHPO import IndexHPO

    stat = os.stat(obo)
    folder = os.path.join(index_dir, f"{stat.st_size}-{int(stat.st_mtime)}")
    target = os.path.join(folder, "hp.index")
    if not os.path.isfile(target):
        tmp = f"{folder}.tmp-{os.getpid()}"
        os.makedirs(tmp, exist_ok=True)
        linear_cluster_lists()
        IndexHPO(obo, tmp, indexConfig={}).index()
        os.replace(tmp, folder)
    return target


def main(request_path: str, reply_path: str) -> None:
    from FastHPOCR.HPOAnnotator import HPOAnnotator

    with open(request_path, encoding="utf8") as f:
        request = json.load(f)
    texts = request["texts"]
    start = time.perf_counter()
    annotator = HPOAnnotator(index_file(request["obo"], request["index_dir"]))
    load_seconds = time.perf_counter() - start
    longest = bool(request.get("longest_match", False))
    seconds, cpu_seconds, found = [], [], []
    for _ in range(int(request.get("repeats", 1))):
        start, cpu = time.perf_counter(), time.process_time()
        found = [annotator.annotate(text, longestMatch=longest) for text in texts]
        seconds.append(time.perf_counter() - start)
        cpu_seconds.append(time.process_time() - cpu)
    answer = {
        "abstracts": len(texts),
        "abstracts_per_s": len(texts) / statistics.median(seconds),
        "seconds": seconds,
        # CPU seconds: on a machine others load, wall time counts their turns too
        "abstracts_per_cpu_s": len(texts) / statistics.median(cpu_seconds),
        "cpu_seconds": cpu_seconds,
        "concepts_found": sum(map(len, found)),
        "annotations": [[[a.getStartOffset(), a.getEndOffset(), a.getHPOUri()] for a in annotations] for annotations in found],
        "load_seconds": load_seconds,
        "peak_rss_mb": peak_rss_mb(),
    }
    with open(reply_path, "w", encoding="utf8") as f:
        json.dump(answer, f)


def run_fasthpocr(python: str, texts: Sequence[str], cache: Path, repeats: int = 1, longest_match: bool = False) -> Dict[str, Any]:
    """This file run as a worker by ``python`` (FastHPOCR's environment) over ``texts`` with the
    default HPO ontology, the index kept in ``cache``: its reply (see the module docstring)."""
    import subprocess
    import tempfile

    from spacy_sapbert.hpo_kb import hpo_obo_path

    with tempfile.TemporaryDirectory(prefix="fasthpocr-") as tmp:
        request_path, reply = Path(tmp) / "in.json", Path(tmp) / "out.json"
        cache.mkdir(parents=True, exist_ok=True)
        request = {"obo": str(hpo_obo_path()), "index_dir": str(cache), "texts": list(texts), "repeats": repeats,
                   "longest_match": longest_match}
        request_path.write_text(json.dumps(request), encoding="utf8")
        subprocess.run([python, str(Path(__file__).resolve()), str(request_path), str(reply)], check=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
        return json.loads(reply.read_text(encoding="utf8"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
