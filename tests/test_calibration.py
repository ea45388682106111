"""The NIL threshold: scores are cosines in [-1, 1], exact names score exactly 1.0, a threshold is
chosen on dev mentions, stored in the KB's meta and used by the linker by default."""
from __future__ import annotations

import pytest
import spacy

from spacy_sapbert.evaluation.calibration import (
    Outcome,
    calibrate,
    calibrate_kb_folder,
    choose_threshold,
    evaluate_threshold,
    mention_outcomes,
)
from spacy_sapbert.evaluation.datasets import Document, Mention
from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.search import LinkingKB, store_calibration, store_fusion

RECORDS = [
    R("HP:1", "Seizure", ["Epileptic seizure", "Convulsion"]),
    R("HP:2", "Headache", ["Cephalgia", "Head pain"]),
    R("HP:3", "Fever", ["Pyrexia"]),
    R("HP:4", "Multiple sclerosis", ["MS"]),
    R("HP:5", "Mitral stenosis", ["MS"]),
    R("HP:6", "Asthma", ["Bronchial asthma"]),
    R("HP:7", "Renal failure", ["Kidney failure"]),
]


@pytest.fixture(scope="module")
def kb_path(kb_folder):
    return kb_folder(RECORDS)


def test_exact_names_score_exactly_one_and_nothing_more(kb_path, tiny_encoder):
    lkb = LinkingKB.from_disk(kb_path)
    names = list(lkb.kb.display_names)
    for name, cands in zip(names, lkb.link(tiny_encoder, names, top_k=7)):
        assert cands[0].score == 1.0 and lkb.kb.normalize(cands[0].name) == lkb.kb.normalize(name)
        assert all(c.score < 1.0 for c in cands[1:] if lkb.kb.normalize(c.name) != lkb.kb.normalize(name))
    others = ["heart attack", "iron deficiency anemia", "breast cancer", "pain"]
    scores = [c.score for cands in lkb.link(tiny_encoder, others, top_k=7) for c in cands]
    assert scores and max(scores) < 1.0 and min(scores) >= -1.0


def test_scores_are_clipped_without_query_strings(kb_path, tiny_encoder):
    lkb = LinkingKB.from_disk(kb_path)
    vectors = tiny_encoder.encode(list(lkb.kb.names)) * 1.001  # a vector a hair longer than unit length
    scores = [c.score for cands in lkb.candidates(vectors, top_k=7) for c in cands]
    assert max(scores) == 1.0 and min(scores) >= -1.0


def _outcomes(right, wrong, nil, left_out=()):
    return (
        [Outcome(s, True, True, True) for s in right]
        + [Outcome(s, True, False, True) for s in wrong]
        + [Outcome(s, True, False, False) for s in nil]
        + [Outcome(s, True, False, False, left_out=True) for s in left_out]
    )


def test_threshold_maximises_f1_of_the_answers():
    outcomes = _outcomes(right=[0.9, 0.95, 1.0, 1.0], wrong=[0.7], nil=[0.6, 0.75, 0.8])
    t = choose_threshold(outcomes)
    assert t == 0.85  # halfway between the highest NIL score and the lowest right one
    at = evaluate_threshold(outcomes, t)
    assert at["f1"] == round(8 / 9, 4) and at["precision"] == 1.0 and at["abstention"] == 0.2 and at["nil_abstention"] == 1.0
    zero = evaluate_threshold(outcomes, 0.0)
    assert zero["f1"] == round(8 / 13, 4) and zero["abstention"] == 0.0 and zero["nil_abstention"] == 0.0


def test_wrong_answers_below_right_ones_mean_answer_everything_and_nil_weight_matters():
    assert choose_threshold(_outcomes(right=[0.5, 0.9], wrong=[0.6], nil=[])) == -1.0
    outcomes = _outcomes(right=[0.8, 0.9], wrong=[], nil=[], left_out=[0.85])
    assert choose_threshold(outcomes) == -1.0  # leave-gold-out cases are only reported by default
    assert evaluate_threshold(outcomes, -1.0)["nil_abstention"] == 0.0
    assert choose_threshold(outcomes, nil_weight=3.0) == 0.875


def test_mention_outcomes_leave_the_gold_concept_out_and_answer_ambiguous_names_as_the_linker_does():
    cands = [("HP:1", "seizure", 0.97, False), ("HP:2", "headache", 0.81, False), ("HP:3", "fever", 0.5, False)]
    in_kb, left_out = mention_outcomes(cands, {"HP:1"}, in_kb=True)
    assert in_kb == Outcome(0.97, True, True, True) and left_out == Outcome(0.81, True, False, False, left_out=True)
    ambiguous = [("HP:4", "ms", 1.0, True), ("HP:5", "ms", 1.0, True)]
    assert mention_outcomes(ambiguous, {"HP:4"}, in_kb=True, ambiguous="none")[0] == Outcome(1.0, False, False, True)
    assert mention_outcomes(ambiguous, {"HP:4"}, in_kb=True, ambiguous="first")[0].correct
    assert mention_outcomes(cands, {"HP:99"}, in_kb=False) == [Outcome(0.97, True, False, False)]
    assert mention_outcomes(cands, {"OMIM:1"}, in_kb=True, aliases={"HP:1": ["OMIM:1"]})[0].correct


