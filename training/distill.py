"""Distil an encoder into fewer layers that give the teacher's vectors (issue: fewer layers, encode faster).

    python -m training.distill OUTPUT --kb KB_FOLDER [--kb ...] [--texts PUBTATOR ...] [--teacher minilm]
        [--layers 0 2 4] [--steps 2000] [--precision auto]

Cutting MiniLM to its first layers without training links far worse (``benchmarks/encoder_layers.py``).
Here the student starts as the teacher with only ``--layers`` of its layers (its tokenizer and embeddings
kept, and frozen) and learns to give every string the teacher's vector, so it links in the teacher's
space: a KB encoded by the teacher can be searched with it, and one encoded by it resembles the teacher's.

* Strings: every name of the ``--kb`` folders (the ontologies it will link to; ``default``: the
  embedded HPO KB) and, for the text it
  will read, up to ``--text-strings`` word n-grams (1 to 4 tokens, with a run of 3 letters) of the
  ``--texts`` PubTator files (train splits only: these strings are what it learns from).
* Loss per string, its vector s against the teacher's t: (1 - s.t), plus 10 x the mean squared
  difference of s.k and t.k over the 16 KB names k nearest to t (the scores a link is chosen by),
  plus 10 x that over the batch's other teacher vectors. Dropout stays off: a batch's loss depends
  on the step alone, so a resumed run continues exactly.
* Work files in ``OUTPUT.work/``: the teacher's vectors and neighbours (reused only for the same
  strings and teacher, by sha256 and fingerprint, and while their own sha256 holds), and a checkpoint
  every ``--checkpoint-every`` steps (``training.checkpoint``'s layout and checksums), resumed from
  when present and removed when the student is written.
* ``OUTPUT``: a transformers folder that ``SapEncoder.load`` (and so every ``encoder=`` setting)
  takes, with ``distillation.json``: the teacher's fingerprint, the layers, the strings' sha256, the
  settings, the final losses, the seconds and the CPU. Written when training ends (the folder
  atomically, by ``SapEncoder.save``). The linker's ``query_encoder`` takes it too: then only the queries
  go through it, searched against KBs the teacher encoded (``spacy_sapbert/query_encoder.py``);
  ``training.export_student`` writes the smaller folder the package ships.
"""
from __future__ import annotations

import copy
import hashlib
import re
import shutil
import time
from collections import deque
from pathlib import Path
from typing import Deque, Dict, List, Sequence, Tuple

import numpy as np
import torch
import typer

from spacy_sapbert.encoder import SapEncoder, resolve_encoder_path, resolve_precision
from spacy_sapbert.fileio import file_sha256, read_json, write_json
from spacy_sapbert.query_encoder import REPORT_FILE, keep_layers
from training import checkpoint as ckpt

NEIGHBOURS = 16  # KB names per string whose scores the loss keeps
SCORE_WEIGHT = 10.0  # of the squared score differences, against (1 - cosine)
WARMUP_STEPS = 200
_LETTERS = re.compile(r"[A-Za-z]{3}")
CHECKPOINTS = "checkpoints"


def training_strings(kbs: Sequence[Path], texts: Sequence[Path], text_strings: int, seed: int) -> Tuple[List[str], int]:
    """The KBs' names, then a seeded sample of the texts' word n-grams that are no KB name (no repeats),
    and how many names come first."""
    import spacy

    from spacy_sapbert.evaluation.datasets import read_pubtator
    from spacy_sapbert.kb import ConceptKB

    names = list(dict.fromkeys(n for kb in kbs for n in ConceptKB.from_disk(kb).names))
    known = set(names)
    tokenizer = spacy.blank("en").tokenizer
    grams = set()
    for path in texts:
        for doc in tokenizer.pipe(d.text for d in read_pubtator(path)):
            words = [t.text for t in doc]
            for n in range(1, 5):
                for i in range(len(words) - n + 1):
                    gram = " ".join(words[i : i + n])
                    if gram not in known and _LETTERS.search(gram):
                        grams.add(gram)
    ordered = sorted(grams)
    chosen = np.random.default_rng(seed).permutation(len(ordered))[:text_strings]
    return names + [ordered[i] for i in sorted(chosen)], len(names)


def strings_sha256(strings: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(strings).encode("utf8")).hexdigest()


