"""The sapbert_span_finder component and the pipeline builder: proposals, scoring, overlaps, saving."""
from __future__ import annotations

import pytest
import spacy

from spacy_sapbert.normalize import american_spelling, content_keys, word_key
from spacy_sapbert.pipelines import build_pipeline
from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.search import LinkingKB
from spacy_sapbert.span_proposals import NameIndex, is_acronym, name_head, propose

RECORDS = [
    R("D:1", "Breast cancer", ["Carcinoma of the breast"]),
    R("D:2", "Brachydactyly type C", []),
    R("D:3", "Tumor", ["Neoplasm"]),
    R("D:4", "Anemia", []),
    R("D:5", "Abnormality of the left ventricle", []),
    R("D:6", "Cancer", []),
    R("D:7", "Ovarian cancer", []),
]
FP32 = {"precision": "fp32"}  # the tiny BERT's vectors are too alike for bf16 rounding


@pytest.fixture(scope="module")
def kb_path(kb_folder):
    return kb_folder(RECORDS)


def finder_nlp(kb_path, encoder_path, **span_finder):
    return build_pipeline(
        kb_path, "span_finder", encoder=encoder_path, label="DISEASE", linker_config=FP32,
        span_finder_config={"min_exact_score": 0.0, "min_partial_score": 0.0, "max_generic_share": 1.0, **span_finder},
    )


def test_word_keys_join_plurals_and_british_spellings():
    assert word_key("tumours") == word_key("tumors") == word_key("Tumor") == "tumor"
    assert word_key("anaemia") == word_key("anemia")
    for british, american in [("orthopnoea", "orthopnea"), ("amenorrhoea", "amenorrhea"), ("paraesthesia", "paresthesia"),
                              ("hypoaesthesia", "hypoesthesia"), ("aetiology", "etiology"), ("sulphate", "sulfate")]:
        assert word_key(british) == word_key(american), british
    assert word_key("vertebrae") == word_key("vertebra")
    assert word_key("metastases") == word_key("metastasis") and word_key("stenoses") == word_key("stenosis")
    assert word_key("diseases") == word_key("disease") and word_key("causes") == word_key("cause")
    assert word_key("stenosis") == "stenosis" and word_key("ss") == "ss"
    assert word_key("kidneys") == word_key("kidney") and word_key("delays") == word_key("delay")  # "Enlarged kidneys"
    # Latin and irregular plurals, British "naevus": "basal cell naevi" is HPO's "Basal cell nevus"
    for plural, singular in [("emboli", "embolus"), ("nevi", "nevus"), ("naevi", "nevus"), ("thrombi", "thrombus"),
                             ("halluces", "hallux"), ("indices", "index"), ("cortices", "cortex"), ("apices", "apex"),
                             ("calyces", "calyx"), ("reflexes", "reflex"), ("sexes", "sex"), ("teeth", "tooth"), ("feet", "foot"),
                             ("lenses", "lens"), ("children", "child")]:
        assert word_key(plural) == word_key(singular), (plural, singular)
    assert word_key("devices") == word_key("device") != word_key("index")  # an English -ice word keeps its key
    assert [word_key(w) for w in ("viii", "xiv", "xix")] == ["viii", "xiv", "xix"]  # Roman numerals are no plurals
    assert len({word_key(w) for w in ["hallux", "helix", "index", "calyx", "device"]}) == 5
    assert content_keys("type C brachydactyly".split()) == content_keys("Brachydactyly type C".split())


def test_name_index_matches_exact_reordered_and_partial_names():
    index = NameIndex(["Brachydactyly type C", "Abnormality of the left ventricle", "Tumor"])
    assert index.match(content_keys(["tumors"])) == "exact"
    assert index.match(content_keys("type C brachydactyly".split())) == "exact"
    assert index.match(content_keys("left ventricle abnormality".split())) == "exact"
    assert index.match(content_keys("abnormal left ventricle".split())) is None
    assert index.match(content_keys("brachydactyly".split())) is None  # one word of two is not enough
    assert "ventricle" in index.vocab and "the" in index.vocab


