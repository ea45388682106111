"""The NER workflow: PubTator → DocBin conversion, the time-budget stop, evaluation, and the shipped model."""
from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import spacy
from spacy.attrs import ORTH
from spacy.strings import get_string_id
from spacy.tokens import DocBin

import spacy_sapbert
from spacy_sapbert.evaluation.datasets import read_pubtator
from training.ner import (
    _budget_cap_checked,
    convert_corpora,
    evaluate_ner,
    export_pipeline,
    make_tokenizer_nlp,
    time_budget_batcher,
    write_lexicon,
)

FIXTURES = Path(__file__).parent / "fixtures" / "ner"
CONFIG = Path(__file__).parents[1] / "training" / "configs" / "ner.cfg"
SHIPPED = Path(spacy_sapbert.__file__).parent / "data" / "ner"


@pytest.fixture(scope="module")
def converted(ner_corpora, tmp_path_factory):
    out = tmp_path_factory.mktemp("ner_corpus")
    report = convert_corpora(ner_corpora, out, mask_chemicals=True)
    return out, report


def _ents(doc):
    return [(e.text, e.label_) for e in doc.ents]


def test_convert_maps_offsets_labels_and_ncbi_types(converted):
    out, report = converted
    nlp = spacy.load(out / "tokenizer")
    cdr1, cdr2, ncbi = list(DocBin().from_disk(out / "train.spacy").get_docs(nlp.vocab))
    assert _ents(cdr1) == [
        ("Lidocaine", "Chemical"), ("cardiac asystole", "Disease"), ("lidocaine", "Chemical"),
        ("breast cancer", "Disease"), ("seizures", "Disease"), ("xenon", "Chemical"), ("5-HT6", "Chemical"),
    ]
    assert _ents(cdr2) == [("Tamoxifen", "Chemical"), ("endometrial cancer", "Disease"),
                           ("tamoxifen", "Chemical"), ("endometrial cancer", "Disease")]
    # all four NCBI mention types become Disease
    assert _ents(ncbi) == [("breast and ovarian cancer", "Disease"), ("hereditary breast cancer", "Disease"),
                           ("tumours", "Disease"), ("ataxia-telangiectasia", "Disease")]
    counts = report["cdr_train"]
    assert counts["mentions"] == 8 + 4 and counts["entities"] == 7 + 4
    assert counts["dropped_overlapping"] == 1  # "cancer" inside "breast cancer"
    assert counts["expanded_to_tokens"] == 1  # "5-HT" inside "5-HT6"
    assert counts["unaligned_with_plain_english_tokenizer"] == 2  # "xenon-133" and "5-HT6"
    assert "dropped_unalignable" not in counts


def test_convert_marks_chemical_names_missing_in_ncbi_only(converted):
    out, report = converted
    nlp = spacy.load(out / "tokenizer")
    _cdr1, cdr2, ncbi = list(DocBin().from_disk(out / "train.spacy").get_docs(nlp.vocab))
    tamoxifen = next(t for t in ncbi if t.text == "tamoxifen")
    assert tamoxifen.ent_iob_ == ""  # missing: NCBI does not annotate chemicals
    assert next(t for t in ncbi if t.text == "took").ent_iob_ == "O"
    assert all(t.ent_iob_ in ("B", "I", "O") for t in cdr2)
    assert report["ncbi_train"]["masked_tokens"] == 1


def test_tokenizer_splits_biomedical_punctuation():
    nlp = make_tokenizer_nlp()
    assert [t.text for t in nlp.make_doc("(PAN)-induced xenon-133 GABA(A) CHX+Pilo K+ vitamin D.")] == [
        "(", "PAN", ")", "-", "induced", "xenon", "-", "133", "GABA", "(", "A", ")", "CHX", "+", "Pilo",
        "K", "+", "vitamin", "D", ".",
    ]


