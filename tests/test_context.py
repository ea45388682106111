"""Context reranking: the mention's sentence, self-supervised examples, prototypes on disk, the
rerank rule, and the linker setting end to end (saved and loaded with the pipeline)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import spacy
from spacy.tokens import Span

from spacy_sapbert.context import (
    CONCEPTS_FILE,
    PROTOTYPES_FILE,
    ContextPrototypes,
    contested,
    context_encoder,
    mention_in_context,
    rerank,
    self_supervised_examples,
)
from spacy_sapbert.kb import ConceptKB
from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.search import Candidate, LinkingKB, store_context, store_context_weight

RECORDS = [
    R("D:MS", "multiple sclerosis", ["MS"]),
    R("D:MIS", "mitral stenosis", ["MS"]),
    R("D:AST", "asthma", []),
]
NEURO = "Relapses of MS left her with optic neuritis and white matter lesions."
CARDIO = "A diastolic murmur at the apex pointed to MS of the rheumatic valve."


@pytest.fixture(scope="module")
def kb_path(kb_folder):
    return kb_folder(RECORDS)


def test_the_mention_is_marked_in_its_own_sentence():
    text = "First sentence here. Then MS came back. Last one."
    start = text.index("MS")
    assert mention_in_context(text, start, start + 2) == "Then [MS] came back."
    long = "x " * 400 + "MS" + " y" * 400
    at = long.index("MS")
    got = mention_in_context(long, at, at + 2)
    assert "[MS]" in got and len(got) <= 2 * 300 + 4  # no sentence end near: a window either side


def test_a_mention_that_opens_a_sentence_leaves_the_previous_one_out():
    text = "First sentence here. MS came back. Last one."
    start = text.index("MS")
    assert mention_in_context(text, start, start + 2) == "[MS] came back."
    assert mention_in_context(text, 0, 5) == "[First] sentence here."


def test_self_supervised_examples_are_unambiguous_names_found_verbatim():
    kb = ConceptKB.from_records(RECORDS + [R("D:AR", "asthma attack", [])], on_duplicate="merge")
    texts = ["An asthma attack at night. Asthma again, and MS.", "Multiple sclerosis. Asthma."]
    found = list(self_supervised_examples(kb, texts, max_per_concept=2))
    assert ("D:AR", "An [asthma attack] at night.") in found  # the longest name wins over "asthma"
    assert [cid for cid, _ in found].count("D:AST") == 2  # capped at max_per_concept (the third is dropped)
    assert ("D:MS", "[Multiple sclerosis].") in found
    assert all(not s.startswith("[MS]") and "[MS]" not in s for _, s in found)  # an ambiguous (and short) name labels nothing


def cand(cid, name, score, ambiguous=False):
    return Candidate(cid, name, score, ambiguous)


def test_rerank_reorders_the_contested_head_and_keeps_the_tail():
    cands = [cand("A", "ms", 0.9, True), cand("B", "ms", 0.9, True), cand("C", "x", 0.85), cand("D", "y", 0.2)]
    assert contested(cands, 0.1) == 3 and contested(cands, 0.0) == 2 and contested([], 0.1) == 0
    exact = [cand("E", "diabetes mellitus", 1.0), cand("F", "diabetes mellitus type 1", 0.95)]
    assert contested(exact, 0.2) == 1 and rerank(exact, [0.0, 0.9], 0.2) == exact  # an exact name of one concept is never overturned
    out = rerank(cands, [0.1, 0.6, None, 0.9], 0.1)
    assert [c.concept_id for c in out] == ["B", "A", "C", "D"]  # C, without a prototype, counts as the least similar (0.1)
    assert not out[0].ambiguous and not out[1].ambiguous  # the sentence told the two "ms" apart
    assert [c.score for c in out] == [0.9, 0.9, 0.85, 0.2]  # name scores are kept
    tied = rerank(cands[:2], [0.5, 0.5], 0.1)
    assert [c.concept_id for c in tied] == ["A", "B"] and all(c.ambiguous for c in tied)  # no evidence: order and flag stay


def test_prototypes_are_mean_sentence_vectors_and_round_trip(tiny_encoder, tmp_path):
    examples = [("D:MS", NEURO), ("D:MS", "Another [MS] relapse."), ("D:MIS", CARDIO)]
    protos = ContextPrototypes.build(examples, tiny_encoder, sources={"test": 1})
    reader = context_encoder(tiny_encoder)
    assert reader.settings.pooling == "mean" and reader.model is tiny_encoder.model  # shared weights, no second model
    mean = reader.encode([NEURO, "Another [MS] relapse."]).mean(0)
    np.testing.assert_allclose(protos.vectors[protos.concept_ids.index("D:MS")], mean / np.linalg.norm(mean), atol=1e-5)
    sims = protos.similarities(["D:MIS", "D:AST"], reader.encode([CARDIO])[0])
    assert sims[0] == pytest.approx(1.0, abs=1e-5) and sims[1] is None
    (tmp_path / "meta.json").write_text("{}")
    protos.to_disk(tmp_path)
    back = ContextPrototypes.from_disk(tmp_path)
    assert back.concept_ids == protos.concept_ids and back.meta["sources"] == {"test": 1}
    np.testing.assert_array_equal(np.asarray(back.vectors), protos.vectors)
    (tmp_path / "none").mkdir()
    assert ContextPrototypes.from_disk(tmp_path / "none") is None
    np.save(tmp_path / PROTOTYPES_FILE, protos.vectors[::-1].copy())  # same shape, another build's vectors
    with pytest.raises(ValueError, match="does not belong to.*build-context"):
        ContextPrototypes.from_disk(tmp_path)
    (tmp_path / PROTOTYPES_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="build-context"):
        ContextPrototypes.from_disk(tmp_path)


def test_prototypes_of_another_encoder_are_refused(tiny_encoder, tmp_path):
    protos = ContextPrototypes.build([("D:MS", NEURO)], tiny_encoder)
    protos.meta["encoder"] = {**protos.meta["encoder"], "fingerprint": "0" * 32}
    with pytest.raises(ValueError, match="another encoder.*build-context"):
        protos.check_reader(tiny_encoder, tmp_path)


def test_prototypes_cut_by_another_sentence_rule_are_refused(tiny_encoder, tmp_path):
    protos = ContextPrototypes.build([("D:MS", NEURO)], tiny_encoder)
    protos.to_disk(tmp_path)
    ContextPrototypes.from_disk(tmp_path).check_reader(tiny_encoder, tmp_path)  # this version's rule: accepted
    old = {k: v for k, v in protos.meta.items() if k != "sentence_rule"}  # written before the rule was recorded
    with pytest.raises(ValueError, match="cut by rule 1.*build-context"):
        ContextPrototypes(protos.concept_ids, protos.vectors, old).check_reader(tiny_encoder, tmp_path)


def link_ms(nlp, text):
    doc = nlp.make_doc(text)
    start = next(t.i for t in doc if t.text == "MS")
    doc.ents = [Span(doc, start, start + 1, "D")]
    return nlp(doc).ents[0]


def test_the_linker_lets_the_sentence_decide_and_saves_it_with_the_pipeline(kb_path, tiny_encoder, tiny_bert_path, tmp_path):
    folder = tmp_path / "kb"
    shutil.copytree(kb_path, folder)
    with pytest.raises(ValueError, match="no context prototypes"):
        store_context_weight(folder, {"weight": 0.5})
    store_context(folder, ContextPrototypes.build([("D:MS", NEURO), ("D:MIS", CARDIO)], tiny_encoder))
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        store_context_weight(folder, {"weight": 2.0})
    store_context_weight(folder, {"weight": 0.5, "on": "test"})
    assert LinkingKB.from_disk(folder).tuned_context_weight == 0.5

    def pipeline(**config):
        nlp = spacy.blank("en")
        nlp.add_pipe("sapbert_linker", config={"kb": str(folder), "encoder": str(tiny_bert_path), "precision": "fp32", **config})
        return nlp

    off = link_ms(pipeline(context_weight=0.0), CARDIO)
    assert off._.cui_candidates[0][3] and {off._.cui_candidates[0][0], off._.cui_candidates[1][0]} == {"D:MS", "D:MIS"}
    nlp = pipeline()  # the weight stored with the prototypes
    for text, expected in ((CARDIO, "D:MIS"), (NEURO, "D:MS")):
        ent = link_ms(nlp, text)
        assert ent._.cui == expected and ent.kb_id_ == expected and not ent._.cui_candidates[0][3]
    assert nlp.get_pipe("sapbert_linker").effective_context_weight == 0.5
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert link_ms(loaded, CARDIO)._.cui == "D:MIS"
    assert (tmp_path / "pipeline" / "sapbert_linker" / "kb" / CONCEPTS_FILE).is_file()
    from spacy_sapbert.shards import pipeline_fingerprint

    before = pipeline_fingerprint(loaded)  # a resumed annotation run must find the same prototypes
    store_context(tmp_path / "pipeline" / "sapbert_linker" / "kb", ContextPrototypes.build([("D:MS", CARDIO), ("D:MIS", NEURO)], tiny_encoder))
    assert pipeline_fingerprint(spacy.load(tmp_path / "pipeline")) != before


def test_a_kb_without_prototypes_links_as_before(kb_path, tiny_bert_path):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("sapbert_linker", config={"kb": str(kb_path), "encoder": str(tiny_bert_path), "precision": "fp32",
                                                     "context_weight": 0.5})
    ent = link_ms(nlp, CARDIO)
    assert linker.effective_context_weight == 0.0 and ent._.cui_candidates[0][3]
    with pytest.raises(ValueError, match="context_weight"):
        nlp.add_pipe("sapbert_linker", name="bad", config={"context_weight": 1.5})


def test_build_context_then_calibrate_chooses_and_stores_the_weight(kb_path, tiny_bert_path, tmp_path):
    """``build-context KB TEXTS`` finds the unambiguous names in unlabelled text; ``calibrate
    --context-weight`` then picks the weight on dev mentions of the ambiguous "MS" and stores it."""
    import json

    from typer.testing import CliRunner

    from spacy_sapbert.cli import app

    folder = tmp_path / "kb"
    shutil.copytree(kb_path, folder)
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(
        [NEURO.replace("MS", "multiple sclerosis"), CARDIO.replace("MS", "mitral stenosis")])), encoding="utf8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "Asthma."}\n{"id": 2, "text": \n', encoding="utf8")
    refused = CliRunner().invoke(app, ["build-context", str(folder), str(bad), "--encoder", str(tiny_bert_path)])
    assert refused.exit_code == 1 and "bad.jsonl" in refused.output and ContextPrototypes.from_disk(folder) is None
    built = CliRunner().invoke(app, ["build-context", str(folder), str(texts), "--encoder", str(tiny_bert_path)])
    assert built.exit_code == 0, built.output
    prototypes = ContextPrototypes.from_disk(folder)
    assert sorted(prototypes.concept_ids) == ["D:MIS", "D:MS"] and prototypes.meta["examples"] == 2
    described = json.loads(CliRunner().invoke(app, ["info", str(folder)]).stdout)[str(folder)]["context_prototypes"]
    assert described["concepts"] == 2 and described["examples"] == 2
    title, abstract = NEURO, CARDIO
    text = f"{title} {abstract}"
    first, second = text.index("MS"), text.index("MS", len(title))
    dev = tmp_path / "dev.PubTator.txt"
    dev.write_text(f"1|t|{title}\n1|a|{abstract}\n1\t{first}\t{first + 2}\tMS\tDisease\tD:MS\n"
                   f"1\t{second}\t{second + 2}\tMS\tDisease\tD:MIS\n\n", encoding="utf8")
    chose = CliRunner().invoke(app, ["calibrate", str(folder), str(dev), "--encoder", str(tiny_bert_path),
                                     "--context-weight", "0", "--context-weight", "0.5"])
    assert chose.exit_code == 0, chose.output
    context = json.loads(chose.stdout)["context"]
    assert context["top_concept_right_by_weight"] == {"0.0": 0.5, "0.5": 1.0} and context["weight"] == 0.5
    assert LinkingKB.from_disk(folder).tuned_context_weight == 0.5


def test_build_context_from_annotated_documents_lets_the_sentence_decide(kb_folder, tiny_bert_path, tmp_path):
    """``build-context KB --annotated FILE --type T``: each mention of type T whose one id is a KB
    concept (or its cross-reference) is an example of it, the ambiguous "MS" too, which self-supervision
    never labels; composite and unknown ids are left out. The linker then settles "MS" by its sentence."""
    import json

    from typer.testing import CliRunner

    from spacy_sapbert.cli import app

    folder = kb_folder([R("D:MS", "multiple sclerosis", ["MS"], xrefs=["OMIM:126200"]), *RECORDS[1:]])
    text = f"{NEURO} {CARDIO}"
    first, second = text.index("MS"), text.index("MS", len(NEURO))
    neuritis, murmur, valve = text.index("optic neuritis"), text.index("murmur"), text.index("valve")
    annotated = tmp_path / "train.PubTator.txt"
    annotated.write_text(
        f"1|t|{NEURO}\n1|a|{CARDIO}\n"
        f"1\t{first}\t{first + 2}\tMS\tDisease\tOMIM:126200\n"  # a cross-reference of D:MS
        f"1\t{second}\t{second + 2}\tMS\tDisease\tD:MIS\n"
        f"1\t{neuritis}\t{neuritis + 14}\toptic neuritis\tDisease\tD:NONE\n"  # no concept of the KB
        f"1\t{murmur}\t{murmur + 6}\tmurmur\tDisease\tD:MS|D:MIS\n"  # a composite
        f"1\t{valve}\t{valve + 5}\tvalve\tChemical\tD:AST\n\n",  # not of the type asked for
        encoding="utf8")
    run = CliRunner().invoke
    assert run(app, ["build-context", str(folder), "--encoder", str(tiny_bert_path)]).exit_code == 2  # neither texts nor annotations
    unknown = tmp_path / "unknown.PubTator.txt"
    unknown.write_text(f"1|t|{NEURO}\n1|a|{CARDIO}\n1\t{neuritis}\t{neuritis + 14}\toptic neuritis\tDisease\tD:NONE\n\n", encoding="utf8")
    refused = run(app, ["build-context", str(folder), "--annotated", str(unknown), "--encoder", str(tiny_bert_path)])
    assert refused.exit_code == 1 and "no mention has exactly one id" in refused.output and ContextPrototypes.from_disk(folder) is None
    built = run(app, ["build-context", str(folder), "--annotated", str(annotated), "--type", "Disease", "--encoder", str(tiny_bert_path)])
    assert built.exit_code == 0, built.output
    prototypes = ContextPrototypes.from_disk(folder)
    assert prototypes.concept_ids == ["D:MIS", "D:MS"] and prototypes.meta["examples"] == 2
    assert prototypes.meta["sources"] == {"annotated": {"files": [str(annotated)], "types": ["Disease"], "mentions": 4, "examples": 2}}
    assert json.loads(run(app, ["info", str(folder)]).stdout)[str(folder)]["context_prototypes"]["concepts"] == 2
    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"kb": str(folder), "encoder": str(tiny_bert_path), "precision": "fp32", "context_weight": 0.5})
    assert [link_ms(nlp, t)._.cui for t in (NEURO, CARDIO)] == ["D:MS", "D:MIS"]
