"""Parameter-efficient self-alignment: train a small adapter, keep the encoder's weights frozen.

The paper's ADAPTER rows (SapBERT, Liu et al. 2021, Table 1) train only a few percent of the
parameters with Houlsby bottleneck adapters (small down/up projections inserted in every
layer). Here the stand-in is LoRA through ``peft`` (low-rank updates of chosen linear layers,
by default the attention's ``query`` and ``value``): the same idea, a different adapter, and
one that folds back into the base weights after training.

``[training.adapter]`` picks it: ``none.v1`` (default, every weight trains) or ``lora.v1``.
During training the model is a ``peft`` model and checkpoints hold its full state (base +
adapter), so ``--resume`` continues exactly. Encoder folders (snapshots, the final model) hold
the merged weights: a plain transformers model that loads without ``peft``.

``peft`` is optional (``pip install peft`` or the ``adapter`` extra) and imported only when an
adapter is on.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import torch

from .registry import registry

PEFT_MISSING = (
    "[training.adapter] {name} needs the optional package 'peft': "
    "pip install peft (or pip install -e \".[adapter]\"), or switch the adapter off with "
    "@adapters = \"none.v1\""
)


def import_peft(name: str = "lora.v1"):
    """``peft``, or an ImportError that says how to get it."""
    try:
        import peft
    except ImportError as e:
        raise ImportError(PEFT_MISSING.format(name=name)) from e
    return peft


@dataclass(frozen=True)
class LoraAdapter:
    """LoRA settings (``peft.LoraConfig``'s names); ``apply`` wraps a model with them."""

    r: int = 8
    lora_alpha: float = 16.0
    lora_dropout: float = 0.1
    target_modules: Tuple[str, ...] = ("query", "value")

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"training.adapter.r must be at least 1, got {self.r}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"training.adapter.lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if not self.target_modules:
            raise ValueError("training.adapter.target_modules must name at least one module")

    def describe(self) -> Dict[str, Any]:
        """JSON-able settings (the run log, the summary and checkpoints record them)."""
        return {
            "type": "lora",
            "r": self.r,
            "lora_alpha": self.lora_alpha,
            "lora_dropout": self.lora_dropout,
            "target_modules": list(self.target_modules),
        }

    def apply(self, model: torch.nn.Module) -> torch.nn.Module:
        """Wrap ``model`` (in place) with fresh LoRA layers; only their weights stay trainable."""
        peft = import_peft()
        config = peft.LoraConfig(
            r=self.r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            target_modules=list(self.target_modules),
            bias="none",
        )
        with warnings.catch_warnings():
            # peft asks transformers a deprecated question; nothing the user can act on
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            return peft.get_peft_model(model, config)


def merged_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A plain copy of an adapted ``model`` with the adapter folded into the base weights.

    ``model`` itself is left as it is (merging and unmerging in place would not give the
    same float32 weights back, and training goes on after a snapshot).
    """
    return copy.deepcopy(model).merge_and_unload()


def count_parameters(model: torch.nn.Module) -> Tuple[int, int]:
    """(trainable, all) parameter counts; with an adapter, ``all`` includes the adapter's."""
    trainable = total = 0
    for p in model.parameters():
        total += p.numel()
        if p.requires_grad:
            trainable += p.numel()
    return trainable, total


@registry.adapters("none.v1")
def no_adapter() -> Optional[LoraAdapter]:
    """Train every weight of the encoder (the paper's default SapBERT)."""
    return None


@registry.adapters("lora.v1")
def lora_adapter(
    r: int = 8,
    lora_alpha: float = 16.0,
    lora_dropout: float = 0.1,
    target_modules: Sequence[str] = ("query", "value"),
) -> Optional[LoraAdapter]:
    """LoRA on ``target_modules`` (BERT's attention ``query``/``value`` by default): the ``peft``
    stand-in for the paper's bottleneck adapters. Resolving the config does not import ``peft``."""
    return LoraAdapter(r=int(r), lora_alpha=float(lora_alpha), lora_dropout=float(lora_dropout),
                       target_modules=tuple(target_modules))