def cached_array(path: Path, key: Dict[str, str], make) -> np.ndarray:
    """``make()``, saved as ``path`` (.npy) beside ``path``.json holding ``key`` and the file's sha256;
    reused only under the same key and checksum, else made again."""
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file():
        saved = read_json(meta)
        if saved.get("key") == key and saved.get("sha256") == file_sha256(path):
            return np.load(path)
    array = make()
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, array)
    meta.unlink(missing_ok=True)  # never an old key beside new bytes
    tmp.replace(path)
    write_json(meta, {"key": key, "sha256": file_sha256(path)})
    return array


def nearest_names(vectors: np.ndarray, names: np.ndarray, k: int = NEIGHBOURS, block: int = 4096) -> np.ndarray:
    """Row indices into ``names`` of the ``k`` best inner products of each row of ``vectors``."""
    kb = torch.from_numpy(names)
    out = np.zeros((len(vectors), min(k, len(names))), dtype=np.int64)
    for start in range(0, len(vectors), block):
        scores = torch.from_numpy(vectors[start : start + block]) @ kb.T
        out[start : start + block] = scores.topk(out.shape[1], dim=1).indices.numpy()
    return out


def student_of(teacher: SapEncoder, layers: Sequence[int]) -> torch.nn.Module:
    """A copy of the teacher (a transformers model) keeping ``layers``, in that order; embeddings frozen."""
    try:
        student = keep_layers(teacher.model, layers)
    except ValueError as e:
        raise typer.BadParameter(f"--{e}") from None
    for p in student.embeddings.parameters():
        p.requires_grad = False
    return student.eval()  # no dropout: see the module docstring


def batch_rows(step: int, n: int, batch_size: int, seed: int) -> np.ndarray:
    """The strings of ``step``: epochs of a seeded permutation each, cut into full batches."""
    per_epoch = max(1, n // batch_size)
    epoch, k = divmod(step, per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return order[k * batch_size : (k + 1) * batch_size]


def save_checkpoint(work: Path, student: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Dict) -> None:
    """The student and optimizer at ``state["step"]``, published as the trainer's are (``training.checkpoint``)."""
    from safetensors.torch import save_file

    root, step = work / CHECKPOINTS, state["step"]
    staging = ckpt.staging_dir(root, step)
    if staging.exists():  # left by a write that was killed
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in student.state_dict().items()}, str(staging / ckpt.MODEL_FILE))
    tensors, meta = ckpt.optimizer_to_tensors(optimizer)
    save_file(tensors, str(staging / ckpt.OPTIMIZER_FILE))
    write_json(staging / ckpt.STATE_FILE, {**state, "optimizer": meta})
    ckpt.publish(staging, root, step, keep=1)


def resume(work: Path, student: torch.nn.Module, optimizer: torch.optim.Optimizer, key: Dict[str, object]) -> int:
    """The step the checkpoint in ``work`` reached (0 without one); refuses one from another run."""
    from safetensors.torch import load_file

    folder = ckpt.latest_checkpoint(work / CHECKPOINTS)
    if folder is None:
        return 0
    ckpt.verify_checkpoint(folder)
    state = read_json(folder / ckpt.STATE_FILE)
    if state.get("key") != key:
        raise typer.BadParameter(f"{folder} was written by another run (its strings, teacher or settings differ): "
                                 "delete it or use another OUTPUT")
    student.load_state_dict(load_file(str(folder / ckpt.MODEL_FILE)))
    ckpt.optimizer_from_tensors(optimizer, load_file(str(folder / ckpt.OPTIMIZER_FILE)), state["optimizer"])
    return int(state["step"])


