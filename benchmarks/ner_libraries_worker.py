"""The part of ``ner_libraries.py`` that runs inside a library's own environment.

Run from the repository root as ``PYTHON -m benchmarks.ner_libraries_worker TASK ... --answer OUT.json``
(``-m`` puts the root on the path, so ``training.ner`` imports as in ``python -m training.ner``):

* ``train CONFIG OUTPUT --corpus DIR --budget-minutes M``: ``training.ner``'s train command on a copy
  of CONFIG with a copy of the local MiniLM folder (deleted after training, so the later tasks show
  that the saved pipeline does not need it), the budget, a dev subset for choosing model-best, and a
  batcher wrapper that counts steps and words (and stops at a CPU-time budget with ``--budget-clock cpu``);
* ``evaluate MODEL``: ``spacy.load`` in this fresh process, then exact-span dev P/R/F per corpus and label;
* ``package MODEL DIR``: ``spacy package``, ``pip install`` of the result into DIR, and ``spacy.load``
  of the installed package in another fresh process;
* ``speed MODEL --threads T``: ``nlp.pipe`` over the 600 BC5CDR + NCBI-disease test abstracts.

Every task refuses socket connections (and counts the attempts) and runs with ``HF_HUB_OFFLINE=1``
from the caller, so "offline" is checked, not assumed.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional

import spacy
import typer
from spacy.tokens import DocBin
from spacy.util import load_config, registry

from spacy_sapbert.evaluation.datasets import read_pubtator
from spacy_sapbert.fileio import write_json
from spacy_sapbert.machine import peak_rss_mb
from training.ner import CORPUS_LABELS, DATA_DIR, corpus_path, evaluate_ner, prf
from training.ner import app as ner_app

app = typer.Typer(add_completion=False, no_args_is_help=True)
PACKAGE_NAME = "ner_libraries_probe"
WALL_CAP = 30  # with --budget-clock cpu, the wall-clock cap is this many times the budget


def refuse_network() -> List[str]:
    """Make every IP socket connection fail, and return the list the attempts are recorded in."""
    attempts: List[str] = []
    connect = socket.socket.connect

    def refused(self: socket.socket, address: object) -> None:
        if self.family == socket.AF_UNIX:
            return connect(self, address)
        attempts.append(repr(address))
        raise OSError(f"ner_libraries_worker: connection to {address!r} refused (the benchmark runs offline)")

    socket.socket.connect = refused  # type: ignore[method-assign]
    socket.socket.connect_ex = refused  # type: ignore[method-assign,assignment]
    return attempts


def is_torch_pickle(path: Path) -> bool:
    """Whether the file holds a ``torch.save`` archive (a zip whose records include ``data.pkl``), here or embedded."""
    with open(path, "rb") as f:
        return b"data.pkl" in f.read()


def versions() -> Dict[str, Optional[str]]:
    from importlib.metadata import PackageNotFoundError, version

    out: Dict[str, Optional[str]] = {}
    for name in ("spacy", "spacy-transformers", "spacy-curated-transformers", "curated-transformers", "transformers",
                 "torch", "spacy-sapbert"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


@registry.batchers("ner_libraries.counting_batcher.v1")
def counting_batcher(
    batcher: Callable[[Iterable], Iterator], output_file: str, max_cpu_seconds: float = 0.0
) -> Callable[[Iterable], Iterator]:
    """Pass ``batcher``'s batches through, recording the words of each and when it was handed out
    (wall clock, and this process's CPU time: on a shared machine the wall clock also counts waiting).

    With ``max_cpu_seconds``, stop handing out batches once the process has used that much CPU time
    since this was built: the same amount of work for every library however busy the machine is."""
    record: Dict[str, List[float]] = {"words": [], "at": [], "cpu": []}
    cpu_started = time.process_time()

    def spent() -> bool:
        return bool(max_cpu_seconds) and time.process_time() - cpu_started >= max_cpu_seconds

    def batch(items: Iterable) -> Iterator:
        if not spent():  # (spaCy asks again each remaining epoch: those end here, before the inner batcher)
            for b in batcher(items):
                if spent():
                    break
                record["words"].append(sum(len(eg) for eg in b))
                record["at"].append(time.monotonic())
                record["cpu"].append(time.process_time())
                yield b
        write_json(Path(output_file), record)

    return batch


def step_speed(counted: Dict[str, List[float]], eval_frequency: int) -> Dict[str, object]:
    """Steps, words and seconds per step from the batch times; the gaps after evaluated steps are left out.

    spaCy updates on the batch, evaluates when ``step % eval_frequency == 0``, then asks for the next batch."""
    at, cpu, words = counted["at"], counted["cpu"], counted["words"]
    kept = [step for step in range(len(at) - 1) if step % eval_frequency]
    seconds = sum(at[s + 1] - at[s] for s in kept)
    cpu_seconds = sum(cpu[s + 1] - cpu[s] for s in kept)
    kept_words = sum(words[s] for s in kept)
    return {
        "steps": len(words),
        "words": int(sum(words)),
        "seconds_per_step": round(seconds / len(kept), 3) if kept else None,
        "median_seconds_per_step": round(statistics.median(at[s + 1] - at[s] for s in kept), 3) if kept else None,
        "cpu_seconds_per_step": round(cpu_seconds / len(kept), 3) if kept else None,
        "words_per_second": round(kept_words / seconds, 1) if seconds else None,
        "words_per_cpu_second": round(kept_words / cpu_seconds, 1) if cpu_seconds else None,
        "seconds_in_steps_and_evaluations": round(at[-1] - at[0], 1) if at else None,
    }


def dev_subset(corpus: Path, n: int, dest: Path) -> int:
    """Every k-th dev document (BC5CDR and NCBI-disease both represented): what model-best is chosen on."""
    nlp = spacy.blank("en")
    docs = list(DocBin().from_disk(corpus / "dev.spacy").get_docs(nlp.vocab))
    step = max(1, len(docs) // max(n, 1))
    DocBin(docs=docs[::step][:n], store_user_data=False).to_disk(dest)
    return min(n, len(docs[::step]))


@app.command()
def train(
    config: Path = typer.Argument(..., exists=True, dir_okay=False),
    output: Path = typer.Argument(...),
    corpus: Path = typer.Option(Path("corpus/ner")),
    budget_minutes: float = typer.Option(20.0),
    budget_clock: str = typer.Option("wall", help="wall, or cpu: also stop after budget-minutes of CPU time"),
    eval_frequency: int = typer.Option(100),
    select_docs: int = typer.Option(150),
    answer: Path = typer.Option(...),
) -> None:
    attempts = refuse_network()
    from spacy_sapbert.encoder import resolve_encoder_path

    # train from a copy of the MiniLM folder and delete it afterwards: the saved pipeline must not need it
    output.mkdir(parents=True, exist_ok=True)
    encoder = output / "minilm-copy"
    shutil.rmtree(encoder, ignore_errors=True)
    shutil.copytree(resolve_encoder_path(None), encoder)
    n_select = dev_subset(corpus, select_docs, output / "select.spacy")
    cfg = load_config(config, interpolate=False)
    budget = cfg["training"]["batcher"]
    if budget.get("@batchers") != "spacy_sapbert.time_budget_batcher.v1":
        raise SystemExit(f"{config}: [training.batcher] must be spacy_sapbert.time_budget_batcher.v1")
    # with a CPU budget the wall clock is only a safety cap (a busy machine can stretch it a lot)
    budget["max_seconds"] = budget_minutes * 60 * (1 if budget_clock == "wall" else WALL_CAP)
    counted = output / "steps.json"
    cfg["training"]["batcher"] = {"@batchers": "ner_libraries.counting_batcher.v1", "batcher": budget,
                                  "output_file": str(counted),
                                  "max_cpu_seconds": budget_minutes * 60 if budget_clock == "cpu" else 0.0}
    cfg["training"]["eval_frequency"] = eval_frequency
    cfg.to_disk(output / "config.cfg", interpolate=False)
    started = time.time()
    ner_app(["train", str(output / "config.cfg"), str(output), "--paths.train", str(corpus / "train.spacy"),
             "--paths.dev", str(output / "select.spacy"), "--paths.tokenizer", str(corpus / "tokenizer"),
             "--paths.encoder", str(encoder)], standalone_mode=False)
    shutil.rmtree(encoder)
    steps = json.loads(counted.read_text(encoding="utf8"))
    write_json(answer, {
        "wall_seconds": round(time.time() - started, 1),
        "budget_minutes": budget_minutes,
        "budget_clock": budget_clock,
        "encoder": str(resolve_encoder_path(None)),
        "encoder_copy_deleted_after_training": not encoder.exists(),
        "eval_frequency": eval_frequency,
        "select_docs": n_select,
        **step_speed(steps, eval_frequency),
        "network_attempts": attempts,
        "peak_rss_mb": peak_rss_mb(),
        "versions": versions(),
    })


@app.command()
def evaluate(
    model: Path = typer.Argument(..., exists=True, file_okay=False),
    limit: int = typer.Option(0, help="only the first N documents of each dev corpus (0: all; for trying the script out)"),
    answer: Path = typer.Option(...),
) -> None:
    attempts = refuse_network()
    started = time.time()
    nlp = spacy.load(model)
    files = [p for p in model.rglob("*") if p.is_file()]
    out: Dict[str, object] = {"load_seconds": round(time.time() - started, 2), "pipe_names": nlp.pipe_names,
                              "model_mb": round(sum(p.stat().st_size for p in files) / 1e6, 1),
                              "pickled_weights": sorted(str(p.relative_to(model)) for p in files if is_torch_pickle(p))}
    totals = {"tp": 0, "pred": 0, "gold": 0}
    for name, labels in CORPUS_LABELS.items():
        path = corpus_path(DATA_DIR, name, "dev")
        documents = read_pubtator(path)
        documents = documents[:limit] if limit else documents
        scores = evaluate_ner(nlp, documents, labels, path)
        out[f"{name}_documents"] = len(documents)
        out[name] = scores
        for key in totals:
            totals[key] += int(scores["micro"][key])
    out["micro"] = prf(totals["tp"], totals["pred"], totals["gold"])
    out["limited"] = bool(limit)
    out.update(network_attempts=attempts, versions=versions(), peak_rss_mb=peak_rss_mb())
    write_json(answer, out)


LOAD_PACKAGE = """
import json, socket, sys, spacy
def refused(self, address):
    raise OSError("refused: offline")
socket.socket.connect = refused
nlp = spacy.load(sys.argv[1])
doc = nlp(sys.argv[2])
print(json.dumps([(e.start_char, e.end_char, e.label_) for e in doc.ents]))
"""
PROBE_TEXT = "Cisplatin-induced nephrotoxicity and hypertension were seen in patients with breast cancer given tamoxifen."


@app.command()
def package(
    model: Path = typer.Argument(..., exists=True, file_okay=False),
    folder: Path = typer.Argument(...),
    answer: Path = typer.Option(...),
) -> None:
    """``spacy package`` (sdist), ``pip install --no-deps`` of it into ``folder``/site, and a fresh ``spacy.load``."""
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "build").mkdir(parents=True)
    py = sys.executable
    subprocess.run([py, "-m", "spacy", "package", str(model), str(folder / "build"), "--name", PACKAGE_NAME,
                    "--version", "0.0.0", "--build", "sdist", "--force"], check=True)
    sdist = next((folder / "build").glob("*/dist/*.tar.gz"))
    subprocess.run([py, "-m", "pip", "install", "--no-deps", "--target", str(folder / "site"), str(sdist)], check=True)
    meta = json.loads(next((folder / "build").glob("*/meta.json")).read_text(encoding="utf8"))
    env = {**os.environ, "PYTHONPATH": str(folder / "site")}
    loaded = subprocess.run([py, "-c", LOAD_PACKAGE, f"en_{PACKAGE_NAME}", PROBE_TEXT], env=env, check=True,
                            capture_output=True, text=True)
    direct = subprocess.run([py, "-c", LOAD_PACKAGE, str(model), PROBE_TEXT], env=os.environ, check=True,
                            capture_output=True, text=True)
    packaged_ents = json.loads(loaded.stdout.strip().splitlines()[-1])
    write_json(answer, {
        "sdist_mb": round(sdist.stat().st_size / 1e6, 1),
        "requirements": meta.get("requirements", []),
        "packaged_ents": packaged_ents,
        "same_as_folder": packaged_ents == json.loads(direct.stdout.strip().splitlines()[-1]),
    })


@app.command()
def speed(
    model: Path = typer.Argument(..., exists=True, file_okay=False),
    threads: int = typer.Option(1),
    batch_size: int = typer.Option(32),
    limit: int = typer.Option(0, help="only the first N abstracts (0: all; for trying the script out)"),
    answer: Path = typer.Option(...),
) -> None:
    """Abstracts/s of ``nlp.pipe`` over the BC5CDR + NCBI-disease test abstracts (speed only: no scores)."""
    import torch

    attempts = refuse_network()
    torch.set_num_threads(threads)
    nlp = spacy.load(model)
    texts = [d.text for name in CORPUS_LABELS for d in read_pubtator(corpus_path(DATA_DIR, name, "test"))]
    texts = texts[:limit] if limit else texts
    list(nlp.pipe(texts[:8], batch_size=batch_size))  # warm-up
    started, cpu_started = time.perf_counter(), time.process_time()
    tokens = sum(len(doc) for doc in nlp.pipe(texts, batch_size=batch_size))
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    write_json(answer, {"abstracts": len(texts), "tokens": tokens, "threads": threads, "batch_size": batch_size,
                        "seconds": round(seconds, 2), "abstracts_per_s": round(len(texts) / seconds, 2),
                        "cpu_seconds": round(cpu_seconds, 2), "abstracts_per_cpu_second": round(len(texts) / cpu_seconds, 2),
                        "tokens_per_s": round(tokens / seconds, 1), "network_attempts": attempts,
                        "peak_rss_mb": peak_rss_mb(), "load_average": [round(x, 2) for x in os.getloadavg()]})


if __name__ == "__main__":
    app()
