"""Training checkpoints without pickle: tensors in safetensors files, everything else in JSON.

A checkpoint folder ``step-00000100/`` holds the model weights, the optimizer's state
tensors, the epoch's batch plan, one RNG file per rank and ``state.json`` (step, epoch,
position in the plan, optimizer hyper-parameters, scheduler and grad-scaler state, Python
RNG state). It is assembled under a hidden name and renamed into place, so a kill at any
moment leaves either a complete checkpoint or none. ``checksums.json`` holds the sha256 of
every other file; resume verifies them, so damaged bytes (a bad disk, a partial copy) are
refused instead of resumed from. With ``[training.adapter]`` on, the weights
are the adapted model's (frozen base + adapter, unmerged), so a resumed run continues exactly.
"""
from __future__ import annotations

import os
import random
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import torch
from safetensors.torch import load_file, save_file

from spacy_sapbert.fileio import file_sha256, read_json, replace_dir, write_json

STATE_FILE = "state.json"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
PLAN_FILE = "plan.safetensors"
CHECKSUM_FILE = "checksums.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


# ---------------------------------------------------------------- optimizer state
def optimizer_to_tensors(optimizer: torch.optim.Optimizer):
    """Split ``optimizer.state_dict()`` into a tensor dict and a JSON-able dict."""
    sd = optimizer.state_dict()
    tensors: Dict[str, torch.Tensor] = {}
    scalars: Dict[str, Dict[str, Any]] = {}
    for pid, pstate in sd["state"].items():
        for key, value in pstate.items():
            if torch.is_tensor(value):
                tensors[f"{pid}/{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[key] = value
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars}


def optimizer_from_tensors(optimizer: torch.optim.Optimizer, tensors: Dict[str, torch.Tensor], meta: Dict[str, Any]) -> None:
    state: Dict[int, Dict[str, Any]] = {}
    for name, value in tensors.items():
        pid, key = name.split("/", 1)
        state.setdefault(int(pid), {})[key] = value
    for pid, values in meta["scalars"].items():
        state.setdefault(int(pid), {}).update(values)
    groups = [{k: (tuple(v) if k == "betas" else v) for k, v in g.items()} for g in meta["param_groups"]]
    optimizer.load_state_dict({"state": state, "param_groups": groups})


# ---------------------------------------------------------------- RNG state
def rng_tensors() -> Dict[str, torch.Tensor]:
    out = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"torch_cuda_{i}"] = s
    return out


def python_rng_state() -> List[Any]:
    version, internal, gauss = random.getstate()
    return [version, list(internal), gauss]


