"""The linker's ``query_encoder``: a student of the KB's encoder encodes the queries, the KB keeps its
vectors; refused with another KB encoder; saved and loaded with the pipeline; in the cache's key."""
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch

from spacy_sapbert.query_encoder import REPORT_FILE, SHIPPED, Student, keep_layers
from spacy_sapbert.records import ConceptRecord
from spacy_sapbert.shards import ENCODER_PASS_ROWS, prepare_pipeline

NAMES = [("C1", "diabetes mellitus", ["sugar diabetes"]), ("C2", "heart attack", ["myocardial infarction"]),
         ("C3", "hypertension", ["high blood pressure"]), ("C4", "bronchial asthma", []), ("C5", "breast cancer", ["breast tumor"])]
QUERIES = ["diabetes attack", "high asthma", "breast pressure", "kidney failure"]  # no KB names: encoded


@pytest.fixture(scope="module")
def kb_path(kb_folder) -> Path:
    return kb_folder([ConceptRecord(cui, name, aliases) for cui, name, aliases in NAMES])


def student_of(teacher, fingerprint=None, seed: int = 0) -> Student:
    """The teacher's layer 1 alone, its weights moved a little: a student of ``teacher``."""
    model = keep_layers(teacher.model, [1])
    generator = torch.Generator().manual_seed(seed)
    tensors = {k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in model.state_dict().items()
               if k.startswith("encoder.layer.")}
    return Student({"teacher_fingerprint": fingerprint or teacher.fingerprint, "layers": [1]}, tensors)


@pytest.fixture(scope="module")
def student_path(tiny_encoder, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("student") / "student"
    student_of(tiny_encoder).write(path)
    return path


def linker_pipeline(kb_path, tiny_bert_path, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"kb": str(kb_path), "encoder": str(tiny_bert_path), "precision": "fp32", **config})
    nlp.initialize()
    return nlp


def test_queries_go_through_the_student_and_kb_names_keep_their_vectors(kb_path, tiny_bert_path, student_path):
    plain = linker_pipeline(kb_path, tiny_bert_path).get_pipe("sapbert_linker")
    linker = linker_pipeline(kb_path, tiny_bert_path, query_encoder=str(student_path)).get_pipe("sapbert_linker")
    student = linker.query_encoder
    assert student is not None and student.model.config.num_hidden_layers == 1 and linker.encoder.model.config.num_hidden_layers == 2
    vectors = student.encode(QUERIES)
    assert not np.allclose(vectors, linker.encoder.encode(QUERIES), atol=1e-3)  # the student is not its teacher
    names = linker.linking_kb.kb.names
    expected = vectors @ linker.encoder.encode(list(names)).T  # the KB's names as the teacher encoded them
    for query, row, cands in zip(QUERIES, expected, linker.link_strings(QUERIES)):
        best = names[int(np.argmax(row))]
        assert cands[0].name.lower() == best and cands[0].score == pytest.approx(float(row.max()), abs=1e-5), query
    # a KB name is searched with its stored vector, with or without the student
    assert [c.concept_id for c in linker.link_strings(["heart attack"])[0]] == [c.concept_id for c in plain.link_strings(["heart attack"])[0]]
    assert linker.link_strings(["heart attack"])[0][0].score == pytest.approx(1.0)
    assert linker._cache_key()["query_encoder"] == [student.fingerprint, None] and "query_encoder" not in plain._cache_key()


def test_a_student_of_another_encoder_is_refused(kb_path, tiny_bert_path, tiny_encoder, tmp_path):
    student_of(tiny_encoder, fingerprint="0" * 32).write(tmp_path / "other")
    with pytest.raises(ValueError, match=f"distilled from the encoder with fingerprint {'0' * 32}.*{tiny_encoder.fingerprint}"):
        linker_pipeline(kb_path, tiny_bert_path, query_encoder=str(tmp_path / "other"))
    with pytest.raises(FileNotFoundError, match="minilm-l3"):
        linker_pipeline(kb_path, tiny_bert_path, query_encoder=str(tmp_path / "nowhere"))