def test_partial_matches_never_drop_the_head_nor_the_first_word_of_a_name():
    names = ["Abnormality of the left ventricle", "Optic nerve diseases", "Coronary artery aneurysm", "Hypertrophy, Left Ventricular",
             "Increased blood pressure", "Abnormal renal function"]
    assert [name_head(n) for n in names] == ["abnormality", "disease", "aneurysm", "hypertrophy", "pressure", "function"]
    index = NameIndex(names)
    assert index.match(content_keys("coronary aneurysm".split())) == "partial"  # one of three words missing, an inner one
    assert index.match(content_keys("coronary artery".split())) is None  # the head is missing
    assert index.match(content_keys("optic nerve".split())) is None  # an organ, not its diseases
    assert index.match(content_keys("left ventricle".split())) is None
    # the first word is most often the quality that makes the name an abnormality: a measurement is none
    assert index.match(content_keys("blood pressure".split())) is None
    assert index.match(content_keys("renal function".split())) is None
    assert index.match(content_keys("increased pressure".split())) == "partial"


def test_a_word_written_twice_matches_only_a_name_that_writes_it_twice():
    index = NameIndex(["Basal cell nevus", "Renal cell carcinoma", "Clear cell renal cell carcinoma", "Optic atrophy",
                       "Cleft lip and palate", "Nausea and vomiting"])
    nlp = spacy.blank("en")
    doc = nlp("Cells from basal cell naevus patients; renal cell carcinoma cell lines; a clear-cell renal cell carcinoma.")
    found = {doc[p.start : p.end].text for p in propose(doc, index)}
    assert {"basal cell naevus", "renal cell carcinoma", "clear-cell renal cell carcinoma"} <= found
    # the set of words is a name's, but one of them is there twice
    assert not {"Cells from basal cell naevus", "renal cell carcinoma cell"} & found
    doc = nlp("Chorioretinal atrophy with optic atrophy; cleft lip with cleft palate; nausea and vomiting and nausea.")
    found = {doc[p.start : p.end].text for p in propose(doc, index)}
    assert "atrophy with optic atrophy" not in found and "optic atrophy" in found
    assert "cleft lip with cleft palate" in found  # a second conjunct that repeats the first word: "cleft [lip] with cleft palate"
    assert "nausea and vomiting" in found and "nausea and vomiting and nausea" not in found  # the repeat ends it: a list


def test_acronyms_and_names_written_in_capitals():
    assert is_acronym("VHL") and is_acronym("G6PD") and is_acronym("ALL")
    assert not is_acronym("ANIRIDIA") and not is_acronym("Aniridia") and not is_acronym("NYSTAGMUS 1, CONGENITAL")
    omim = ["ANIRIDIA", "Congenital aniridia", "Aniridia type 2", "VHL", "INCLUDED", "CATARACT 1, INCLUDED", "DEAFNESS 4, INCLUDED"]
    nlp = spacy.blank("en")
    doc = nlp("Aniridia and VHL were included; vhl and ANIRIDIA too.")
    found = {doc[p.start : p.end].text for p in propose(doc, NameIndex(omim))}
    # OMIM writes whole names in capitals: "aniridia" is a word; "included" is its notation; "vhl" is no acronym
    assert found == {"Aniridia", "VHL", "ANIRIDIA"}


def test_short_acronyms_only_where_the_text_introduces_them():
    index = NameIndex(["MS", "Multiple sclerosis", "VHL"])
    nlp = spacy.blank("en")
    doc = nlp("MS and VHL were seen.")
    assert {doc[p.start : p.end].text for p in propose(doc, index)} == {"VHL"}  # "MS" alone is too short to trust
    doc = nlp("Multiple sclerosis (MS) is common; MS and VHL were seen.")
    found = [doc[p.start : p.end].text for p in propose(doc, index, short_forms={"MS"})]
    assert found.count("MS") == 2 and "VHL" in found


def test_function_words_other_than_prepositions_and_coordinators_end_a_proposal():
    index = NameIndex(["Second cancer", "Abnormality of the hand"])
    nlp = spacy.blank("en")
    doc = nlp("Cancer is the second cause; an abnormality of the hand.")
    assert {doc[p.start : p.end].text for p in propose(doc, index)} == {"abnormality of the hand"}