def restore_rng(tensors: Dict[str, torch.Tensor], python_state: List[Any]) -> None:
    torch.set_rng_state(tensors["torch_cpu"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("torch_cuda_")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    version, internal, gauss = python_state
    random.setstate((version, tuple(internal), gauss))


# ---------------------------------------------------------------- folders
def staging_dir(root: Path, step: int) -> Path:
    return root / f".{checkpoint_name(step)}.partial"


def write_rank_rng(folder: Path, rank: int) -> None:
    """Each rank writes its own RNG state (dropout masks differ between ranks)."""
    save_file(rng_tensors(), str(folder / f"rng-rank{rank}.safetensors"))
    write_json(folder / f"rng-rank{rank}.json", python_rng_state())


def write_checkpoint(
    folder: Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    plan_arrays,
    state: Dict[str, Any],
) -> None:
    """Write the shared parts (rank 0) into the staging ``folder``."""
    from safetensors.torch import save_model

    save_model(model, str(folder / MODEL_FILE))
    tensors, optim_meta = optimizer_to_tensors(optimizer)
    save_file(tensors, str(folder / OPTIMIZER_FILE))
    flat, offsets = plan_arrays
    save_file({"flat": torch.from_numpy(flat), "offsets": torch.from_numpy(offsets)}, str(folder / PLAN_FILE))
    write_json(folder / STATE_FILE, {**state, "optimizer": optim_meta})


class CorruptCheckpointError(ValueError):
    """A checkpoint's files do not match the checksums written with them, or cannot be read."""


def write_checksums(folder: Path) -> None:
    """``checksums.json``: the sha256 of every other file in ``folder`` (written last)."""
    sums = {p.name: file_sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != CHECKSUM_FILE}
    write_json(folder / CHECKSUM_FILE, {"sha256": sums})


def verify_checkpoint(folder: Path) -> bool:
    """Check every file against ``checksums.json``; raise ``CorruptCheckpointError`` naming the
    file that differs. Returns False for a checkpoint written before checksums existed."""
    manifest = folder / CHECKSUM_FILE
    if not manifest.is_file():
        return False
    try:
        sums = read_json(manifest)["sha256"]
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptCheckpointError(f"{manifest}: unreadable checksum list ({e})") from None
    for name, expected in sums.items():
        path = folder / name
        if not path.is_file():
            raise CorruptCheckpointError(f"{path}: missing (listed in {CHECKSUM_FILE})")
        if file_sha256(path) != expected:
            raise CorruptCheckpointError(f"{path}: damaged (its sha256 differs from the one in {CHECKSUM_FILE})")
    return True


def set_aside(folder: Path) -> Path:
    """Rename a damaged checkpoint to a hidden name: kept for inspection, never resumed from."""
    target = folder.with_name(f".{folder.name}.damaged")
    if target.exists():
        shutil.rmtree(target)
    os.replace(folder, target)
    return target


def publish(staging: Path, root: Path, step: int, keep: int) -> Path:
    """Checksum a complete staging folder, rename it into place and drop all but the newest ``keep``."""
    write_checksums(staging)
    final = root / checkpoint_name(step)
    replace_dir(staging, final)
    if keep > 0:
        for old in list_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(root: Path) -> List[Path]:
    """Complete checkpoints, oldest first (partial ones have a hidden name)."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and (p / STATE_FILE).is_file()]
    return [p for _, p in sorted(found)]


def incomplete_checkpoints(root: Path) -> List[Path]:
    """Checkpoint folders (``step-N``) without ``state.json``: never resumed from, and reported as such
    (a published checkpoint always has it: one without was damaged or emptied by hand)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if _STEP_DIR.match(p.name) and p.is_dir() and not (p / STATE_FILE).is_file())


def latest_checkpoint(root: Path) -> Optional[Path]:
    found = list_checkpoints(root)
    return found[-1] if found else None


def load_checkpoint(folder: Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int) -> Dict[str, Any]:
    """Restore model, optimizer and this rank's RNG; return the state with the plan arrays."""
    from safetensors.torch import load_model

    with _naming(folder / MODEL_FILE):
        load_model(model, str(folder / MODEL_FILE), device=str(next(model.parameters()).device))
    state = read_json(folder / STATE_FILE)
    with _naming(folder / OPTIMIZER_FILE):
        optimizer_tensors = load_file(str(folder / OPTIMIZER_FILE))
    optimizer_from_tensors(optimizer, optimizer_tensors, state.pop("optimizer"))
    rng_file = folder / f"rng-rank{rank}.safetensors"
    if not rng_file.is_file():
        raise FileNotFoundError(f"{rng_file} missing: resume with the same number of processes as the run that wrote it")
    with _naming(rng_file):
        rng = load_file(str(rng_file))
    restore_rng(rng, read_json(folder / f"rng-rank{rank}.json"))
    with _naming(folder / PLAN_FILE):
        plan = load_file(str(folder / PLAN_FILE))
    state["plan_arrays"] = (plan["flat"].numpy(), plan["offsets"].numpy())
    return state


@contextmanager
def _naming(path: Path) -> Iterator[None]:
    """Errors while reading ``path`` name it (safetensors' own messages do not)."""
    try:
        yield
    except (FileNotFoundError, CorruptCheckpointError):
        raise
    except Exception as e:  # safetensors raises its own error types for a damaged header
        raise CorruptCheckpointError(f"{path}: cannot be read ({type(e).__name__}: {e})") from e