def test_the_student_is_saved_and_loaded_with_the_pipeline(kb_path, tiny_bert_path, student_path, tmp_path):
    nlp = linker_pipeline(kb_path, tiny_bert_path, query_encoder=str(student_path))
    linker = nlp.get_pipe("sapbert_linker")
    expected = linker.link_strings(QUERIES)
    settings = {k: v for k, v in nlp.config["components"]["sapbert_linker"].items() if k != "factory"}
    nlp.to_disk(tmp_path / "saved")
    assert (tmp_path / "saved" / "sapbert_linker" / "query_encoder" / REPORT_FILE).is_file()
    moved = tmp_path / "moved"
    student_path.rename(moved)  # the saved pipeline needs the student's folder no more
    try:
        for loaded in (spacy.load(tmp_path / "saved").get_pipe("sapbert_linker"),
                       spacy.blank("en").add_pipe("sapbert_linker", config=settings).from_bytes(linker.to_bytes())):
            assert loaded.query_encoder.fingerprint == linker.query_encoder.fingerprint
            assert [[(c.concept_id, round(c.score, 5)) for c in cands] for cands in loaded.link_strings(QUERIES)] == \
                   [[(c.concept_id, round(c.score, 5)) for c in cands] for cands in expected]
    finally:
        moved.rename(student_path)


def test_a_cache_saved_without_the_student_is_refused_with_it(kb_path, tiny_bert_path, student_path, tmp_path):
    plain = linker_pipeline(kb_path, tiny_bert_path).get_pipe("sapbert_linker")
    plain.link_strings(QUERIES)
    plain.save_cache(tmp_path / "cache.json")
    linker = linker_pipeline(kb_path, tiny_bert_path, query_encoder=str(student_path)).get_pipe("sapbert_linker")
    with pytest.raises(ValueError, match="query_encoder"):
        linker.load_cache(tmp_path / "cache.json")


def test_annotate_runs_the_student_in_fixed_passes(kb_path, tiny_bert_path, student_path):
    (linker,) = prepare_pipeline(linker_pipeline(kb_path, tiny_bert_path, query_encoder=str(student_path)), 1000)
    assert linker.query_encoder.pass_rows == linker.encoder.pass_rows == ENCODER_PASS_ROWS


def test_layers_only_in_float16_gives_the_same_vectors(tiny_encoder, tmp_path):
    student = student_of(tiny_encoder)
    student.layers_only().write(tmp_path / "half")
    half = Student.read(tmp_path / "half")
    assert {v.dtype for v in half.tensors.values()} == {torch.float16}
    full, small = student.build(tiny_encoder), half.build(tiny_encoder)
    assert np.sum(full.encode(QUERIES) * small.encode(QUERIES), axis=1).min() > 0.9999


def test_the_shipped_student_is_minilms_and_holds_its_layers_alone():
    folder = SHIPPED["minilm-l3"]
    student = Student.read("minilm-l3")
    assert student.report["layers"] == [0, 2, 4] and student.report["made_by"] == "python -m training.distill"
    assert student.tensors and all(k.startswith("encoder.layer.") and v.dtype == torch.float16 for k, v in student.tensors.items())
    assert sum(f.stat().st_size for f in folder.iterdir()) < 12e6
    calibration = student.report["score_calibration"]  # fit by training.export_student: increasing, 1.0 kept for names
    assert calibration["student"][0] == calibration["teacher"][0] == -1.0 and calibration["teacher"][-1] == 1.0
    assert all(b > a for a, b in zip(calibration["teacher"], calibration["teacher"][1:])) and max(calibration["teacher"][:-1]) < 1.0
    # setup.cfg's package data holds it
    assert "data/query_encoders/*/*" in (Path(__file__).parents[1] / "setup.cfg").read_text(encoding="utf8")


