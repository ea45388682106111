"""Loss functions and pair miners, registered by name so a config file can choose them.

The defaults are the ones in the authors' released training code (cambridgeltl/sapbert,
``src/metric_learning.py``); the other losses are the paper's Table 6 ablation.
"""
from __future__ import annotations

from typing import Optional

import torch
from pytorch_metric_learning import losses, miners
from pytorch_metric_learning.losses import BaseMetricLossFunction
from pytorch_metric_learning.miners import BaseMiner

from .registry import registry


class ZeroLoss(BaseMetricLossFunction):
    """A loss that is always 0 (with a graph, so backward runs): the no-learning control."""

    def forward(self, embeddings, labels=None, indices_tuple=None, ref_emb=None, ref_labels=None):
        return embeddings.sum() * 0.0


@registry.losses("multi_similarity.v1")
def multi_similarity_loss(alpha: float = 1.0, beta: float = 60.0, base: float = 0.5) -> BaseMetricLossFunction:
    """The SapBERT loss. The released code uses alpha=1, beta=60, base=0.5; the paper's
    Table 9 lists alpha=2, beta=50 (the code's comment gives the search ranges 1-3, 40-60)."""
    return losses.MultiSimilarityLoss(alpha=alpha, beta=beta, base=base)


@registry.losses("infonce.v1")
def infonce_loss(temperature: float = 0.07) -> BaseMetricLossFunction:
    """InfoNCE / NT-Xent with the MoCo temperature, as in the authors' code."""
    return losses.NTXentLoss(temperature=temperature)


@registry.losses("circle.v1")
def circle_loss(m: float = 0.4, gamma: float = 80.0) -> BaseMetricLossFunction:
    return losses.CircleLoss(m=m, gamma=gamma)


@registry.losses("triplet.v1")
def triplet_loss(margin: float = 0.05) -> BaseMetricLossFunction:
    return losses.TripletMarginLoss(margin=margin)


@registry.losses("nca.v1")
def nca_loss(softmax_scale: float = 1.0) -> BaseMetricLossFunction:
    return losses.NCALoss(softmax_scale=softmax_scale)


@registry.losses("lifted_structure.v1")
def lifted_structure_loss(neg_margin: float = 1.0, pos_margin: float = 0.0) -> BaseMetricLossFunction:
    return losses.LiftedStructureLoss(neg_margin=neg_margin, pos_margin=pos_margin)


@registry.losses("none.v1")
def no_loss() -> BaseMetricLossFunction:
    """Train nothing: the control run of the learning test."""
    return ZeroLoss()


@registry.miners("triplet_margin.v1")
def triplet_margin_miner(margin: float = 0.2, type_of_triplets: str = "all") -> Optional[BaseMiner]:
    """SapBERT's online hard-pair mining on L2-normalised embeddings."""
    return miners.TripletMarginMiner(margin=margin, type_of_triplets=type_of_triplets)


@registry.miners("none.v1")
def no_miner() -> Optional[BaseMiner]:
    """Mining off (the paper's Table 2 ablation): the loss sees every pair of the batch."""
    return None


def count_mined(indices_tuple) -> int:
    """How many triplets (or pairs) the miner kept; -1 when there was no miner."""
    if indices_tuple is None:
        return -1
    return int(indices_tuple[0].numel())


def compute_loss(loss_fn: torch.nn.Module, miner: Optional[torch.nn.Module], embeddings: torch.Tensor, labels: torch.Tensor):
    """Mine on the batch (or take all pairs) and apply the loss; returns (loss, n_mined)."""
    indices = miner(embeddings, labels) if miner is not None else None
    return loss_fn(embeddings, labels, indices), count_mined(indices)
