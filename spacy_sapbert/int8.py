"""The encoder at ``precision="int8"``: SmoothQuant-calibrated, per-channel dynamic int8 Linear layers.

torch's dynamic quantisation alone (one scale per weight tensor and per activation tensor), the int8
this package had first, moved the vectors to a mean cosine of 0.965 with fp32's and changed 6 of the
HPO default's GSC+ dev links (link F1 0.607 -> 0.602, ``benchmarks/results/encoder_precision_avx2.json``
as committed at 9aa757a): a BERT's activations carry a few channels far larger than the rest, and one
scale per tensor spends the int8 range on them. SmoothQuant (Xiao et al., ICML 2023) divides input
channel j of each Linear by ``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)`` and multiplies the weight's
column j by it, which moves the range from the activations into the weights (the product is
unchanged); the weights are then quantised per output channel. The activation maxima come from
encoding a fixed calibration list with the fp32 model (``CALIBRATION_FILE``: MeSH 2024 names, none of
them benchmark text). ``ALPHA`` is the value under which the most NCBI-disease and BC5CDR-disease dev
mentions found the concept fp32 finds when it was chosen (``python benchmarks/int8_alpha.py --isa avx2``);
the alphas from 0.8 to 0.95 have since agreed within a few mentions of each other, the best changing
from run to run.

The quantised Linear layers run in fbgemm (x86) or qnnpack (ARM), CPU only. torch 2.13 marks its eager
quantisation API deprecated in favour of torchao, which is not a dependency; its warnings are not
repeated to users here.

Calibrating takes seconds (1,000 names through the fp32 model), so the
maxima are kept in the user's cache folder (``maxima_file``: one ``.npz`` per encoder and calibration
list) and read back by later processes, ``annotate``'s workers included.
"""
from __future__ import annotations

import copy
import hashlib
import json
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import torch

CALIBRATION_FILE = Path(__file__).parent / "data" / "int8_calibration.json"
ALPHA = 0.85  # how much of an activation channel's range moves into the weights (SmoothQuant's alpha)
CALIBRATION_BATCH = 64


class SmoothedLinear(torch.nn.Module):
    """A quantised Linear whose input channels are first divided by their smoothing scales."""

    def __init__(self, linear: torch.nn.Module, inverse_scales: torch.Tensor):
        super().__init__()
        self.linear = linear
        self.register_buffer("inverse_scales", inverse_scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x * self.inverse_scales)


def calibration_texts(path: Path = CALIBRATION_FILE) -> List[str]:
    """The calibration names (the file records their source and licence)."""
    data = json.loads(Path(path).read_text(encoding="utf8"))
    texts = data.get("names") if isinstance(data, dict) else None
    if not texts or not all(isinstance(t, str) and t for t in texts):
        raise ValueError(f"{path}: 'names' must be a non-empty list of non-empty strings")
    return texts


def maxima_file(encoder_fingerprint: str, folder: Optional[Path] = None, calibration: Path = CALIBRATION_FILE) -> Path:
    """Where the maxima of the encoder ``encoder_fingerprint`` over ``calibration`` are kept
    (the user cache folder: ``SPACY_SAPBERT_CACHE`` or ~/.cache/spacy-sapbert)."""
    from .fileio import cache_dir

    digest = hashlib.sha256(Path(calibration).read_bytes()).hexdigest()[:12]
    return (folder or cache_dir()) / "int8" / f"maxima-{encoder_fingerprint[:16]}-{digest}.npz"


def cached_maxima(path: Path, expected: Dict[str, int], compute: Callable[[], Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """The maxima stored at ``path`` when each is a vector of its layer's ``expected`` input width (the
    Linear layers of the model by name; calibration need not run them all); else ``compute()``'s,
    written there atomically (a cache folder that cannot be written is only not written)."""
    from .fileio import atomic_path

    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as stored:
                found = {name: torch.from_numpy(stored[name].astype(np.float32)) for name in stored.files}
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            found = {}
        if found and all(v.dim() == 1 and expected.get(name) == v.numel() for name, v in found.items()):
            return found
    maxima = compute()
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.savez(f, **{name: v.numpy() for name, v in maxima.items()})
    except OSError:
        pass
    return maxima


def activation_maxima(model: torch.nn.Module, run: Callable[[], object]) -> Dict[str, torch.Tensor]:
    """The largest absolute input of every input channel of every Linear in ``model`` while ``run()`` runs it."""
    maxima: Dict[str, torch.Tensor] = {}
    hooks = []

    def hook(name: str) -> Callable:
        def record(module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            x = inputs[0].detach().abs().reshape(-1, inputs[0].shape[-1]).amax(0).float()
            maxima[name] = torch.maximum(maxima[name], x) if name in maxima else x

        return record

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            hooks.append(module.register_forward_hook(hook(name)))
    training = model.training
    model.eval()  # no dropout: the maxima are those inference sees
    try:
        with torch.inference_mode():
            run()
    finally:
        model.train(training)
        for h in hooks:
            h.remove()
    return maxima


def smoothed_int8(model: torch.nn.Module, maxima: Dict[str, torch.Tensor], alpha: float = ALPHA) -> torch.nn.Module:
    """A copy of ``model`` whose calibrated Linear layers are smoothed (``SmoothedLinear``) and quantised
    per output channel; Linear layers the calibration never ran stay fp32. ``model`` is unchanged."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    smoothed = copy.deepcopy(model).float().eval()
    for parent_name, parent in list(smoothed.named_modules()):
        for child_name, child in list(parent.named_children()):
            name = f"{parent_name}.{child_name}" if parent_name else child_name
            if not isinstance(child, torch.nn.Linear) or name not in maxima:
                continue
            weight = child.weight.data
            scales = (maxima[name].clamp(min=1e-5) ** alpha / weight.abs().amax(0).clamp(min=1e-5) ** (1 - alpha)).clamp(min=1e-5)
            child.weight.data = weight * scales
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r".*(deprecated|torchao).*")
                quantised = quantize_dynamic(torch.nn.Sequential(child), {torch.nn.Linear: per_channel_dynamic_qconfig})[0]
            setattr(parent, child_name, SmoothedLinear(quantised, 1.0 / scales))
    return smoothed.eval()
