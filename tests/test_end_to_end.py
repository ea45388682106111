"""End-to-end evaluation: the metrics on hand-made spans, and a miniature NCBI-disease run
through the real pipeline (entity ruler + abbreviations + sapbert_linker, tiny encoder)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_fixtures import pubtator_doc, write_mini_ncbi

from spacy_sapbert.evaluation.end_to_end import (
    GoldSpan,
    PredictedSpan,
    command_line,
    evaluate_end_to_end,
    gold_spans,
    load_documents,
    score_document,
    summarize_counts,
)


# ---------------------------------------------------------------------------- metrics
def test_exact_overlap_link_and_document_scores():
    gold = [GoldSpan(0, 10, ("A",)), GoldSpan(20, 30, ("B",)), GoldSpan(40, 45, ())]
    pred = [
        PredictedSpan(0, 10, ("A",)),  # right span, right concept
        PredictedSpan(22, 30, ("C",)),  # overlaps a gold span only
        PredictedSpan(50, 55, ("D",)),  # nothing there
        PredictedSpan(40, 45, ("E",)),  # on an unlinkable gold span: no linking decision
    ]
    rates = summarize_counts(score_document(gold, pred))
    assert (rates["mention_p"], rates["mention_r"]) == (0.5, round(2 / 3, 4))
    assert (rates["overlap_p"], rates["overlap_r"]) == (0.75, 1.0)
    assert (rates["link_p"], rates["link_r"]) == (round(1 / 3, 4), 0.5)
    assert (rates["doc_p"], rates["doc_r"]) == (0.25, 0.5)  # found {A, C, D, E}, annotated {A, B}
    assert rates["link_f1"] == 0.4


def test_wrong_spans_are_counted_by_how_they_meet_the_gold_spans():
    gold = [GoldSpan(0, 24, ("A",)), GoldSpan(40, 50, ("B",)), GoldSpan(60, 70, ("C",))]
    pred = [
        PredictedSpan(11, 24, ("A",)),  # "breast cancer" in "hereditary breast cancer"
        PredictedSpan(33, 50, ("B",)),  # "severe neutropenia" around "neutropenia"
        PredictedSpan(65, 75, ("C",)),  # crosses a gold span's end
        PredictedSpan(80, 83, ("D",)),  # apart from every gold span
        PredictedSpan(0, 24, ("A",)),  # right
    ]
    c = score_document(gold, pred)
    assert (c.wrong_inside_gold, c.wrong_containing_gold, c.wrong_crossing_gold, c.wrong_apart_from_gold) == (1, 1, 1, 1)
    assert c.predicted - c.exact == 4


def test_alternative_ids_composites_and_unlinked_spans():
    aliases = {"OMIM:114500": ["MESH:D015179"]}
    gold = [GoldSpan(0, 5, ("MESH:D015179",)), GoldSpan(10, 20, ("A", "B")), GoldSpan(30, 35, ("C",))]
    pred = [PredictedSpan(0, 5, ("OMIM:114500",)), PredictedSpan(10, 20, ("A", "X")), PredictedSpan(30, 35, ())]
    c = score_document(gold, pred, aliases)
    assert (c.link_predicted, c.link_right, c.link_gold) == (2, 1, 3)  # the unlinked span is no prediction
    assert (c.doc_predicted, c.doc_predicted_right, c.doc_gold, c.doc_gold_found) == (3, 2, 4, 2)
    assert score_document(gold, [PredictedSpan(10, 20, ("B", "A"))]).link_right == 1  # every part gold
    assert score_document(gold, pred).link_right == 0  # without the alias table the OMIM id is wrong


def test_no_predictions_scores_zero_not_an_error():
    rates = summarize_counts(score_document([GoldSpan(0, 3, ("A",))], []))
    assert rates["mention_p"] == rates["mention_f1"] == rates["link_f1"] == 0.0


def test_command_line_reproduces_the_options():
    cmd = command_line("ncbi-disease", "ner", "paper", encoder=None, ner_model="models/ner", no_abbreviations="")
    assert cmd == (
        "python -m spacy_sapbert evaluate --end-to-end --dataset ncbi-disease --detector ner --dictionary paper "
        "--ner-model models/ner --no-abbreviations"
    )


# ---------------------------------------------------------------------------- a miniature run
@pytest.fixture(scope="module")
def mini_ncbi(tmp_path_factory) -> Path:
    test = pubtator_doc(
        "1",
        "Breast cancer and multiple sclerosis.",
        "Patients with colorectal cancer (CRC) were seen. CRC is common. xyzzy disease too.",
        [
            ("Breast cancer", "D001943"),
            ("multiple sclerosis", "D009103"),
            ("colorectal cancer", "D015179"),  # the alternative id of OMIM:114500
            ("CRC", "D015179"),  # found and linked through the abbreviation component
            ("CRC", "D015179"),
            ("xyzzy disease", "D001943"),  # in no KB name: only the paper lexicon has it
        ],
    )
    test += pubtator_doc(
        "2",
        "Ovarian cancer in MS patients.",
        "No breast cancer here; xyzzy syndrome.",
        [("Ovarian cancer", "D010051"), ("MS", "D009103"), ("xyzzy syndrome", "-1")],
    )
    train = pubtator_doc("3", "xyzzy disease.", "Nothing else.", [("xyzzy disease", "D001943")])
    dev = pubtator_doc("4", "Ovarian cancer.", "Nothing else.", [("Ovarian cancer", "D010051")])
    return write_mini_ncbi(tmp_path_factory.mktemp("benchmarks"), test, train, dev)


def test_gold_spans_of_the_fixture(mini_ncbi):
    docs = load_documents("ncbi-disease", "test", mini_ncbi)
    assert [len(d.mentions) for d in docs] == [6, 3]
    spans = gold_spans(docs[1])
    assert [s.ids for s in spans] == [("MESH:D010051",), ("MESH:D009103",), ()]


@pytest.mark.parametrize(
    "dictionary, expected",
    [
        # the ruler drops two-letter names ("MS"); "breast cancer" in doc 2 is not annotated
        ("ontology", {"mention_p": 6 / 7, "mention_r": 6 / 9, "link_p": 6 / 7, "link_r": 6 / 8, "doc_p": 4 / 5, "doc_r": 4 / 5}),
        # the lexicon adds "xyzzy disease" from the training mentions
        ("paper", {"mention_p": 7 / 8, "mention_r": 7 / 9, "link_p": 7 / 8, "link_r": 7 / 8, "doc_p": 4 / 5, "doc_r": 4 / 5}),
    ],
)
def test_ruler_pipeline_end_to_end(mini_ncbi, tmp_path, tiny_bert_path, dictionary, expected):
    result = evaluate_end_to_end(
        "ncbi-disease", "ruler", dictionary, tiny_bert_path, data_dir=mini_ncbi, cache_dir=tmp_path, build_in_child=False,
        progress=False,
    )
    for key, value in expected.items():
        assert result[key] == round(value, 4), key
    assert result["counts"]["gold_unlinkable"] == 1 and result["counts"]["documents"] == 2
    assert result["pipeline"] == ["entity_ruler", "sapbert_abbreviations", "sapbert_context", "sapbert_linker"]
    for key in ("detector", "dictionary", "mention_f1", "link_f1", "doc_f1", "overlap_f1", "abstracts_per_s", "peak_rss_mb",
                "machine_cpu", "command"):
        assert result[key] is not None, key
    assert result["abstracts_per_s"] > 0
    assert result["intervals"]["link_f1"]["value"] == result["link_f1"] and result["intervals"]["link_f1"]["documents"] == 2
    json.dumps(result)  # all of it serialisable


def test_without_abbreviations_the_short_forms_are_missed(mini_ncbi, tmp_path, tiny_bert_path):
    result = evaluate_end_to_end(
        "ncbi-disease", "ruler", "ontology", tiny_bert_path, abbreviations=False, data_dir=mini_ncbi, cache_dir=tmp_path,
        build_in_child=False, progress=False,
    )
    assert result["mention_r"] == round(4 / 9, 4) and result["link_r"] == round(4 / 8, 4)
    assert "sapbert_abbreviations" not in result["pipeline"]
    documents = evaluate_end_to_end(
        "ncbi-disease", "ruler", "ontology", tiny_bert_path, abbreviations=False, data_dir=mini_ncbi, cache_dir=tmp_path,
        build_in_child=False, progress=False, with_documents=True,
    )["per_document"]
    assert len(documents) == 2 and sum(d["gold"] for d in documents) == 9 and sum(d["link_right"] for d in documents) == 4


def test_bad_arguments_are_clear_errors(mini_ncbi):
    with pytest.raises(ValueError, match="detector must be one of"):
        evaluate_end_to_end("ncbi-disease", "gold", data_dir=mini_ncbi)
    with pytest.raises(ValueError, match="dictionary must be one of"):
        evaluate_end_to_end("ncbi-disease", "ruler", "umls", data_dir=mini_ncbi)
    with pytest.raises(ValueError, match="unknown benchmark"):
        evaluate_end_to_end("ncbi", "ruler", data_dir=mini_ncbi)


def test_cli_routes_end_to_end(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import spacy_sapbert.evaluation.end_to_end as e2e
    from spacy_sapbert.cli import app

    seen = {}

    def fake(dataset, detector, dictionary, encoder, **options):
        seen.update(dataset=dataset, detector=detector, dictionary=dictionary, **options)
        return {"detector": detector}

    monkeypatch.setattr(e2e, "evaluate_end_to_end", fake)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(app, ["evaluate", "--end-to-end", "--dataset", "bc5cdr-chemical", "--detector", "ner",
                                   "--dictionary", "ontology", "--output", str(out), "--no-abbreviations"])
    assert res.exit_code == 0, res.output
    assert seen["detector"] == "ner" and seen["dataset"] == "bc5cdr-chemical" and seen["abbreviations"] is False
    assert json.loads(out.read_text(encoding="utf8")) == {"detector": "ner"}


def test_a_split_composite_predicts_each_parts_concept(mini_ncbi, tmp_path, tiny_bert_path):
    from spacy_sapbert.evaluation.end_to_end import predicted_spans, prepare_kb
    from spacy_sapbert.evaluation.gold_spans import find_linker
    from spacy_sapbert.pipelines import build_pipeline

    folder, _ = prepare_kb("ncbi-disease", "ontology", tiny_bert_path, tmp_path, mini_ncbi, progress=False)
    nlp = build_pipeline(folder, "gold", encoder=tiny_bert_path, linker_config={"precision": "fp32"})
    doc = nlp.make_doc("Breast and ovarian cancer run in families.")
    doc.ents = [doc.char_span(0, 25, label="Disease")]
    doc = nlp(doc)
    # both parts are KB names (score 1.0), the whole is not: the linker keeps the parts
    assert predicted_spans(doc, find_linker(nlp)) == [PredictedSpan(0, 25, ("MESH:D001943", "MESH:D010051"))]
    counts = score_document([GoldSpan(0, 25, ("MESH:D001943", "MESH:D010051"))], predicted_spans(doc, find_linker(nlp)))
    assert counts.link_right == 1 and counts.doc_gold_found == 2
    # what link and annotate write: each part's concept, and PubTator's composite ids
    from spacy_sapbert.documents import InputDocument
    from spacy_sapbert.shards import _pubtator, span_records

    (record,) = span_records(doc, [find_linker(nlp)])
    assert [(p["query"], p["cui"]) for p in record["parts"]] == [("breast cancer", "MESH:D001943"), ("ovarian cancer", "MESH:D010051")]
    assert record["cui"] == "MESH:D001943" and record["parts"][1]["name"] and record["parts"][1]["score"] == 1.0
    line = _pubtator(InputDocument(id="1", text=doc.text), [record]).splitlines()[2]
    assert line.split("\t")[5] == "MESH:D001943|MESH:D010051"


def test_threshold_sweep_scores_one_run_at_each_nil_threshold(mini_ncbi, tmp_path, tiny_bert_path):
    """The ruler's spans are KB names (score 1.0, up to float rounding): linked at every threshold
    up to 1; above it nothing is linked while the mention scores stay; --threshold applies one."""
    result = evaluate_end_to_end(
        "ncbi-disease", "ruler", "ontology", tiny_bert_path, data_dir=mini_ncbi, cache_dir=tmp_path, build_in_child=False,
        progress=False, threshold_sweep=(0.0, 0.99, 1.5),
    )
    low, high, above = result["threshold_sweep"]
    assert low["link_f1"] == high["link_f1"] == result["link_f1"] > 0
    assert result["threshold"] == result["dev_calibration"]["threshold"] < 0.99  # dev: one exact name, nothing to abstain on
    assert above["threshold"] == 1.5 and above["link_p"] == 0 and above["link_r"] == 0
    assert above["mention_f1"] == result["mention_f1"]
    strict = evaluate_end_to_end(
        "ncbi-disease", "ruler", "ontology", tiny_bert_path, data_dir=mini_ncbi, cache_dir=tmp_path, build_in_child=False,
        progress=False, linker_config={"threshold": 1.5},
    )
    assert strict["link_f1"] == 0 and strict["mention_f1"] == result["mention_f1"] and "--threshold 1.5" in strict["command"]


def test_a_saved_pipeline_is_swept_with_threshold_0_in_its_config_and_scored_at_its_own(mini_ncbi, tmp_path, tiny_bert_path):
    """``pipeline`` + ``threshold_sweep``: the saved pipeline is loaded with its linker's threshold 0
    (a config override; the component is never changed after it is built), every swept threshold is
    scored on that run, and the main scores are at the threshold the pipeline was saved with."""
    from spacy_sapbert.evaluation.end_to_end import prepare_kb
    from spacy_sapbert.pipelines import build_pipeline

    folder, _ = prepare_kb("ncbi-disease", "ontology", tiny_bert_path, tmp_path, mini_ncbi, progress=False)
    saved = tmp_path / "saved"
    build_pipeline(folder, "ruler", encoder=tiny_bert_path, labels=["Disease"], linker_config={"threshold": 1.5}).to_disk(saved)
    run = dict(data_dir=mini_ncbi, cache_dir=tmp_path, build_in_child=False, progress=False, pipeline=str(saved))
    swept = evaluate_end_to_end("ncbi-disease", "ruler", "ontology", tiny_bert_path, threshold_sweep=(0.0, 1.5), **run)
    plain = evaluate_end_to_end("ncbi-disease", "ruler", "ontology", tiny_bert_path, **run)
    at_zero, at_saved = swept["threshold_sweep"]
    assert at_zero["link_f1"] > 0 and at_saved["link_f1"] == swept["link_f1"] == plain["link_f1"] == 0
    assert swept["threshold"] == plain["threshold"] == 1.5 and swept["mention_f1"] == plain["mention_f1"]


def test_the_default_nil_threshold_is_chosen_on_the_dev_gold_mentions(mini_ncbi, tmp_path, tiny_bert_path):
    """A dictionary built for the test split has no calibration: its NIL threshold is the one
    ``calibrate_kb_folder`` chooses on the dev gold mentions against the dev run's dictionary,
    applied and recorded; a given threshold wins; a dev run links every span."""
    from spacy_sapbert.evaluation.calibration import calibrate_kb_folder
    from spacy_sapbert.evaluation.end_to_end import dev_calibration, load_documents, prepare_kb

    run = dict(data_dir=mini_ncbi, cache_dir=tmp_path, build_in_child=False, progress=False)
    result = evaluate_end_to_end("ncbi-disease", "ruler", "paper", tiny_bert_path, **run)
    chosen = result["dev_calibration"]
    dev_kb, _ = prepare_kb("ncbi-disease", "paper", tiny_bert_path, tmp_path, mini_ncbi, progress=False, split="dev")
    expected = calibrate_kb_folder(dev_kb, load_documents("ncbi-disease", "dev", mini_ncbi), "dev", encoder=tiny_bert_path,
                                   label="Disease", store=False, linker_config={"precision": "fp32", "device": "cpu"})
    assert chosen["threshold"] == expected["threshold"] != 0.0 and chosen["cases"] == {"in_kb": 1, "nil": 0, "left_out": 1}
    assert result["threshold"] == chosen["threshold"] and result["threshold_source"].startswith("chosen on the dev")
    assert "--threshold" not in result["command"]  # the command reproduces the choice, not its value
    settings = {"precision": "fp32", "device": "cpu"}
    assert dev_calibration(dev_kb, "ncbi-disease", "paper", tiny_bert_path, tmp_path, mini_ncbi, linker_config=settings) == chosen
    given = evaluate_end_to_end("ncbi-disease", "ruler", "paper", tiny_bert_path, linker_config={"threshold": 0.0}, **run)
    assert given["threshold"] == 0.0 and given["threshold_source"] == "given" and given["dev_calibration"] is None
    on_dev = evaluate_end_to_end("ncbi-disease", "ruler", "paper", tiny_bert_path, split="dev", **run)
    assert on_dev["threshold"] == 0.0 and on_dev["dev_calibration"] is None


def test_context_reranking_end_to_end_builds_prototypes_for_both_splits(mini_ncbi, tmp_path, tiny_bert_path):
    """``--context-weight`` end to end: the KB folders of the test run and of the dev calibration
    both get the prototypes the gold-span evaluation builds, the linker uses them, the command says so."""
    from spacy_sapbert.context import ContextPrototypes
    from spacy_sapbert.evaluation.end_to_end import prepare_kb

    run = dict(data_dir=mini_ncbi, cache_dir=tmp_path, build_in_child=False, progress=False)
    result = evaluate_end_to_end("ncbi-disease", "ruler", "paper", tiny_bert_path, linker_config={"context_weight": 0.5},
                                 context_examples="self+train", **run)
    assert result["context_weight"] == 0.5
    assert result["kb"]["context_prototypes"]["examples"] == "self+train"
    assert result["kb"]["context_prototypes"]["annotated"]["splits"] == ["train", "dev"]
    assert "--context-weight 0.5 --context-examples self+train" in result["command"]
    for split, annotated in (("test", 2), ("dev", 1)):  # xyzzy disease (train) + ovarian cancer (dev); train alone for dev
        folder, _ = prepare_kb("ncbi-disease", "paper", tiny_bert_path, tmp_path, mini_ncbi, progress=False, split=split)
        assert ContextPrototypes.from_disk(folder).meta["sources"]["annotated"]["examples"] == annotated
