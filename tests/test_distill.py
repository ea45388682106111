"""``training.distill``: a student with fewer layers learns the teacher's vectors, saves as an encoder
folder, and resumes from its checkpoint exactly."""
from pathlib import Path

import numpy as np
import pytest
import torch
import typer

from spacy_sapbert.encoder import SapEncoder
from spacy_sapbert.records import ConceptRecord
from training import checkpoint as ckpt
from training import distill

NAMES = [("C1", "diabetes mellitus type 1", ["insulin dependent diabetes"]), ("C2", "heart attack", ["myocardial infarction"]),
         ("C3", "hypertension", ["high blood pressure"]), ("C4", "bronchial asthma", []), ("C5", "breast cancer", ["breast tumor"]),
         ("C6", "renal failure", ["kidney failure"]), ("C7", "iron deficiency anemia", []), ("C8", "migraine", ["headache"])]


@pytest.fixture(scope="module")
def kb_path(kb_folder) -> Path:
    return kb_folder([ConceptRecord(cui, name, aliases) for cui, name, aliases in NAMES])


@pytest.fixture(scope="module")
def pubtator(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("texts") / "train.PubTator.txt"
    path.write_text("1|t|Fever and seizure in epilepsy\n1|a|Lung cancer with renal failure and anemia.\n\n", encoding="utf8")
    return path


def distil(tmp: Path, teacher: Path, kb: Path, texts: Path, steps: int, **options) -> Path:
    output = tmp / "student"
    args = {"output": output, "kb": [kb], "texts": [texts], "teacher": str(teacher), "layers": [1], "steps": steps,
            "batch_size": 8, "lr": 1e-3, "text_strings": 20, "precision": "fp32", "checkpoint_every": 0, "seed": 0, **options}
    distill.main(**args)
    return output


def distance(encoder: SapEncoder, teacher: SapEncoder, strings) -> float:
    """Mean (1 - cosine) to the teacher's vectors (a random tiny BERT's are all alike: cosines near 1)."""
    return float(np.mean(1 - np.sum(encoder.encode(strings) * teacher.encode(strings), axis=1)))


def test_the_student_learns_the_teachers_vectors_and_loads_as_an_encoder(tmp_path, tiny_bert_path, tiny_encoder, kb_path, pubtator):
    strings, n_names = distill.training_strings([kb_path], [pubtator], 20, 0)
    assert n_names == 14 and strings[:n_names] == list(dict.fromkeys(strings[:n_names]))
    assert "renal failure" not in strings[n_names:]  # a KB name is not counted again as an n-gram
    untrained = distil(tmp_path / "a", tiny_bert_path, kb_path, pubtator, steps=0)
    trained = distil(tmp_path / "b", tiny_bert_path, kb_path, pubtator, steps=60)
    before = SapEncoder.load(untrained, device="cpu", precision="fp32")
    after = SapEncoder.load(trained, device="cpu", precision="fp32")
    assert before.model.config.num_hidden_layers == after.model.config.num_hidden_layers == 1
    assert distance(after, tiny_encoder, strings) < 0.5 * distance(before, tiny_encoder, strings)
    report = distill.read_json(trained / distill.REPORT_FILE)
    assert report["teacher_fingerprint"] == tiny_encoder.fingerprint and report["layers"] == [1]
    assert report["strings"] == len(strings) and report["kb_names"] == 14


def test_a_resumed_run_continues_exactly_and_refuses_another_runs_checkpoint(tmp_path, tiny_bert_path, kb_path, pubtator,
                                                                            monkeypatch):
    whole = distil(tmp_path / "whole", tiny_bert_path, kb_path, pubtator, steps=20)

    class Killed(Exception):
        pass

    write = distill.save_checkpoint

    def write_then_die(*args, **kwargs):
        write(*args, **kwargs)
        raise Killed

    parts = tmp_path / "parts"
    monkeypatch.setattr(distill, "save_checkpoint", write_then_die)
    with pytest.raises(Killed):  # killed right after its checkpoint at step 10
        distil(parts, tiny_bert_path, kb_path, pubtator, steps=20, checkpoint_every=10)
    monkeypatch.setattr(distill, "save_checkpoint", write)
    work = parts / "student.work"
    assert not (parts / "student").exists() and ckpt.latest_checkpoint(work / distill.CHECKPOINTS) is not None
    with pytest.raises(typer.BadParameter, match="another run"):
        distil(parts, tiny_bert_path, kb_path, pubtator, steps=20, lr=5e-4)
    resumed = distil(parts, tiny_bert_path, kb_path, pubtator, steps=20)  # the same run: continues from step 10
    assert distill.read_json(resumed / distill.REPORT_FILE)["resumed_at_step"] == 10
    assert not (work / distill.CHECKPOINTS).exists() and (work / "teacher.npy").is_file()
    a = SapEncoder.load(whole, device="cpu", precision="fp32").encode(["kidney failure", "fever"])
    b = SapEncoder.load(resumed, device="cpu", precision="fp32").encode(["kidney failure", "fever"])
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_layers_must_be_the_teachers(tmp_path, tiny_bert_path, kb_path, pubtator):
    with pytest.raises(typer.BadParameter, match="layers"):
        distil(tmp_path, tiny_bert_path, kb_path, pubtator, steps=1, layers=[2])


def test_the_teachers_cached_vectors_are_reused_only_intact_and_for_the_same_key(tmp_path):
    made = []

    def make(value):
        def run():
            made.append(value)
            return np.full((3, 2), value, dtype=np.float32)
        return run

    path = tmp_path / "teacher.npy"
    key = {"strings_sha256": "a", "teacher": "t"}
    assert distill.cached_array(path, key, make(1.0))[0, 0] == 1.0
    assert distill.cached_array(path, key, make(2.0))[0, 0] == 1.0 and made == [1.0]  # reused
    assert distill.cached_array(path, {**key, "teacher": "u"}, make(3.0))[0, 0] == 3.0  # another teacher: made again
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # a damaged byte
    path.write_bytes(bytes(data))
    assert distill.cached_array(path, {**key, "teacher": "u"}, make(4.0))[0, 0] == 4.0 and made == [1.0, 3.0, 4.0]


def test_bad_input_is_one_line_naming_the_file_and_nothing_is_written(tmp_path, tiny_bert_path, kb_path):
    bad = tmp_path / "bad.PubTator.txt"
    bad.write_text("1|t|Fever\nnot an annotation\n", encoding="utf8")
    with pytest.raises(typer.BadParameter, match=r"bad\.PubTator\.txt:2"):
        distil(tmp_path, tiny_bert_path, kb_path, bad, steps=1)
    with pytest.raises(typer.BadParameter, match="not a spacy-sapbert KB folder"):
        distil(tmp_path, tiny_bert_path, tmp_path / "nothing", bad, steps=1)
    assert list(tmp_path.iterdir()) == [bad]


def test_the_exported_student_is_its_layers_in_float16_and_builds_on_its_teacher(tmp_path, tiny_bert_path, tiny_encoder, kb_path,
                                                                                 pubtator):
    from spacy_sapbert.query_encoder import Student
    from training import export_student

    trained = distil(tmp_path, tiny_bert_path, kb_path, pubtator, steps=5)
    export_student.main(trained, tmp_path / "shipped", teacher=str(tiny_bert_path), check=50, calibration_strings=0, seed=0)
    shipped = Student.read(tmp_path / "shipped")
    assert shipped.tensors and all(k.startswith("encoder.layer.") and v.dtype == torch.float16 for k, v in shipped.tensors.items())
    assert "score_calibration" not in shipped.report and shipped.report["teacher_fingerprint"] == tiny_encoder.fingerprint
    full = SapEncoder.load(trained, device="cpu", precision="fp32")
    np.testing.assert_allclose(shipped.build(tiny_encoder).encode(["renal failure"]), full.encode(["renal failure"]), atol=2e-3)
    # the tiny random teacher's cosines are all near 1: nothing to fit a calibration on, said in one line
    with pytest.raises(typer.BadParameter, match="too few"):
        export_student.main(trained, tmp_path / "calibrated", teacher=str(tiny_bert_path), check=50, calibration_strings=20, seed=0)
    assert not (tmp_path / "calibrated").exists()


def test_the_calibration_maps_the_students_scores_onto_the_teachers():
    from training.export_student import fit_calibration

    rng = np.random.default_rng(0)
    teacher = rng.uniform(0.8, 0.999, 5000)
    student = 0.9 + 0.8 * (teacher - 0.9)  # compressed around 0.9, as a student's are near the top
    calibration = fit_calibration(student, teacher)
    xs, ys = calibration["student"], calibration["teacher"]
    assert xs[0] == ys[0] == -1.0 and xs[-1] == ys[-1] == 1.0 and all(b > a for a, b in zip(ys, ys[1:]))
    assert np.interp(0.9 + 0.8 * 0.07, xs, ys) == pytest.approx(0.97, abs=2e-3)  # the student's 0.956 is the teacher's 0.97