def test_the_default_pipeline_takes_a_query_encoder_when_asked(kb_path, tiny_bert_path, student_path, monkeypatch):
    from spacy_sapbert import defaults, query_encoder

    monkeypatch.setattr(defaults, "default_kb_path", lambda encoder, progress=True: kb_path)
    monkeypatch.setitem(query_encoder.SHIPPED, "tiny-student", student_path)
    nlp = defaults.default_pipeline(encoder=str(tiny_bert_path), progress=False, precision="fp32", query_encoder="tiny-student")
    assert nlp.config["components"]["sapbert_linker"]["query_encoder"] == "tiny-student"
    assert nlp.get_pipe("sapbert_linker").query_encoder.model.config.num_hidden_layers == 1
    off = defaults.default_pipeline(encoder=str(tiny_bert_path), progress=False, precision="fp32")  # opt-in
    assert off.get_pipe("sapbert_linker").query_encoder is None


def test_the_calibration_maps_encoded_queries_scores_and_not_kb_names(kb_path, tiny_bert_path, tiny_encoder, tmp_path):
    raw = student_of(tiny_encoder)
    raw.write(tmp_path / "raw")
    knots = [[-1.0, 0.0, 1.0], [-1.0, 0.5, 1.0]]  # a strong map: 0.8 -> 0.9
    Student({**raw.report, "score_calibration": {"student": knots[0], "teacher": knots[1]}}, raw.tensors).write(tmp_path / "mapped")
    plain = linker_pipeline(kb_path, tiny_bert_path, query_encoder=str(tmp_path / "raw")).get_pipe("sapbert_linker")
    mapped = linker_pipeline(kb_path, tiny_bert_path, query_encoder=str(tmp_path / "mapped")).get_pipe("sapbert_linker")
    assert mapped.query_encoder.score_calibration == knots and plain.query_encoder.score_calibration is None
    for before, after in zip(plain.link_strings(QUERIES), mapped.link_strings(QUERIES)):
        assert [c.concept_id for c in after] == [c.concept_id for c in before]  # increasing: the order stays
        assert [c.score for c in after] == pytest.approx([float(np.interp(c.score, *knots)) for c in before], abs=1e-6)
    assert mapped.link_strings(["heart attack"])[0][0].score == 1.0  # a KB name keeps its stored vector's score
    assert mapped._cache_key()["query_encoder"] != plain._cache_key()["query_encoder"]


def test_link_and_annotate_take_a_query_encoder(kb_path, student_path, tmp_path):
    import json

    from typer.testing import CliRunner

    from spacy_sapbert.annotate import annotate
    from spacy_sapbert.cli import app
    from spacy_sapbert.shards import PipelineSpec, linkers_of

    (linker,) = linkers_of(PipelineSpec(kb=str(kb_path), detector="ruler", query_encoder=str(student_path)).load())
    linker.ensure_ready()  # loaded at first use
    assert linker.query_encoder is not None
    with pytest.raises(ValueError, match="saved pipeline"):
        PipelineSpec(pipeline=str(tmp_path), query_encoder="minilm-l3").load()
    out = CliRunner().invoke(app, ["link", "heart attack", "--kb", str(kb_path), "--detector", "ruler", "--query-encoder", "nowhere"])
    assert out.exit_code != 0 and "minilm-l3" in out.output  # the setting reached the linker: an unknown student is refused
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"id": "1", "text": "A heart attack and hypertension."}) + "\n", encoding="utf8")
    fingerprints = []
    for name, query_encoder in (("plain", None), ("student", str(student_path))):
        annotate(source, tmp_path / name, kb=kb_path, detector="ruler", progress=False, query_encoder=query_encoder)
        fingerprints.append(json.loads((tmp_path / name / "manifest.json").read_text(encoding="utf8"))["run"]["pipeline_fingerprint"])
    assert fingerprints[0] != fingerprints[1]  # a run resumed with another query encoder is refused
