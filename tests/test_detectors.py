"""Detectors are registered functions: one registered here, outside the package, builds and links
through ``build_pipeline``; composites are lists (the old ``"a+b"`` strings name the same lists);
the span finder and the abbreviation detector are conventional ``Pipe``s, and a pipeline saved with
the span finder's old setting names loads with a warning and finds the same spans."""
from __future__ import annotations

import catalogue
import pytest
import spacy
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.training import Example

from spacy_sapbert.detectors import SHIPPED_NER, DetectorContext, TrainedNER, detector_names, registered_detectors
from spacy_sapbert.pipelines import build_pipeline
from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.registries import detectors

RECORDS = [R("D:1", "Breast cancer", ["Carcinoma of the breast"]), R("D:3", "Tumor", ["Neoplasm"]), R("D:4", "Anemia", [])]
FP32 = {"precision": "fp32"}  # the tiny BERT's vectors are too alike for bf16 rounding
ANY_SCORE = {"min_exact_score": 0.0, "min_partial_score": 0.0, "max_generic_share": 1.0}
TOY = "test_toy_anemia"


@pytest.fixture(scope="module")
def kb_path(kb_folder):
    return kb_folder(RECORDS)


@pytest.fixture
def toy():
    """A detector as another package would write it: a function that adds its component, registered."""

    @detectors.register(TOY)
    def toy_anemia(nlp: Language, context: DetectorContext) -> Language:
        ruler = nlp.add_pipe("entity_ruler", name="toy_ruler")
        ruler.add_patterns([{"label": context.span_label(TOY), "pattern": [{"LOWER": "anemia"}]}])  # type: ignore[attr-defined]
        return nlp

    yield TOY
    catalogue._remove((*detectors.namespace, TOY))  # (catalogue has no public way back)


def test_a_detector_registered_outside_the_package_builds_and_links(toy, kb_path, tiny_bert_path):
    assert toy in registered_detectors()
    nlp = build_pipeline(kb_path, toy, encoder=tiny_bert_path, label="DISEASE", linker_config=FP32)
    assert nlp.pipe_names == ["toy_ruler", "sapbert_abbreviations", "sapbert_context", "sapbert_linker"]
    doc = nlp("Severe anemia.")
    assert [(e.text, e.label_, e.kb_id_) for e in doc.ents] == [("anemia", "DISEASE", "D:4")]
    assert nlp.get_pipe("sapbert_linker").overlap is True  # nothing else searches through the linker


def test_a_composite_is_a_list_run_in_order(toy, kb_path, tiny_bert_path):
    nlp = build_pipeline(kb_path, [toy, "span_finder"], encoder=tiny_bert_path, label="DISEASE", linker_config=FP32,
                         span_finder_config=ANY_SCORE)
    assert nlp.pipe_names[:2] == ["toy_ruler", "sapbert_span_finder"]
    assert nlp.get_pipe("sapbert_linker").overlap is False  # the span finder searches through the linker
    doc = nlp("Anemia and breast cancer.")
    assert [(e.text, e.kb_id_) for e in doc.ents] == [("Anemia", "D:4"), ("breast cancer", "D:1")]
    joined = build_pipeline(kb_path, f"{toy}+span_finder", encoder=tiny_bert_path, label="DISEASE", linker_config=FP32,
                            span_finder_config=ANY_SCORE)
    assert joined.config.to_str() == nlp.config.to_str()


@pytest.mark.skipif(not SHIPPED_NER.exists(), reason="the shipped NER is built by training/ner.py")
def test_the_old_plus_strings_name_the_same_lists(kb_path, tiny_bert_path):
    assert detector_names("ner+span_finder") == ["ner", "span_finder"]
    assert detector_names("ner-trf+span_finder") == ["ner-trf", "span_finder"]
    old = build_pipeline(kb_path, "ner+span_finder", encoder=tiny_bert_path, linker_config=FP32)
    new = build_pipeline(kb_path, ["ner", "span_finder"], encoder=tiny_bert_path, linker_config=FP32)
    assert old.pipe_names == new.pipe_names and old.pipe_names.index("ner") < old.pipe_names.index("sapbert_span_finder")
    assert old.config.to_str() == new.config.to_str()
    with pytest.raises(ValueError, match="list it first"):
        build_pipeline(kb_path, ["span_finder", "ner"], encoder=tiny_bert_path)


