"""``python -m training.finetune CONFIG --paths.pairs TASK_PAIRS --paths.encoder MODEL [...]``

Fine-tuning on task data (paper §3.1): the same loss on mention–name pairs from a training
corpus (e.g. NCBI-disease train mentions paired with the names of their gold concepts),
starting from a self-aligned encoder. The default config is ``training/configs/finetune.cfg``.
"""
from __future__ import annotations

import json

import typer

from .trainer import train_from_file

app = typer.Typer(add_completion=False)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def finetune(
    ctx: typer.Context,
    config: str = typer.Argument(..., help="config file, or the name of one in training/configs (finetune)"),
    resume: bool = typer.Option(False, "--resume", help="continue from the latest checkpoint in the output folder"),
    progress: bool = typer.Option(True, help="show a progress bar"),
) -> None:
    """Continue self-alignment on mention–name pairs from a task's training set."""
    summary = train_from_file(config, ctx.args, resume=resume, progress=progress)
    typer.echo(json.dumps(summary, indent=2))


if __name__ == "__main__":
    app()
