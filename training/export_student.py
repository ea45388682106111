"""Write a distilled student as the package ships it: its encoder layers alone, as float16.

    python -m training.export_student STUDENT OUTPUT [--teacher minilm]

``training.distill`` writes a whole transformers folder (about 70 MB for MiniLM's 3 layers, most of
it the embeddings, which the student keeps frozen and so equal to the teacher's). The linker's
``query_encoder`` rebuilds a student on its teacher (``spacy_sapbert/query_encoder.py``), so the
layers are all it needs: about 11 MB as float16. Prints how far the float16 copy's vectors move
from the float32 student's on ``--check`` of the teacher's vocabulary entries, before writing.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from spacy_sapbert.encoder import SapEncoder, resolve_encoder_path
from spacy_sapbert.query_encoder import Student


def main(
    student: Path = typer.Argument(..., help="a folder training.distill wrote"),
    output: Path = typer.Argument(..., help="the folder to write (e.g. spacy_sapbert/data/query_encoders/minilm-l3)"),
    teacher: str = typer.Option("minilm", help="the teacher: a local transformers folder, or minilm"),
    check: int = typer.Option(5000, help="vocabulary entries whose vectors are compared"),
) -> None:
    teacher_encoder = SapEncoder.load(resolve_encoder_path(teacher), device="cpu", precision="fp32")
    try:
        full = Student.read(student)
        built = full.build(teacher_encoder)
    except (OSError, ValueError) as e:
        raise typer.BadParameter(str(e)) from None
    shipped = full.layers_only()
    strings = [w for w in teacher_encoder.tokenizer.get_vocab() if w.isalpha() and len(w) > 3][:check]
    cosines = np.sum(built.encode(strings) * shipped.build(teacher_encoder).encode(strings), axis=1)
    typer.echo(f"float16 layers against float32, {len(strings)} words: lowest cosine {cosines.min():.6f}, mean {cosines.mean():.6f}")
    shipped.write(output)
    size = sum(f.stat().st_size for f in output.iterdir()) / 1e6
    typer.echo(f"{output}: {len(shipped.tensors)} tensors, {size:.1f} MB", err=True)


if __name__ == "__main__":
    typer.run(main)