def test_calibrate_refuses_dev_data_without_in_kb_mentions():
    with pytest.raises(ValueError, match="no dev mention"):
        calibrate(_outcomes(right=[], wrong=[], nil=[0.5]), "dev.txt")


def test_stored_threshold_is_read_back_from_the_kb_folder(kb_path, tmp_path):
    assert LinkingKB.from_disk(kb_path).calibrated_threshold is None
    store_calibration(kb_path, calibrate(_outcomes(right=[0.9], wrong=[], nil=[0.7]), "dev.txt"))
    try:
        lkb = LinkingKB.from_disk(kb_path)
        assert lkb.calibrated_threshold == 0.8 and lkb.meta["calibration"]["dev"] == "dev.txt"
        lkb.to_disk(tmp_path / "copy")  # a saved copy keeps it
        assert LinkingKB.from_disk(tmp_path / "copy").calibrated_threshold == 0.8
    finally:
        store_calibration(kb_path, {"threshold": None})
    with pytest.raises(FileNotFoundError, match="not a spacy-sapbert KB folder"):
        store_calibration(tmp_path, {"threshold": 0.5})


def _linker(kb_path, tiny_bert_path, **config):
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler", config={"phrase_matcher_attr": "LOWER"})
    ruler.add_patterns([{"label": "PHEN", "pattern": p} for p in ("seizure", "convulsions", "renal failure", "kidney disease")])
    nlp.add_pipe("sapbert_linker", config={"kb": str(kb_path), "encoder": str(tiny_bert_path), "precision": "fp32", **config})
    return nlp


def test_threshold_one_keeps_exact_names_only(kb_path, tiny_bert_path):
    doc = _linker(kb_path, tiny_bert_path, threshold=1.0)("seizure, convulsions, renal failure, kidney disease")
    linked = {e.text: e._.cui for e in doc.ents}
    assert linked == {"seizure": "HP:1", "convulsions": None, "renal failure": "HP:7", "kidney disease": None}
    assert all(c[2] <= 1.0 for e in doc.ents for c in e._.cui_candidates)


def test_linker_uses_the_kb_calibrated_threshold_unless_configured(kb_path, tiny_bert_path):
    """Needs /work/notes/linker_threshold.patch (config ``threshold`` default None)."""
    store_calibration(kb_path, {"threshold": 1.0, "dev": "test"})
    try:
        doc = _linker(kb_path, tiny_bert_path)("seizure, convulsions")
        assert [e._.cui for e in doc.ents] == ["HP:1", None]
        doc = _linker(kb_path, tiny_bert_path, threshold=0.0)("seizure, convulsions")
        assert doc.ents[1]._.cui is not None
    finally:
        store_calibration(kb_path, {"threshold": None})
    assert _linker(kb_path, tiny_bert_path)("convulsions").ents[0]._.cui is not None  # no calibration: 0.0


def test_calibrate_kb_folder_on_dev_documents(kb_path, tiny_bert_path, tmp_path):
    text = "Seizure and pyrexia; also gout."
    doc = Document("d1", text, [
        Mention("d1", 0, 7, "Seizure", "Phenotype", ("HP:1",)),
        Mention("d1", 12, 19, "pyrexia", "Phenotype", ("HP:3",)),
        Mention("d1", 26, 30, "gout", "Phenotype", ("HP:99",)),  # not in the KB: a real NIL mention
    ])
    record = calibrate_kb_folder(kb_path, [doc], "tiny dev", encoder=tiny_bert_path)
    try:
        assert record["cases"] == {"in_kb": 2, "nil": 1, "left_out": 2}
        assert record["at_threshold"]["f1"] >= record["at_zero"]["f1"]
        assert -1.0 <= record["threshold"] <= 1.0 and record["curve"][-1]["threshold"] == 1.0
        assert LinkingKB.from_disk(kb_path).calibrated_threshold == record["threshold"]
    finally:
        store_calibration(kb_path, {"threshold": None})


def test_shipped_calibration_is_stamped_for_its_encoder_only(kb_path, tiny_encoder, tmp_path):
    from spacy_sapbert.fileio import write_json
    from spacy_sapbert.hpo_kb import apply_shipped_calibration

    shipped = tmp_path / "shipped.json"
    write_json(shipped, {"threshold": 0.9, "dev": "GSC+ dev", "encoder_fingerprint": "another encoder"})
    assert not apply_shipped_calibration(kb_path, tiny_encoder.fingerprint, shipped)
    assert LinkingKB.from_disk(kb_path).calibrated_threshold is None
    write_json(shipped, {"threshold": 0.9, "dev": "GSC+ dev", "encoder_fingerprint": tiny_encoder.fingerprint})
    try:
        assert apply_shipped_calibration(kb_path, tiny_encoder.fingerprint, shipped)
        assert LinkingKB.from_disk(kb_path).calibrated_threshold == 0.9
    finally:
        store_calibration(kb_path, {"threshold": None})