def test_names_with_kb_modifiers_before_them_are_proposed_as_modified():
    names = ["Breast cancer", "Hereditary deafness", "Hereditary ataxia", "Hereditary neuropathy", "X-linked ichthyosis",
             "X-linked agammaglobulinemia", "X-linked hypophosphatemia"]
    index = NameIndex(names)
    assert {"hereditary", "x", "linked"} <= index.modifiers and "breast" not in index.modifiers  # in one name only
    nlp = spacy.blank("en")
    doc = nlp("Her hereditary breast cancer and X-linked breast cancer.")
    found = {(doc[p.start : p.end].text, p.kind) for p in propose(doc, index, max_modifiers=2)}
    assert {("hereditary breast cancer", "modified"), ("X-linked breast cancer", "modified"), ("breast cancer", "exact")} <= found
    assert all(p.kind != "modified" for p in propose(doc, index))  # off by default


def test_generic_words_capital_names_and_coordinations():
    nlp = spacy.blank("en")
    organs = [f"organ{i} cancer" for i in range(20)]  # "cancer": in 24 of 30 names, generic
    names = ["Cancer", "Breast cancer", "Ovarian cancer", "Lung cancer", "ALL", "Acute lymphoblastic leukemia", "1"] + organs
    index = NameIndex(names)
    assert index.word_share["cancer"] == 24 / 26  # "1" has no letter: not a name here
    assert not NameIndex(names[:6]).is_generic("cancer", 0.5)  # a handful of names proves nothing
    doc = nlp("All had cancer, ALL and breast and/or ovarian cancer.")
    texts = lambda **kw: sorted(doc[p.start : p.end].text for p in propose(doc, index, **kw))  # noqa: E731
    assert "cancer" in texts() and "cancer" not in texts(max_generic_share=0.5)
    assert "ALL" in texts() and "All" not in texts()  # a name written in capitals matches capitals only
    assert "ALL" not in texts(acronyms=False)
    assert "breast and/or ovarian cancer" in texts()  # "breast" + "cancer" is a name too: one coordinated proposal


def test_proposals_never_start_or_end_on_function_words_or_cross_sentences():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    index = NameIndex([r.name for r in RECORDS])
    doc = nlp("The tumors of the breast. Cancer and ovarian cancer were seen.")
    found = {doc[p.start : p.end].text for p in propose(doc, index)}
    assert {"tumors", "Cancer", "ovarian cancer", "cancer"} <= found
    assert not any(t.split()[0].lower() in ("the", "and", "of") or t.split()[-1].lower() in ("the", "and", "of") for t in found)
    assert not any("breast. Cancer" in t for t in found)


def test_finds_variants_the_ruler_misses_and_links_them(kb_path, tiny_bert_path):
    text = "Two tumours and type C brachydactyly; later breast cancers appeared."
    ruler = build_pipeline(kb_path, "ruler", encoder=tiny_bert_path, label="DISEASE", linker_config=FP32)
    assert [e.text for e in ruler(text).ents] == []
    doc = finder_nlp(kb_path, tiny_bert_path)(text)
    found = {e.text: e for e in doc.ents}
    assert set(found) == {"tumours", "type C brachydactyly", "breast cancers"}
    assert all(e.label_ == "DISEASE" for e in doc.ents)
    assert all(e.kb_id_ and e._.cui_candidates for e in doc.ents)


def test_a_short_form_the_text_defines_is_scored_through_its_long_form(kb_path, tiny_bert_path, monkeypatch):
    """"GALT", defined as an enzyme, is searched as the enzyme: a KB name "GALT" does not make it a mention."""
    text = "Galactose uridyltransferase (GALT) activity fell; GALT was low."
    for abbreviations, expected in ((True, []), (False, ["GALT", "GALT"])):
        nlp = build_pipeline(kb_path, "span_finder", encoder=tiny_bert_path, label="DISEASE", linker_config=FP32,
                             abbreviations=False, span_finder_config={"abbreviations": abbreviations})
        finder = nlp.get_pipe("sapbert_span_finder")
        searched = []

        def scores(texts, searched=searched):
            searched.extend(texts)
            return {t: 1.0 if t == "GALT" else 0.0 for t in texts}

        monkeypatch.setattr(finder, "_scores", scores)
        monkeypatch.setattr(finder, "name_index", lambda: NameIndex(["GALT", "Galactosemia"]))
        assert [e.text for e in nlp(text).ents] == expected
        assert ("Galactose uridyltransferase" in searched) is abbreviations


