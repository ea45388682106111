"""``python -m training.pretrain CONFIG [--resume] [--section.key value ...]``

Self-alignment pretraining on a synonym-pair file. CONFIG is a path or the name of a bundled
config: ``sapbert`` (the authors' settings, for GPUs) or ``cpu`` (the CPU profile).
Under ``torchrun --nproc_per_node N`` it trains data-parallel.
"""
from __future__ import annotations

import json

import typer

from .trainer import train_from_file

app = typer.Typer(add_completion=False)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def pretrain(
    ctx: typer.Context,
    config: str = typer.Argument(..., help="config file, or the name of one in training/configs (sapbert, cpu)"),
    resume: bool = typer.Option(False, "--resume", help="continue from the latest checkpoint in the output folder"),
    progress: bool = typer.Option(True, help="show a progress bar"),
) -> None:
    """Train an encoder so that all names of a concept lie close together."""
    summary = train_from_file(config, ctx.args, resume=resume, progress=progress)
    typer.echo(json.dumps(summary, indent=2))


if __name__ == "__main__":
    app()