def test_unknown_mention_type_names_the_file(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("1|t|Aspirin.\n1|a|Text.\n1\t0\t7\tAspirin\tDrug\tD001241\n\n")
    from collections import Counter

    from training.ner import document_to_doc

    with pytest.raises(ValueError, match=r"bad\.txt.*unknown mention type 'Drug'"):
        document_to_doc(make_tokenizer_nlp(), read_pubtator(bad)[0], bad, Counter())


@pytest.fixture(scope="module")
def lexicon(tmp_path_factory) -> Path:
    """The lexicon features of two tiny ontologies in MEDIC's format: chemicals, then diseases."""
    root = tmp_path_factory.mktemp("lexicon")
    root.joinpath("chemicals.txt").write_text(
        "D001241||Aspirin|Acetylsalicylic Acid\nD000001||Acetic Acid\nD014978||Xenon\n", encoding="utf8")
    root.joinpath("diseases.txt").write_text(
        "D001249||Asthma\nD001943||Breast Cancer|Breast Neoplasms\nD008175||Lung Cancer\n", encoding="utf8")
    assert write_lexicon(root, [(root / "chemicals.txt", "medic"), (root / "diseases.txt", "medic")]) == 6
    return root / "lexicon"


def test_lexicon_features_per_word_in_lower_case_and_capitalised(lexicon):
    nlp = spacy.load(lexicon)
    vectors = nlp.vocab.vectors
    assert vectors.attr == ORTH and vectors.shape == (6, 4)

    def features(word):
        row = vectors.find(key=get_string_id(word))
        return None if row < 0 else [round(float(x), 4) for x in vectors.data[row]]

    one_of_three = round(math.log(2) / math.log(3), 4)  # in 1 name, when the most frequent word is in 2
    # whole names, in lower case and capitalised; "xenon" as the corpus tokenizer splits "xenon-133"
    assert [t.text for t in nlp.make_doc("xenon-133")] == ["xenon", "-", "133"]
    assert features("Aspirin") == features("aspirin") == features("xenon") == [1.0, one_of_three, 0.0, 0.0]
    assert features("ASPIRIN") is None  # capitals are mostly short forms, which no name spells out
    assert features("asthma") == [0.0, 0.0, 1.0, one_of_three]
    assert features("acid") == [0.0, 1.0, 0.0, 0.0]  # in two chemical names, a whole name of none
    assert features("cancer") == [0.0, 0.0, 0.0, 1.0] and features("breast") == [0.0, 0.0, 0.0, 1.0]
    # in one name and no whole name: a fragment, left out; words of no name are not there at all
    assert features("acetic") is None and features("lung") is None and features("the") is None


def test_budget_batcher_stops_yielding():
    batcher = time_budget_batcher(lambda items: ([x] for x in items), max_seconds=0.2)
    assert len(list(batcher(range(5)))) == 5
    time.sleep(0.25)
    assert list(batcher(range(5))) == []
    with pytest.raises(ValueError, match="max_epochs"):
        _budget_cap_checked({"training": {"batcher": {"@batchers": "spacy_sapbert.time_budget_batcher.v1"},
                                          "max_epochs": 0}})


@pytest.fixture(scope="module")
def tiny_run(converted, lexicon, tmp_path_factory) -> Path:
    """A tiny-config run whose 2-second budget is all that ends it (1000 epochs would take minutes)."""
    from spacy.cli.train import train

    out, _ = converted
    overrides = {
        "paths.train": str(out / "train.spacy"),
        "paths.dev": str(out / "dev.spacy"),
        "paths.tokenizer": str(out / "tokenizer"),
        "paths.vectors": str(lexicon),
        "components.ner.model.tok2vec.encode.width": 16,
        "components.ner.model.tok2vec.encode.depth": 1,
        "components.ner.model.tok2vec.embed.rows": [100, 50, 50, 50],
        "components.ner.model.hidden_width": 8,
        "training.eval_frequency": 5,
        "training.max_epochs": 1000,
        "training.batcher.max_seconds": 2,
    }
    run = tmp_path_factory.mktemp("ner_run")
    started = time.monotonic()
    train(CONFIG, run, use_gpu=-1, overrides=overrides)
    run.joinpath("wall_seconds").write_text(str(time.monotonic() - started))
    return run


def test_budget_stops_a_tiny_training_run(tiny_run, tmp_path):
    assert float(tiny_run.joinpath("wall_seconds").read_text()) < 30
    assert (tiny_run / "model-best" / "meta.json").is_file() and (tiny_run / "model-last" / "meta.json").is_file()
    nlp = export_pipeline(tiny_run / "model-best", tmp_path / "exported")
    assert nlp.pipe_names == ["ner"] and set(nlp.get_pipe("ner").labels) == {"Chemical", "Disease"}
    assert nlp.vocab.vectors.shape == (6, 4)  # the lexicon features travel with the model, not its corpus path
    assert nlp.config["initialize"]["vectors"] is None and nlp.config["paths"]["vectors"] is None
    assert "time_budget" not in nlp.config.to_str()
    assert nlp.config["training"]["batcher"]["@batchers"] == "spacy.batch_by_words.v1"


def test_export_loads_without_the_training_package(tiny_run, tmp_path):
    """A fresh interpreter that never imports training/ loads the export, tokenizer rules included."""
    export_pipeline(tiny_run / "model-best", tmp_path / "exported")
    code = ("import spacy, sys; nlp = spacy.load(sys.argv[1]); "
            "print(nlp.pipe_names, [t.text for t in nlp.make_doc('xenon-133')])")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path / "exported")], capture_output=True, text=True,
                         cwd=tmp_path, check=True)
    assert res.stdout.strip() == "['ner'] ['xenon', '-', '133']"