def test_a_british_spelling_of_a_name_is_scored_and_linked_as_that_name(kb_path, tiny_bert_path):
    """"Tumours" and "anaemia" spell the KB names *Tumor* and *Anemia* another way: the linker settles
    them as those names (``ConceptKB.row_of_variant``), and the span finder scores a proposal as the
    linker searches it, so both keep them (a random tiny BERT alone would not)."""
    assert american_spelling("Tumours and anaemia") == "tumors and anemia"
    assert american_spelling("Tumourigenesis, behavioural") == "tumorigenesis, behavioral"
    assert american_spelling("four hours, a contour, resources") == "four hours, a contour, resources"
    nlp = finder_nlp(kb_path, tiny_bert_path, min_exact_score=0.9999)
    linker = nlp.get_pipe("sapbert_linker")
    assert [(e.text, e.kb_id_) for e in nlp("Two tumours and anaemia.").ents] == [("tumours", "D:3"), ("anaemia", "D:4")]
    assert linker.top_scores(["tumours", "anaemia"]) == [c[0].score for c in linker.link_strings(["tumours", "anaemia"])]


def test_an_accented_spelling_of_a_name_is_proposed_and_linked_as_that_name(kb_folder, tiny_bert_path):
    """Ontologies write "Cafe-au-lait spot", notes "café-au-lait spots": word keys fold accents, so the
    span finder proposes the phrase and the linker settles it as that name, without the encoder."""
    assert word_key("Café") == "cafe" and word_key("Sjögren") == "sjogren" and word_key("naïve") == "naive"
    nlp = finder_nlp(kb_folder([R("D:1", "Cafe-au-lait spot", []), R("D:2", "Anemia", [])]), tiny_bert_path, min_exact_score=0.9999)
    linker = nlp.get_pipe("sapbert_linker")
    assert [(e.text, e.kb_id_) for e in nlp("Six café-au-lait spots.").ents] == [("café-au-lait spots", "D:1")]
    assert linker.linking_kb.kb.row_of_variant("café-au-lait spots") == linker.linking_kb.kb.row_of_name("cafe-au-lait spot")


def test_a_coordination_is_kept_when_each_of_its_parts_matches(kb_path, tiny_bert_path, monkeypatch):
    """The whole "breast and ovarian cancer" is no KB name; its parts are, as the linker splits it."""
    nlp = finder_nlp(kb_path, tiny_bert_path, min_exact_score=0.9, min_partial_score=0.9)
    finder = nlp.get_pipe("sapbert_span_finder")
    monkeypatch.setattr(finder, "name_index", lambda: NameIndex(["Breast cancer", "Ovarian cancer"]))
    for part_scores, expected in (({"ovarian cancer": 1.0, "breast cancer": 0.95}, ["breast and ovarian cancer"]),
                                  ({"ovarian cancer": 1.0, "breast cancer": 0.5}, ["ovarian cancer"])):
        monkeypatch.setattr(finder, "_scores", lambda texts, s=part_scores: {t: s.get(t, 0.2) for t in texts})
        assert [e.text for e in nlp("Women with breast and ovarian cancer.").ents] == expected


def test_min_scores_let_the_encoder_reject_proposals(kb_path, tiny_bert_path):
    nlp = finder_nlp(kb_path, tiny_bert_path, min_exact_score=1.5, min_partial_score=1.5)
    assert list(nlp("Two tumours and breast cancer.").ents) == []
    nlp = finder_nlp(kb_path, tiny_bert_path, min_exact_score=0.0, min_partial_score=1.5)
    assert [e.text for e in nlp("Abnormality of left, breast cancer.").ents] == ["breast cancer"]


