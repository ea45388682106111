"""The self-alignment training loop (SapBERT, Liu et al. 2021).

Each step encodes both names of a batch of synonym pairs, labels them with their concept,
mines hard triplets on the L2-normalised embeddings and applies a metric-learning loss.
Settings come from a config file (``training/configs/*.cfg``); the result is saved with
``SapEncoder.save`` so the linker loads it unchanged. With ``[training.adapter]`` on, only a
LoRA adapter trains (``training/adapter.py``) and the saved encoders hold the merged weights.
"""
from __future__ import annotations

import math
import random
import shutil
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

import numpy as np
import torch
from confection import Config

from spacy_sapbert.context import context_encoder
from spacy_sapbert.encoder import TRAINING_PRECISIONS, SapEncoder, resolve_precision, select_device
from spacy_sapbert.fileio import read_json, write_json
from spacy_sapbert.machine import peak_rss_mb

from . import checkpoint as ckpt
from .adapter import LoraAdapter, count_parameters, merged_copy
from .data import (
    ContextSet,
    PairSet,
    cut_into_batches,
    plan_from_arrays,
    plan_to_arrays,
    read_context_file,
    read_pair_file,
    shard,
)
from .distributed import (
    any_rank,
    barrier,
    broadcast_array,
    init_distributed,
    shutdown_distributed,
    wrap_loss_and_miner,
    wrap_model,
)
from .losses import compute_loss
from .registry import registry
from .runlog import MetricsLog


class NonFiniteLossError(FloatingPointError):
    """A training step's loss is NaN or infinite: the run stops instead of writing a NaN encoder."""

SCHEDULES = ("constant", "linear")