def test_bad_detectors_are_clear_errors(kb_path, tiny_bert_path):
    with pytest.raises(ValueError, match=r"detector must be one of .*'span_finder'.*got 'magic'"):
        build_pipeline(kb_path, ["span_finder", "magic"])
    with pytest.raises(ValueError, match="nested mentions come from the span finder"):
        build_pipeline(kb_path, "ruler", encoder=tiny_bert_path, nested="all")
    with pytest.raises(ValueError, match="labelling detector"):
        build_pipeline({"Disease": kb_path}, "ruler")
    with pytest.raises(FileNotFoundError, match="train it"):
        TrainedNER("ner", SHIPPED_NER.parent / "no-such-ner").check(DetectorContext())


def test_the_span_finder_is_a_pipe_with_a_span_scorer(kb_path, tiny_bert_path):
    nlp = build_pipeline(kb_path, "span_finder", encoder=tiny_bert_path, label="DISEASE", linker_config=FP32,
                         span_finder_config=ANY_SCORE, nested="all")
    finder = nlp.get_pipe("sapbert_span_finder")
    assert isinstance(finder, Pipe) and isinstance(nlp.get_pipe("sapbert_abbreviations"), Pipe)
    nlp.initialize()  # builds the KB vocabulary now
    predicted = nlp("Anemia and breast cancer.")
    gold = nlp.make_doc("Anemia and breast cancer.")
    gold.ents = [gold.char_span(0, 6, "DISEASE")]
    gold.spans["sapbert_nested"] = [gold.char_span(0, 6, "DISEASE")]
    scores = finder.score([Example(predicted, gold)])
    assert scores["ents_p"] == 0.5 and scores["ents_r"] == 1.0
    assert scores["spans_sapbert_nested_r"] == 1.0 and scores["spans_sapbert_nested_p"] < 1.0


def test_components_round_trip_bytes(kb_path, tiny_bert_path):
    nlp = build_pipeline(kb_path, "span_finder", encoder=tiny_bert_path, label="DISEASE", linker_config=FP32)
    for name in ("sapbert_span_finder", "sapbert_abbreviations"):
        pipe = nlp.get_pipe(name)
        assert pipe.from_bytes(pipe.to_bytes()) is pipe
    with pytest.raises(ValueError, match="saved as"):
        nlp.get_pipe("sapbert_span_finder").from_bytes(nlp.get_pipe("sapbert_abbreviations").to_bytes())


def test_a_pipeline_saved_with_the_old_setting_names_loads_with_a_warning(kb_path, tiny_bert_path, tmp_path):
    """What the span finder's cut-offs were called before (``threshold``, ``partial_threshold``,
    ``modifier_threshold``): a config with them loads, warns with the new name, finds the same spans."""
    import shutil

    settings = {"min_exact_score": 0.1, "min_partial_score": 0.2, "max_modifiers": 2, "min_modified_score": 0.3, "max_generic_share": 1.0}
    nlp = build_pipeline(kb_path, "span_finder", encoder=tiny_bert_path, label="DISEASE", linker_config=FP32,
                         span_finder_config=settings)
    texts = ["Two tumours and anaemia.", "Carcinoma of the breast, then breast cancer."]
    before = [[(e.text, e.kb_id_) for e in d.ents] for d in nlp.pipe(texts)]
    assert any(before)
    nlp.to_disk(tmp_path / "old")
    renamed = {"min_exact_score": "threshold", "min_partial_score": "partial_threshold", "min_modified_score": "modifier_threshold"}
    lines = (tmp_path / "old" / "config.cfg").read_text().splitlines()
    lines = [line for line in lines if line.split(" = ")[0] not in renamed.values()]  # the new code's nulls
    lines = [" = ".join([renamed.get(k, k), *rest]) for k, *rest in (line.split(" = ") for line in lines)]
    (tmp_path / "old" / "config.cfg").write_text("\n".join(lines) + "\n")
    shutil.rmtree(tmp_path / "old" / "sapbert_span_finder")  # the old code saved no folder for it
    shutil.rmtree(tmp_path / "old" / "sapbert_abbreviations")
    with pytest.warns(FutureWarning) as caught:
        loaded = spacy.load(tmp_path / "old")
    assert sorted(str(w.message).split(";")[0].split(": ")[1] for w in caught) == [
        f"the setting '{old}' is now '{new}'" for new, old in sorted(renamed.items(), key=lambda kv: kv[1])]
    finder = loaded.get_pipe("sapbert_span_finder")
    assert (finder.min_exact_score, finder.min_partial_score, finder.min_modified_score) == (0.1, 0.2, 0.3)
    assert [[(e.text, e.kb_id_) for e in d.ents] for d in loaded.pipe(texts)] == before