def test_a_kind_whose_minimum_is_above_one_is_never_searched(kb_path, tiny_bert_path, monkeypatch):
    """No string scores above a KB name's own 1.0: a partial match at ``min_partial_score`` 1.5 could
    never be kept, so the encoder is not asked about it."""
    text = "Abnormality of left, breast cancer."
    searched = {}
    for minimum in (0.0, 1.5):
        nlp = finder_nlp(kb_path, tiny_bert_path, min_partial_score=minimum)
        finder = nlp.get_pipe("sapbert_span_finder")
        scores = finder._scores
        asked = searched[minimum] = set()
        monkeypatch.setattr(finder, "_scores", lambda texts, asked=asked, scores=scores: asked.update(texts) or scores(texts))
        nlp(text)
    assert "Abnormality of left" in searched[0.0]  # a partial match of "Abnormality of the left ventricle"
    assert searched[1.5] == searched[0.0] - {"Abnormality of left"}


def test_overlaps_resolved_longest_first_or_all_kept_in_a_span_group(kb_path, tiny_bert_path):
    text = "She had ovarian cancer."
    longest = finder_nlp(kb_path, tiny_bert_path)(text)
    assert [e.text for e in longest.ents] == ["ovarian cancer"]
    nested = finder_nlp(kb_path, tiny_bert_path, resolve="all", spans_key="mentions")(text)
    assert sorted(s.text for s in nested.spans["mentions"]) == ["cancer", "ovarian cancer"]
    assert [e.text for e in nested.ents] == ["ovarian cancer"]
    with pytest.raises(ValueError, match="spans_key"):
        finder_nlp(kb_path, tiny_bert_path, resolve="all")


def test_a_linker_in_its_own_thread_shares_the_span_finders_cache_safely(kb_path, tiny_bert_path):
    """The span finder scores proposals through the linker's cache. ``build_pipeline`` has the linker
    link in turn (``overlap`` off: the two would take turns); turned on, the linker links batch i in
    its thread while the span finder looks up batch i + 1 in the same (tiny, evicting) cache, and the
    annotations are the same. Fixed encoder passes, as ``annotate`` runs them: which strings are
    encoded together then changes no vector."""
    from spacy_sapbert.shards import prepare_pipeline

    texts = ["Two tumours and breast cancer.", "Anemia, then ovarian cancer.", "Carcinoma of the breast."] * 6

    def run(**linker):
        nlp = build_pipeline(kb_path, "span_finder", encoder=tiny_bert_path, label="DISEASE", linker_config={**FP32, **linker},
                             span_finder_config={"min_exact_score": 0.0, "min_partial_score": 0.0, "max_generic_share": 1.0})
        assert nlp.get_pipe("sapbert_linker").overlap is bool(linker.get("overlap"))
        prepare_pipeline(nlp, max_chars=1000)
        return [[(e.text, e.kb_id_, e._.cui_candidates) for e in d.ents] for d in nlp.pipe(texts, batch_size=2)]

    in_turn = run(cache_size=3)
    assert sum(map(len, in_turn)) == 30
    assert run(cache_size=3, overlap=True) == in_turn


def test_keeps_entities_an_earlier_detector_set(kb_path, tiny_bert_path):
    nlp = finder_nlp(kb_path, tiny_bert_path)
    ruler = nlp.add_pipe("entity_ruler", first=True)
    ruler.add_patterns([{"label": "NER", "pattern": "ovarian cancer"}])
    doc = nlp("ovarian cancer and anemia")
    assert [(e.text, e.label_) for e in doc.ents] == [("ovarian cancer", "NER"), ("anemia", "DISEASE")]


