"""A smaller encoder for the linker's queries, trained into its KB encoder's space.

``training.distill`` trains a student: the KB encoder (its teacher) keeping only some of its layers,
its tokenizer and embeddings unchanged, taught to give the teacher's vectors. The KB's names keep
the teacher's vectors; only the queries, what is encoded while linking, go through the student.

A student folder holds ``distillation.json`` (the teacher's fingerprint and the layers kept) and
``model.safetensors``: the tensors that differ from the teacher with those layers kept (a folder
``training.distill`` wrote has them all; the one shipped holds its layers alone, as float16). The
student is rebuilt on the teacher it names, so it can only ever be used with that teacher's KBs.

Its cosines near the top are compressed (a name the teacher scores near 0.97 it scores lower on
average), which would move the span finder's and the linker's thresholds. The report's
``score_calibration`` (knots fit by ``training.export_student`` on the student's training strings:
the teacher's score expected for each of the student's) maps them back onto the teacher's scale.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict, List, Sequence, Union

import torch

from .encoder import SapEncoder
from .fileio import atomic_dir, read_json, write_json

REPORT_FILE = "distillation.json"
WEIGHTS_FILE = "model.safetensors"
# students shipped in the package, by name (``LinkerSettings.query_encoder``)
SHIPPED = {"minilm-l3": Path(__file__).parent / "data" / "query_encoders" / "minilm-l3"}


def keep_layers(model: torch.nn.Module, layers: Sequence[int]) -> torch.nn.Module:
    """A copy of a BERT-style ``model`` keeping its encoder layers ``layers``, in that order."""
    n = int(model.config.num_hidden_layers)
    if not layers or any(not 0 <= i < n for i in layers):
        raise ValueError(f"layers must be layers of the model's {n} (0 to {n - 1}), got {list(layers)}")
    kept = copy.deepcopy(model)
    kept.encoder.layer = torch.nn.ModuleList(copy.deepcopy(model.encoder.layer[i]) for i in layers)
    kept.config.num_hidden_layers = len(layers)
    return kept


def resolve_student_path(path: Union[str, Path]) -> Path:
    """A student folder: a name in ``SHIPPED`` or a local folder holding ``distillation.json``."""
    folder = SHIPPED.get(str(path), Path(path).expanduser())
    if not (folder / REPORT_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
        known = ", ".join(repr(k) for k in SHIPPED)
        raise FileNotFoundError(f"query encoder {str(path)!r}: not one shipped ({known}) nor a folder with "
                                f"{REPORT_FILE} and {WEIGHTS_FILE} (written by training.distill)")
    return folder


def identity(query_encoder: SapEncoder) -> List[Any]:
    """What decides a query encoder's scores, for keys and fingerprints: its weights and its calibration."""
    return [query_encoder.fingerprint, query_encoder.score_calibration]


class Student:
    """A distilled student as data: its report and its own tensors, rebuilt on its teacher by ``build``."""

    def __init__(self, report: Dict[str, Any], tensors: Dict[str, torch.Tensor], source: str = ""):
        self.report = report
        self.tensors = tensors
        self.source = source

    @classmethod
    def read(cls, path: Union[str, Path]) -> "Student":
        """The student of a folder or shipped name (``resolve_student_path``)."""
        from safetensors.torch import load_file

        folder = resolve_student_path(path)
        report = read_json(folder / REPORT_FILE)
        missing = [k for k in ("teacher_fingerprint", "layers") if k not in report]
        if missing:
            raise ValueError(f"{folder / REPORT_FILE}: no {', '.join(missing)} (not written by training.distill)")
        return cls(report, load_file(str(folder / WEIGHTS_FILE)), source=str(folder))

    @property
    def teacher_fingerprint(self) -> str:
        return str(self.report["teacher_fingerprint"])

    def write(self, path: Union[str, Path]) -> None:
        """The folder ``read`` reads, written atomically."""
        from safetensors.torch import save_file

        with atomic_dir(path) as tmp:
            write_json(tmp / REPORT_FILE, self.report)
            save_file({k: v.contiguous() for k, v in self.tensors.items()}, str(tmp / WEIGHTS_FILE))

    def build(self, teacher: SapEncoder) -> SapEncoder:
        """The student as an encoder beside ``teacher``: same tokenizer (and its lock), settings,
        device and precision. Refused, naming both fingerprints, unless ``teacher`` is the one it was
        distilled from."""
        if teacher.fingerprint != self.teacher_fingerprint:
            raise ValueError(f"query encoder {self.source or '(in memory)'} was distilled from the encoder with "
                             f"fingerprint {self.teacher_fingerprint}, not from this KB's encoder "
                             f"({teacher.fingerprint}, {teacher.source}); it can only search that encoder's KBs")
        model = keep_layers(teacher.model, [int(i) for i in self.report["layers"]])
        own = model.state_dict()
        wrong = sorted(k for k, v in self.tensors.items() if k not in own or own[k].shape != v.shape)
        if wrong:
            raise ValueError(f"query encoder {self.source}: tensors that its teacher with layers "
                             f"{self.report['layers']} lacks or shapes differently: {', '.join(wrong[:3])}")
        model.load_state_dict({k: v.to(own[k].dtype) for k, v in self.tensors.items()}, strict=False)
        student = SapEncoder(model.eval(), teacher.tokenizer, copy.copy(teacher.settings), device=str(teacher.device),
                             precision=teacher.precision, source=self.source)
        student.pass_rows = teacher.pass_rows
        calibration = self.report.get("score_calibration")
        if calibration is not None:
            student.score_calibration = [list(calibration["student"]), list(calibration["teacher"])]
        student._tokenizer_lock = teacher._tokenizer_lock  # one tokenizer, one lock
        return student

    def layers_only(self, dtype: torch.dtype = torch.float16) -> "Student":
        """The student with its encoder layers' tensors alone, in ``dtype``: what the package ships
        (its embeddings are the teacher's, which the teacher's package ships)."""
        tensors = {k: v.to(dtype) for k, v in self.tensors.items() if k.startswith("encoder.layer.")}
        return Student({**self.report, "weights": f"encoder layers only, {str(dtype).replace('torch.', '')}"}, tensors)