def test_evaluate_ner_exact_spans_per_label(tmp_path):
    docs = read_pubtator(FIXTURES / "cdr.PubTator.txt")
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([{"label": "Chemical", "pattern": "lidocaine"},  # 1 of 2 Lidocaine mentions (case)
                        {"label": "Disease", "pattern": "endometrial cancer"},  # 2 of 2
                        {"label": "Disease", "pattern": "cardiac"}])  # wrong span: a false positive
    scores = evaluate_ner(nlp, docs, ("Chemical", "Disease"))
    assert scores["Chemical"]["tp"] == 1 and scores["Chemical"]["pred"] == 1 and scores["Chemical"]["gold"] == 6
    # gold Disease: cardiac asystole, breast cancer, cancer, seizures, endometrial cancer x2
    assert scores["Disease"]["tp"] == 2 and scores["Disease"]["pred"] == 3 and scores["Disease"]["gold"] == 6
    assert scores["micro"]["p"] == 75.0 and scores["micro"]["r"] == round(100 * 3 / 12, 2)
    assert evaluate_ner(nlp, docs, ("Disease",))["micro"]["pred"] == 3  # other labels ignored


def test_shipped_model_finds_a_disease_and_can_be_sourced():
    nlp = spacy.load(SHIPPED)
    assert nlp.pipe_names == ["ner"]
    doc = nlp("The patient had breast cancer and was treated with tamoxifen.")
    assert ("breast cancer", "Disease") in _ents(doc)
    rows, width = nlp.vocab.vectors.shape
    assert width == 4 and rows > 100_000  # the lexicon features: MeSH-2024 chemical and MEDIC disease words
    found = [nlp.vocab.vectors.find(key=get_string_id(w)) for w in ("tamoxifen", "Tamoxifen", "asthma")]
    assert min(found) >= 0 and found[0] == found[1] and nlp.vocab.vectors.data[found[0]][0] == 1.0  # a whole chemical name
    host = spacy.blank("en")
    host.vocab.vectors = nlp.vocab.vectors  # the ner reads them: they go with it
    host.add_pipe("ner", source=nlp)
    assert ("breast cancer", "Disease") in _ents(host("The patient had breast cancer and was treated with tamoxifen."))
