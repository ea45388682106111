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
    verbose: bool = typer.Option(False, "--verbose", "-v", help="on a training fault, show the traceback (default: one line)"),
) -> None:
    """Train an encoder so that all names of a concept lie close together."""
    from .checkpoint import CorruptCheckpointError
    from .trainer import NonFiniteLossError

    try:
        summary = train_from_file(config, ctx.args, resume=resume, progress=progress)
    except (NonFiniteLossError, CorruptCheckpointError) as e:  # faults the run names itself: one line, exit status 1
        if verbose:
            raise
        typer.echo(f"error: {' '.join(str(e).splitlines())}", err=True)
        raise typer.Exit(1) from None
    typer.echo(json.dumps(summary, indent=2))


if __name__ == "__main__":
    app()