def main(
    output: Path = typer.Argument(..., help="the student's folder (written when training ends)"),
    kb: List[Path] = typer.Option(..., help="a KB folder whose names to learn (repeat); 'default': the embedded HPO KB's"),
    texts: List[Path] = typer.Option([], help="a PubTator file of train text whose n-grams to learn (repeat)"),
    teacher: str = typer.Option("minilm", help="a local transformers folder, or minilm"),
    layers: List[int] = typer.Option([0, 2, 4], help="the teacher's layers the student starts from (repeat)"),
    steps: int = typer.Option(2000), batch_size: int = typer.Option(256), lr: float = typer.Option(2e-4),
    text_strings: int = typer.Option(60000, help="n-grams of the texts, at most"),
    precision: str = typer.Option("auto", help="autocast: auto, fp32 or bf16 (encoder.resolve_precision, training)"),
    checkpoint_every: int = typer.Option(500), seed: int = typer.Option(0),
) -> None:
    from tqdm import tqdm

    from spacy_sapbert.machine import machine_description

    t0 = time.perf_counter()
    teacher_encoder = SapEncoder.load(resolve_encoder_path(teacher), device="cpu", precision="fp32", plain_bert=False)
    if any(str(p) == "default" for p in kb):
        from spacy_sapbert.hpo_kb import default_kb_path

        kb = [default_kb_path(teacher_encoder) if str(p) == "default" else p for p in kb]
    try:
        strings, n_names = training_strings(kb, texts, text_strings, seed)
    except (OSError, ValueError) as e:  # a folder that is no KB, a missing or malformed text file
        raise typer.BadParameter(str(e)) from None
    work = output.with_name(output.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    key = {"strings_sha256": strings_sha256(strings), "teacher": teacher_encoder.fingerprint}
    typer.echo(f"{len(strings)} strings ({n_names} KB names), teacher {teacher_encoder.source}", err=True)
    targets = cached_array(work / "teacher.npy", key, lambda: teacher_encoder.encode(strings, batch_size=256, progress=True))
    neighbours = cached_array(work / "neighbours.npy", key, lambda: nearest_names(targets, targets[:n_names]))
    settings = {"layers": list(layers), "steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed,
                "neighbours": NEIGHBOURS, "score_weight": SCORE_WEIGHT, "warmup_steps": WARMUP_STEPS}
    student = student_of(teacher_encoder, layers)
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    schedule = lambda s: min(1.0, (s + 1) / WARMUP_STEPS) * max(0.0, 1 - s / steps)  # noqa: E731
    run_key = {**key, **settings}
    start = resume(work, student, optimizer, run_key)
    autocast = resolve_precision(precision, torch.device("cpu"), training=True) == "bf16"
    T, K, NB = torch.from_numpy(targets), torch.from_numpy(targets[:n_names]), torch.from_numpy(neighbours)
    tokenizer, max_length = teacher_encoder.tokenizer, teacher_encoder.settings.max_length
    recent: Deque[List[float]] = deque(maxlen=100)  # the losses of the last 100 steps, for the report
    bar = tqdm(total=steps, initial=start, desc="distilling", unit="step")
    for step in range(start, steps):
        for group in optimizer.param_groups:
            group["lr"] = lr * schedule(step)
        rows = batch_rows(step, len(strings), batch_size, seed)
        batch = tokenizer([strings[i] for i in rows], padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            hidden = student(**batch).last_hidden_state
        s = teacher_encoder.pool(hidden, batch["attention_mask"])
        t, k = T[rows], K[NB[rows]]
        vector = (1 - (s * t).sum(-1)).mean()
        near = ((torch.einsum("bd,bkd->bk", s - t, k)) ** 2).mean()
        within = (((s - t) @ t.T) ** 2).mean()
        loss = vector + SCORE_WEIGHT * (near + within)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        recent.append([x.item() for x in (vector.detach(), near.detach(), within.detach())])
        bar.update(1)
        if step % 100 == 0:
            bar.set_postfix(cos_loss=f"{recent[-1][0]:.4f}", near=f"{recent[-1][1]:.5f}")
        if checkpoint_every and (step + 1) % checkpoint_every == 0 and step + 1 < steps:
            save_checkpoint(work, student, optimizer, {"step": step + 1, "key": run_key})
    bar.close()
    final = np.mean(recent, axis=0).tolist() if recent else None
    SapEncoder(student, tokenizer, copy.deepcopy(teacher_encoder.settings), device="cpu", precision="fp32").save(output)
    write_json(output / REPORT_FILE, {
        "made_by": "python -m training.distill", "teacher": teacher_encoder.source,
        "teacher_fingerprint": teacher_encoder.fingerprint, **settings, "precision": "bf16" if autocast else "fp32",
        "strings": len(strings), "kb_names": n_names, "strings_sha256": key["strings_sha256"],
        "kbs": [str(p) for p in kb], "texts": [str(p) for p in texts],
        "final_losses_last_100_steps": dict(zip(("one_minus_cosine", "near_names_mse", "batch_mse"), final)) if final else None,
        "resumed_at_step": start, "seconds": round(time.perf_counter() - t0, 1), "machine": machine_description(),
        "torch": torch.__version__,
    })
    shutil.rmtree(work / CHECKPOINTS, ignore_errors=True)  # the teacher's vectors stay, for another student
    typer.echo(f"{output}: {len(layers)} layers; {REPORT_FILE} says how it was made", err=True)


if __name__ == "__main__":
    typer.run(main)