def test_shipped_calibration_replaces_an_older_shipped_one_but_not_the_users(kb_path, tiny_encoder, tmp_path):
    from spacy_sapbert.fileio import write_json
    from spacy_sapbert.hpo_kb import apply_shipped_calibration

    shipped = tmp_path / "shipped.json"
    write_json(shipped, {"threshold": 0.9, "encoder_fingerprint": tiny_encoder.fingerprint})
    try:
        apply_shipped_calibration(kb_path, tiny_encoder.fingerprint, shipped)
        write_json(shipped, {"threshold": 0.8, "encoder_fingerprint": tiny_encoder.fingerprint})
        assert apply_shipped_calibration(kb_path, tiny_encoder.fingerprint, shipped)
        assert LinkingKB.from_disk(kb_path).calibrated_threshold == 0.8
        store_calibration(kb_path, {"threshold": 0.5, "dev": "the user's own"})
        assert not apply_shipped_calibration(kb_path, tiny_encoder.fingerprint, shipped)
        assert LinkingKB.from_disk(kb_path).calibrated_threshold == 0.5
    finally:
        store_calibration(kb_path, {"threshold": None})


def test_calibrate_command_reads_dev_files_filters_types_and_stores(kb_path, tiny_bert_path, tmp_path):
    """``calibrate KB DEV --type T``: only mentions of type T are dev cases; ``--dry-run`` leaves the
    KB alone, the plain run stores what it printed; a file without such mentions is an error."""
    import json

    from typer.testing import CliRunner

    from spacy_sapbert.cli import app

    dev = tmp_path / "dev.PubTator.txt"
    dev.write_text("1|t|Seizure and pyrexia.\n1|a|Also gout and aspirin.\n"
                   "1\t0\t7\tSeizure\tPhenotype\tHP:1\n1\t12\t19\tpyrexia\tPhenotype\tHP:3\n"
                   "1\t26\t30\tgout\tPhenotype\tHP:99\n1\t35\t42\taspirin\tChemical\tD001241\n\n", encoding="utf8")
    args = ["calibrate", str(kb_path), str(dev), "--type", "Phenotype", "--encoder", str(tiny_bert_path)]
    dry = CliRunner().invoke(app, args + ["--dry-run"])
    assert dry.exit_code == 0, dry.output
    record = json.loads(dry.stdout)
    assert record["cases"] == {"in_kb": 2, "nil": 1, "left_out": 2}  # the chemical is no case
    assert record["dev"] == "dev.PubTator.txt (Phenotype)"
    assert LinkingKB.from_disk(kb_path).calibrated_threshold is None
    try:
        stored = CliRunner().invoke(app, args)
        assert stored.exit_code == 0, stored.output
        assert LinkingKB.from_disk(kb_path).calibrated_threshold == json.loads(stored.stdout)["threshold"] == record["threshold"]
    finally:
        store_calibration(kb_path, {"threshold": None})
    fused = CliRunner().invoke(app, args + ["--fusion-weight", "0", "--fusion-weight", "0.5"])
    try:
        assert fused.exit_code == 0, fused.output
        fusion = json.loads(fused.stdout)["fusion"]
        by_weight = {float(w): a for w, a in fusion["top_concept_right_by_weight"].items()}
        assert set(by_weight) == {0.0, 0.5} and by_weight[fusion["weight"]] == max(by_weight.values())
        assert fusion["weight"] == min(w for w, a in by_weight.items() if a == max(by_weight.values()))  # ties: the smaller
        assert LinkingKB.from_disk(kb_path).tuned_fusion_weight == fusion["weight"]
    finally:
        store_calibration(kb_path, {"threshold": None})
        store_fusion(kb_path, {"weight": 0.0})
    none = CliRunner().invoke(app, ["calibrate", str(kb_path), str(dev), "--type", "Disease"])
    assert none.exit_code == 1 and "no mention of type Disease" in none.output


def test_the_shipped_hpo_calibration_was_chosen_on_the_default_kb_of_this_revision():
    """A new default KB revision (``DEFAULT_KB_REVISION``) needs ``benchmarks/calibration.py`` run
    again: the shipped threshold was chosen on the KB folder its record names."""
    from spacy_sapbert.fileio import read_json
    from spacy_sapbert.hpo_kb import DEFAULT_KB_REVISION, SHIPPED_HPO, hpo_release

    record = read_json(SHIPPED_HPO)
    assert record["kb"].startswith(f"hpo-{hpo_release()}-phenotypes-r{DEFAULT_KB_REVISION}-")
    assert record["kb"].endswith(record["encoder_fingerprint"][:12])


def test_the_old_import_path_gives_the_same_names_with_a_deprecation_warning():
    import spacy_sapbert.calibration as old
    from spacy_sapbert.evaluation import calibration

    with pytest.warns(DeprecationWarning, match="spacy_sapbert.evaluation.calibration"):
        assert old.calibrate_kb_folder is calibration.calibrate_kb_folder
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018
