"""Write a distilled student as the package ships it: its encoder layers alone, as float16, and the
calibration of its scores onto its teacher's.

    python -m training.export_student STUDENT OUTPUT [--teacher minilm] [--calibration-strings 20000]

``training.distill`` writes a whole transformers folder (about 70 MB for MiniLM's 3 layers, most of
it the embeddings, which the student keeps frozen and so equal to the teacher's). The linker's
``query_encoder`` rebuilds a student on its teacher (``spacy_sapbert/query_encoder.py``), so the
layers are all it needs: about 11 MB as float16. Prints how far the float16 copy's vectors move
from the float32 student's on ``--check`` of the teacher's vocabulary entries.

The calibration: for ``--calibration-strings`` of the student's own training n-grams (never a KB
name; the strings ``distillation.json`` records, rebuilt and checked by their sha256), the best
cosine against the training KBs' names by the student (float16 copy) and by the teacher; an isotonic
fit of the teacher's on the student's, read at knots 0.80, 0.81, ... 0.99, goes into the report as
``score_calibration`` (straight lines to (-1, -1) and (1, 1) beyond). The teacher's vectors are read
from ``STUDENT.work`` where ``training.distill`` left them for the same strings and teacher.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import torch
import typer

from spacy_sapbert.encoder import SapEncoder, resolve_encoder_path
from spacy_sapbert.query_encoder import Student
from training import distill

KNOTS = [round(0.80 + 0.01 * i, 2) for i in range(20)]  # 0.80 ... 0.99: where the thresholds live
MIN_STRINGS = 100  # scoring near the knots, to fit them on


def best_scores(vectors: np.ndarray, names: np.ndarray, block: int = 2048) -> np.ndarray:
    """Each vector's best cosine against ``names``."""
    names_t = torch.from_numpy(np.ascontiguousarray(names)).T
    return np.concatenate([(torch.from_numpy(vectors[i : i + block]) @ names_t).amax(1).numpy()
                           for i in range(0, len(vectors), block)])


def fit_calibration(student_best: np.ndarray, teacher_best: np.ndarray) -> Dict[str, List[float]]:
    """Knots mapping the student's best cosines onto the teacher's expected ones (isotonic, strictly increasing)."""
    from sklearn.isotonic import IsotonicRegression

    keep = (student_best >= KNOTS[0] - 0.05) & (np.maximum(student_best, teacher_best) < 0.9999)
    if keep.sum() < MIN_STRINGS:
        raise ValueError(f"only {int(keep.sum())} of {len(keep)} strings score from {KNOTS[0] - 0.05:.2f} to 0.9999: too few "
                         f"to fit the calibration on (at least {MIN_STRINGS}; --calibration-strings 0 writes none)")
    fit = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(student_best[keep], teacher_best[keep])
    xs, ys = [-1.0] + KNOTS + [1.0], [-1.0] + [float(y) for y in fit.predict(KNOTS)] + [1.0]
    for i in range(1, len(ys) - 1):  # strictly increasing and below 1: no two names' order changes, no 1.0
        ys[i] = min(max(ys[i], ys[i - 1] + 1e-4), 1.0 - 1e-4 * (len(ys) - 1 - i))
    return {"student": xs, "teacher": [round(y, 6) for y in ys], "strings": int(keep.sum())}


def main(
    student: Path = typer.Argument(..., help="a folder training.distill wrote"),
    output: Path = typer.Argument(..., help="the folder to write (e.g. spacy_sapbert/data/query_encoders/minilm-l3)"),
    teacher: str = typer.Option("minilm", help="the teacher: a local transformers folder, or minilm"),
    check: int = typer.Option(5000, help="vocabulary entries whose vectors are compared"),
    calibration_strings: int = typer.Option(20000, help="training n-grams the calibration is fit on (0: no calibration)"),
    seed: int = typer.Option(0),
) -> None:
    teacher_encoder = SapEncoder.load(resolve_encoder_path(teacher), device="cpu", precision="fp32")
    try:
        full = Student.read(student)
        built = full.build(teacher_encoder)
        report = full.report
        strings, n_names = distill.training_strings([Path(p) for p in report["kbs"]], [Path(p) for p in report["texts"]],
                                                    report["strings"] - report["kb_names"], report["seed"])
    except (OSError, ValueError, KeyError) as e:
        raise typer.BadParameter(f"{student}: {e}") from None
    key = {"strings_sha256": distill.strings_sha256(strings), "teacher": teacher_encoder.fingerprint}
    if key["strings_sha256"] != report.get("strings_sha256"):
        raise typer.BadParameter(f"{student}: its training strings cannot be rebuilt (sha256 {key['strings_sha256']}, "
                                 f"recorded {report.get('strings_sha256')}): a KB or text file changed")
    shipped = full.layers_only()
    small = shipped.build(teacher_encoder)
    words = [w for w in teacher_encoder.tokenizer.get_vocab() if w.isalpha() and len(w) > 3][:check]
    cosines = np.sum(built.encode(words) * small.encode(words), axis=1)
    typer.echo(f"float16 layers against float32, {len(words)} words: lowest cosine {cosines.min():.6f}, mean {cosines.mean():.6f}")

    if calibration_strings:
        work = student.with_name(student.name + ".work")
        work.mkdir(exist_ok=True)
        targets = distill.cached_array(work / "teacher.npy", key, lambda: teacher_encoder.encode(strings, batch_size=256, progress=True))
        rows = np.sort(np.random.default_rng(seed).choice(np.arange(n_names, len(strings)),
                                                          min(calibration_strings, len(strings) - n_names), replace=False))
        names = targets[:n_names]
        student_best = best_scores(small.encode([strings[i] for i in rows], batch_size=256), names)
        try:
            calibration = fit_calibration(student_best, best_scores(np.asarray(targets[rows]), names))
        except ValueError as e:
            raise typer.BadParameter(f"{student}: {e}") from None
        for x, y in zip(calibration["student"][1:-1], calibration["teacher"][1:-1]):
            typer.echo(f"  student {x:.2f} -> teacher {y:.4f}")
        shipped.report["score_calibration"] = {**calibration, "made_by": "python -m training.export_student", "seed": seed}
    shipped.write(output)
    size = sum(f.stat().st_size for f in output.iterdir()) / 1e6
    typer.echo(f"{output}: {len(shipped.tensors)} tensors, {size:.1f} MB", err=True)


if __name__ == "__main__":
    typer.run(main)