@dataclass
class TrainSettings:
    """The ``[training]`` block, minus the loss, the miner and the adapter."""

    lr: float = 2e-5
    weight_decay: float = 0.01
    warmup_steps: int = 0
    schedule: str = "constant"
    precision: str = "auto"
    grad_clip: float = 0.0
    freeze_embeddings: bool = False
    freeze_layers: int = 0
    max_minutes: float = 0.0
    log_every: int = 10
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    snapshot_every_minutes: float = 0.0
    context_weight: float = 1.0

    def validate(self) -> "TrainSettings":
        if self.precision not in TRAINING_PRECISIONS:
            raise ValueError(f"training.precision must be one of {TRAINING_PRECISIONS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"training.schedule must be one of {SCHEDULES}")
        if self.context_weight < 0:
            raise ValueError(f"training.context_weight must be >= 0, got {self.context_weight}")
        return self


@dataclass
class DataSettings:
    """The ``[data]`` block."""

    pairs: str
    batcher: Any
    batch_size: int = 256
    epochs: int = 1
    max_steps: int = 0
    lowercase: bool = True
    contexts: Optional[str] = None
    context_concepts: int = 16
    context_per_concept: int = 2

    def validate(self) -> "DataSettings":
        if self.contexts is not None and min(self.context_concepts, self.context_per_concept) < 1:
            raise ValueError("data.context_concepts and data.context_per_concept must be at least 1")
        return self


@dataclass
class RunPaths:
    output: Path

    @property
    def model(self) -> Path:
        return self.output / "model"

    @property
    def checkpoints(self) -> Path:
        return self.output / "checkpoints"

    @property
    def snapshots(self) -> Path:
        return self.output / "snapshots"

    @property
    def log(self) -> Path:
        return self.output / "metrics.jsonl"


# ---------------------------------------------------------------- small parts
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def autocast_context(precision: str, device: torch.device):
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def freeze_lower_layers(model: torch.nn.Module, n_layers: int, embeddings: bool) -> int:
    """Freeze the embeddings and/or the lowest ``n_layers`` transformer layers (cheaper steps).

    Returns the number of parameters left trainable.
    """
    if embeddings or n_layers > 0:
        if not hasattr(model, "embeddings"):
            raise ValueError("freezing needs a BERT-style model with an .embeddings module")
        for p in model.embeddings.parameters():
            p.requires_grad_(False)
    if n_layers > 0:
        layers = getattr(getattr(model, "encoder", None), "layer", None)
        if layers is None:
            raise ValueError("freeze_layers needs a BERT-style model with .encoder.layer")
        for layer in list(layers)[:n_layers]:
            for p in layer.parameters():
                p.requires_grad_(False)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def freeze_unused_pooler(model: torch.nn.Module) -> None:
    """BERT's pooler head never reaches the loss (we pool ``last_hidden_state``); frozen, it
    gets no optimizer state and DDP does not wait for its gradients."""
    pooler = getattr(model, "pooler", None)
    if isinstance(pooler, torch.nn.Module):
        for p in pooler.parameters():
            p.requires_grad_(False)


def lr_lambda(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """Linear warm-up, then constant (the authors' setting, with warm-up 0) or linear decay."""

    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "linear":
            return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
        return 1.0

    return factor


def steps_per_epoch(n_pairs: int, batch_size: int, min_batch: int) -> int:
    return len(cut_into_batches(np.arange(n_pairs), batch_size, min_batch))


def peak_memory_mb(device: torch.device) -> Dict[str, float]:
    """Peak resident memory of this process (and peak CUDA memory when on a GPU)."""
    out = {"peak_rss_mb": peak_rss_mb()}
    if device.type == "cuda":
        out["peak_cuda_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


# ---------------------------------------------------------------- the loop
class Trainer:
    """One training run: owns the encoder, optimizer, schedule, data plan and outputs."""

    def __init__(self, config: Union[Config, Dict[str, Any]], *, resume: bool = False, progress: bool = True):
        self.config = Config(config)
        resolved = registry.resolve(self.config)
        system = resolved["system"]
        torch.set_num_threads(int(system.get("threads", 1)))
        self.info, device = init_distributed(system.get("device", "auto"))
        self.seed = int(system["seed"])
        seed_everything(self.seed + self.info.rank)
        training = dict(resolved["training"])
        self.loss_fn, self.miner = wrap_loss_and_miner(training.pop("loss"), training.pop("miner"), self.info)
        # no [training.adapter] block (configs written before it existed) = no adapter
        self.adapter: Optional[LoraAdapter] = training.pop("adapter", None)
        self.settings = TrainSettings(**training).validate()
        self.data = DataSettings(**resolved["data"]).validate()
        self.paths = RunPaths(Path(resolved["paths"]["output"]))
        self.progress = progress and self.info.is_main
        self.resume = resume

        enc = resolved["encoder"]
        self.device = select_device(device)
        self.precision = resolve_precision(self.settings.precision, self.device, training=True)
        self.encoder = SapEncoder.load(
            enc["path"], pooling=enc["pooling"], max_length=enc["max_length"], device=str(self.device),
            precision="bf16" if self.precision == "bf16" else "fp32",  # inference inside training (batch plans)
            plain_bert=False,  # training (adapters, save_pretrained of the result) wants transformers' model
        )
        self.pairs: PairSet = read_pair_file(self.data.pairs, lowercase=self.data.lowercase)
        self.contexts: Optional[ContextSet] = read_context_file(self.data.contexts) if self.data.contexts else None
        if self.contexts is not None and self.info.enabled:
            raise ValueError("data.contexts trains on one process: DDP would see two forward passes per step")

        model = self.encoder.model
        if self.adapter is not None:
            # the encoder trains (and plans batches) through the adapted model; the base weights are frozen
            model = self.encoder.model = self.adapter.apply(model)
            self.encoder.invalidate()
        freeze_unused_pooler(model)
        # with an adapter, freezing the lowest layers leaves their adapter weights out of training
        self.trainable = freeze_lower_layers(model, self.settings.freeze_layers, self.settings.freeze_embeddings)
        self.total_params = count_parameters(model)[1]
        self.model = wrap_model(model, self.info, self.device)
        # sentences read as the linker reads a mention's context (mean pooling, longer inputs), same weights
        self.context_reader = context_encoder(self.encoder) if self.contexts is not None else None
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=self.settings.lr, weight_decay=self.settings.weight_decay
        )
        self.min_batch = self.info.world_size
        per_epoch = steps_per_epoch(len(self.pairs), self.data.batch_size, self.min_batch)
        self.total_steps = per_epoch * self.data.epochs
        if self.data.max_steps > 0:
            self.total_steps = min(self.total_steps, self.data.max_steps) if self.data.epochs > 0 else self.data.max_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(self.settings.schedule, self.settings.warmup_steps, self.total_steps)
        )
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.precision == "fp16")

        self.step = 0
        self.epoch = 0
        self.position = 0
        self.plan = None
        self.elapsed = 0.0
        self.pairs_seen = 0

    # -------------------------------------------------------------- data
    def make_plan(self, epoch: int):
        """This epoch's batches, built on rank 0 and shared, so every rank agrees."""
        plan = None
        if self.info.is_main:
            plan = self.data.batcher.plan(
                self.pairs, epoch, self.seed, self.data.batch_size, self.min_batch, encoder=self.encoder
            )
            self.encoder.model.train()  # encoding for the plan switched it to eval
        if not self.info.enabled:
            return plan
        flat, offsets = plan_to_arrays(plan) if plan is not None else (None, None)
        return plan_from_arrays(broadcast_array(flat, self.info), broadcast_array(offsets, self.info))

    # -------------------------------------------------------------- state
    def state(self) -> Dict[str, Any]:
        sched = {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"}
        return {
            "step": self.step,
            "epoch": self.epoch,
            "position": self.position,
            "elapsed_s": self.elapsed,
            "pairs_seen": self.pairs_seen,
            "total_steps": self.total_steps,
            "world_size": self.info.world_size,
            "scheduler": sched,
            "grad_scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "adapter": self.adapter_description,
        }

    @property
    def adapter_description(self) -> Optional[Dict[str, Any]]:
        return self.adapter.describe() if self.adapter is not None else None

    def parameter_record(self) -> Dict[str, Any]:
        """Trainable parameters, all parameters (adapter included) and the trainable share in %."""
        return {
            "trainable_params": self.trainable,
            "total_params": self.total_params,
            "trainable_percent": round(100.0 * self.trainable / max(1, self.total_params), 4),
            "adapter": self.adapter_description,
        }

    def save_checkpoint(self) -> None:
        root = self.paths.checkpoints
        staging = ckpt.staging_dir(root, self.step)
        if self.info.is_main:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        barrier(self.info)
        ckpt.write_rank_rng(staging, self.info.rank)
        barrier(self.info)
        if self.info.is_main:
            ckpt.write_checkpoint(
                staging, model=self.encoder.model, optimizer=self.optimizer, plan_arrays=plan_to_arrays(self.plan), state=self.state()
            )
            ckpt.publish(staging, root, self.step, self.settings.keep_checkpoints)
        barrier(self.info)

    def intact_checkpoint(self) -> Optional[Path]:
        """The newest checkpoint whose files match their checksums. Damaged newer ones are
        reported, renamed aside (hidden, kept for inspection) and the previous one is taken."""
        found: Optional[Path] = None
        damaged: Dict[Path, str] = {}
        for folder in ckpt.incomplete_checkpoints(self.paths.checkpoints) if self.info.is_main else ():
            print(f"warning: {folder} has no {ckpt.STATE_FILE}: not a complete checkpoint, not resumed from", file=sys.stderr)
        for folder in reversed(ckpt.list_checkpoints(self.paths.checkpoints)):
            try:
                if not ckpt.verify_checkpoint(folder) and self.info.is_main:
                    print(f"warning: {folder} has no {ckpt.CHECKSUM_FILE} (written before checksums); "
                          "resuming from it unverified", file=sys.stderr)
            except ckpt.CorruptCheckpointError as e:
                damaged[folder] = str(e)
                if self.info.is_main:
                    print(f"warning: {e}; trying the checkpoint before it", file=sys.stderr)
                continue
            found = folder
            break
        if damaged and found is None:
            raise ckpt.CorruptCheckpointError(
                f"no intact checkpoint in {self.paths.checkpoints} to resume from: " + "; ".join(damaged.values())
            )
        barrier(self.info)  # every rank has verified before a folder moves
        if self.info.is_main:
            for folder in damaged:
                print(f"set aside {ckpt.set_aside(folder)}", file=sys.stderr)
        barrier(self.info)
        return found

    def restore(self) -> bool:
        found = self.intact_checkpoint()
        if found is None:
            return False
        written_with = read_json(found / ckpt.STATE_FILE).get("adapter")
        if written_with != self.adapter_description:
            raise ValueError(
                f"{found} was written with [training.adapter] {written_with or 'off'}, this run has "
                f"{self.adapter_description or 'off'}: resume with the same adapter settings"
            )
        state = ckpt.load_checkpoint(found, model=self.encoder.model, optimizer=self.optimizer, rank=self.info.rank)
        if state["world_size"] != self.info.world_size:
            raise ValueError(f"{found} was written by {state['world_size']} processes; resume with as many")
        self.scheduler.load_state_dict({**state["scheduler"], "lr_lambdas": [None]})
        if state["grad_scaler"] and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["grad_scaler"])
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.elapsed, self.pairs_seen = state["elapsed_s"], state["pairs_seen"]
        self.plan = plan_from_arrays(*state["plan_arrays"])
        return True

    # -------------------------------------------------------------- one step
    def train_step(self, batch: np.ndarray) -> Dict[str, float]:
        local = shard(batch, self.info.rank, self.info.world_size)
        names, labels = self.pairs.batch(local)
        tokens = self.encoder.tokenize(names)
        with autocast_context(self.precision, self.device):
            embeddings = self.encoder.forward(tokens, model=self.model)
        # mining and the loss in float32, outside autocast: similarities near the margin matter
        loss, n_mined = compute_loss(self.loss_fn, self.miner, embeddings.float(), labels.to(self.device))
        context_loss = self._context_loss()
        if context_loss is not None:
            loss = loss + self.settings.context_weight * context_loss
        if not bool(torch.isfinite(loss.detach())):
            self._stop_on_non_finite(float(loss.detach()))
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.settings.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        # the distributed loss wrapper scales by the world size to undo DDP's gradient averaging
        out = {"loss": float(loss.detach()) / self.info.world_size, "mined": n_mined, "pairs": len(batch)}
        if context_loss is not None:
            out["context_loss"] = float(context_loss.detach())
        return out

    def _context_loss(self) -> Optional[torch.Tensor]:
        """KRISSBERT-style: the same loss over sentences that mention a few concepts (drawn from the
        seed and the step, so a resumed run draws the same), each concept's sentences the positives."""
        if self.contexts is None or self.context_reader is None:
            return None
        rng = np.random.default_rng([self.seed, self.step])
        texts, labels = self.contexts.batch(rng, self.data.context_concepts, self.data.context_per_concept)
        with autocast_context(self.precision, self.device):
            embeddings = self.context_reader.forward(self.context_reader.tokenize(texts), model=self.model)
        loss, _ = compute_loss(self.loss_fn, None, embeddings.float(), labels.to(self.device))
        return loss

    def _stop_on_non_finite(self, loss: float) -> None:
        """Raise before the step changes any weight: one NaN step makes every later step NaN and
        the saved encoder useless, so going on (and exiting 0) would only hide it."""
        bad = [n for n, p in self.encoder.model.named_parameters() if not bool(torch.isfinite(p).all())]
        cause = (
            f"the weights are already non-finite ({len(bad)} tensors, first {bad[0]}): the encoder at "
            f"{self.encoder.source} or the checkpoint resumed from is damaged"
            if bad else
            f"lower training.lr ({self.settings.lr}) or add training.grad_clip, or train in fp32 "
            f"(training.precision is {self.precision})"
        )
        last = ckpt.latest_checkpoint(self.paths.checkpoints)
        raise NonFiniteLossError(
            f"step {self.step + 1}: the loss is {loss}; training stopped before this step changed the weights "
            f"(last checkpoint: {last or 'none'}; no model was written to {self.paths.model}). {cause}"
        )

    # -------------------------------------------------------------- the run
    def prepare_output(self) -> int:
        """Start fresh, or continue from the latest checkpoint; returns the step resumed from."""
        resumed = self.restore() if self.resume else False
        if not resumed and ckpt.list_checkpoints(self.paths.checkpoints):
            raise FileExistsError(
                f"{self.paths.checkpoints} holds checkpoints of an earlier run: pass --resume to continue it, "
                "or choose another output folder"
            )
        if self.info.is_main:
            self.paths.output.mkdir(parents=True, exist_ok=True)
            self.config.to_disk(self.paths.output / "config.cfg")
        return self.step if resumed else 0

    def run(self) -> Dict[str, Any]:
        resumed_from = self.prepare_output()
        log = MetricsLog(self.paths.log, resume_step=resumed_from) if self.info.is_main else None
        if log and not resumed_from:
            log.write({"event": "start", "step": 0, "total_steps": self.total_steps, "pairs": len(self.pairs),
                       "concepts": len(self.pairs.concepts), **self.parameter_record(),
                       **({"context_concepts": len(self.contexts)} if self.contexts is not None else {}),
                       "precision": self.precision, "device": str(self.device), "world_size": self.info.world_size,
                       "threads": torch.get_num_threads()})
        bar = None
        if self.progress:
            from tqdm import tqdm

            params = self.parameter_record()
            adapter = ", adapter " + " ".join(f"{k}={v}" for k, v in params["adapter"].items()) if params["adapter"] else ""
            print(f"training {params['trainable_params']:,} of {params['total_params']:,} parameters "
                  f"({params['trainable_percent']:.2f}%){adapter}", file=sys.stderr)

            bar = tqdm(total=self.total_steps, initial=self.step, desc="self-alignment", unit="step", dynamic_ncols=True)
        self.model.train()
        window = {"loss": 0.0, "pairs": 0, "steps": 0, "mined": 0, "t0": time.perf_counter()}
        next_snapshot = self._next_snapshot_after(self.elapsed)
        t_last = time.perf_counter()
        stopped_early = False
        try:
            while self.step < self.total_steps:
                if self.plan is None or self.position >= len(self.plan):
                    if self.plan is not None:
                        self.epoch += 1
                        self.position = 0
                    self.plan = self.make_plan(self.epoch)
                out = self.train_step(self.plan[self.position])
                self.position += 1
                self.step += 1
                self.pairs_seen += out["pairs"]
                now = time.perf_counter()
                self.elapsed += now - t_last
                t_last = now
                for key in ("loss", "pairs", "mined"):
                    window[key] += out[key]
                window["context_loss"] = window.get("context_loss", 0.0) + out.get("context_loss", 0.0)
                window["steps"] += 1
                if bar is not None:
                    rate = window["pairs"] / max(1e-9, now - window["t0"])
                    bar.set_postfix(loss=f"{out['loss']:.4f}", pairs_s=f"{rate:.1f}", refresh=False)
                    bar.update(1)
                if self.settings.log_every and self.step % self.settings.log_every == 0 or self.step == self.total_steps:
                    if log:
                        log.write(self._window_record(window, now))
                    window = {"loss": 0.0, "pairs": 0, "steps": 0, "mined": 0, "t0": now}
                if self.settings.checkpoint_every and self.step % self.settings.checkpoint_every == 0:
                    self.save_checkpoint()
                if next_snapshot is not None and self.elapsed >= next_snapshot:
                    self._snapshot(log)
                    next_snapshot = self._next_snapshot_after(self.elapsed)
                t_last = time.perf_counter()  # checkpoint and snapshot writes are not training time
                budget_out = self.settings.max_minutes > 0 and self.elapsed >= self.settings.max_minutes * 60
                if any_rank(budget_out, self.info) and self.step < self.total_steps:
                    stopped_early = True
                    break
        except NonFiniteLossError as e:
            if log:
                log.write({"event": "stopped", "step": self.step, "reason": str(e)})
                log.close()
            raise
        finally:
            if bar is not None:
                bar.close()
        return self._finish(log, stopped_early)

    def _next_snapshot_after(self, elapsed: float) -> Optional[float]:
        every = self.settings.snapshot_every_minutes * 60
        return (math.floor(elapsed / every) + 1) * every if every > 0 else None

    def _window_record(self, window: Dict[str, Any], now: float) -> Dict[str, Any]:
        steps = max(1, window["steps"])
        return {
            "step": self.step,
            "epoch": self.epoch,
            "loss": window["loss"] / steps,
            "mined_per_step": window["mined"] / steps,
            "pairs_per_s": window["pairs"] / max(1e-9, now - window["t0"]),
            "lr": self.scheduler.get_last_lr()[0],
            "elapsed_s": round(self.elapsed, 3),
            "pairs_seen": self.pairs_seen,
            **({"context_loss": window.get("context_loss", 0.0) / steps} if self.contexts is not None else {}),
        }

    def output_encoder(self) -> SapEncoder:
        """The encoder to write out: the trained one, or with an adapter a plain copy with the
        adapter merged into the base weights (loads without peft; training goes on unchanged)."""
        self.encoder.invalidate()
        if self.adapter is None:
            return self.encoder
        enc = self.encoder
        return SapEncoder(merged_copy(enc.model), enc.tokenizer, replace(enc.settings), device=str(self.device),
                          precision=enc.precision, source=enc.source)

    def _snapshot(self, log: Optional[MetricsLog], encoder: Optional[SapEncoder] = None) -> None:
        """An encoder folder at this point, for accuracy-versus-training-time curves."""
        if self.info.is_main:
            path = self.paths.snapshots / f"step-{self.step:08d}"
            (encoder or self.output_encoder()).save(path)
            if log:
                log.write({"event": "snapshot", "step": self.step, "elapsed_s": round(self.elapsed, 3), "path": str(path)})
            self.encoder.model.train()
        barrier(self.info)

    def _finish(self, log: Optional[MetricsLog], stopped_early: bool) -> Dict[str, Any]:
        output = self.output_encoder()
        summary = {
            "steps": self.step,
            "total_steps": self.total_steps,
            "stopped_early": stopped_early,
            "epochs_started": self.epoch + 1,
            "pairs_seen": self.pairs_seen,
            "train_seconds": round(self.elapsed, 2),
            "pairs_per_s": self.pairs_seen / max(1e-9, self.elapsed),
            "device": str(self.device),
            "precision": self.precision,
            "world_size": self.info.world_size,
            "threads": torch.get_num_threads(),
            **self.parameter_record(),
            "encoder_fingerprint": output.fingerprint,
            **peak_memory_mb(self.device),
            **({"contexts": self.data.contexts, "context_concepts": len(self.contexts)} if self.contexts is not None else {}),
        }
        if self.settings.snapshot_every_minutes > 0:
            self._snapshot(log, output)
        if self.info.is_main:
            output.save(self.paths.model)
            write_json(self.paths.output / "summary.json", summary)
            if log:
                log.write({"event": "end", **summary})
                log.close()
            from .plot import plot_loss

            plot_loss(self.paths.log, self.paths.output / "loss.png")
        barrier(self.info)
        return summary


def train(config: Union[Config, Dict[str, Any]], *, resume: bool = False, progress: bool = True) -> Dict[str, Any]:
    """Run one training job from a config; returns the summary (also in ``summary.json``)."""
    try:
        return Trainer(config, resume=resume, progress=progress).run()
    finally:
        shutdown_distributed()


def train_from_file(config: Union[str, Path], override_args: list, *, resume: bool = False, progress: bool = True) -> Dict[str, Any]:
    """What the command-line entry points do: read a config, apply ``--section.key value``
    overrides, train."""
    from .config import load_config, parse_overrides

    return train(load_config(config, parse_overrides(override_args)), resume=resume, progress=progress)