def test_needs_a_linker_and_says_so(kb_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_span_finder")
    with pytest.raises(ValueError, match="sapbert_linker"):
        nlp("breast cancer")


def test_saved_pipeline_finds_the_same_spans(kb_path, tiny_bert_path, tmp_path):
    nlp = finder_nlp(kb_path, tiny_bert_path, min_exact_score=0.1)
    texts = ["Two tumours and type C brachydactyly.", "", "Anaemia, then breast cancer."]
    before = [[(e.text, e.kb_id_) for e in d.ents] for d in nlp.pipe(texts)]
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("sapbert_span_finder").min_exact_score == 0.1
    assert [[(e.text, e.kb_id_) for e in d.ents] for d in loaded.pipe(texts)] == before
    assert any(before)


def test_builder_rejects_unknown_detectors(kb_path):
    with pytest.raises(ValueError, match="detector"):
        build_pipeline(kb_path, "magic")


def test_one_linker_per_label_links_each_label_against_its_kb(kb_path, tiny_encoder, tiny_bert_path, tmp_path):
    chemicals = tmp_path / "chem_kb"
    LinkingKB.build([R("C:1", "Tamoxifen", []), R("C:2", "Cancer", [])], tiny_encoder).to_disk(chemicals)
    nlp = build_pipeline({"Disease": kb_path, "Chemical": chemicals}, "gold", encoder=tiny_bert_path, linker_config=FP32)
    assert [n for n in nlp.pipe_names if n.startswith("sapbert_linker")] == ["sapbert_linker_disease", "sapbert_linker_chemical"]
    doc = nlp.make_doc("Cancer treated with tamoxifen; cancer again.")
    doc.ents = [doc.char_span(0, 6, "Disease"), doc.char_span(20, 29, "Chemical"), doc.char_span(31, 37, "Chemical")]
    doc = nlp(doc)
    assert [(e.text, e.kb_id_) for e in doc.ents] == [("Cancer", "D:6"), ("tamoxifen", "C:1"), ("cancer", "C:2")]
    with pytest.raises(ValueError, match="labelling detector"):
        build_pipeline({"Disease": kb_path}, "span_finder")


@pytest.mark.slow
def test_a_saved_pipeline_packages_with_spacy_package(kb_path, tiny_bert_path, tmp_path):
    import subprocess
    import sys

    nlp = build_pipeline(kb_path, "span_finder", encoder=tiny_bert_path, label="DISEASE", linker_config=FP32)
    nlp.meta.update({"name": "sapbert_test", "version": "0.0.1"})
    nlp.to_disk(tmp_path / "pipeline")
    (tmp_path / "packages").mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "spacy", "package", str(tmp_path / "pipeline"), str(tmp_path / "packages"), "--force"],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert list((tmp_path / "packages").glob("en_sapbert_test-0.0.1/dist/*.tar.gz"))
    assert "spacy-sapbert" in out.stdout + out.stderr  # the plugin is listed as the package's requirement


