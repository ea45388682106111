"""Pictures of a run: the loss curve, and dev accuracy against minutes of training."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import typer

from spacy_sapbert.fileio import atomic_open

from .runlog import read_log


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Union[str, Path]) -> None:
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120, bbox_inches="tight")


def plot_loss(log_path: Union[str, Path], png_path: Union[str, Path]) -> Optional[Path]:
    """Loss per logged window against the step; nothing is drawn for an empty log."""
    rows = [r for r in read_log(log_path) if "loss" in r and "event" not in r]
    if not rows:
        return None
    plt = _figure()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("self-alignment loss")
    ax.grid(alpha=0.3)
    _save(fig, png_path)
    plt.close(fig)
    return Path(png_path)


def plot_accuracy(
    series: Dict[str, Sequence[Dict[str, float]]], png_path: Union[str, Path], metric: str = "lenient_acc@1"
) -> Path:
    """One line per named series of ``{"minutes": m, metric: percent}`` points."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, points in series.items():
        pts = sorted(points, key=lambda p: p["minutes"])
        ax.plot([p["minutes"] for p in pts], [p[metric] for p in pts], marker="o", label=label)
    ax.set_xlabel("minutes of training")
    ax.set_ylabel(f"{metric} (%)")
    ax.grid(alpha=0.3)
    ax.legend()
    _save(fig, png_path)
    plt.close(fig)
    return Path(png_path)


def main(
    results: Path = typer.Argument(..., help="JSON lines from training.dev_eval (one object per model and dataset)"),
    output: Path = typer.Argument(..., help="PNG to write"),
    metric: str = typer.Option("lenient_acc@1", help="which field to plot (percent)"),
) -> None:
    """Plot dev accuracy against minutes of training, one line per dataset."""
    series: Dict[str, List[Dict[str, float]]] = {}
    for r in read_log(results):
        if "minutes" in r and metric in r:
            series.setdefault(r.get("dataset", "dev"), []).append(r)
    plot_accuracy(series, output, metric)


if __name__ == "__main__":
    typer.run(main)