def test_build_pipeline_command_saves_a_loadable_pipeline(kb_path, tiny_bert_path, tmp_path):
    from typer.testing import CliRunner

    from spacy_sapbert.cli import app

    out = tmp_path / "pipelines" / "mine"  # its parent does not exist yet
    args = ["build-pipeline", str(out), "--kb", str(kb_path), "--detector", "span_finder", "--encoder", str(tiny_bert_path),
            "--label", "DISEASE", "--name", "tiny", "--version", "1.2.3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    nlp = spacy.load(out)
    assert nlp.meta["name"] == "tiny" and nlp.meta["version"] == "1.2.3"
    assert nlp.pipe_names[0] == "sapbert_span_finder" and nlp.pipe_names[-1] == "sapbert_linker"
    assert "sapbert_context" in nlp.pipe_names and "sapbert_abbreviations" in nlp.pipe_names
    assert [e.text for e in nlp("Two breast cancers.").ents] == ["breast cancers"]
    bad = CliRunner().invoke(app, ["build-pipeline", str(tmp_path / "x"), "--kb", str(kb_path), "--kb", "A=" + str(kb_path)])
    assert bad.exit_code != 0


def test_link_reports_negated_findings(kb_path, tiny_bert_path):
    import json

    from typer.testing import CliRunner

    from spacy_sapbert.cli import app

    out = CliRunner().invoke(app, ["link", "No evidence of anemia. Breast cancer confirmed.", "--kb", str(kb_path),
                                   "--encoder", str(tiny_bert_path)])
    assert out.exit_code == 0, out.output
    spans = {r["text"]: r for r in map(json.loads, (x for x in out.stdout.splitlines() if x.startswith("{")))}
    assert spans["anemia"]["negated"] is True and spans["Breast cancer"]["negated"] is False


def test_nested_mentions_in_a_span_group_the_linker_links(kb_path, tiny_bert_path):
    """build_pipeline(nested=...): doc.ents keeps the longest; the group keeps nested mentions, all of
    them or only those inside a coordination; the linker links the group; scoring counts it on request."""
    from spacy_sapbert.evaluation.end_to_end import predicted_spans
    from spacy_sapbert.pipelines import NESTED_SPANS_KEY
    from spacy_sapbert.shards import span_records

    text = "She had ovarian cancer. Breast and ovarian cancer ran in the family."

    def run(nested):
        nlp = build_pipeline(kb_path, "span_finder", encoder=tiny_bert_path, label="DISEASE", linker_config=FP32, nested=nested,
                             negation=True, span_finder_config={"min_exact_score": 0.0, "min_partial_score": 0.0, "max_generic_share": 1.0})
        return nlp, nlp(text)

    nlp, doc = run("all")
    group = [s.text for s in doc.spans[NESTED_SPANS_KEY]]
    assert [e.text for e in doc.ents] == ["ovarian cancer", "Breast and ovarian cancer"]
    assert group == ["ovarian cancer", "cancer", "Breast and ovarian cancer", "ovarian cancer", "cancer"]
    assert all(s.kb_id_ for s in doc.spans[NESTED_SPANS_KEY])  # the linker linked the group
    linker = nlp.get_pipe("sapbert_linker")
    assert len(linker.spans_to_link(doc)) == 5  # entities once, then the group's other spans
    records = span_records(doc, [linker])
    assert [(r["text"], r["nested"]) for r in records] == [
        ("ovarian cancer", False), ("cancer", True), ("Breast and ovarian cancer", False), ("ovarian cancer", True), ("cancer", True)]
    assert all(r["cui"] for r in records)
    assert len(predicted_spans(doc, linker)) == 5 and len(predicted_spans(doc, linker, nested=False)) == 2

    # "cancer" inside "ovarian cancer" goes (also inside the coordination: every span around it must be one);
    # "ovarian cancer" inside "Breast and ovarian cancer" stays
    _, doc = run("coordinations")
    assert [s.text for s in doc.spans[NESTED_SPANS_KEY]] == ["ovarian cancer", "Breast and ovarian cancer", "ovarian cancer"]
    # "heads": also a KB name that ends the longer span ("cancer", a name, ends "ovarian cancer")
    _, doc = run("heads")
    assert [s.text for s in doc.spans[NESTED_SPANS_KEY]] == group
    finder = nlp.get_pipe("sapbert_span_finder")
    finder.nested = "heads"
    words = nlp.make_doc("tonic-clonic seizure and partial seizure")
    outer, inner, mid_word, later = words[0:4], words[3:4], words[2:4], words[6:7]
    kept = finder._nested([(outer, 0.99), (inner, 1.0), (mid_word, 1.0), (later, 1.0)], [outer, later])
    assert [s.text for s in kept] == ["tonic-clonic seizure", "seizure", "seizure"]  # not "clonic seizure", which starts mid-word
    assert [s.text for s in finder._nested([(outer, 0.99), (inner, 0.97)], [outer])] == ["tonic-clonic seizure"]  # a head must be a name
    with pytest.raises(ValueError, match="nested"):
        build_pipeline(kb_path, "ruler", encoder=tiny_bert_path, nested="all")
    with pytest.raises(ValueError, match="nested must be one of"):
        finder_nlp(kb_path, tiny_bert_path, resolve="all", spans_key="k", nested="some")


@pytest.mark.parametrize("nested", ["heads", "coordinations"])
@pytest.mark.parametrize("minimum", [0.0, 0.97])
def test_nested_proposals_the_span_group_would_drop_are_never_searched(kb_path, tiny_bert_path, monkeypatch, nested, minimum):
    """resolve="all": a proposal inside a longer accepted span that the group drops whatever its score
    (it ends earlier, or ends it without being a KB name) and that overlaps a longer entity is not
    searched; entities and span groups are what scoring every proposal gives."""
    from spacy_sapbert.span_finder import SpanFinder

    texts = ["Severe breast cancer and ovarian cancers with anaemia.",
             "Abnormality of the left ventricle, type C brachydactyly and tumours of the breast.",
             "Her breast tumour, breast cancer carcinoma of the breast and cancer."]
    config = dict(resolve="all", spans_key="mentions", nested=nested, min_exact_score=minimum, min_partial_score=minimum,
                  min_modified_score=minimum)

    def run():
        nlp = finder_nlp(kb_path, tiny_bert_path, **config)
        searched = []
        finder = nlp.get_pipe("sapbert_span_finder")
        scores = finder._scores
        monkeypatch.setattr(finder, "_scores", lambda texts_: searched.extend(texts_) or scores(texts_))
        docs = list(nlp.pipe(texts))
        return [([(e.start, e.end) for e in d.ents], [(s.start, s.end) for s in d.spans["mentions"]]) for d in docs], searched

    pruned, searched = run()

    def score_all(self, docs, proposals, queries, scored, minimum):
        every = self._scores({q for d, props in enumerate(proposals) for p in props for q in queries(d, p)})
        return [[(docs[d][p[0]:p[1]], score) for p in props if (score := scored(d, p, every)) >= minimum[p[2]]]
                for d, props in enumerate(proposals)]

    monkeypatch.setattr(SpanFinder, "_predict_all", score_all)
    everything, searched_all = run()
    assert pruned == everything
    assert set(searched) < set(searched_all)  # some proposals were never searched


def test_spans_inside_a_longer_one_found_in_one_pass():
    import random

    from spacy_sapbert.span_finder import contained_in_longer

    assert contained_in_longer([(0, 3), (1, 3), (0, 2), (4, 5), (4, 5), (2, 6)]) == {(1, 3), (0, 2), (4, 5)}
    rng = random.Random(0)
    for _ in range(500):
        spans = [(s, s + rng.randint(1, 5)) for s in (rng.randint(0, 12) for _ in range(rng.randint(0, 12)))]
        by_pairs = {(s, e) for s, e in spans if any(s2 <= s and e <= e2 and e2 - s2 > e - s for s2, e2 in spans)}
        assert contained_in_longer(spans) == by_pairs


def test_a_finding_stated_as_a_clause_links_to_the_name_it_reorders(kb_folder, tiny_bert_path):
    """"Ankle reflexes were absent" is searched as "absent ankle reflexes" too: the KB name answers it."""
    records = [R("HP:1", "Absent ankle reflexes", []), R("HP:2", "Absent thumb", []), R("HP:3", "Absent speech", []),
               R("HP:4", "Ankle swelling", [])]
    nlp = finder_nlp(kb_folder(records), tiny_bert_path, min_exact_score=0.99)
    doc = nlp("On examination, ankle reflexes were absent.")
    assert [(e.text, e.kb_id_) for e in doc.ents] == [("ankle reflexes were absent", "HP:1")]
    linker = nlp.get_pipe("sapbert_linker")
    assert linker.search_strings("ankle reflexes were absent") == ["ankle reflexes were absent", "absent ankle reflexes"]
    assert linker.decided_parts(doc.ents[0]) == []  # one concept, not a composite


def test_quality_synonyms_mined_from_the_kb_propose_a_name_written_with_one(kb_folder, tiny_bert_path):
    """``quality_synonyms``: the KB's own names make "reduced" a synonym of "decreased" (three concepts named
    both ways), so "reduced vibration sense" is proposed as its *Decreased vibration sense*; off, it is not."""
    records = [R(f"Q:{i}", f"Decreased {w}", [f"Reduced {w}"]) for i, w in enumerate(("hearing", "vision", "growth"))]
    path = kb_folder(records + [R("Q:V", "Decreased vibration sense", [])])
    text = "Reduced vibration sense in the feet."
    assert [e.text for e in finder_nlp(path, tiny_bert_path)(text).ents] == []
    doc = finder_nlp(path, tiny_bert_path, quality_synonyms=True)(text)
    assert [(e.text, e.kb_id_) for e in doc.ents] == [("Reduced vibration sense", "Q:V")]
